"""P7: a real Airflow deployment carrying one sweep of N mapped deferrable AI Runtime tasks.

Airflow 3 with the LocalExecutor on PostgreSQL (database ``airflow_scale``), one scheduler,
one triggerer, one DAG processor and the API server as separate processes
(tests/e2e/airflow_deployment.py), against the local workspace in simulate mode in its own
process. A warm-up Dag (a few tasks of each kind) runs first; then two rounds of the three
compared sweeps in alternated order (ours first, then ours last), each side's numbers the
median of its two sweeps; the zero-worker sweep last. The DAGs (benchmarks/dags/, one file each; what they share in _sweep.py):

- ``floor_sweep``: Airflow's own deferrable ``WaitSensor`` mapped over the N durations, the
  deployment's floor for the same waiting;
- ``air_sweep``: ``AirRunOperator.partial(...).expand(...)`` over the same N durations, each
  trial a run held for its duration by the workspace;
- ``air_planned_sweep``: the same with ``submit_in_triggerer=True`` (each trial's trigger
  submits its run);
- ``zero_worker_sweep``: N ``DateTimeSensorAsync`` tasks that start and end in the triggerer
  (``start_from_trigger``): how far below ``WaitSensor`` a deployment can go with no worker.

Reported per DAG: wall time from trigger to the DAG run's end, every task's state, the
triggerer's CPU seconds (its whole process tree, reaped children included) and peak RSS
(sampled every 0.5 s) and the most tasks deferred at once, the worker runs per task (the
execution API's "running" events of the Dag run: 2 for a task resumed in a worker, 1 for one
its trigger ends, 0 for one that starts in the triggerer); for the two ``air_`` sweeps also
requests/s at the workspace and whether every trial made exactly one run that succeeded (no
duplicates, none lost).

    python -m benchmarks.p7_deployment [--quick] [--n 500]
"""

from __future__ import annotations

import asyncio
import compileall
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from benchmarks._common import REPO, RESULTS, fmt, parser_for, write_result
from benchmarks.p1_triggers import TOKEN, BenchWorkspace, workspace_counters

sys.path.insert(0, str(REPO / "tests" / "e2e"))

T = TypeVar("T")
POSTGRES = "postgresql://postgres@127.0.0.1:5432"
DATABASE = "airflow_scale"
TARGET = {
    "n": 500,
    "duplicates": 0,
    "lost": 0,
    "failed_tasks": 0,
    "wall_ratio_to_floor": 1.2,
    "worker_runs_per_task": 1.0,
}
# Durations used in turn by the trials (seconds); long enough that the sweep waits together.
SECONDS = (60, 75, 90, 105, 120)
QUICK_SECONDS = (30, 40, 50)
# The warm-up Dag's tasks of each kind (benchmarks/dags/_sweep.py).
WARM_UP_TASKS = 8


class TreeSampler:
    """CPU seconds of a process and its descendants, and their peak RSS (sampled in a thread)."""

    def __init__(self, pid: int, period: float = 0.5) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.period = period
        self.peak_rss = 0
        self.baseline_rss = self._rss()
        self._cpu0 = self._cpu_total()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _tree(self) -> list[Any]:
        import psutil

        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def _rss(self) -> int:
        total = 0
        for proc in self._tree():
            try:
                total += proc.memory_info().rss
            except Exception:  # a child that just exited
                continue
        return total

    def _cpu_total(self) -> float:
        """CPU seconds of the tree so far: each live process's own and its reaped
        descendants'. A task process that starts and ends between two samples is counted
        in the supervisor that waited for it, so this needs no sampling, only a reading at
        the start and one at the end."""
        total = 0.0
        for proc in self._tree():
            try:
                times = proc.cpu_times()
            except Exception:  # a child that just exited
                continue
            total += times.user + times.system + times.children_user + times.children_system
        return total

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.peak_rss = max(self.peak_rss, self._rss())

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return {
            "cpu_s": self._cpu_total() - self._cpu0,
            "rss_baseline_mb": self.baseline_rss / 2**20,
            "rss_peak_mb": max(self.peak_rss, self.baseline_rss) / 2**20,
        }


