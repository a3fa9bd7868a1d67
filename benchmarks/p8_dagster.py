"""P8: what each Dagster materialization costs while it waits on its run, K = 10 .. 50 at once.

One Dagster job of K independent AI Runtime assets (benchmarks/dagster_sweep.py) runs with
the multiprocess executor (forkserver, Dagster and dagster_air preloaded), every step at once, against the local workspace in simulate mode
(its own process; each run held RUNNING long enough for all K to wait together). Once all K
runs are submitted, a window measures: the RSS of every step process (sampled every 0.5 s;
its peak over the window, per step, and the step's own memory, USS, once), the job process's
own RSS, and the requests the
workspace receives per waiting materialization per second. Over the whole job: requests per
materialization. Growth: the per-materialization figures at each K.

    python -m benchmarks.p8_dagster [--quick]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import PYTHON, REPO, RESULTS, fmt, median, parser_for, write_result
from benchmarks.p1_triggers import TOKEN, BenchWorkspace, workspace_counters

TARGET = {"k": 50}
WINDOW_S = 15.0


def _step_processes(root: Any) -> list[Any]:
    """The executor's step processes: the direct children of its forkserver (a step's own
    children, which inherit the forkserver's command line, are not steps)."""
    import psutil

    steps = []
    for child in root.children():
        try:
            if "forkserver" in " ".join(child.cmdline()):
                steps += child.children()
        except psutil.Error:
            continue
    return steps


def _uss(process: Any) -> int:
    try:
        return int(process.memory_full_info().uss)
    except Exception:  # a step that just ended
        return 0


def _rss(processes: list[Any]) -> list[int]:
    values = []
    for proc in processes:
        try:
            values.append(proc.memory_info().rss)
        except Exception:  # a step that just ended
            continue
    return values


