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
    """Copies both images from the stand-in Docker Hub into the stand-in Artifact Registry,
    then trains on the copies: the workspace refuses a run whose images are not there."""
    from image_registries import image_registries, push_rl_images

    monkeypatch.setenv(
        "AIRFLOW_CONN_HF_DEFAULT",
        json.dumps({"conn_type": "generic", "password": "hf_local_demo_token"}),
    )
    with image_registries(tmp_path / "registries", workspace) as registries:
        sources = push_rl_images(registries, tmp_path / "build")
        monkeypatch.setenv("DOCKER_CONFIG", str(registries.docker_config.parent))
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        dag = repo_dag("rl_pipeline.py")
        dag_run = dag.test(
            run_conf={
                "output_root": str(tmp_path / "out"),
                "source_registry": registries.hub.host,
                "artifact_registry_host": registries.artifact_registry.host,
            }
        )
    assert task_states(dag_run) == {
        "copy_vllm_image": "success",
        "copy_pytorch_image": "success",
        "rl.submit": "success",
        "rl.grpo": "success",
        "rl.evaluate": "success",
    }
    assert xcom(dag.dag_id, dag_run.run_id, "copy_vllm_image") == "main.rl.vllm:0.8.5"
    assert (
        xcom(dag.dag_id, dag_run.run_id, "copy_pytorch_image")
        == "main.rl.pytorch:2.6.0-cuda12.4-cudnn9-runtime"
    )
    assert (
        xcom(dag.dag_id, dag_run.run_id, "copy_vllm_image", key="digest")
        == sources["vllm/vllm-openai"].manifests["linux/amd64"]
    )
    assert workspace.admin.counters()["runs_created"] == 1
    outputs = list((tmp_path / "out").rglob("metrics.json"))
    assert len(outputs) == 1 and dag.dag_id in str(outputs[0])  # per-run output folder
    assert "hf_local_demo_token" not in task_log.text()
    # The stage's secret keys were deleted once the whole multi-task run had ended.
    assert "secret keys of the ended run" in task_log.text()
    assert scope_keys(workspace, "airflow-air") == []
