"""P11 (Dagster): GPU-hours paid / GPU-hours needed when a run fails and is recovered the way
Dagster teaches, counted by what the ranks did.

- **Re-execute from failure**: a 4-partition sweep backfilled as one run
  (``BackfillPolicy.single_run()``); partition ``c`` runs out of GPU memory once; the run is
  re-executed from failure (``ReexecutionOptions.from_failure`` with the parent's tags and
  run config, as the UI does).
- **Run retry after SIGKILL**: a run worker killed while its step waits on the GPU run; the
  run is marked failed (what the code server that started it does) and retried from failure
  with ``dagster/retry_number`` (what the retries daemon does). The real deployment is
  exercised in tests/e2e/test_dagster_run_retries.py; here those two actions are taken
  directly so the figure does not depend on the daemons' poll intervals.

Every rank appends ``<partition> <start> <end> <ok|oom>`` to a file. A training is *needed*
unless its partition already had a successful one (the failed attempt itself was needed: it
is what failed); *paid* is every training. The ratio is paid / needed in rank-seconds (one
accelerator each, so GPU-hours up to a constant).

    python -m benchmarks.p11_dagster_recovery [--quick]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import dagster as dg

from benchmarks._common import PYTHON, REPO, fmt, parser_for, write_result
from dagster_air import AirStage, AirWorkspace, build_air_assets

KEYS = ["a", "b", "c", "d"]
TRAIN_S = 4.0
# Not measured here (no option reproduces the old behaviour): the figures of targets.md P11,
# 2026-12-02, labelled as estimates wherever they are shown.
BEFORE_ESTIMATE = {"reexecute_from_failure": 1.6, "run_retry_after_sigkill": 2.0}

TRAINER = f"""\
start=$(date +%s.%N)
sleep {TRAIN_S}
if [ "$DAGSTER_PARTITION_KEY" = c ] && [ ! -e "$COUNT_DIR/oom_once" ]; then
  touch "$COUNT_DIR/oom_once"
  echo "$DAGSTER_PARTITION_KEY $start $(date +%s.%N) oom" >> "$COUNT_DIR/trained"
  echo "torch.OutOfMemoryError: CUDA out of memory"
  exit 1