def patiently(call: Callable[[], T], attempts: int = 10) -> T:
    """The API server answers slowly while hundreds of tasks run on two cores: ask again."""
    for _ in range(attempts - 1):
        try:
            return call()
        except (httpx.HTTPError, AssertionError):
            time.sleep(5)
    return call()


def _task_states(deployment: Any, dag_id: str, run_id: str) -> Counter[str]:
    states: Counter[str] = Counter()
    offset = 0
    while True:
        body = deployment.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
            params={"limit": 100, "offset": offset},
        )
        tis = body["task_instances"]
        states.update(str(t["state"]) for t in tis)
        offset += len(tis)
        if not tis or offset >= body["total_entries"]:
            return states


def _deferred(deployment: Any, dag_id: str, run_id: str) -> int:
    body = deployment.api(
        "GET",
        f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
        params={"limit": 1, "state": "deferred"},
    )
    return int(body["total_entries"])


async def _workspace_runs(host: str) -> list[dict[str, Any]]:
    import httpx

    runs: list[dict[str, Any]] = []
    async with httpx.AsyncClient(
        base_url=host, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    ) as http:
        token = None
        while True:
            params: dict[str, Any] = {"limit": 25}
            if token:
                params["page_token"] = token
            body = (await http.get("/api/2.2/jobs/runs/list", params=params)).json()
            runs += body.get("runs") or []
            token = body.get("next_page_token")
            if not token:
                return runs


# Where a worker run's time goes, read off its task log: the marks Airflow's task runner
# writes, and ours (the submit's answer).
_PHASE_MARKS = (
    ("start", lambda event: event.startswith("::group::Pre Execute")),
    ("parsed", lambda event: event.startswith("Worker startup parse complete")),
    ("executing", lambda event: event == "::endgroup::"),
    ("submitted", lambda event: event.startswith("submitted run")),
    ("post", lambda event: event.startswith("::group::Post Execute")),
    ("end", lambda event: event == "::endgroup::"),
)


def worker_phases(task_logs: Path) -> dict[str, float]:
    """Median seconds of each phase of a first try's worker run, over the task logs under
    ``task_logs`` (one Dag run's): the Dag file's parse, templating, ``execute`` (to the
    submit's answer, when it submits) and the end of the try (link XComs)."""
    import json
    import statistics
    from datetime import datetime

    spans: dict[str, list[float]] = {}
    for log in task_logs.glob("task_id=*/**/attempt=1.log"):
        marks: dict[str, float] = {}
        pending = list(_PHASE_MARKS)
        for line in log.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
                event = str(entry.get("event") or "")
                at = datetime.fromisoformat(str(entry["timestamp"]).replace("Z", "+00:00"))
            except (ValueError, KeyError, TypeError):
                continue
            for i, (name, matches) in enumerate(pending):
                if matches(event):
                    marks[name] = at.timestamp()
                    del pending[: i + 1]  # marks come in order; "submitted" may be absent
                    break
        if {"start", "parsed", "executing", "post", "end"} <= marks.keys():
            phases = {
                "parse_s": marks["parsed"] - marks["start"],
                "templating_s": marks["executing"] - marks["parsed"],
                "execute_s": marks["post"] - marks["executing"],
                "end_of_try_s": marks["end"] - marks["post"],
                "logged_total_s": marks["end"] - marks["start"],
            }
            if "submitted" in marks:
                phases["execute_to_submitted_s"] = marks["submitted"] - marks["executing"]
            for name, value in phases.items():
                spans.setdefault(name, []).append(value)
    return {name: round(statistics.median(values), 3) for name, values in spans.items()}


class SweepStalled(RuntimeError):
    """No task of the sweep moved for longer than any trial waits."""


