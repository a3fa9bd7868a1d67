"""Provider metadata read by Airflow's providers manager (``apache_airflow_provider`` entry point).

Kept free of imports: Airflow loads this for every process that touches its configuration.
"""

from __future__ import annotations

from typing import Any

INTEGRATION = "Databricks AI Runtime"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "air-orchestration",
        "name": "Databricks AI Runtime",
        "description": "Run Databricks AI Runtime (serverless GPU) workloads from Apache Airflow: "
        "single workloads, multi-stage workflows, Docker image registration.",
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://docs.databricks.com/aws/en/machine-learning/ai-runtime/",
                "tags": ["service"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_air.operators", "airflow_air.workflow"],
            }
        ],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["airflow_air.hooks"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["airflow_air.triggers"]}],
        "extra-links": [
            "airflow_air.links.AirRunLink",
            "airflow_air.links.AirMlflowRunLink",
        ],
        # The ``databricks`` connection type stays owned by apache-airflow-providers-databricks:
        # AirHook reads the same fields, so registering it again would only compete for the UI form.
        "connection-types": [],
        "config": {
            "air": {
                "description": "Defaults of the Databricks AI Runtime operators and triggers.",
                "options": {
                    "default_poll_interval": {
                        "description": "Seconds between status checks of a run when an operator "
                        "does not set poll_interval.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "10",
                        "default": "5",
                    },
                    "preload_task_modules": {
                        "description": "Whether the provider's plugin imports the modules a "
                        "submitting task needs once in each Airflow component that loads "
                        "plugins (scheduler, triggerer), so the task processes the "
                        "LocalExecutor forks from the scheduler inherit them instead of each "
                        "importing them again (about 40 ms of CPU per task on an idle machine). "
                        "Task processes themselves never preload.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                    "submit_in_triggerer": {
                        "description": "Default of AirRunOperator's submit_in_triggerer: a "
                        "deferrable task's first try defers before its submit, and the trigger "
                        "submits the planned run (same idempotency token, so a restarted "
                        "trigger gets the same run). The worker run of a sweep's trial then "
                        "ends without a round trip to the workspace beyond the user lookup. "
                        "Tasks with secret_env, a local code snapshot or a Docker image to "
                        "register still submit in the worker.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                    "pool_slots_from_accelerators": {
                        "description": "Default of AirRunOperator's pool_slots: the "
                        "accelerators of the task's workload (compute.num_accelerators) when "
                        "they are known as the Dag file is parsed, so an Airflow pool sized in "
                        "accelerators (python -m airflow_air.pools POOL --accelerators) caps "
                        "GPUs, not tasks. Tasks whose count a template decides keep 1.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                    "trigger_first_poll_delay": {
                        "description": "Seconds a deferred operator's trigger waits before its "
                        "first status request. Airflow 3.3 can fail a deferred task whose "
                        "trigger fires before the scheduler has read the executor event of the "
                        "deferral (apache/airflow#72716), and the worker reports that event up "
                        "to [workers] min_heartbeat_interval after the deferral. Default: twice "
                        "[workers] min_heartbeat_interval (10 s). Operators finish without "
                        "deferring when the run has already ended.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "10",
                        "default": None,
                    },
                    "defer_timeout_grace": {
                        "description": "Seconds a deferred operator's trigger gets past the "
                        "task's execution_timeout before Airflow times the deferral out (the "
                        "triggerer was down or overloaded). The trigger cancels the run at the "
                        "deadline itself; when Airflow's timeout fires instead, the task "
                        "resumes only to cancel the run and fail.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "60",
                        "default": "300",
                    },
                    "workspace_request_budget": {
                        "description": "Upper bound of status requests per second that one "
                        "triggerer or worker process sends to one workspace, shared by all runs "
                        "it waits on.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "20",
                        "default": "10",
                    },
                    "live_lines": {
                        "description": "Deferred tasks show their runs' new node lines while "
                        "they run (each line once; the copy at the end adds only the lines not "
                        "shown). The reads share workspace_request_budget with the status "
                        "polls: at most live_lines_share of it, each run read at most every "
                        "live_lines_interval seconds, at most live_lines_per_read lines of a "
                        "node per read (the newest; older unread lines are passed over and "
                        "said so).",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                    "live_lines_interval": {
                        "description": "Seconds between two reads of one run's live lines.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "30",
                        "default": "15",
                    },
                    "live_lines_per_read": {
                        "description": "At most this many lines of one node per read.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "200",
                        "default": "50",
                    },
                    "live_lines_share": {
                        "description": "The share of workspace_request_budget live lines "
                        "may take (0 to 1); the status polls keep the rest.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "0.25",
                        "default": "0.95",
                    },
                    "live_progress_interval": {
                        "description": "With live_lines on, a deferred task logs its run's "
                        "training progress and time left when they change (as databricks air "
                        "get computes them from the MLflow params max_steps or "
                        "num_train_epochs and the epoch metric), read at most every this many "
                        "seconds, within live_progress_share.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "300",
                        "default": "60",
                    },
                    "live_progress_share": {
                        "description": "The share of workspace_request_budget progress reads "
                        "(three requests each) may take (0 to 1), only when it has them at "
                        "once: they never hold up a line read, and with many runs come less "
                        "often than live_progress_interval (while line reads fall behind, "
                        "0.02).",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "0.1",
                        "default": "0.05",
                    },
                    "completed_log_lines": {
                        "description": "At most this many node log lines are copied into the "
                        "task log when a run (or workflow stage) that was waited on in the "
                        "triggerer, or had already ended, completes; the rest with airo logs. "
                        "Runs waited on in the worker stream every line while they run.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "100000",
                        "default": "10000",
                    },
                    "default_secret_scope": {
                        "description": "Databricks secret scope that secret_env values are "
                        "written to when an operator does not set secret_scope.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "airflow-secrets",
                        "default": "airflow-air",
                    },
                    "deployment_namespace": {
                        "description": "Identity of this Airflow deployment in idempotency "
                        "tokens and secret keys, so deployments sharing a workspace never get "
                        "each other's runs. Unset: a random value made once and kept in the "
                        "metadata database (variable airflow_air_deployment_namespace). Set it "
                        "to that value of another metadata database to take over its runs "
                        "on purpose (a migration).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "prod-eu",
                        "default": None,
                    },
                },
            }
        },
    }
