"""Steps over a partition key range (single_run / multi_run backfills): one task per partition
in one multi-task run, each partition trained with its own parameters and recorded from its
own task; blocking checks inside one multi-stage step; the last attempt's Pipes reports."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster_checks import counters, failure_data, node_log, workload

from air_runtime import AirClient
from dagster_air import AirStage, AirWorkspace, build_air_assets

SWEEP = {"lr=0.1": {"lr": 0.1}, "lr=0.2": {"lr": 0.2}, "lr=0.3": {"lr": 0.3}}

# Each task reports, through Pipes, the partition its context names and the lr it trained.
REPORTING_TRAINER = """\
cat hyperparameters.yaml
python - <<'PY'
import yaml
from dagster_pipes import open_dagster_pipes

lr = yaml.safe_load(open("hyperparameters.yaml"))["lr"]
with open_dagster_pipes() as pipes:
    pipes.report_asset_materialization(metadata={"trained_lr": lr, "seen_partition": pipes.partition_key})
    pipes.report_asset_check("lr_positive", passed=lr > 0, metadata={"lr": lr})
    if lr == FAILING_LR:
        raise SystemExit("diverged at lr=" + str(lr))
PY
"""


def _range(start: str, end: str) -> dict[str, str]:
    return {
        "dagster/asset_partition_range_start": start,
        "dagster/asset_partition_range_end": end,
    }


def _sweep_assets(failing_lr: float | None = None, **options):
    command = REPORTING_TRAINER.replace("FAILING_LR", repr(failing_lr))
    return build_air_assets(
        AirStage(key="train", workload=workload("sweep", command), check_specs=["lr_positive"]),
        partitions_def=dg.StaticPartitionsDefinition(list(SWEEP)),
        partition_parameters=SWEEP,
        backfill_policy=dg.BackfillPolicy.single_run(),
        **options,
    )


def _materialize(assets, air_workspace, instance, **options):
    return dg.materialize(
        [assets], resources={"air_workspace": air_workspace}, instance=instance, **options
    )


def _tasks(local_workspace, run_id: int) -> dict:
    with AirClient(local_workspace.host, local_workspace.token) as client:
        return {t.task_key: t for t in client.get_run(run_id).tasks}


def _materialize_range(assets, air_workspace, instance, keys: list[str]):
    """Materialize ``keys`` (first to last) as one range run, successfully."""
    result = _materialize(assets, air_workspace, instance, tags=_range(keys[0], keys[-1]))
    assert result.success
    return result


def _materializations(instance, asset: str) -> dict[str, dg.AssetMaterialization]:
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=100).records
    found: dict[str, dg.AssetMaterialization] = {}
    for record in reversed(records):  # oldest first: the newest of a partition wins
        materialization = record.asset_materialization
        assert materialization is not None
        found[str(record.partition_key)] = materialization
    return found


def _checks(result) -> list[dg.AssetCheckEvaluation]:
    return [
        e.asset_check_evaluation_data
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ]


def test_a_range_run_trains_each_partition_in_its_own_task(
    air_workspace, instance, local_workspace
):
    assets = _sweep_assets()
    result = _materialize(
        assets,
        air_workspace,
        instance,
        tags=_range("lr=0.1", "lr=0.3"),
    )
    assert result.success
    assert counters(local_workspace)["runs_created"] == 1
    mats = _materializations(instance, "train")
    assert set(mats) == set(SWEEP)
    (run_id,) = {m.metadata["dagster-air/run_id"].value for m in mats.values()}
    tasks = _tasks(local_workspace, run_id)
    assert len(tasks) == 3 and all(t.is_success for t in tasks.values())
    task_runs = {key: m.metadata["dagster-air/task_run_id"].value for key, m in mats.items()}
    assert len(set(task_runs.values())) == 3  # each partition from its own task
    for key, params in SWEEP.items():
        metadata = mats[key].metadata
        assert metadata["trained_lr"].value == params["lr"]
        assert metadata["seen_partition"].value == key
        assert metadata["dagster-air/partition"].value == key
        assert metadata["dagster-air/gpu_hours"].value > 0
        assert f"lr: {params['lr']}" in node_log(local_workspace, task_runs[key])
    checks = _checks(result)
    assert sorted(c.metadata["dagster-air/partition"].value for c in checks) == sorted(SWEEP)
    assert all(c.passed for c in checks)


def test_one_failing_partition_fails_only_itself(air_workspace, instance, local_workspace):
    assets = _sweep_assets(failing_lr=0.2)
    result = _materialize(
        assets,
        air_workspace,
        instance,
        tags=_range("lr=0.1", "lr=0.3"),
        raise_on_error=False,
    )
    assert not result.success
    assert set(_materializations(instance, "train")) == {"lr=0.1", "lr=0.3"}
    message = failure_data(result).user_failure_data.description
    assert message.startswith("1 of 3 partitions not materialized: lr=0.2"), message
    assert "diverged at lr=0.2" in message
    assert counters(local_workspace)["runs_created"] == 1


def test_a_range_larger_than_the_task_cap_is_split_into_runs(
    air_workspace, instance, local_workspace
):
    keys = [f"trial-{i}" for i in range(5)]
    assets = build_air_assets(
        AirStage(key="trial", workload=workload("trial", 'echo "trial $DAGSTER_PARTITION_KEY"')),
        partitions_def=dg.StaticPartitionsDefinition(keys),
        backfill_policy=dg.BackfillPolicy.single_run(),
        max_tasks_per_run=2,
    )
    _materialize_range(assets, air_workspace, instance, keys)
    mats = _materializations(instance, "trial")
    assert set(mats) == set(keys)
    assert len({m.metadata["dagster-air/run_id"].value for m in mats.values()}) == 3
    assert counters(local_workspace)["runs_created"] == 3


def test_a_time_window_range_gives_each_day_its_own_task(air_workspace, instance, local_workspace):
    days = dg.DailyPartitionsDefinition(start_date="2026-01-01", end_date="2026-01-04")
    command = """\