def _sweep(
    deployment: Any,
    workspace: BenchWorkspace,
    dag_id: str,
    n: int,
    stall_s: float | None = None,
) -> dict[str, Any]:
    """One sweep's row; with ``stall_s``, ``SweepStalled`` when the number of deferred tasks
    and the Dag run's state stay the same that long (the zero-worker sweep can hang Airflow
    3.3's triggerer: it and its trigger runner block writing to each other)."""
    triggerer = next(p for p in deployment.processes if p.name == "triggerer")
    counters_0 = workspace_counters(workspace.host)
    sampler = TreeSampler(triggerer.popen.pid)
    # Where the deployment's CPU goes (the scheduler's tree holds the LocalExecutor's workers
    # and the task processes they start): what to cut to come closer to the floor.
    services = {
        p.name: TreeSampler(p.popen.pid, period=2.0)
        for p in deployment.processes
        if p.name != "triggerer"
    }
    services["workspace"] = TreeSampler(workspace.process.pid, period=2.0)
    started = time.monotonic()
    run_id = deployment.trigger(dag_id)  # not retried: a lost answer would start a 2nd run
    peak_deferred = 0
    state = "running"
    seen, moved = None, time.monotonic()
    while state not in ("success", "failed"):
        time.sleep(2)
        try:
            deferred = _deferred(deployment, dag_id, run_id)
            peak_deferred = max(peak_deferred, deferred)
            state = deployment.dag_run(dag_id, run_id)["state"]
        except httpx.HTTPError:  # the API server is slow under this load: ask again
            continue
        if (deferred, state) != seen:
            seen, moved = (deferred, state), time.monotonic()
        elif stall_s is not None and time.monotonic() - moved > stall_s:
            for sampling in (sampler, *services.values()):
                sampling.stop()
            raise SweepStalled(
                f"{dag_id}: {deferred} tasks deferred, unchanged for {stall_s:.0f} s"
            )
        dead = [p.name for p in deployment.processes if not p.alive]
        if dead:
            raise RuntimeError(f"Airflow services exited: {dead}\n{deployment.logs()}")
        if time.monotonic() - started > 3600:
            raise RuntimeError(f"{dag_id} did not finish within an hour")
    wall = time.monotonic() - started
    triggerer_use = sampler.stop()
    service_cpu = {name: round(s.stop()["cpu_s"], 1) for name, s in services.items()}
    service_cpu["triggerer"] = round(triggerer_use["cpu_s"], 1)
    counters_1 = workspace_counters(workspace.host)
    requests = {k: counters_1.get(k, 0) - counters_0.get(k, 0) for k in counters_1}
    requests = {k: v for k, v in requests.items() if v}
    states = patiently(lambda: _task_states(deployment, dag_id, run_id))
    # Each time a worker starts a task instance the execution API records a "running" event.
    worker_runs = patiently(lambda: deployment.worker_runs(dag_id, run_id))
    waiting = max(peak_deferred, 1)
    row = {
        "dag_id": dag_id,
        "n": n,
        "dag_run_state": state,
        "wall_s": wall,
        "task_states": dict(states),
        "all_tasks_succeeded": states.get("success", 0) == n and sum(states.values()) == n,
        "peak_deferred": peak_deferred,
        "worker_runs": sum(worker_runs.values()),
        "worker_runs_per_task": sum(worker_runs.values()) / n,
        "tasks_with_more_than_one_worker_run": sum(1 for c in worker_runs.values() if c > 1),
        "triggerer": triggerer_use,
        "triggerer_cpu_ms_per_task": 1000 * triggerer_use["cpu_s"] / n,
        "triggerer_peak_rss_kb_per_waiting_task": 1024
        * (triggerer_use["rss_peak_mb"] - triggerer_use["rss_baseline_mb"])
        / waiting,
        "workspace_requests": requests,
        "workspace_requests_per_s": sum(requests.values()) / wall,
        "cpu_s_by_service": service_cpu,
        "cpu_ms_per_task_by_service": {k: round(1000 * v / n) for k, v in service_cpu.items()},
        "worker_run_phases_median": worker_phases(
            deployment.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        ),
    }
    print(
        f"  P7 {dag_id} N={n}: {state} in {wall:.0f} s, tasks {dict(states)}, peak deferred "
        f"{peak_deferred}, {row['worker_runs_per_task']:.2f} worker runs per task, "
        f"triggerer {triggerer_use['cpu_s']:.1f} CPU s, peak RSS "
        f"{triggerer_use['rss_peak_mb']:.0f} MB, {row['workspace_requests_per_s']:.2f} req/s, "
        f"CPU s by service {service_cpu}",
        flush=True,
    )
    return row


