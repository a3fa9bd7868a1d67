"""Multi-stage workflows: one multi-asset, any subset of stages as one multi-task run."""

from __future__ import annotations

import dagster as dg
import httpx
from dagster_checks import compute_logs, counters, failure_data, node_log, workload

from air_runtime import AirClient
from dagster_air import AirStage, build_air_assets


def _pipeline(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    return build_air_assets(
        [
            AirStage(
                key="generate",
                workload=workload("generate", f'echo rollouts > "{shared}/rollouts.txt"\n'),
            ),
            AirStage(
                key="train",
                workload=workload(
                    "train", f'cat "{shared}/rollouts.txt"\necho trained > "{shared}/model.txt"\n'
                ),
                depends_on=["generate"],
            ),
            AirStage(
                key="evaluate",
                workload=workload("evaluate", f'echo "evaluating $(cat "{shared}/model.txt")"\n'),
                depends_on=["train"],
            ),
        ],
        name="rl_pipeline",
    )


def _tasks(local_workspace, run_id):
    with AirClient(local_workspace.host, local_workspace.token) as client:
        return {t.task_key: t for t in client.get_run(run_id).tasks}


def test_all_stages_run_as_one_multi_task_run(air_workspace, instance, local_workspace, tmp_path):
    assets = _pipeline(tmp_path)
    assert assets.can_subset
    deps = {key.path[-1]: [d.path[-1] for d in assets.asset_deps[key]] for key in assets.keys}
    assert deps == {"generate": [], "train": ["generate"], "evaluate": ["train"]}

    result = dg.materialize([assets], resources={"air_workspace": air_workspace}, instance=instance)
    assert result.success
    mats = {m.asset_key.path[-1]: m for m in result.get_asset_materialization_events()}
    assert set(mats) == {"generate", "train", "evaluate"}
    run_ids = {m.materialization.metadata["dagster-air/run_id"].value for m in mats.values()}
    assert len(run_ids) == 1
    (run_id,) = run_ids
    assert counters(local_workspace)["runs_created"] == 1

    tasks = _tasks(local_workspace, run_id)
    assert set(tasks) == {"generate", "train", "evaluate"}
    assert all(t.is_success for t in tasks.values())
    # Each stage's metadata points at its own task run.
    for key, mat in mats.items():
        assert mat.materialization.metadata["dagster-air/task_run_id"].value == tasks[key].run_id
    assert "evaluating trained" in node_log(local_workspace, tasks["evaluate"].run_id)


def test_a_subset_of_stages_runs_with_dependencies_among_the_selected(
    air_workspace, instance, local_workspace, tmp_path
):
    assets = _pipeline(tmp_path)
    (tmp_path / "shared" / "rollouts.txt").write_text("earlier rollouts\n")
    result = dg.materialize(
        [assets],
        selection=["train", "evaluate"],
        resources={"air_workspace": air_workspace},
        instance=instance,
    )
    assert result.success
    mats = {m.asset_key.path[-1]: m for m in result.get_asset_materialization_events()}
    assert set(mats) == {"train", "evaluate"}
    (run_id,) = {m.materialization.metadata["dagster-air/run_id"].value for m in mats.values()}
    assert counters(local_workspace)["runs_created"] == 1

    body = _raw_run(local_workspace, run_id)
    # The workflow's name, then whose run it is: the job, the Dagster run and the step.
    assert body["run_name"] == f"rl_pipeline--ephemeral_asset_job--{result.run_id[:8]}--rl_pipeline"
    depends = {
        t["task_key"]: [d["task_key"] for d in t.get("depends_on", [])] for t in body["tasks"]
    }
    assert depends == {"train": [], "evaluate": ["train"]}
    assert "earlier rollouts" in node_log(
        local_workspace, _tasks(local_workspace, run_id)["train"].run_id
    )


def test_a_failed_stage_fails_the_step_after_recording_the_stages_that_succeeded(
    air_workspace, instance, local_workspace, tmp_path
):
    assets = build_air_assets(
        [
            AirStage(key="first", workload=workload("first", "echo ok\n")),
            AirStage(key="second", workload=workload("second", "exit 4\n"), depends_on=["first"]),
        ],
        name="two_stages",
    )
    result = dg.materialize(
        [assets],
        resources={"air_workspace": air_workspace},
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    assert [m.asset_key.path[-1] for m in result.get_asset_materialization_events()] == ["first"]
    failure = failure_data(result).user_failure_data
    assert "Failed task: second" in failure.description
    assert "exit code 4" in failure.description
    # The observation that says the remote run ended badly is on the failed stage's asset.
    (observation,) = [
        e.asset_observation_data.asset_observation
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_OBSERVATION
        and "dagster-air/generation" in e.asset_observation_data.asset_observation.metadata
    ]
    assert observation.asset_key == dg.AssetKey("second")


def _raw_run(local_workspace, run_id):
    """runs/get as the workspace answers it (with each task's depends_on)."""
    response = httpx.get(
        f"{local_workspace.host}/api/2.2/jobs/runs/get",
        params={"run_id": run_id},
        headers={"Authorization": f"Bearer {local_workspace.token}"},
    )
    response.raise_for_status()
    return response.json()


def test_every_node_and_attempt_reaches_the_compute_logs_and_each_attempt_end_is_an_event(
    air_workspace, instance, local_workspace, tmp_path, dagster_home
):
    marks = tmp_path / "marks"
    marks.mkdir()
    # The first attempt fails (both ranks print first), the platform retries the task once.
    flaky = (
        f'echo "rank $NODE_RANK try"\n'
        f'if [ ! -f "{marks}/failed" ]; then sleep 0.5; touch "{marks}/failed"; exit 3; fi\n'
    )
    assets = build_air_assets(
        [
            AirStage(key="prepare", workload=workload("prepare", "echo prepared\n")),
            AirStage(
                key="train",
                workload=workload(
                    "train",
                    flaky,
                    compute={"accelerator_type": "GPU_1xA10", "num_accelerators": 2},
                    max_retries=1,
                ),
                depends_on=["prepare"],
            ),
        ],
        name="retried",
    )
    result = dg.materialize([assets], resources={"air_workspace": air_workspace}, instance=instance)
    assert result.success
    stdout = compute_logs(dagster_home, result.run_id)
    for label in ("train node 0 attempt 0", "train node 1 attempt 0", "train node 1 attempt 1"):
        assert f"{label}] rank {label.split()[2]} try" in stdout, label
    assert "prepare node 0 attempt 0] prepared" in stdout
    observations = [
        e.asset_observation_data.asset_observation
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_OBSERVATION
    ]
    # The other observations are the MLflow link, recorded once while train runs.
    ends = [
        (
            o.asset_key.path[-1],
            o.metadata["dagster-air/attempt_number"].value,
            o.metadata["dagster-air/attempt_state"].value,
        )
        for o in observations
        if "dagster-air/attempt_state" in o.metadata
    ]
    links = [
        o.asset_key.path[-1] for o in observations if "dagster-air/attempt_state" not in o.metadata
    ]
    assert all(
        "dagster-air/mlflow_run" in o.metadata
        for o in observations
        if "dagster-air/attempt_state" not in o.metadata
    )
    assert set(links) <= {"prepare", "train"}, links
    assert sorted(ends) == [
        ("prepare", 0, "SUCCESS"),
        ("train", 0, "FAILED"),
        ("train", 1, "SUCCESS"),
    ]
    mats = {
        m.asset_key.path[-1]: m.materialization for m in result.get_asset_materialization_events()
    }
    # GPU-hours of both attempts of train (2 GPUs each).
    assert mats["train"].metadata["dagster-air/gpu_hours"].value > 0
    assert mats["train"].metadata["dagster-air/attempt_number"].value == 1