def _one(k: int) -> dict[str, Any]:
    import psutil

    # Every step process is up and waiting before the first run ends (a step process takes
    # seconds of CPU to start, tens of seconds on a loaded 2-core machine).
    seconds = 300 + 8 * k
    workspace = BenchWorkspace()
    home = Path(tempfile.mkdtemp(prefix="airo-bench-p8-"))
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "AIRO_HOST": workspace.host,
        "AIRO_TOKEN": TOKEN,
        "AIRO_BENCH_SWEEP_N": str(k),
        "AIRO_BENCH_SWEEP_SECONDS": str(seconds),
    }
    log_path = home / "job.log"
    started = time.monotonic()
    try:
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [PYTHON, str(REPO / "benchmarks" / "dagster_sweep.py")],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its step processes go with it on a failure
            )
        root = psutil.Process(proc.pid)
        # All K runs submitted (the workspace's own counter): every materialization waits.
        # On a machine too busy to start K steps before the first run ends, the window
        # opens with fewer waiting (recorded as "waiting").
        while workspace_counters(workspace.host).get("jobs/runs/submit", 0) < k:
            if proc.poll() is not None:
                raise RuntimeError(f"the job ended early:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() - started > seconds - 2 * WINDOW_S:
                break
            time.sleep(0.5)
        all_waiting_after = time.monotonic() - started
        time.sleep(2.0)  # the last submitter reaches its wait
        counters_0 = workspace_counters(workspace.host)
        waiting_k = counters_0.get("jobs/runs/submit", 0)
        window_0 = time.monotonic()
        peak_per_step: dict[int, int] = {}
        uss_per_step: dict[int, int] = {}
        peak_total = 0
        steps_seen = 0
        job_rss = 0
        while time.monotonic() - window_0 < WINDOW_S:
            steps = _step_processes(root)
            steps_seen = max(steps_seen, len(steps))
            for step in steps:
                try:
                    peak_per_step[step.pid] = max(
                        peak_per_step.get(step.pid, 0), step.memory_info().rss
                    )
                except psutil.Error:
                    continue
                # Memory of its own (RSS counts the pages shared with the forkserver too).
                if step.pid not in uss_per_step:
                    uss_per_step[step.pid] = _uss(step)
            peak_total = max(peak_total, sum(_rss(steps)))
            job_rss = max(job_rss, sum(_rss([root])))
            time.sleep(0.5)
        window = time.monotonic() - window_0
        counters_1 = workspace_counters(workspace.host)
        code = proc.wait(timeout=seconds + 600)
        elapsed = time.monotonic() - started
        counters_end = workspace_counters(workspace.host)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        workspace.stop()
    if code != 0:
        raise RuntimeError(f"the Dagster job failed:\n{log_path.read_text()[-3000:]}")
    waiting = {
        key: counters_1.get(key, 0) - counters_0.get(key, 0)
        for key in counters_1
        if counters_1.get(key, 0) - counters_0.get(key, 0)
    }
    per_step_mb = [v / 2**20 for v in peak_per_step.values()]
    row: dict[str, Any] = {
        "k": k,
        "run_seconds": seconds,
        "all_submitted_after_s": all_waiting_after,
        "step_processes": steps_seen,
        "rss_per_waiting_materialization_mb": median(per_step_mb),
        "rss_per_waiting_materialization_max_mb": max(per_step_mb) if per_step_mb else 0.0,
        "uss_per_waiting_materialization_mb": median(
            [v / 2**20 for v in uss_per_step.values() if v]
        ),
        "rss_all_steps_peak_mb": peak_total / 2**20,
        "rss_job_process_mb": job_rss / 2**20,
        "window_s": window,
        "waiting_requests": waiting,
        "waiting": waiting_k,
        "requests_per_waiting_materialization_per_s": sum(waiting.values()) / waiting_k / window,
        "requests_per_materialization_total": sum(counters_end.values()) / k,
        "requests_total_by_endpoint": counters_end,
        "elapsed_s": elapsed,
        "job_succeeded": code == 0,
    }
    print(
        f"  P8 K={k}: {waiting_k} waiting, {steps_seen} step processes, RSS/materialization "
        f"{fmt(row['rss_per_waiting_materialization_mb'])} MB (own "
        f"{fmt(row['uss_per_waiting_materialization_mb'])} MB), "
        f"{fmt(row['requests_per_waiting_materialization_per_s'])} req/s each while waiting, "
        f"{fmt(row['requests_per_materialization_total'])} requests each in all "
        f"({elapsed:.0f} s)",
        flush=True,
    )
    return row


def measure(quick: bool = False) -> dict[str, Any]:
    ks = [5, 10] if quick else [10, 25, 50]
    started = time.monotonic()
    rows = [_one(k) for k in ks]
    first, last = rows[0], rows[-1]
    growth = {
        "rss_per_materialization_ratio": last["rss_per_waiting_materialization_mb"]
        / first["rss_per_waiting_materialization_mb"],
        "requests_per_materialization_per_s_ratio": last[
            "requests_per_waiting_materialization_per_s"
        ]
        / max(first["requests_per_waiting_materialization_per_s"], 1e-9),
        "rss_all_steps_ratio": last["rss_all_steps_peak_mb"] / first["rss_all_steps_peak_mb"],
    }
    met_detail = {
        "all_succeeded": all(r["job_succeeded"] for r in rows),
        "all_concurrent": all(r["waiting"] >= r["k"] for r in rows),
        "k_50": last["k"] >= TARGET["k"],
    }
    result = {
        "what": "K concurrent Dagster materializations (multiprocess executor) waiting on runs",
        "quick": quick,
        "inputs": {"ks": ks, "window_s": WINDOW_S},
        "target": TARGET,
        "per_k": rows,
        "growth_first_to_last": growth,
        "met_detail": met_detail,
        "met": all(v for key, v in met_detail.items() if not (quick and key == "k_50")),
        "elapsed_s": time.monotonic() - started,
        "plot": "p8_dagster.png",
    }
    _plot(rows)
    return result


def _plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [r["k"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = [
        ("uss_per_waiting_materialization_mb", "own memory (USS) per waiting step (MB)"),
        ("rss_all_steps_peak_mb", "RSS of all step processes (MB)"),
        ("requests_per_waiting_materialization_per_s", "requests/s per waiting materialization"),
    ]
    for ax, (key, title) in zip(axes, panels, strict=True):
        ax.plot(ks, [r[key] for r in rows], "o-")
        ax.set_xlabel("K concurrent materializations")
        ax.set_title(title, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    fig.suptitle("P8: Dagster materializations waiting on runs (multiprocess executor)")
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(RESULTS / "p8_dagster.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    # A stop by SIGTERM still tears the deployment and the workspace down (finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parser_for(__doc__).parse_args(argv)
    result = measure(quick=args.quick)
    path = write_result("P8", result)
    print(f"P8 written to {path}; met={result['met']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