python - <<'PY'
import os
from dagster_pipes import open_dagster_pipes

with open_dagster_pipes() as pipes:
    window = pipes.partition_time_window
    pipes.report_asset_materialization(
        metadata={"day": os.environ["DAGSTER_PARTITION_KEY"], "window_start": window["start"]}
    )
PY
"""
    assets = build_air_assets(
        AirStage(key="daily", workload=workload("daily", command)),
        partitions_def=days,
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    result = _materialize(
        assets,
        air_workspace,
        instance,
        tags=_range("2026-01-01", "2026-01-03"),
    )
    assert result.success
    mats = _materializations(instance, "daily")
    assert set(mats) == {"2026-01-01", "2026-01-02", "2026-01-03"}
    for day, mat in mats.items():
        assert mat.metadata["day"].value == day
        assert mat.metadata["window_start"].value.startswith(day)
    assert counters(local_workspace)["runs_created"] == 1


def test_a_multi_partition_range_maps_each_dimension(air_workspace, instance, local_workspace):
    grid = dg.MultiPartitionsDefinition(
        {
            "model": dg.StaticPartitionsDefinition(["small"]),
            "seed": dg.StaticPartitionsDefinition(["1", "2"]),
        }
    )
    assets = build_air_assets(
        AirStage(key="grid", workload=workload("grid", "cat hyperparameters.yaml")),
        partitions_def=grid,
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    keys = grid.get_partition_keys()
    _materialize_range(assets, air_workspace, instance, keys)
    mats = _materializations(instance, "grid")
    assert set(mats) == set(keys)
    for key, mat in mats.items():
        model, seed = key.split("|")
        log = node_log(local_workspace, mat.metadata["dagster-air/task_run_id"].value)
        assert f"model: {model}" in log
        assert f'seed: "{seed}"' in log  # a dimension's key is text


def test_range_runs_refuse_what_they_cannot_do_when_the_definitions_load():
    stages = [
        AirStage(
            key=f"s{i}", workload=workload(f"s{i}", "true"), depends_on=[f"s{i - 1}"] if i else []
        )
        for i in range(3)
    ]
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="max_tasks_per_run to at least 3"):
        build_air_assets(
            stages,
            partitions_def=dg.StaticPartitionsDefinition(["a", "b"]),
            backfill_policy=dg.BackfillPolicy.single_run(),
            max_tasks_per_run=2,
        )
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="from 1 to 1000"):
        build_air_assets(stages, max_tasks_per_run=5000)
    # One partition per run: the cap does not matter.
    build_air_assets(
        stages,
        partitions_def=dg.StaticPartitionsDefinition(["a", "b"]),
        backfill_policy=dg.BackfillPolicy.multi_run(1),
        max_tasks_per_run=2,
    )


CHECKED_PREPARE = """\
python - <<'PY'
import os
from dagster_pipes import open_dagster_pipes

