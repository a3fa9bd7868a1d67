"""Dagster webserver and daemon on PostgreSQL: the RL assets of examples/dagster launched
through GraphQL, queued, started by the daemon, and materialized from a local workspace; the
evaluation starts only after grpo's blocking check passed, and never after it failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster_deployment import DagsterDeployment

from demo.pipeline import DAGSTER_ASSETS, DAGSTER_MODULE, DAGSTER_PROJECT, PLACEHOLDER_SECRET

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(360)]

LOCATION = "air_examples"


def test_rl_assets_launched_through_graphql(
    tmp_path: Path, postgres: str, local_workspace, workspace_client
) -> None:
    """The example's image asset copies the RL images from a stand-in Docker Hub into the
    workspace's stand-in Artifact Registry first (its workloads run on the copies)."""
    from image_registries import image_registries, push_rl_images

    with image_registries(tmp_path / "registries", local_workspace) as registries:
        push_rl_images(registries, tmp_path / "build")
        _launch_the_rl_assets(
            tmp_path,
            postgres,
            local_workspace,
            workspace_client,
            {
                "DOCKER_CONFIG": str(registries.docker_config.parent),
                "XDG_CACHE_HOME": str(tmp_path / "cache"),
                "RL_SOURCE_REGISTRY": registries.hub.host,
                "AIRO_ARTIFACT_REGISTRY": registries.artifact_registry.host,
            },
        )


def _launch_the_rl_assets(
    tmp_path: Path, postgres: str, local_workspace, workspace_client, registry_env: dict
) -> None:
    deployment = DagsterDeployment(
        tmp_path,
        database_dsn=f"{postgres}/airo_dagster",
        code_location={
            "python_module": {
                "module_name": DAGSTER_MODULE,
                "working_directory": str(DAGSTER_PROJECT),
                "location_name": LOCATION,
            }
        },
        extra_env={
            "AIRO_HOST": local_workspace.host,
            "AIRO_TOKEN": local_workspace.token,
            "HF_TOKEN": PLACEHOLDER_SECRET,
            "RL_OUTPUT_ROOT": str(tmp_path / "rl_output"),
            **registry_env,
        },
    )
    try:
        deployment.start()
        jobs = deployment.jobs()[LOCATION]
        asset_job = "__ASSET_JOB" if "__ASSET_JOB" in jobs else sorted(jobs)[0]
        run_id = deployment.launch(
            location=LOCATION,
            job=asset_job,
            asset_selection=[[key] for key in DAGSTER_ASSETS],
            # One run worker process; a process per step only adds start-up time here.
            run_config={"execution": {"config": {"in_process": {}}}},
        )
        status, seen = deployment.wait_for_run(run_id, timeout=240)
        assert status == "SUCCESS", f"{seen}\n{deployment.run_messages(run_id)}"
        # Queued first: the daemon, not the webserver, started the run.
        assert seen[0] in ("QUEUED", "NOT_STARTED", "STARTING") and len(seen) > 1, seen

        materialized = deployment.materializations(run_id)
        assert set(materialized) == {(key,) for key in DAGSTER_ASSETS}, materialized
        grpo, evaluate = materialized[("grpo",)], materialized[("evaluate",)]
        # grpo's blocking check split the stages: grpo's run, then evaluate's once it passed.
        remote_id = grpo["dagster-air/run_id"]
        assert isinstance(remote_id, int) and evaluate["dagster-air/run_id"] > remote_id
        assert grpo["dagster-air/run_url"] == f"{local_workspace.host}/jobs/runs/{remote_id}"
        remote = workspace_client.get_run(remote_id)
        assert remote.is_success, remote
        assert {t.task_key: t.result_state for t in remote.tasks} == {"grpo": "SUCCESS"}
        evaluated = workspace_client.get_run(evaluate["dagster-air/run_id"])
        assert {t.task_key: t.result_state for t in evaluated.tasks} == {"evaluate": "SUCCESS"}
        assert evaluated.start_time >= remote.end_time
        # Each run is named after the Dagster run (its first 8 characters).
        assert f"--{run_id[:8]}--" in remote.run_name and f"--{run_id[:8]}--" in evaluated.run_name
        # The trainer wrote its metrics where this run's metadata says; evaluate its verdict.
        output = Path(grpo["dagster/uri"])
        metrics = json.loads((output / "metrics.json").read_text())
        assert metrics["epochs"] >= 1 and 0.0 <= metrics["mean_reward"] <= 1.0
        assert (output / "evaluation.json").is_file()

        # A reward no policy reaches: the blocking check fails, so evaluate's rank never
        # executes (no verdict in the run's folder) and only grpo's run is submitted.
        before = len(workspace_client.list_runs(active_only=False, limit=25)[0])
        failing = deployment.launch(
            location=LOCATION,
            job=asset_job,
            asset_selection=[["grpo"], ["evaluate"]],
            run_config={
                "execution": {"config": {"in_process": {}}},
                "ops": {
                    "rl_pipeline": {
                        "config": {"stage_overrides": {"grpo": ["parameters.min_train_reward=2"]}}
                    }
                },
            },
        )
        status, _ = deployment.wait_for_run(failing, timeout=240)
        messages = deployment.run_messages(failing, last=80)
        assert status == "FAILURE", messages
        assert "blocking check reward_learned of grpo failed" in messages, messages
        assert set(deployment.materializations(failing)) == {("grpo",)}
        assert not (tmp_path / "rl_output" / failing / "evaluation.json").exists()
        assert (tmp_path / "rl_output" / failing / "metrics.json").is_file()
        assert len(workspace_client.list_runs(active_only=False, limit=25)[0]) == before + 1
    finally:
        deployment.stop()
