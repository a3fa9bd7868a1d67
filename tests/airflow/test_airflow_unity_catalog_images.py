"""AirRegisterImageOperator's Unity Catalog target (Dag ``air_test_uc_image``): it copies
the image from the stand-in Docker Hub (its login from an Airflow connection) to the
stand-in Artifact Registry and returns the ``unity_catalog_image``, which the downstream
AirRunOperator runs (templated into ``environment.unity_catalog_image``; the workspace
refuses a run whose image is not in its Artifact Registry). A refused login fails the task
at once, naming the registry, with no password in the logs."""

from __future__ import annotations

import json

from airflow_runs import load_test_dag, rendered_fields_text, task_states, xcom
from image_registries import HUB_PASSWORD, HUB_USER, image_registries

from image_fixtures.image_builder import push_generated_image


def test_copy_into_unity_catalog_then_train_on_the_copy(workspace, task_log, monkeypatch, tmp_path):
    with image_registries(tmp_path / "registries", workspace) as registries:
        built = push_generated_image(
            registries.hub.host,
            "acme/trainer",
            "3.0",
            platforms=("linux/amd64", "linux/arm64"),
            login=registries.hub_login,
            workdir=tmp_path / "build",
        )
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        monkeypatch.setenv(
            "AIRFLOW_CONN_HUB_TEST",
            json.dumps({"conn_type": "generic", "login": HUB_USER, "password": HUB_PASSWORD}),
        )
        conf = {
            "source_registry": registries.hub.host,
            "artifact_registry_host": registries.artifact_registry.host,
        }
        dag = load_test_dag("air_test_uc_image")
        run = dag.test(run_conf=conf)
        assert task_states(run) == {"copy_image": "success", "train": "success"}
        assert xcom(dag.dag_id, run.run_id, "copy_image") == "main.ml.trainer:3.0"
        digest = xcom(dag.dag_id, run.run_id, "copy_image", key="digest")
        assert digest == built.manifests["linux/amd64"]
        assert "main.ml.trainer:3.0" in rendered_fields_text(dag.dag_id)

        monkeypatch.setenv(
            "AIRFLOW_CONN_HUB_TEST",
            json.dumps({"conn_type": "generic", "login": HUB_USER, "password": "wrong-pw-0042"}),
        )
        failed = dag.test(run_conf=conf)
    assert task_states(failed)["copy_image"] == "failed"
    logs = task_log.text()
    assert f"the source registry {registries.hub.host} refused the login of 'hubuser'" in logs
    assert "wrong-pw-0042" not in logs and HUB_PASSWORD not in logs
    assert workspace.token not in logs