with open_dagster_pipes() as pipes:
    pipes.report_asset_check("data_valid", passed=os.path.exists("PASS_FILE"), metadata={"bad_rows": 12})
PY
"""


def test_a_stage_after_a_failing_blocking_check_never_starts_and_one_after_a_passing_one_does(
    air_workspace, instance, local_workspace, tmp_path
):
    """The stages after a blocking check are a run of their own, submitted once the check
    passed: after a failed one the downstream rank never executes, not even for a moment."""
    ranks, passes = tmp_path / "evaluate_ranks", tmp_path / "data_is_valid"
    assets = build_air_assets(
        [
            AirStage(
                key="prepare",
                workload=workload("prepare", CHECKED_PREPARE.replace("PASS_FILE", str(passes))),
                check_specs=[{"name": "data_valid", "blocking": True}],
            ),
            AirStage(
                key="evaluate",
                # Every execution of the rank leaves a line, first thing.
                workload=workload("evaluate", f'echo "$AIRO_ORCHESTRATOR_RUN_ID" >> "{ranks}"'),
                depends_on=["prepare"],
            ),
        ],
        name="blocked",
    )
    result = _materialize(assets, air_workspace, instance, raise_on_error=False)
    assert not result.success
    materialized = {m.asset_key.path[-1] for m in result.get_asset_materialization_events()}
    assert materialized == {"prepare"}
    (check,) = _checks(result)
    assert check.check_name == "data_valid" and not check.passed and check.blocking
    message = failure_data(result).user_failure_data.description
    assert "never started" in message
    assert "evaluate: not materialized, blocking check data_valid of prepare failed" in message
    run_id = (
        next(iter(result.get_asset_materialization_events()))
        .materialization.metadata["dagster-air/run_id"]
        .value
    )
    # One run, of the checked stage alone; the downstream one was never submitted.
    assert set(_tasks(local_workspace, run_id)) == {"prepare"}
    assert counters(local_workspace)["runs_created"] == 1
    assert not ranks.exists()

    passes.touch()
    result = _materialize(assets, air_workspace, instance)
    materialized = {
        m.asset_key.path[-1]: m.materialization.metadata["dagster-air/run_id"].value
        for m in result.get_asset_materialization_events()
    }
    assert set(materialized) == {"prepare", "evaluate"}
    # Two runs: the downstream one submitted after the check passed, named after it.
    assert materialized["prepare"] != materialized["evaluate"]
    assert set(_tasks(local_workspace, materialized["evaluate"])) == {"evaluate"}
    with AirClient(local_workspace.host, local_workspace.token) as client:
        name = client.get_run(materialized["evaluate"]).run_name
    assert name.startswith("blocked_after_prepare--"), name
    assert ranks.read_text().splitlines() == [result.run_id]  # once, for the passing run


RETRIED_TRAINER = """\
python - <<'PY'
import os
from dagster_pipes import open_dagster_pipes

first = not os.path.exists("MARKER")
with open_dagster_pipes() as pipes:
    pipes.report_asset_materialization(metadata={"loss": 9.0 if first else 0.5, "first_attempt": first})
    pipes.report_asset_check("loss_small", passed=not first, metadata={"first_attempt": first})
if first:
    open("MARKER", "w").close()
    raise SystemExit("lost a node")