def _result_id(quick: bool) -> str:
    """Quick mode keeps its own file (p7_quick.json): it never replaces the N = 500 result."""
    return "P7_quick" if quick else "P7"


# Each side is swept twice, the order alternated between the rounds, after a warm-up of
# every kind of task: no side pays the deployment's cold caches (a fresh scheduler, DAG
# processor and API server, and the first task processes' imports) alone.
ROUNDS = (
    ("air_sweep", "floor_sweep", "air_planned_sweep"),
    ("air_planned_sweep", "floor_sweep", "air_sweep"),
)
SIDES = ("air_sweep", "floor_sweep", "air_planned_sweep")


def _median_side(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One side of the comparison over its sweeps: each sweep's row kept, the headline numbers
    (wall, worker runs, CPU per task by service) their medians."""
    import statistics

    services = {k for row in rows for k in row["cpu_ms_per_task_by_service"]}
    side = {
        key: value
        for key, value in rows[-1].items()
        if key not in ("wall_s", "cpu_s_by_service", "cpu_ms_per_task_by_service")
    }
    side.update(
        {
            "wall_s": statistics.median(row["wall_s"] for row in rows),
            "wall_s_each": [round(row["wall_s"], 1) for row in rows],
            "sweep_order_each": [row["order"] for row in rows],
            "all_tasks_succeeded": all(row["all_tasks_succeeded"] for row in rows),
            "worker_runs_per_task": max(row["worker_runs_per_task"] for row in rows),
            "cpu_ms_per_task_by_service": {
                k: round(statistics.median(r["cpu_ms_per_task_by_service"].get(k, 0) for r in rows))
                for k in sorted(services)
            },
            "sweeps": rows,
        }
    )
    return side


def sweep_env(tasks: int) -> dict[str, str]:
    """Airflow settings for a deployment whose one Dag run waits on ``tasks`` deferred tasks
    at once: all of them active and in one triggerer, with the provider's default poll."""
    return {
        # The default triggerer capacity is 1,000 triggers; the sweep must fit in one.
        "AIRFLOW__TRIGGERER__CAPACITY": str(max(1000, tasks + 10)),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(tasks),
        "AIRFLOW__AIR__DEFAULT_POLL_INTERVAL": "5",
    }


def measure(quick: bool = False, n: int | None = None) -> dict[str, Any]:
    from airflow_deployment import AirflowDeployment, airflow_connection_env
    from managed_process import own_database

    n = n or (40 if quick else 500)
    seconds = QUICK_SECONDS if quick else SECONDS
    database_dsn = own_database(POSTGRES, DATABASE)
    # As installed (pip writes .pyc files): every task process imports our modules, and where
    # nothing may write bytecode (PYTHONDONTWRITEBYTECODE) an edited tree is compiled again in
    # each of them, which the floor's tasks (Airflow's own, preloaded) never pay.
    for package in ("air_runtime", "providers", "dagster_air"):
        compileall.compile_dir(str(REPO / package), quiet=1)
    started = time.monotonic()
    workspace = BenchWorkspace()
    root = Path(tempfile.mkdtemp(prefix="airo-bench-p7-"))
    parallelism = 16
    env = {
        **airflow_connection_env(ConnectionTarget(workspace)),
        "AIRO_BENCH_SWEEP_N": str(n),
        "AIRO_BENCH_SWEEP_SECONDS": ",".join(str(s) for s in seconds),
        **sweep_env(n),
    }
    deployment = AirflowDeployment(
        root,
        executor="LocalExecutor",
        database_dsn=database_dsn,
        dag_folders={"bench": REPO / "benchmarks" / "dags"},
        extra_env=env,
        parallelism=parallelism,
    )
    rows: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    try:
        deployment.migrate()
        deployment.start()
        deployment.wait_for_dags([*SIDES, "zero_worker_sweep", "warm_up"], timeout=300)
        warm = _sweep(deployment, workspace, "warm_up", WARM_UP_TASKS * 3)
        for number, order in enumerate(ROUNDS, start=1):
            for dag_id in order:
                quiet_s = wait_until_quiet(deployment, workspace.host)
                before = {r["run_id"] for r in asyncio.run(_workspace_runs(workspace.host))}
                row = _sweep(deployment, workspace, dag_id, n)
                row["quiet_wait_s"] = round(quiet_s, 1)
                row["order"] = f"round {number}, sweep {order.index(dag_id) + 1} of {len(order)}"
                if dag_id != "floor_sweep":
                    runs = asyncio.run(_workspace_runs(workspace.host))
                    fresh = [r for r in runs if r["run_id"] not in before]
                    row["remote_runs"] = _remote_runs(fresh, f"{dag_id}_", n)
                rows[dag_id].append(row)
                # Each sweep's row is kept as soon as it is measured.
                write_result(
                    _result_id(quick),
                    {"partial": True, "inputs": {"n": n}, "rows": rows, "met": False},
                )
        wait_until_quiet(deployment, workspace.host)
        try:
            zero: dict[str, Any] | None = _sweep(
                deployment, workspace, "zero_worker_sweep", n, stall_s=max(seconds) + 180
            )
        except SweepStalled as stalled:
            print(f"  P7 zero_worker_sweep stalled, left out: {stalled}", flush=True)
            zero = None
    finally:
        deployment.stop()
        workspace.stop()
    air, floor, planned = (_median_side(rows[side]) for side in SIDES)
    for side in (air, planned):
        each = side["sweeps"]
        side["remote_runs"] = {
            key: max(row["remote_runs"][key] for row in each) for key in ("duplicates", "lost")
        } | {
            "distinct_trials": min(row["remote_runs"]["distinct_trials"] for row in each),
            "result_states": each[-1]["remote_runs"]["result_states"],
            "all_sweeps_all_succeeded": all(
                row["remote_runs"]["result_states"].get("SUCCESS", 0) == n for row in each
            ),
        }
        side["wall_ratio_to_floor"] = side["wall_s"] / floor["wall_s"]
        side["wall_ratio_to_floor_each_round"] = [
            round(a["wall_s"] / f["wall_s"], 3) for a, f in zip(each, floor["sweeps"], strict=True)
        ]
        side["wall_ratio_to_zero_worker"] = side["wall_s"] / zero["wall_s"] if zero else None
    floor["wall_ratio_to_zero_worker"] = floor["wall_s"] / zero["wall_s"] if zero else None

    def met(side: dict[str, Any]) -> dict[str, bool]:
        remote = side["remote_runs"]
        return {
            "n_at_least_500": n >= TARGET["n"],
            "all_tasks_succeeded": side["all_tasks_succeeded"] and floor["all_tasks_succeeded"],
            "one_run_per_trial": remote["duplicates"] == 0 and remote["distinct_trials"] == n,
            "all_runs_succeeded": remote["all_sweeps_all_succeeded"],
            "wall_at_most_1_2x_floor": side["wall_ratio_to_floor"] <= TARGET["wall_ratio_to_floor"],
            "one_worker_run_per_task": side["worker_runs_per_task"] == 1.0,
        }

    # The anchors never call the workspace: a request in their window is another sweep's
    # leftover work timed as theirs, and the comparison does not hold.
    anchor_requests = {
        "floor": sum(sum(row["workspace_requests"].values()) for row in rows["floor_sweep"]),
        "zero_worker": sum(zero["workspace_requests"].values()) if zero else 0,
    }
    met_detail = met(air) | {"anchors_made_no_requests": not any(anchor_requests.values())}
    planned["met_detail"] = met(planned)
    result = {
        "what": "one DAG of N mapped deferrable AirRunOperator tasks in a real deployment "
        "(LocalExecutor, PostgreSQL, one triggerer) vs the same DAG of WaitSensor; after a "
        "warm-up of each kind of task, each side swept twice in alternated order, medians",
        "quick": quick,
        "inputs": {
            "n": n,
            "seconds": seconds,
            "parallelism": parallelism,
            "rounds": [list(order) for order in ROUNDS],
        },
        "target": TARGET,
        "warm_up": {"wall_s": warm["wall_s"], "task_states": warm["task_states"]},
        "floor": floor,
        "zero_worker": zero,
        "air": air,
        # The same sweep with submit_in_triggerer (an option, off by default).
        "air_submit_in_triggerer": planned,
        "anchor_requests_in_window": anchor_requests,
        "met_detail": met_detail,
        "met": all(v for k, v in met_detail.items() if not (quick and k == "n_at_least_500")),
        "elapsed_s": time.monotonic() - started,
        "plot": "p7_deployment_quick.png" if quick else "p7_deployment.png",
    }
    _plot(result)
    return result


def wait_until_quiet(deployment: Any, host: str) -> float:
    """Until the workspace's request counters and the deployment's queued and running task
    instances stay the same for 5 s: a sweep starts on a quiet deployment."""
    from ha_deployment import wait_quiet

    began = time.monotonic()
    patiently(
        lambda: wait_quiet(
            deployment,
            lambda: {"requests": workspace_counters(host)},
            quiet_s=5,
            timeout=900,
        )
    )
    return time.monotonic() - began


def _remote_runs(runs: list[dict[str, Any]], prefix: str, n: int) -> dict[str, Any]:
    """Whether each of the sweep's trials (run names ``<prefix>NNNN``) made exactly one run."""
    names = Counter(r.get("run_name") for r in runs)
    trials = {name for name in names if str(name).startswith(prefix)}
    results = Counter(
        (r.get("state") or {}).get("result_state")
        for r in runs
        if str(r.get("run_name")).startswith(prefix)
    )
    return {
        "runs": sum(names[name] for name in trials),
        "distinct_trials": len(trials),
        "duplicates": sum(c - 1 for name, c in names.items() if name in trials and c > 1),
        "lost": n - len(trials),
        "result_states": dict(results),
    }


class ConnectionTarget:
    """The host and token of the benchmark workspace, as airflow_connection_env reads them."""

    def __init__(self, workspace: BenchWorkspace) -> None:
        self.host = workspace.host
        self.token = TOKEN


def _plot(result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    named = [
        ("zero-worker", result["zero_worker"]),
        ("WaitSensor (floor)", result["floor"]),
        ("AirRunOperator", result["air"]),
        ("submit_in_triggerer", result["air_submit_in_triggerer"]),
    ]
    labels = [label for label, side in named if side]  # a stalled zero-worker sweep: none
    sides = [side for _, side in named if side]
    panels = [
        ("wall time (s)", [side["wall_s"] for side in sides]),
        ("worker runs per task", [side["worker_runs_per_task"] for side in sides]),
        ("triggerer CPU (s)", [side["triggerer"]["cpu_s"] for side in sides]),
        (
            "triggerer peak RSS growth per waiting task (KB)",
            [side["triggerer_peak_rss_kb_per_waiting_task"] for side in sides],
        ),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(16, 4))
    for ax, (title, values) in zip(axes, panels, strict=True):
        ax.bar(labels, values, color=["#cccccc", "#999999", "#d9822b", "#f2b880"][-len(sides) :])
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"P7: {result['inputs']['n']} mapped deferrable tasks in one deployment")
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(RESULTS / result["plot"], dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    # A stop by SIGTERM still tears the deployment and the workspace down (finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = parser_for(__doc__)
    parser.add_argument("--n", type=int, default=None, help="mapped tasks (default 500, quick 40)")
    args = parser.parse_args(argv)
    result = measure(quick=args.quick, n=args.n)
    path = write_result(_result_id(args.quick), result)
    print(
        f"P7 written to {path}; met={result['met']}; air {fmt(result['air']['wall_s'])} s "
        f"({fmt(result['air']['worker_runs_per_task'])} worker runs per task) vs floor "
        f"{fmt(result['floor']['wall_s'])} s ({fmt(result['floor']['worker_runs_per_task'])})"
        + (
            f" vs zero-worker {fmt(result['zero_worker']['wall_s'])} s"
            if result["zero_worker"]
            else " (the zero-worker sweep stalled)"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