fi
echo "${{DAGSTER_PARTITION_KEY:-held}} $start $(date +%s.%N) ok" >> "$COUNT_DIR/trained"
"""

# The retry scenario's training: it starts, then holds until the run worker was killed.
HELD_TRAINER = """\
start=$(date +%s.%N)
touch "$COUNT_DIR/started"
while [ ! -e "$COUNT_DIR/killed" ]; do sleep 0.1; done
sleep 2
echo "held $start $(date +%s.%N) ok" >> "$COUNT_DIR/trained"
"""


def _workload(name: str, command: str) -> dict[str, Any]:
    return {
        "experiment_name": name,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": command,
    }


def _job(assets: dg.AssetsDefinition, name: str) -> dg.JobDefinition:
    defs = dg.Definitions(
        assets=[assets],
        jobs=[dg.define_asset_job(name, executor_def=dg.in_process_executor)],
        resources={
            "air_workspace": AirWorkspace(
                host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"), poll_interval=0.2
            )
        },
    )
    return defs.resolve_job_def(name)


def sweep_job() -> dg.JobDefinition:
    return _job(
        build_air_assets(
            AirStage(key="sweep", workload=_workload("sweep", TRAINER)),
            partitions_def=dg.StaticPartitionsDefinition(KEYS),
            backfill_policy=dg.BackfillPolicy.single_run(),
        ),
        "sweep_job",
    )


def held_job() -> dg.JobDefinition:
    return _job(
        build_air_assets(AirStage(key="held", workload=_workload("held", HELD_TRAINER))),
        "held_job",
    )


def _config(op: str, count_dir: Path) -> dict[str, Any]:
    return {"ops": {op: {"config": {"env": {"COUNT_DIR": str(count_dir)}}}}}


def _ratio(count_dir: Path) -> dict[str, Any]:
    """Paid and needed rank-seconds from what the ranks wrote (see the docstring)."""
    paid = needed = 0.0
    succeeded: set[str] = set()
    trainings = []
    for line in (count_dir / "trained").read_text().splitlines():
        key, start, end, how = line.split()
        seconds = float(end) - float(start)
        trainings.append({"partition": key, "seconds": round(seconds, 2), "result": how})
        paid += seconds
        if key not in succeeded:
            needed += seconds
        if how == "ok":
            succeeded.add(key)
    return {
        "paid_rank_s": round(paid, 2),
        "needed_rank_s": round(needed, 2),
        "ratio": round(paid / needed, 3),
        "trainings": trainings,
    }


def reexecute_from_failure(instance: dg.DagsterInstance, count_dir: Path) -> dict[str, Any]:
    job = dg.reconstructable(sweep_job)
    config = _config("sweep", count_dir)
    tags = {
        "dagster/asset_partition_range_start": KEYS[0],
        "dagster/asset_partition_range_end": KEYS[-1],
    }
    with dg.execute_job(job, instance, tags=tags, run_config=config, raise_on_error=False) as r:
        assert not r.success
        parent = r.run_id
    options = dg.ReexecutionOptions.from_failure(parent, instance)
    resume = {**tags, "dagster/is_resume_retry": "true"}
    with dg.execute_job(job, instance, tags=resume, run_config=config, reexecution_options=options) as r:  # fmt: skip
        assert r.success
    materialized = set(instance.get_materialized_partitions(dg.AssetKey("sweep")))
    assert materialized == set(KEYS), materialized
    return _ratio(count_dir)


def run_retry_after_sigkill(instance: dg.DagsterInstance, count_dir: Path) -> dict[str, Any]:
    worker = subprocess.Popen(
        [PYTHON, "-m", "benchmarks.p11_dagster_recovery", "--worker", str(count_dir)], cwd=REPO
    )
    try:
        while not (count_dir / "started").exists():  # the rank runs: the worker waits on it
            if worker.poll() is not None:
                raise RuntimeError("the run worker ended before its training started")
            time.sleep(0.1)
        (parent,) = instance.get_runs()
        while not _launched(instance, parent.run_id):  # the step recorded its GPU run
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    (count_dir / "killed").touch()
    instance.report_run_failed(parent)  # what the code server does when its worker dies
    options = dg.ReexecutionOptions.from_failure(parent.run_id, instance)
    retry_tags = {"dagster/retry_number": "1", "dagster/is_resume_retry": "true"}
    with dg.execute_job(
        dg.reconstructable(held_job),
        instance,
        tags=retry_tags,
        run_config=_config("held", count_dir),
        reexecution_options=options,
    ) as r:
        assert r.success
    return _ratio(count_dir)


def _launched(instance: dg.DagsterInstance, run_id: str) -> bool:
    return any(
        e.dagster_event is not None
        and e.dagster_event.event_type == dg.DagsterEventType.ENGINE_EVENT
        and "dagster-air/launch" in e.dagster_event.engine_event_data.metadata
        for e in instance.all_logs(run_id)
    )


def _worker(count_dir: str) -> None:
    with dg.DagsterInstance.get() as instance:
        dg.execute_job(
            dg.reconstructable(held_job), instance, run_config=_config("held", Path(count_dir))
        )


def _run_ids(workspace: Any) -> set[int]:
    from air_runtime import AirClient

    with AirClient(workspace.host, workspace.token) as client:
        ids: set[int] = set()
        page: str | None = None
        while True:
            runs, page = client.list_runs(active_only=False, limit=25, page_token=page)
            ids |= {run.run_id for run in runs}
            if not page:
                return ids


def _workspace_gpu_hours(workspace: Any, run_ids: set[int]) -> dict[str, Any]:
    """What the workspace's own accounting says the scenario's runs held: accelerator-hours of
    every attempt of every task run (``RunState.gpu_hours``), per run and in all."""
    from air_runtime import AirClient

    with AirClient(workspace.host, workspace.token) as client:
        per_run = {str(r): client.get_run(r).gpu_hours() for r in sorted(run_ids)}
    return {"total": round(sum(per_run.values()), 6), "per_run": per_run}


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # the run worker to kill
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker)
        return
    from air_runtime.local import start_local_workspace

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        workspace = start_local_workspace(data_dir=root / "workspace", image_delay_s=0.2)
        try:
            os.environ.update({"AIRO_HOST": workspace.host, "AIRO_TOKEN": workspace.token})
            for name, scenario in (
                ("reexecute_from_failure", reexecute_from_failure),
                ("run_retry_after_sigkill", run_retry_after_sigkill),
            ):
                home = root / name / "dagster_home"
                home.mkdir(parents=True)
                (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
                os.environ["DAGSTER_HOME"] = str(home)
                count_dir = root / name / "count"
                count_dir.mkdir()
                before = workspace.admin.counters()["runs_created"]
                known = _run_ids(workspace)
                with dg.DagsterInstance.get() as instance:
                    result = scenario(instance, count_dir)
                result["gpu_runs_created"] = workspace.admin.counters()["runs_created"] - before
                result["workspace_gpu_hours"] = _workspace_gpu_hours(
                    workspace, _run_ids(workspace) - known
                )
                result["before_estimate"] = BEFORE_ESTIMATE[name]
                results[name] = result
                print(
                    f"{name}: paid/needed {fmt(result['ratio'])}x, the workspace counted "
                    f"{fmt(result['workspace_gpu_hours']['total'])} GPU-hours (before, an estimate: {BEFORE_ESTIMATE[name]}x)"
                )
        finally:
            workspace.stop()
    path = write_result(
        "P11_dagster",
        {
            "what": "GPU-hours paid / needed, Dagster recovery (rank-seconds, 1 accelerator each)",
            "target": 1.0,
            "before_source": "targets.md P11 (2026-12-02); no option reproduces the old behaviour",
            "train_s": TRAIN_S,
            "scenarios": results,
            # Each way of recovering paid for what it needed and no more.
            "met": {name: r["ratio"] <= 1.0 + 1e-9 for name, r in results.items()},
        },
    )
    print(path)


if __name__ == "__main__":
    main()
