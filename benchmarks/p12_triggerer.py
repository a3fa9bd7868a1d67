"""P12 in a real deployment: N deferred ``AirRunOperator`` tasks in one Airflow triggerer.

The same target as ``benchmarks.p12_live_lines`` (which runs the N triggers in one event loop
of its own and times each line as it is written), here with everything a deployment adds:
Airflow 3 with the LocalExecutor on PostgreSQL (database ``airflow_p12``), scheduler,
triggerer, DAG processor and API server as separate processes (tests/e2e/airflow_deployment.py),
``[air]`` defaults (live lines, progress and the MLflow link on; 5 s poll interval); the local
workspace in execute mode in its own process. The Dag (benchmarks/p12_dags/live_sweep.py) maps
``AirRunOperator`` over N trials whose rank prints ``line K printed_at <its clock>`` every
5 s, and holds a probe of the triggerer's event-loop lag (``benchmarks.p12_probe``).

Once all N tasks are deferred and their runs RUNNING, a warm-up, then the window. Measured:
requests the workspace served per second (its counters, by endpoint); the triggerer's loop
lag (the probe's 10 ms sleeps, p99 and max) and its CPU; and, from the task logs the
triggerer wrote (each record's own timestamp), for every node line shown in the window the
time from being printed to being in the task's log (p50, p99, max), and how many tasks had a
line shown in the window's last 60 s.

    python -m benchmarks.p12_triggerer [--quick] [--n 500]
"""

from __future__ import annotations

import asyncio
import compileall
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, parser_for, percentile, write_result
from benchmarks.p12_live_lines import COMMAND, TOKEN, _Workspace, p12_met

sys.path.insert(0, str(REPO / "tests" / "e2e"))

POSTGRES = "postgresql://postgres@127.0.0.1:5432"
DATABASE = "airflow_p12"
DAG_ID = "live_sweep"
_PRINTED = re.compile(r"printed_at (\d+(?:[.,]\d+)?)")
_MAP_INDEX = re.compile(r"map_index=(\d+)")


class _Target:
    """The workspace's host and token, as airflow_connection_env reads them."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.token = TOKEN


def _wait(what: str, check: Any, timeout: float, every: float = 5.0) -> None:
    """Until ``check()``; an API server slow to answer under this load is asked again."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(every)


def _deferred(deployment: Any, run_id: str) -> int:
    body = deployment.api(
        "GET",
        f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances",
        params={"limit": 1, "state": "deferred"},
    )
    return int(body["total_entries"])


async def _running_runs(host: str) -> int:
    from air_runtime import AsyncAirClient
    from air_runtime.cli._run_views import active_runs_of_current_user

    async with AsyncAirClient(host, TOKEN) as client:
        runs = await client.run_flow(active_runs_of_current_user)
    return sum(1 for r in runs if r.life_cycle_state == "RUNNING")


async def _cancel_all(host: str) -> None:
    from air_runtime import AsyncAirClient
    from air_runtime.cli._run_views import cancel_all_active

    async with AsyncAirClient(host, TOKEN) as client:
        await client.run_flow(cancel_all_active)


def _shown_lines(logs: Path, start: float, end: float) -> tuple[list[float], dict[int, float]]:
    """Printed-to-shown seconds of each node line a task log holds with a timestamp in the
    window, and each task's newest such timestamp."""
    latencies: list[float] = []
    newest: dict[int, float] = {}
    for path in logs.glob("task_id=trial/**/*.log*"):
        found = _MAP_INDEX.search(str(path))
        index = int(found.group(1)) if found else -1
        for line in path.read_text(errors="replace").splitlines():
            if "printed_at" not in line:
                continue
            try:
                entry = json.loads(line)
                at = datetime.fromisoformat(str(entry["timestamp"]).replace("Z", "+00:00"))
            except (ValueError, KeyError, TypeError):
                continue
            printed = _PRINTED.search(str(entry.get("event", "")))
            shown = at.timestamp()
            if printed is None or not start <= shown <= end:
                continue
            latencies.append(shown - float(printed.group(1).replace(",", ".")))
            newest[index] = max(newest.get(index, 0.0), shown)
    return latencies, newest


def _lags(path: Path, start: float, end: float) -> list[float]:
    lags = []
    for line in path.read_text().splitlines() if path.exists() else []:
        at, _, lag = line.partition(" ")
        if start <= float(at) <= end:
            lags.append(float(lag))
    return lags


