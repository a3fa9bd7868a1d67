"""P13: a mapped sweep on the HA deployment with one triggerer SIGKILLed at half time.

The deployment of docs/deployments.md (tests/e2e/ha_deployment.py starts the page's block:
two schedulers, two triggerers, two Celery workers, a DAG processor and the API server on
PostgreSQL, database ``airflow_p13``, with Redis database 8 as the broker), against the local
workspace in simulate mode in its own process. The Dags are P7's (benchmarks/dags/):

- ``floor_sweep``: Airflow's deferrable ``WaitSensor`` mapped over the N durations, the
  deployment's floor for the same waiting (no triggerer is killed: the floor of a deployment
  that keeps both);
- ``air_sweep``: ``AirRunOperator`` mapped over the same N durations, each trial a run the
  workspace holds for its duration. When half the floor's wall time has passed, the main
  process of the triggerer holding more of the sweep's triggers is SIGKILLed (``kill -9``,
  what the OOM killer does); what it leaves behind is recorded, and it is started again
  (leftovers killed first) once the sweep has ended.

After a warm-up Dag, each side starts only once the deployment is quiet (the workspace's
request counters and the deployment's queued, scheduled and running task instances unchanged
for 5 s). Measured per run: each side's wall time and the ratio; the air sweep's runs at the
workspace: duplicates (more than one run for a trial), lost trials, orphans (runs not ended
once the Dag run has), runs cancelled (ended CANCELED, and ``jobs/runs/cancel`` requests);
and for each trigger the killed triggerer held, the time from the kill until the other
triggerer's log of that task shows the run's state (the first ``Run <id>: <state>`` line in
its ``.trigger.<job id>.log``). Every run is kept in the result (``runs``); ``met`` holds when
every run at N >= 1,000 meets the P13 target.

    python -m benchmarks.p13_failover [--quick] [--n 1000]
"""

from __future__ import annotations

import asyncio
import compileall
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import (
    REPO,
    RESULTS,
    git_commit,
    machine_info,
    parser_for,
    percentile,
    write_result,
)
from benchmarks.p1_triggers import TOKEN, BenchWorkspace, workspace_counters
from benchmarks.p7_deployment import patiently, wait_until_quiet

sys.path.insert(0, str(REPO / "tests" / "e2e"))

POSTGRES = "postgresql://postgres@127.0.0.1:5432"
DATABASE = "airflow_p13"
REDIS = "redis://127.0.0.1:6379"
REDIS_DB = 8
TARGET = {
    "n": 1000,
    "wall_ratio_to_floor": 1.2,
    "duplicates": 0,
    "orphans": 0,
    "runs_cancelled": 0,
    "moved_state_shown_within_s": 60.0,
}
SECONDS = (60, 75, 90, 105, 120)
QUICK_SECONDS = (30, 40, 50)
TERMINAL = ("success", "failed")


class _Target:
    """The workspace's host and token, as airflow_connection_env reads them."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.token = TOKEN


def _dag_run_state(deployment: Any, dag_id: str, run_id: str) -> str:
    return str(patiently(lambda: deployment.dag_run(dag_id, run_id))["state"])


def _owners(deployment: Any, dag_id: str, run_id: str) -> dict[int, str | None]:
    """Map index -> the triggerer component holding each deferred trial's trigger."""
    tis = patiently(lambda: deployment.mapped_instances(dag_id, run_id))
    return {
        int(ti["map_index"]): deployment.triggerer_name(
            (ti.get("trigger") or {}).get("triggerer_id")
        )
        for ti in tis
        if ti["state"] == "deferred"
    }