PY
"""


def test_the_last_attempt_s_reports_win_and_earlier_ones_are_observations(
    air_workspace, instance, local_workspace, tmp_path
):
    command = RETRIED_TRAINER.replace("MARKER", str(tmp_path / "first-attempt-done"))
    assets = build_air_assets(
        AirStage(
            key="flaky",
            workload={**workload("flaky", command), "max_retries": 1},
            check_specs=["loss_small"],
        )
    )
    result = _materialize(assets, air_workspace, instance)
    assert result.success
    (mat,) = result.asset_materializations_for_node("flaky")
    assert mat.metadata["loss"].value == 0.5
    assert mat.metadata["first_attempt"].value is False
    assert mat.metadata["dagster-air/attempt_number"].value == 1
    (check,) = _checks(result)
    assert check.passed and check.metadata["first_attempt"].value is False
    observations = [
        e.asset_observation_data.asset_observation.metadata
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_OBSERVATION
    ]
    superseded = [o for o in observations if "dagster-air/superseded_by_retry" in o]
    assert len(superseded) == 1
    assert superseded[0]["loss"].value == 9.0
    assert superseded[0]["dagster-air/check/loss_small"].value == "failed"
    # Each ended attempt is observed with its own GPU-hours; the materialization has the
    # total, under another name, so summing either never counts an attempt twice.
    attempts = [o for o in observations if "dagster-air/attempt_gpu_hours" in o]
    assert len(attempts) == 2 and all("dagster-air/gpu_hours" not in o for o in attempts)
    total = sum(o["dagster-air/attempt_gpu_hours"].value for o in attempts)
    assert abs(mat.metadata["dagster-air/gpu_hours"].value - total) < 1e-5


def test_a_range_step_run_again_reattaches_to_its_runs(local_workspace, monkeypatch):
    """The same step of the same Dagster run (as after its worker crashed: same run id,
    same deployment) gets its remote runs back instead of training again."""
    monkeypatch.setenv("AIRO_HOST", local_workspace.host)
    monkeypatch.setenv("AIRO_TOKEN", local_workspace.token)
    workspace = AirWorkspace(
        host=dg.EnvVar("AIRO_HOST"),
        token=dg.EnvVar("AIRO_TOKEN"),
        poll_interval=0.2,
        deployment_namespace="one-deployment",
    )
    keys = [f"trial-{i}" for i in range(3)]
    assets = build_air_assets(
        AirStage(key="trial", workload=workload("trial", "echo trained")),
        partitions_def=dg.StaticPartitionsDefinition(keys),
        backfill_policy=dg.BackfillPolicy.single_run(),
        max_tasks_per_run=2,
    )
    job = dg.Definitions(
        assets=[assets], resources={"air_workspace": workspace}
    ).resolve_implicit_global_asset_job_def()
    remote_runs = []
    for _ in range(2):
        with dg.DagsterInstance.ephemeral() as instance:
            result = job.execute_in_process(
                instance=instance, run_id="5b1e0c1e-0000-4000-8000-000000000001",
                tags=_range(keys[0], keys[-1]),
            )  # fmt: skip
            assert result.success
            remote_runs.append(
                sorted(
                    {
                        m.materialization.metadata["dagster-air/run_id"].value
                        for m in result.get_asset_materialization_events()
                    }
                )
            )
    assert len(remote_runs[0]) == 2  # 3 partitions, 2 tasks per run
    assert remote_runs[0] == remote_runs[1]
    assert counters(local_workspace)["runs_created"] == 2


def test_a_failing_blocking_check_of_one_partition_blocks_only_that_partition_downstream(
    air_workspace, instance, local_workspace
):
    check = """\
python - <<'PY'
from dagster_pipes import open_dagster_pipes

with open_dagster_pipes() as pipes:
    pipes.report_asset_check("data_valid", passed=pipes.partition_key != "bad")
PY
"""
    assets = build_air_assets(
        [
            AirStage(
                key="prepare",
                workload=workload("prepare", check),
                check_specs=[{"name": "data_valid", "blocking": True}],
            ),
            AirStage(
                key="evaluate",
                workload=workload("evaluate", "echo evaluated"),
                depends_on=["prepare"],
            ),
        ],
        name="checked_sweep",
        partitions_def=dg.StaticPartitionsDefinition(["bad", "good"]),
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    result = _materialize(
        assets, air_workspace, instance, tags=_range("bad", "good"), raise_on_error=False
    )
    assert not result.success
    assert set(_materializations(instance, "prepare")) == {"bad", "good"}
    assert set(_materializations(instance, "evaluate")) == {"good"}
    message = failure_data(result).user_failure_data.description
    assert "evaluate partition bad" in message
    assert "blocking check data_valid of prepare partition bad failed" in message
    # The range's prepare tasks in one run, then the evaluate tasks the checks let through
    # (only the good partition's) in a second: the bad one's never started.
    evaluated = _materializations(instance, "evaluate")["good"]
    tasks = _tasks(local_workspace, evaluated.metadata["dagster-air/run_id"].value)
    assert list(tasks) == [k for k in tasks if k.startswith("evaluate__good_")] and len(tasks) == 1
    assert counters(local_workspace)["runs_created"] == 2
