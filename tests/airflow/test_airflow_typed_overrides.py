"""A templated numeric override, typed by the workload's schema: ``"{{ params.gpus }}"``
renders to the text ``'2'`` and submits 2 accelerators (it used to be refused as not an
integer). The Dag: dag_files/air_test_typed_overrides.py."""

from __future__ import annotations

from airflow_runs import load_test_dag, rendered_fields_text, task_states, xcom

from air_runtime import AirClient

DAG_ID = "air_test_typed_overrides"


def test_a_templated_accelerator_count_renders_and_submits_that_many(workspace, task_log):
    dag_run = load_test_dag(DAG_ID, "air_test_typed_overrides.py").test()
    assert task_states(dag_run) == {"train": "success"}, task_log.text()
    # Airflow rendered the override to text; the core typed it.
    assert "'compute.num_accelerators': '2'" in rendered_fields_text(DAG_ID)
    run_id = xcom(DAG_ID, dag_run.run_id, "train", "run_id")
    with AirClient(workspace.host, workspace.token) as client:
        (task,) = client.get_run(run_id).tasks
    assert (task.accelerator_type, task.num_accelerators) == ("GPU_1xA10", 2)
    assert "rank 1 of 2" in task_log.text()  # two one-GPU nodes ran