def _run_sweep(
    deployment: Any, dag_id: str, *, kill_after_s: float | None = None
) -> dict[str, Any]:
    """Trigger ``dag_id`` and wait for its end; with ``kill_after_s``, SIGKILL the main
    process of the triggerer holding more of its triggers that long after the trigger."""
    started = time.monotonic()
    run_id = deployment.trigger(dag_id)  # not retried: a lost answer would start a 2nd run
    kill: dict[str, Any] | None = None
    state = "running"
    while state not in TERMINAL:
        time.sleep(2)
        if kill is None and kill_after_s is not None and time.monotonic() - started >= kill_after_s:
            owners = _owners(deployment, dag_id, run_id)
            held = Counter(owners.values())
            victim = max(("triggerer1", "triggerer2"), key=lambda name: held.get(name, 0))
            survivor = "triggerer2" if victim == "triggerer1" else "triggerer1"
            kill = {
                "victim": victim,
                "victim_job": deployment.triggerer_jobs[victim],
                "survivor": survivor,
                "survivor_job": deployment.triggerer_jobs[survivor],
                "after_s": round(time.monotonic() - started, 1),
                "deferred_by_triggerer": dict(held),
                "moved": sorted(i for i, owner in owners.items() if owner == victim),
                "at": time.time(),
            }
            kill["left_behind"] = deployment.crash(victim)
            print(f"  P13 killed {victim} after {kill['after_s']} s: {dict(held)}", flush=True)
        try:
            state = deployment.dag_run(dag_id, run_id)["state"]
        except (httpx.HTTPError, AssertionError):
            continue
        dead = [p.name for p in deployment.processes if not p.alive]
        if dead:
            raise RuntimeError(f"Airflow services exited: {dead}\n{deployment.logs()}")
        if time.monotonic() - started > 7200:
            raise RuntimeError(f"{dag_id} did not finish within two hours")
    wall = time.monotonic() - started
    tis = patiently(lambda: deployment.mapped_instances(dag_id, run_id))
    states = Counter(str(ti["state"]) for ti in tis)
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "dag_run_state": state,
        "wall_s": round(wall, 1),
        "task_states": dict(states),
        "queued_wait_s": _queued_waits(tis),
        "kill": kill,
    }


def _queued_waits(tis: list[dict[str, Any]]) -> dict[str, float | None]:
    """How long trials waited in the queue for a worker slot (queued until started): what
    `[scheduler] task_queued_timeout` must stay well above."""
    waits = []
    for ti in tis:
        if ti.get("queued_when") and ti.get("start_date"):
            queued = datetime.fromisoformat(str(ti["queued_when"]).replace("Z", "+00:00"))
            started = datetime.fromisoformat(str(ti["start_date"]).replace("Z", "+00:00"))
            waits.append((started - queued).total_seconds())
    return {
        "samples": len(waits),
        "p50": round(statistics.median(waits), 1) if waits else None,
        "max": round(max(waits), 1) if waits else None,
    }