def measure(*, quick: bool = False, n: int | None = None) -> dict[str, Any]:
    from airflow_deployment import AirflowDeployment, airflow_connection_env
    from managed_process import own_database

    from benchmarks.p7_deployment import TreeSampler, sweep_env

    n = n or (100 if quick else 500)
    window_s, warmup_s = (90.0, 30.0) if quick else (180.0, 60.0)
    database_dsn = own_database(POSTGRES, DATABASE)
    for package in ("air_runtime", "providers", "dagster_air"):
        compileall.compile_dir(str(REPO / package), quiet=1)
    root = Path(tempfile.mkdtemp(prefix="airo-bench-p12-"))
    lag_file = root / "loop_lag.txt"
    workspace = _Workspace()
    workspace.wait_ready()
    env = {
        **airflow_connection_env(_Target(workspace.host)),
        "PYTHONPATH": str(REPO),  # the Dag imports the probe from benchmarks/
        "AIRO_BENCH_P12_N": str(n),
        "AIRO_BENCH_P12_COMMAND": COMMAND,
        "AIRO_BENCH_P12_LAG_FILE": str(lag_file),
        "AIRO_BENCH_P12_LAG_S": str(3600),
        **sweep_env(n + 1),  # the sweep and the loop-lag probe
    }
    deployment = AirflowDeployment(
        root,
        executor="LocalExecutor",
        database_dsn=database_dsn,
        dag_folders={"p12": REPO / "benchmarks" / "p12_dags"},
        extra_env=env,
        parallelism=16,
    )
    started = time.monotonic()
    try:
        deployment.migrate()
        deployment.start()
        deployment.wait_for_dags([DAG_ID], timeout=300)
        run_id = deployment.trigger(DAG_ID)
        _wait(f"{n + 1} deferred tasks", lambda: _deferred(deployment, run_id) == n + 1, 1800)
        _wait(f"{n} RUNNING runs", lambda: asyncio.run(_running_runs(workspace.host)) == n, 600)
        settled = time.monotonic() - started
        time.sleep(warmup_s)
        triggerer = next(p for p in deployment.processes if p.name == "triggerer")
        sampler = TreeSampler(triggerer.popen.pid)
        before = workspace.counters()
        window_start = time.time()
        time.sleep(window_s)
        window_end = time.time()
        after = workspace.counters()
        triggerer_use = sampler.stop()
        asyncio.run(_cancel_all(workspace.host))
        logs = deployment.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"
        latencies, newest = _shown_lines(logs, window_start, window_end)
        lags = _lags(lag_file, window_start, window_end)
        blocked = deployment.log_dir.joinpath("triggerer.log").read_text(errors="replace")
    finally:
        deployment.stop()
        workspace.stop()
        shutil.rmtree(root, ignore_errors=True)
    elapsed = window_end - window_start
    by_endpoint = {k: v - before.get(k, 0) for k, v in sorted(after.items())}
    by_endpoint = {k: v for k, v in by_endpoint.items() if v}
    requests = sum(by_endpoint.values())
    fresh = sum(1 for at in newest.values() if window_end - at <= 60)
    return {
        "n": n,
        "through": "an Airflow deployment: N deferred AirRunOperator tasks in one triggerer",
        "window_s": round(elapsed, 1),
        "all_deferred_and_running_after_s": round(settled, 1),
        "workspace_requests_per_s": round(requests / elapsed, 2),
        "workspace_requests_by_endpoint": by_endpoint,
        "lines_shown": len(latencies),
        "printed_to_shown_s": {
            "p50": round(statistics.median(latencies), 1) if latencies else None,
            "p99": round(percentile(latencies, 99), 1) if latencies else None,
            "max": round(max(latencies), 1) if latencies else None,
        },
        "tasks_with_a_line_shown_in_last_60s": fresh,
        "loop_lag_ms": {
            "samples": len(lags),
            "p99": round(percentile(lags, 99) * 1000, 1) if lags else None,
            "max": round(max(lags) * 1000, 1) if lags else None,
        },
        "triggerer_blocked_warnings": blocked.count("async thread was blocked"),
        "triggerer_cpu_s": round(triggerer_use["cpu_s"], 1),
        "triggerer_cpu_share_of_a_core": round(triggerer_use["cpu_s"] / elapsed, 2),
        "budget_rps": 10.0,
        "within_budget": requests / elapsed <= 10.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = parser_for(__doc__)
    parser.add_argument("--n", type=int, default=None)
    args = parser.parse_args(argv)
    row = measure(quick=args.quick, n=args.n)
    met = p12_met(row, "tasks_with_a_line_shown_in_last_60s")
    name = "P12_triggerer_quick" if args.quick else "P12_triggerer"
    path = write_result(name, {"rows": [row], "met": met})
    print(json.dumps(row, indent=2))
    print(f"met={met}; written to {path}")


if __name__ == "__main__":
    main()
