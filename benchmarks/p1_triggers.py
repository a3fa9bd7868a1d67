"""P1: waiting on many runs in one event loop, ``AirRunTrigger`` vs ``DatabricksExecutionTrigger``.

The situation of an Airflow triggerer: N deferred tasks, each a trigger re-created from its
serialized kwargs, all iterated (``run()``) in one asyncio loop, against the local workspace in
simulate mode with N runs held ``RUNNING``. The workspace runs in a separate process. Each
(side, N) is measured in a fresh process (so memory and connections start from zero); the
two sides alternate at every N.

Per side and N, over a steady-state window after a warm-up:

- CPU of the trigger process per waiting run per second, net of the control below (the
  compared figure), and per status update. A status update is one (run,
  poll) state observation delivered: for the Databricks trigger one ``runs/get`` answer
  read by a trigger; for ours, one watched run refreshed by the shared watcher (a row of a
  ``runs/list`` page, or a ``runs/get``). CPU and updates are summed over the window
  (sub-window medians are recorded too). A control process (same imports, the lag sampler,
  no trigger) measures the sampler's own CPU rate; the compared figures are net of it (the
  raw ratio is recorded too). The watcher learns ends from ``runs/list`` pages of the smaller
  side (the completed runs, none while all are held RUNNING), so it delivers almost no
  per-run update while runs wait: its CPU per update is then undefined (``n/a``).
- RSS growth per waiting run (RSS at the end of the window minus RSS before the triggers
  were created, over N).
- requests per second received by the workspace (its admin counters).
- TCP connections the process holds to the workspace (psutil).
- event-loop lag: a sampler task sleeps 10 ms in a loop; lag = oversleep. p99 and max.

Both sides log at WARNING (the Databricks trigger logs every poll at INFO, ours only state
changes; leaving logging out makes the anchor cheaper, never ours).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks._common import (
    PYTHON,
    REPO,
    RESULTS,
    fmt,
    median,
    parser_for,
    percentile,
    write_result,
)

AIR = "air"
DATABRICKS = "databricks"
IDLE = "idle"  # the control: the same process and lag sampler, no trigger
SIDES = {
    AIR: "airflow_air.triggers.AirRunTrigger",
    DATABRICKS: "airflow.providers.databricks.triggers.databricks.DatabricksExecutionTrigger",
    IDLE: "",
}
TOKEN = "bench-token"
TARGETS = {"cpu_ratio": 0.2, "memory_ratio": 0.5, "lag_p99_ms": 20.0, "tcp": 20, "budget_rps": 10.0}


# --- the child: one side, one N ---------------------------------------------------------


def _child(args: argparse.Namespace) -> None:
    os.environ["AIRFLOW_CONN_DATABRICKS_DEFAULT"] = json.dumps(
        {
            "conn_type": "databricks",
            "host": "127.0.0.1",
            "port": args.port,
            "schema": "http",
            "password": TOKEN,
        }
    )
    import warnings

    warnings.simplefilter("ignore")
    import httpx
    import psutil
    from airflow.sdk.module_loading import import_string

    trigger_class = import_string(SIDES[args.side]) if args.side != IDLE else None
    observations = _instrument(args.side)
    if args.side == AIR:
        import airflow_air._logs  # noqa: F401

        import air_runtime._watcher  # noqa: F401
    elif args.side == DATABRICKS:
        import aiohttp  # noqa: F401
        import asgiref.sync  # noqa: F401
    logging.disable(logging.INFO)

    run_ids: list[int] = json.loads(Path(args.runs_file).read_text())[: args.n]
    stored: dict[str, Any] = {}
    if args.side == AIR:
        _, stored = trigger_class(run_id=0, poll_interval=args.interval).serialize()
    elif args.side == DATABRICKS:
        _, stored = trigger_class(
            run_id=0, databricks_conn_id="databricks_default", polling_period_seconds=args.interval
        ).serialize()
    else:
        run_ids = []
    stored_json = json.dumps(stored)
    process = psutil.Process()
    gc.collect()
    rss_before = process.memory_info().rss
    events: list[Any] = []

    async def consume(trigger: Any) -> None:
        async for event in trigger.run():
            events.append(event)

    async def counters(http: httpx.AsyncClient) -> int:
        response = await http.get("/api/2.0/airo-admin/counters")
        response.raise_for_status()
        requests = response.json()["requests"]
        return sum(n for endpoint, n in requests.items() if not endpoint.startswith("airo-admin"))

    async def drive() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        lags: list[float] = []
        sampling = False

        async def sampler() -> None:
            while True:
                start = loop.time()
                await asyncio.sleep(0.01)
                if sampling:
                    lags.append(loop.time() - start - 0.01)

        sampler_task = loop.create_task(sampler())
        tasks = []
        created = loop.time()
        for run_id in run_ids:
            kwargs = {**json.loads(stored_json), "run_id": run_id}
            tasks.append(loop.create_task(consume(trigger_class(**kwargs))))
        # Every run seen once (all triggers created and polling), then a steady warm-up.
        ready_by = loop.time() + 120
        while observations() < len(run_ids) and loop.time() < ready_by:
            await asyncio.sleep(0.1)
        ready_after = loop.time() - created
        await asyncio.sleep(args.warmup)
        profiler = _start_profiler(args.profile)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{args.port}",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=60,
        ) as admin:
            requests_0 = await counters(admin)
            gc_stats = _GcTimer()
            threads_0 = {t.id: t.user_time + t.system_time for t in process.threads()}
            wall_0 = time.monotonic()
            marks = [(time.monotonic(), time.process_time(), observations())]
            sampling = True
            for _ in range(args.windows):
                await asyncio.sleep(args.window)
                marks.append((time.monotonic(), time.process_time(), observations()))
            sampling = False
            gc_stats.stop()
            threads_1 = {t.id: t.user_time + t.system_time for t in process.threads()}
            _stop_profiler(profiler, args.profile)
            requests_1 = await counters(admin)
            wall_1 = time.monotonic()
        rss_after = process.memory_info().rss
        connections = [
            c
            for c in process.net_connections(kind="tcp")
            if c.raddr and c.raddr.port == args.port and c.status == psutil.CONN_ESTABLISHED
        ]
        sampler_task.cancel()
        windows = []
        for (t0, c0, o0), (t1, c1, o1) in itertools.pairwise(marks):
            windows.append({"seconds": t1 - t0, "cpu_s": c1 - c0, "observations": o1 - o0})
        per_update = [w["cpu_s"] / w["observations"] for w in windows if w["observations"]]
        total_cpu = marks[-1][1] - marks[0][1]
        total_obs = marks[-1][2] - marks[0][2]
        return {
            "side": args.side,
            "n": args.n,
            "all_seen_after_s": ready_after,
            "interval_s": args.interval,
            "windows": windows,
            "cpu_s": total_cpu,
            "observations": total_obs,
            "observations_per_s": total_obs / (marks[-1][0] - marks[0][0]),
            "cpu_per_1000_updates_s": 1000 * total_cpu / total_obs if total_obs else float("nan"),
            "cpu_per_1000_updates_window_median_s": 1000 * median(per_update)
            if per_update
            else float("nan"),
            "cpu_utilization": total_cpu / (marks[-1][0] - marks[0][0]),
            "rss_before_mb": rss_before / 2**20,
            "rss_after_mb": rss_after / 2**20,
            "rss_per_run_kb": (rss_after - rss_before) / max(1, len(run_ids)) / 1024,
            "requests": requests_1 - requests_0,
            "requests_per_s": (requests_1 - requests_0) / (wall_1 - wall_0),
            "tcp_connections": len(connections),
            "lag_samples": len(lags),
            "lag_p50_ms": 1000 * percentile(lags, 50),
            "lag_p99_ms": 1000 * percentile(lags, 99),
            "lag_max_ms": 1000 * max(lags) if lags else float("nan"),
            "gc": gc_stats.summary(),
            "thread_cpu_s": sorted(
                (round(v - threads_0.get(k, 0.0), 3) for k, v in threads_1.items()), reverse=True
            ),
            "events_before_end": len(events),
            "tasks_failed": sum(1 for t in tasks if t.done() and t.exception() is not None),
        }

    result = asyncio.run(drive())
    print(json.dumps(result), flush=True)
    os._exit(0)  # do not wait for thousands of sessions to close


class _GcTimer:
    """Time spent in garbage collections, per generation, while installed."""

    def __init__(self) -> None:
        self.totals = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]
        self.longest = 0.0
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        spent = time.perf_counter() - self._started
        generation = info["generation"]
        self.totals[generation] += spent
        self.counts[generation] += 1
        self.longest = max(self.longest, spent)

    def stop(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, Any]:
        return {
            "collections": self.counts,
            "seconds": [round(t, 4) for t in self.totals],
            "longest_ms": round(1000 * self.longest, 2),
        }


def _start_profiler(path: str | None) -> Any:
    """pyinstrument over the measurement window only (``--profile``)."""
    if not path:
        return None
    from pyinstrument import Profiler

    profiler = Profiler(async_mode="disabled", interval=0.0005)
    profiler.start()
    return profiler


def _stop_profiler(profiler: Any, path: str | None) -> None:
    if profiler is None or not path:
        return
    profiler.stop()
    Path(path).write_text(profiler.output_text(unicode=False, show_all=False))


def _instrument(side: str) -> Any:
    """A counter of delivered (run, poll) observations. Counting costs a few hundred
    nanoseconds per observation on either side."""
    count = [0]
    if side == AIR:
        from air_runtime._watcher import RunWatcher

        observe_raw = RunWatcher._observe_raw
        observe = RunWatcher._observe

        def counted_raw(self: Any, watched: Any, raw: Any) -> bool:
            count[0] += 1
            return observe_raw(self, watched, raw)

        def counted(self: Any, watched: Any, state: Any, *, final: bool) -> None:
            count[0] += 1
            observe(self, watched, state, final=final)

        RunWatcher._observe_raw = counted_raw  # type: ignore[method-assign]
        RunWatcher._observe = counted  # type: ignore[method-assign]
    elif side == DATABRICKS:
        from airflow.providers.databricks.hooks.databricks import DatabricksHook

        get_state = DatabricksHook.a_get_run_state

        async def counted_state(self: Any, run_id: int) -> Any:
            state = await get_state(self, run_id)
            count[0] += 1
            return state

        DatabricksHook.a_get_run_state = counted_state  # type: ignore[method-assign]
    return lambda: count[0]


# --- the parent: workspace, runs, alternating children, results ---------------------------


async def submit_runs(
    http: Any, submit_body: dict[str, Any], indices: Iterable[int], *, token_prefix: str
) -> list[int]:
    """Submit one run per index (32 at once) with the client ``http`` of a bench workspace;
    the run ids in index order."""
    limit = asyncio.Semaphore(32)

    async def one(i: int) -> int:
        async with limit:
            response = await http.post(
                "/api/2.2/jobs/runs/submit",
                json={**submit_body, "idempotency_token": f"{token_prefix}-{i}"},
            )
            response.raise_for_status()
            return int(response.json()["run_id"])

    return list(await asyncio.gather(*(one(i) for i in indices)))


def workspace_counters(host: str) -> dict[str, int]:
    """Requests the bench workspace has served, by endpoint (its own admin calls left out)."""
    import httpx

    response = httpx.get(
        f"{host}/api/2.0/airo-admin/counters",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    response.raise_for_status()
    return {k: v for k, v in response.json()["requests"].items() if not k.startswith("airo-admin")}


class BenchWorkspace:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="airo-bench-p1-"))
        ready = self.dir / "ready.json"
        self.process = subprocess.Popen(
            [PYTHON, "-m", "benchmarks._workspace", "--ready-file", str(ready)],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the benchmark workspace did not start")
            time.sleep(0.05)
        self.port = int(json.loads(ready.read_text())["port"])
        self.host = f"http://127.0.0.1:{self.port}"
        self.run_ids: list[int] = []

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def top_up(self, n: int) -> None:
        """Hold exactly ``n`` runs RUNNING (runs are only ever added: N grows)."""
        missing = n - len(self.run_ids)
        if missing > 0:
            self.run_ids += asyncio.run(self._submit(len(self.run_ids), missing))
        (self.dir / "runs.json").write_text(json.dumps(self.run_ids))

    async def _submit(self, start: int, count: int) -> list[int]:
        import httpx

        from air_runtime import build_plan, load_workload

        workload = load_workload(
            {
                "experiment_name": "bench-p1",
                "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                "command": "true",
            }
        )
        body = build_plan(workload, user_name="local-user@example.com", idempotency_token="x")
        async with httpx.AsyncClient(
            base_url=self.host, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
        ) as http:
            ids = await submit_runs(
                http, body.submit_body, range(start, start + count), token_prefix="bench-p1"
            )
            # wait until every run is RUNNING
            for _ in range(600):
                active = await self._count_running(http)
                if active >= start + count:
                    break
                await asyncio.sleep(0.2)
        return list(ids)

    async def _count_running(self, http: Any) -> int:
        running = 0
        token = None
        while True:
            params: dict[str, Any] = {"active_only": "true", "limit": 25}
            if token:
                params["page_token"] = token
            body = (await http.get("/api/2.2/jobs/runs/list", params=params)).json()
            running += sum(
                1 for r in body.get("runs", []) if r["state"]["life_cycle_state"] == "RUNNING"
            )
            token = body.get("next_page_token")
            if not token:
                return running


def measure(
    *,
    quick: bool = False,
    ns: list[int] | None = None,
    interval: float = 5.0,
    profile: bool = False,
) -> dict[str, Any]:
    ns = ns or ([100, 500] if quick else [100, 500, 1000, 2000])
    warmup = 2.0  # after every run was seen once
    window = interval
    workspace = BenchWorkspace()
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for index, n in enumerate(ns):
            began = time.monotonic()
            workspace.top_up(n)
            print(f"  P1 {n} runs RUNNING ({time.monotonic() - began:.0f} s to submit)", flush=True)
            order = [AIR, DATABRICKS] if index % 2 == 0 else [DATABRICKS, AIR]
            if index == 0:
                order = [IDLE, *order]
            for side in order:
                argv = [
                    "-m", "benchmarks.p1_triggers", "--child", "--side", side, "--n", str(n),
                    "--port", str(workspace.port), "--runs-file", str(workspace.dir / "runs.json"),
                    "--interval", str(interval), "--warmup", str(warmup),
                    "--window", str(window), "--windows", str(_windows(n, ns, quick)),
                ]  # fmt: skip
                if profile and side == AIR and n == ns[-1]:
                    argv += ["--profile", str(RESULTS / "p1_air_profile.txt")]
                from benchmarks._common import run_child

                began = time.monotonic()
                row = run_child(argv, env=_airflow_env(workspace.dir))
                row["child_s"] = time.monotonic() - began
                rows.append(row)
                if side == IDLE:
                    print(
                        f"  P1 control (no trigger): {fmt(row['cpu_utilization'])} CPU s/s, lag "
                        f"p99 {fmt(row['lag_p99_ms'])} ms max {fmt(row['lag_max_ms'])} ms",
                        flush=True,
                    )
                    continue
                print(
                    f"  P1 {side:10s} N={n:5d}: {fmt(row['cpu_per_1000_updates_s'])} CPU s/1000 "
                    f"updates, {fmt(row['rss_per_run_kb'])} KB/run, "
                    f"{fmt(row['requests_per_s'])} req/s, {row['tcp_connections']} TCP, lag p99 "
                    f"{fmt(row['lag_p99_ms'])} ms max {fmt(row['lag_max_ms'])} ms "
                    f"({row['child_s']:.0f} s)",
                    flush=True,
                )
    finally:
        workspace.stop()
    result = _summarize(rows, ns, interval, warmup, window, time.monotonic() - started)
    for row in result["per_n"]:
        ours, theirs = row["air"], row["databricks"]
        print(
            f"  P1 N={row['n']}: CPU per waiting run {fmt(ours['cpu_us_per_run_s_net'])} vs "
            f"{fmt(theirs['cpu_us_per_run_s_net'])} µs/s net ({fmt(row['cpu_ratio'])}x); per "
            f"status update {fmt(row['cpu_per_update_ratio'])}x; memory "
            f"{fmt(row['memory_ratio'])}x",
            flush=True,
        )
    return result


def _windows(n: int, ns: list[int], quick: bool) -> int:
    """Measurement sub-windows of one poll interval: more at the N the target is set at."""
    return 3 if n == max(ns) and not quick else 2


def _airflow_env(home: Path) -> dict[str, str]:
    airflow_home = home / "airflow"
    airflow_home.mkdir(exist_ok=True)
    return {
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW__AIR__WORKSPACE_REQUEST_BUDGET": str(TARGETS["budget_rps"]),
        "PYTHONWARNINGS": "ignore",
    }


def _summarize(
    rows: list[dict[str, Any]],
    ns: list[int],
    interval: float,
    warmup: float,
    window: float,
    elapsed: float,
) -> dict[str, Any]:
    by = {(r["side"], r["n"]): r for r in rows}
    control = next((r for r in rows if r["side"] == IDLE), None)
    idle_rate = control["cpu_utilization"] if control else 0.0
    per_n = []
    for n in ns:
        ours, theirs = by[(AIR, n)], by[(DATABRICKS, n)]
        for row in (ours, theirs):
            seconds = sum(w["seconds"] for w in row["windows"])
            net_cpu = row["cpu_s"] - idle_rate * seconds
            row["cpu_per_1000_updates_net_s"] = (
                1000 * net_cpu / row["observations"] if row["observations"] else float("nan")
            )
            # CPU per waiting run per second: defined whatever the side's way of learning ends
            # (the watcher learns them from listings, with no per-run update while runs wait).
            row["cpu_us_per_run_s_net"] = 1e6 * net_cpu / (n * seconds) if seconds else 0.0
        per_n.append(
            {
                "n": n,
                # the lag sampler's own CPU (the control's) is not the triggers' cost
                "cpu_ratio": _ratio(ours["cpu_us_per_run_s_net"], theirs["cpu_us_per_run_s_net"]),
                "cpu_per_update_ratio": _ratio(
                    ours["cpu_per_1000_updates_net_s"], theirs["cpu_per_1000_updates_net_s"]
                ),
                "cpu_ratio_raw": _ratio(
                    ours["cpu_per_1000_updates_s"], theirs["cpu_per_1000_updates_s"]
                ),
                "memory_ratio": _ratio(ours["rss_per_run_kb"], theirs["rss_per_run_kb"]),
                "air": _headline(ours),
                "databricks": _headline(theirs),
            }
        )
    top = per_n[-1]
    ours_all = [by[(AIR, n)] for n in ns]
    met = {
        # Per status update is undefined for the watcher (no per-run updates while runs wait):
        # the target's CPU ratio is read per waiting run per second, net of the control.
        "cpu_per_waiting_run": top["cpu_ratio"] <= TARGETS["cpu_ratio"],
        "memory_per_run": top["memory_ratio"] <= TARGETS["memory_ratio"],
        "lag_p99": top["air"]["lag_p99_ms"] <= TARGETS["lag_p99_ms"],
        "tcp_connections": all(r["tcp_connections"] <= TARGETS["tcp"] for r in ours_all),
        # the token bucket allows one request of burst per window
        "request_budget": all(_within_budget(r) for r in ours_all),
    }
    result = {
        "what": "N concurrent AirRunTrigger vs DatabricksExecutionTrigger in one event loop, "
        "runs held RUNNING on the local workspace (simulate mode, separate process)",
        "inputs": {
            "n": ns,
            "poll_interval_s": interval,
            "warmup_s": warmup,
            "window_s": window,
            "windows_per_n": {r["n"]: len(r["windows"]) for r in rows if r["side"] == AIR},
            "request_budget_rps": TARGETS["budget_rps"],
            "status_update": "one (run, poll) state observation delivered to the waiting side",
            "cpu_compared": "CPU µs per waiting run per second, net of the no-trigger control",
        },
        "target": {
            "at_n": ns[-1],
            "cpu_per_update_ratio_max": TARGETS["cpu_ratio"],
            "memory_per_run_ratio_max": TARGETS["memory_ratio"],
            "lag_p99_ms_max": TARGETS["lag_p99_ms"],
            "tcp_connections_max": TARGETS["tcp"],
            "requests_per_s_max": TARGETS["budget_rps"],
        },
        "control_idle_loop": control
        and {k: control[k] for k in ("cpu_utilization", "lag_p50_ms", "lag_p99_ms", "lag_max_ms")},
        "per_n": per_n,
        "met_detail": met,
        "met": all(met.values()),
        "elapsed_s": elapsed,
        "raw": rows,
    }
    _plot(per_n)
    result["plot"] = "p1_triggers.png"
    return result


def _within_budget(row: dict[str, Any]) -> bool:
    seconds = row["requests"] / row["requests_per_s"] if row["requests_per_s"] else 0.0
    return bool(row["requests"] <= TARGETS["budget_rps"] * seconds + 1)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def _headline(row: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "cpu_us_per_run_s_net",
        "cpu_per_1000_updates_s",
        "cpu_per_1000_updates_net_s",
        "cpu_per_1000_updates_window_median_s",
        "observations_per_s",
        "cpu_utilization",
        "rss_per_run_kb",
        "requests_per_s",
        "tcp_connections",
        "lag_p99_ms",
        "lag_max_ms",
    )
    return {k: row[k] for k in keys}


def _plot(per_n: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [p["n"] for p in per_n]
    panels = [
        ("cpu_us_per_run_s_net", "CPU µs per waiting run per second (net)", True),
        ("rss_per_run_kb", "RSS growth per waiting run (KB)", False),
        ("requests_per_s", "requests/s to the workspace", True),
        ("tcp_connections", "TCP connections held", True),
        ("lag_p99_ms", "event-loop lag p99 (ms)", True),
        ("lag_max_ms", "event-loop lag max (ms)", True),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(14, 8))
    for ax, (key, title, log) in zip(axes.flat, panels, strict=True):
        for side, label, style in (
            ("air", "AirRunTrigger", "o-"),
            ("databricks", "DatabricksExecutionTrigger", "s--"),
        ):
            ax.plot(ns, [p[side][key] for p in per_n], style, label=label)
        if key == "requests_per_s":
            ax.axhline(TARGETS["budget_rps"], color="grey", lw=0.8, ls=":", label="budget")
        if key == "tcp_connections":
            ax.axhline(TARGETS["tcp"], color="grey", lw=0.8, ls=":", label="target")
        if key == "lag_p99_ms":
            ax.axhline(TARGETS["lag_p99_ms"], color="grey", lw=0.8, ls=":", label="target")
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("N waiting runs")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    axes.flat[2].legend(fontsize=8)
    fig.suptitle("P1: triggers waiting on N RUNNING runs (one event loop, same poll interval)")
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(RESULTS / "p1_triggers.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = parser_for(__doc__)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--side", choices=sorted(SIDES))
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--ns", default=None, help="comma-separated N values (parent)")
    parser.add_argument("--port", type=int)
    parser.add_argument("--runs-file")
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=7.0)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--profile", default=None, help="pyinstrument text output (child)")
    parser.add_argument("--profile-air", action="store_true", help="profile our side at max N")
    args = parser.parse_args(argv)
    if args.child:
        _child(args)
        return
    ns = [int(x) for x in args.ns.split(",")] if args.ns else None
    result = measure(quick=args.quick, ns=ns, interval=args.interval, profile=args.profile_air)
    write_result("P1", result)
    print(json.dumps({k: result[k] for k in ("per_n", "met_detail", "met")}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