def _first_state_shown(log_dir: Path, map_index: int, job_id: int) -> float | None:
    """When the triggerer ``job_id`` first logged the run's state for this trial."""
    folder = log_dir / "task_id=trial" / f"map_index={map_index}"
    for path in sorted(folder.glob(f"attempt=*.log.trigger.{job_id}.log")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            event = str(entry.get("event") or "")
            if event.startswith("Run ") and ": " in event:
                stamp = str(entry["timestamp"]).replace("Z", "+00:00")
                return datetime.fromisoformat(stamp).timestamp()
    return None


def _completed_before(log_dir: Path, map_index: int, kill: dict[str, Any]) -> bool:
    """Whether the killed triggerer's trigger for this trial completed before the kill."""
    folder = log_dir / "task_id=trial" / f"map_index={map_index}"
    for path in folder.glob(f"attempt=*.log.trigger.{kill['victim_job']}.log"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") == "trigger completed":
                stamp = str(entry["timestamp"]).replace("Z", "+00:00")
                return datetime.fromisoformat(stamp).timestamp() < kill["at"]
    return False


async def _workspace_runs(host: str) -> list[dict[str, Any]]:
    from benchmarks.p7_deployment import _workspace_runs

    return await _workspace_runs(host)


def _remote(runs: list[dict[str, Any]], prefix: str, n: int) -> dict[str, Any]:
    ours = [r for r in runs if str(r.get("run_name")).startswith(prefix)]
    names = Counter(str(r.get("run_name")) for r in ours)
    states = Counter(
        f"{(r.get('state') or {}).get('life_cycle_state')}/{(r.get('state') or {}).get('result_state')}"
        for r in ours
    )
    return {
        "runs": len(ours),
        "distinct_trials": len(names),
        "duplicates": sum(c - 1 for c in names.values() if c > 1),
        "lost": n - len(names),
        "orphans": sum(
            1
            for r in ours
            if (r.get("state") or {}).get("life_cycle_state") in ("PENDING", "QUEUED", "RUNNING")
        ),
        "cancelled": sum(
            1 for r in ours if (r.get("state") or {}).get("result_state") == "CANCELED"
        ),
        "states": dict(states),
    }


def measure(*, quick: bool = False, n: int | None = None) -> dict[str, Any]:
    from airflow_deployment import airflow_connection_env
    from ha_deployment import HADeployment
    from managed_process import own_database

    n = n or (40 if quick else TARGET["n"])
    seconds = QUICK_SECONDS if quick else SECONDS
    for package in ("air_runtime", "providers", "dagster_air"):
        compileall.compile_dir(str(REPO / package), quiet=1)
    import redis

    redis.Redis.from_url(f"{REDIS}/{REDIS_DB}").flushdb()
    load_before = [round(x, 2) for x in os.getloadavg()]
    workspace = BenchWorkspace()
    root = Path(tempfile.mkdtemp(prefix="airo-bench-p13-"))
    deployment = HADeployment(
        root,
        database_dsn=own_database(POSTGRES, DATABASE),
        broker_url=f"{REDIS}/{REDIS_DB}",
        dag_folders={"bench": REPO / "benchmarks" / "dags"},
        extra_env={
            **airflow_connection_env(_Target(workspace.host)),
            "AIRO_BENCH_SWEEP_N": str(n),
            "AIRO_BENCH_SWEEP_SECONDS": ",".join(str(s) for s in seconds),
            # The provider's default poll interval (the tests' deployments poll every 2 s).
            "AIRFLOW__AIR__DEFAULT_POLL_INTERVAL": "5",
        },
    )
    began = time.monotonic()
    try:
        deployment.migrate()
        deployment.start()
        deployment.wait_for_dags(["floor_sweep", "air_sweep", "warm_up"], timeout=300)
        warm = _run_sweep(deployment, "warm_up")
        quiet_floor = wait_until_quiet(deployment, workspace.host)
        load_floor = [round(x, 2) for x in os.getloadavg()]
        floor = _run_sweep(deployment, "floor_sweep")
        print(
            f"  P13 floor_sweep N={n}: {floor['dag_run_state']} in {floor['wall_s']} s", flush=True
        )
        quiet_air = wait_until_quiet(deployment, workspace.host)
        load_air = [round(x, 2) for x in os.getloadavg()]
        before = {r["run_id"] for r in asyncio.run(_workspace_runs(workspace.host))}
        counters_0 = workspace_counters(workspace.host)
        air = _run_sweep(deployment, "air_sweep", kill_after_s=floor["wall_s"] / 2)
        runs = [
            r for r in asyncio.run(_workspace_runs(workspace.host)) if r["run_id"] not in before
        ]
        counters_1 = workspace_counters(workspace.host)
        air["remote_runs"] = _remote(runs, "air_sweep_", n)
        air["cancel_requests"] = counters_1.get("jobs/runs/cancel", 0) - counters_0.get(
            "jobs/runs/cancel", 0
        )
        kill = air["kill"]
        if kill is not None:
            logs = deployment.home / "logs" / "dag_id=air_sweep" / f"run_id={air['run_id']}"
            # The owners are read a moment before the kill: a trigger that completed in that
            # moment, its event delivered (the other triggerer never ran it), had nothing left
            # to move.
            delays = {}
            ended = []
            for index in kill["moved"]:
                shown = _first_state_shown(logs, index, kill["survivor_job"])
                if shown is None and _completed_before(logs, index, kill):
                    ended.append(index)
                    continue
                delays[index] = None if shown is None else round(shown - kill["at"], 1)
            kill["ended_before_kill"] = ended
            seen = [d for d in delays.values() if d is not None]
            kill["moved_runs"] = len(delays)
            kill["moved_state_never_shown"] = sum(1 for d in delays.values() if d is None)
            kill["moved_state_shown_s"] = {
                "p50": statistics.median(seen) if seen else None,
                "p99": percentile(seen, 99) if seen else None,
                "max": max(seen) if seen else None,
            }
            deployment.start_service(kill["victim"])
            # What was still there when the sweep had ended (killed before the restart).
            kill["left_behind_at_restart"] = deployment.left_behind[kill["victim"]]
            kill["restarted_log_server_answers"] = deployment.log_server_answers(kill["victim"])
    finally:
        deployment.stop()
        workspace.stop()
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": git_commit(),
        "n": n,
        "seconds": list(seconds),
        "load_before_start": load_before,
        "load_before_floor": load_floor,
        "load_before_air": load_air,
        "quiet_wait_s": {"floor": round(quiet_floor, 1), "air": round(quiet_air, 1)},
        "warm_up": {"wall_s": warm["wall_s"], "task_states": warm["task_states"]},
        "floor": floor,
        "air": air,
        "wall_ratio_to_floor": round(air["wall_s"] / floor["wall_s"], 3),
        "elapsed_s": round(time.monotonic() - began, 1),
    }


def run_met(run: dict[str, Any]) -> dict[str, bool]:
    air, kill, remote = run["air"], run["air"]["kill"] or {}, run["air"]["remote_runs"]
    shown = (kill.get("moved_state_shown_s") or {}).get("max")
    return {
        "n_at_least_1000": run["n"] >= TARGET["n"],
        "a_triggerer_was_killed": bool(kill),
        "all_tasks_succeeded": air["task_states"] == {"success": run["n"]}
        and run["floor"]["task_states"] == {"success": run["n"]},
        "wall_at_most_1_2x_floor": run["wall_ratio_to_floor"] <= TARGET["wall_ratio_to_floor"],
        "no_duplicates": remote["duplicates"] == 0 and remote["lost"] == 0,
        "no_orphans": remote["orphans"] == 0,
        "no_run_cancelled": remote["cancelled"] == 0 and air["cancel_requests"] == 0,
        "moved_state_shown_within_60_s": kill.get("moved_state_never_shown") == 0
        and shown is not None
        and shown <= TARGET["moved_state_shown_within_s"],
    }


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = parser_for(__doc__)
    parser.add_argument("--n", type=int, default=None, help="mapped trials (default 1,000)")
    args = parser.parse_args(argv)
    name = "P13_quick" if args.quick else "P13"
    path = RESULTS / f"{name.lower()}.json"
    runs = json.loads(path.read_text()).get("runs", []) if path.exists() else []
    run = measure(quick=args.quick, n=args.n)
    run["met_detail"] = run_met(run)
    run["machine"] = machine_info()
    runs.append(run)
    if args.quick:  # a quick run cannot meet the size: the rest of the target still counts
        met = all(
            all(v for k, v in r["met_detail"].items() if k != "n_at_least_1000") for r in runs
        )
    else:  # every run at the target's size (a smaller one, recorded, does not count)
        full = [r for r in runs if r["n"] >= TARGET["n"]]
        met = bool(full) and all(all(r["met_detail"].values()) for r in full)
    write_result(
        name,
        {
            "what": "a mapped sweep of deferrable AirRunOperator tasks on the HA deployment "
            "(docs/deployments.md) with one triggerer SIGKILLed at half the floor's wall time, "
            "vs the same sweep of WaitSensor on the same deployment",
            "target": TARGET,
            "runs": runs,
            "met": met,
            "met_rule": "met when every run at the target's size meets every part of the target "
            "(a quick run's file: every part but the size)",
        },
    )
    print(json.dumps({k: v for k, v in run.items() if k not in ("floor", "air")}, indent=2))
    print(
        f"P13 N={run['n']}: air {run['air']['wall_s']} s vs floor {run['floor']['wall_s']} s "
        f"({run['wall_ratio_to_floor']}x), remote {run['air']['remote_runs']}, kill "
        f"{ {k: v for k, v in (run['air']['kill'] or {}).items() if k != 'moved'} }; "
        f"met={met}; written to {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
