"""The repository's Dags, run end to end against the local workspace with ``dag.test()``."""

from __future__ import annotations

import json

from airflow_runs import repo_dag, scope_keys, task_states, xcom


def test_scheduled_training(workspace, task_log):
    dag = repo_dag("scheduled_training.py")
    dag_run = dag.test()
    assert task_states(dag_run) == {"train": "success"}
    logs = task_log.text()
    assert "torchrun node 0/2: nproc_per_node=8 world_size=16" in logs
    assert "torchrun node 1/2" in logs
    assert xcom(dag.dag_id, dag_run.run_id, "train")["result_state"] == "SUCCESS"


def test_rl_pipeline(workspace, task_log, monkeypatch, tmp_path):
    monkeypatch.setenv(
        "AIRFLOW_CONN_HF_DEFAULT",
        json.dumps({"conn_type": "generic", "password": "hf_local_demo_token"}),
    )
    dag = repo_dag("rl_pipeline.py")
    dag_run = dag.test(run_conf={"output_root": str(tmp_path)})
    assert task_states(dag_run) == {
        "register_vllm_image": "success",
        "register_pytorch_image": "success",
        "rl.submit": "success",
        "rl.grpo": "success",
        "rl.evaluate": "success",
    }
    assert workspace.admin.counters()["runs_created"] == 1
    outputs = list(tmp_path.rglob("metrics.json"))
    assert len(outputs) == 1 and dag.dag_id in str(outputs[0])  # per-run output folder
    assert "hf_local_demo_token" not in task_log.text()
    # The stage's secret keys were deleted once the whole multi-task run had ended.
    assert "secret keys of the ended run" in task_log.text()
    assert scope_keys(workspace, "airflow-air") == []
