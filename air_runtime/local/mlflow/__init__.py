"""MLflow: the runs of task attempts (`routes`, kept by `backend`) and each node's output as
log artifacts (`log_artifacts`)."""
