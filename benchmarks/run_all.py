"""Run the performance benchmarks P1-P9 in sequence and print a summary table.

    python -m benchmarks.run_all [--quick] [--only P1,P3]

Each benchmark runs in its own process (P4 pins its process to one CPU; P1 starts its own
workspace and trigger processes) and writes ``benchmarks/results/<id>.json``; the summary
is read back from those files and also written to ``benchmarks/results/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import PYTHON, REPO, RESULTS, fmt, machine_info, verdict

PERFORMANCE_PAGE = REPO / "docs" / "performance.md"
TABLE_START = "<!-- the table below is generated: python -m benchmarks.run_all --summary-only -->"
TABLE_END = "<!-- end of the generated table -->"

# Quick ones first; P1 (the long one) last.
MODULES = {
    "P2": "benchmarks.p2_import",
    "P4": "benchmarks.p4_plan",
    "P3": "benchmarks.p3_submit",
    "P5": "benchmarks.p5_local",
    "P1": "benchmarks.p1_triggers",
    # The scale benchmarks: minutes each (P7 starts a whole Airflow deployment).
    "P6": "benchmarks.p6_end_detection",
    "P8": "benchmarks.p8_dagster",
    "P7": "benchmarks.p7_deployment",
    "P9": "benchmarks.p9_image_copy",
    "P10": "benchmarks.p10_short_runs",
    "P11_AIRFLOW": "benchmarks.p11_airflow_repair",
    "P11_DAGSTER": "benchmarks.p11_dagster_recovery",
    "P12": "benchmarks.p12_live_lines",
    "P12_TRIGGERER": "benchmarks.p12_triggerer",
    # The HA deployment (docs/deployments.md): two of each component, one triggerer killed.
    "P13": "benchmarks.p13_failover",
    "P14": "benchmarks.p14_recovery",
}
ORDER = [
    "P1",
    "P2",
    "P3",
    "P4",
    "P5",
    "P6",
    "P7",
    "P8",
    "P9",
    "P10",
    "P11_AIRFLOW",
    "P11_DAGSTER",
    "P12",
    "P12_TRIGGERER",
    "P13",
    "P14",
]


def _p1(r: dict[str, Any]) -> tuple[str, str]:
    top = r["per_n"][-1]
    ours, theirs = top["air"], top["databricks"]
    rows = [p["air"] for p in r["per_n"]]
    measured = (
        f"N={top['n']}: CPU/update {fmt(top['cpu_ratio'], 2)}x "
        f"({fmt(ours['cpu_per_1000_updates_net_s'], 2)} vs "
        f"{fmt(theirs['cpu_per_1000_updates_net_s'], 2)} CPU s/1000 net of the sampler; raw "
        f"{fmt(top['cpu_ratio_raw'], 2)}x), memory/run {fmt(top['memory_ratio'], 2)}x "
        f"({fmt(ours['rss_per_run_kb'], 3)} vs {fmt(theirs['rss_per_run_kb'], 3)} KB), "
        f"lag p99 {fmt(ours['lag_p99_ms'], 2)} ms (anchor {fmt(theirs['lag_p99_ms'], 3)}), "
        f"TCP <= {max(p['tcp_connections'] for p in rows)} (anchor {theirs['tcp_connections']}), "
        f"req/s <= {fmt(max(p['requests_per_s'] for p in rows), 3)} "
        f"(anchor {fmt(theirs['requests_per_s'], 3)})"
    )
    return "<=0.2x CPU, <=0.5x memory, lag p99<=20 ms, <=20 TCP, <=10 req/s", measured


def _p2(r: dict[str, Any]) -> tuple[str, str]:
    return (
        "<=20 ms over airflow.sdk (anchor 325 ms)",
        f"{fmt(r['air']['module_ms_median'])} ms vs Databricks operator "
        f"{fmt(r['databricks']['module_ms_median'], 4)} ms = {fmt(r['ratio'], 2)}x (target "
        f"20/325 = {fmt(r['ratio_max'], 2)}x; {fmt(r['air_ms_at_anchor_speed'], 2)} ms at the "
        f"anchor's speed; airflow.sdk itself {fmt(r['airflow_sdk_ms_median'], 4)} ms here)",
    )


def _p3(r: dict[str, Any]) -> tuple[str, str]:
    return (
        "<=4 round trips",
        f"{fmt(r['air']['round_trips_median'])} round trips, {fmt(r['air']['wall_s_median'])} s "
        f"(sequential: {fmt(r['sequential']['round_trips_median'])}, "
        f"{fmt(r['sequential']['wall_s_median'])} s; with 16 parallel uploads: "
        f"{fmt(r['air_max_concurrent_uploads_16']['round_trips_median'])})",
    )


def _p4(r: dict[str, Any]) -> tuple[str, str]:
    return (
        ">=2000 workloads/s",
        f"{fmt(r['workloads_per_s_median'], 4)} /CPU-s (load {fmt(r['load_us_median'])} us + "
        f"plan {fmt(r['plan_us_median'])} us)",
    )


def _p5(r: dict[str, Any]) -> tuple[str, str]:
    many = r["concurrent"]
    return (
        "<=1.5 s; 200 concurrent, 0 errors",
        f"{fmt(r['latency_s_median'])} s; {many['runs']} concurrent: {many['errors']} errors "
        f"({fmt(many['elapsed_s'])} s)",
    )


def _p6(r: dict[str, Any]) -> tuple[str, str]:
    rows = r["per_n"]
    top, small = rows[-1], rows[0]
    anchor = small["databricks"]
    return (
        "p99 <= 10 s at N=10,000 with <= 10 req/s",
        f"N={top['n']}: p50 {fmt(top['air']['latency_p50_s'], 2)} s, p99 "
        f"{fmt(top['air']['latency_p99_s'], 2)} s, max {fmt(top['air']['latency_max_s'], 2)} s at "
        f"{fmt(top['air']['requests_per_s'], 2)} req/s (anchor at N={small['n']}: p99 "
        f"{fmt(anchor['latency_p99_s'], 2)} s at {fmt(anchor['requests_per_s'], 2)} req/s; "
        f"N/30 = {fmt(top['databricks_requests_per_s_extrapolated'], 3)} req/s at N={top['n']})",
    )


def _p7(r: dict[str, Any]) -> tuple[str, str]:
    air, floor = r["air"], r["floor"]
    remote = air["remote_runs"]
    return (
        ">=500 mapped deferrable tasks, all succeed, one run each",
        f"N={r['inputs']['n']}: {air['task_states']}, {remote['duplicates']} duplicates, "
        f"{remote['lost']} lost; wall {fmt(air['wall_s'])} s vs WaitSensor "
        f"{fmt(floor['wall_s'])} s ({fmt(air['wall_ratio_to_floor'], 2)}x); triggerer "
        f"{fmt(air['triggerer_cpu_ms_per_task'], 2)} CPU ms and "
        f"{fmt(air['triggerer_peak_rss_kb_per_waiting_task'], 2)} KB peak RSS per task (floor "
        f"{fmt(floor['triggerer_cpu_ms_per_task'], 2)} ms, "
        f"{fmt(floor['triggerer_peak_rss_kb_per_waiting_task'], 2)} KB); "
        f"{fmt(air['workspace_requests_per_s'], 2)} req/s"
        + _p7_planned(r.get("air_submit_in_triggerer"), floor),
    )


def _p7_planned(planned: dict[str, Any] | None, floor: dict[str, Any]) -> str:
    """The same sweep with submit_in_triggerer (results from before it existed lack it)."""
    if not planned:
        return ""
    return (
        f"; with submit_in_triggerer {fmt(planned['wall_s'])} s "
        f"({fmt(planned['wall_s'] / floor['wall_s'], 2)}x), "
        f"{planned['remote_runs']['duplicates']} duplicates, {planned['remote_runs']['lost']} lost"
    )


def _p8(r: dict[str, Any]) -> tuple[str, str]:
    rows = r["per_k"]
    parts = [
        f"K={row['k']}: {fmt(row['rss_per_waiting_materialization_mb'])} MB, "
        f"{fmt(row['requests_per_waiting_materialization_per_s'], 2)} req/s each"
        for row in rows
    ]
    return ("50 concurrent materializations: RSS, requests each, growth", "; ".join(parts))


def _p9(r: dict[str, Any]) -> tuple[str, str]:
    return (
        "peak RSS <= 64 MiB; >= 0.8x skopeo; repeat < 1 s, 0 bytes",
        f"{fmt(r['image_mib'], 4)} MiB: peak RSS {fmt(r['airo']['peak_rss_mib'], 3)} MiB, "
        f"{fmt(r['airo']['throughput_mib_s'], 3)} vs skopeo "
        f"{fmt(r['skopeo']['throughput_mib_s'], 3)} MiB/s ({fmt(r['throughput_ratio'], 2)}x); "
        f"repeat {fmt(r['repeat']['copy_s'], 2)} s, {r['repeat']['bytes_sent']} bytes",
    )


def _p11_airflow(r: dict[str, Any]) -> tuple[str, str]:
    before, after = r["before"], r["after"]
    return (
        "1.00x GPU-hours paid / needed after one stage fails once",
        f"clear the failed stage {fmt(after['ratio_median'], 3)}x "
        f"(executions {after['executions']}, {after['runs_created']} run) vs clear the submit "
        f"task {fmt(before['ratio_median'], 3)}x (executions {before['executions']})",
    )


def _p12(r: dict[str, Any]) -> tuple[str, str]:
    (row,) = r["rows"]
    shown = row["printed_to_shown_s"]
    return (
        "N waiting runs' live lines: <= 10 req/s, loop lag p99 <= 20 ms, newest line in 60 s",
        f"N={row['n']}: {fmt(row['watcher_requests_per_s'], 3)} req/s "
        f"({fmt(row['line_requests_per_s'], 3)} for lines), lag p99 "
        f"{fmt(row['loop_lag_ms']['p99'], 3)} ms, printed to shown p99 {fmt(shown['p99'], 3)} s, "
        f"{row['runs_with_a_line_shown_in_last_60s']}/{row['n']} runs shown a line in the last 60 s",
    )


def _p12_triggerer(r: dict[str, Any]) -> tuple[str, str]:
    (row,) = r["rows"]
    shown = row["printed_to_shown_s"]
    return (
        "the same in a deployment: N deferred tasks in one Airflow triggerer",
        f"N={row['n']}: {fmt(row['workspace_requests_per_s'], 3)} req/s at the workspace, "
        f"triggerer loop lag p99 {fmt(row['loop_lag_ms']['p99'], 3)} ms, printed to in-the-log "
        f"p99 {fmt(shown['p99'], 3)} s, {row['tasks_with_a_line_shown_in_last_60s']}/{row['n']} "
        "tasks shown a line in the last 60 s",
    )


def _p13(r: dict[str, Any]) -> tuple[str, str]:
    run = r["runs"][-1]
    remote, kill = run["air"]["remote_runs"], run["air"]["kill"] or {}
    shown = kill.get("moved_state_shown_s") or {}
    return (
        "HA deployment, a triggerer killed at half time: <= 1.2x the WaitSensor floor, 0 "
        "duplicates, orphans, cancelled; moved runs shown within 60 s",
        f"N={run['n']} ({len(r['runs'])} runs kept): {fmt(run['air']['wall_s'])} s vs floor "
        f"{fmt(run['floor']['wall_s'])} s ({fmt(run['wall_ratio_to_floor'], 3)}x), "
        f"{remote['duplicates']} duplicates, {remote['orphans']} orphans, {remote['cancelled']} "
        f"cancelled; {kill.get('moved_runs', 0)} moved runs shown by the other triggerer "
        f"{fmt(shown.get('max') or float('nan'), 3)} s after the kill at most",
    )


def _p10(r: dict[str, Any]) -> tuple[str, str]:
    ours = [row for row in r["rows"] if row["side"] == "ends_in_triggerer"]
    worker = [row for row in r["rows"] if row["side"] == "resumes_in_worker"]
    return (
        "a run of a few seconds seen ended by its deferred task within 2 s at p99",
        ", ".join(
            f"K={row['k']}: p99 {fmt(row['latency_p99_s'], 3)} s ({row['runs']} runs)"
            for row in ours
        )
        + "; resumed in a worker: p99 "
        + " / ".join(f"{fmt(row['latency_p99_s'], 3)} s" for row in worker)
        + (" (quick)" if r.get("quick") else ""),
    )


def _p11_dagster(r: dict[str, Any]) -> tuple[str, str]:
    return (
        "1.00x GPU-hours paid / needed: re-execute from failure; run retry after SIGKILL",
        "; ".join(
            f"{name.replace('_', ' ')} {fmt(s['ratio'], 3)}x ({len(s['trainings'])} trainings, "
            f"{s['gpu_runs_created']} GPU runs; before: "
            f"{s.get('before_estimate', s.get('before'))}x, an estimate, not measured)"
            for name, s in r["scenarios"].items()
        ),
    )


def _p14(r: dict[str, Any]) -> tuple[str, str]:
    return (
        "<= 1.1x GPU-hours paid / needed, a 100-step stage's node lost at step 80",
        f"with a checkpoint volume "
        f"{', '.join(fmt(run['checkpoint']['ratio'], 2) + 'x' for run in r['runs'])} "
        f"({r['runs'][-1]['checkpoint']['steps']} steps run for 100); without "
        f"{', '.join(fmt(run['restart']['ratio'], 2) + 'x' for run in r['runs'])} "
        f"({r['runs'][-1]['restart']['steps']} steps)",
    )


SUMMARIES: dict[str, Callable[[dict[str, Any]], tuple[str, str]]] = {
    "P1": _p1,
    "P2": _p2,
    "P3": _p3,
    "P4": _p4,
    "P5": _p5,
    "P6": _p6,
    "P7": _p7,
    "P8": _p8,
    "P9": _p9,
    "P10": _p10,
    "P11_AIRFLOW": _p11_airflow,
    "P11_DAGSTER": _p11_dagster,
    "P12": _p12,
    "P12_TRIGGERER": _p12_triggerer,
    "P13": _p13,
    "P14": _p14,
}


def result_path(bench_id: str, *, quick: bool = False) -> Path:
    path = RESULTS / f"{bench_id.lower()}.json"
    quick_path = RESULTS / f"{bench_id.lower()}_quick.json"
    if quick and quick_path.exists():  # a module whose quick run keeps its own file
        return quick_path
    return path


def summary_row(
    bench_id: str, *, quick: bool = False, seconds: float | None = None
) -> dict[str, Any]:
    """One benchmark's line of the summary, read from its result file: the figure, ``met``
    (decided over every kept run), how many runs and the newest one's date and commit."""
    result = json.loads(result_path(bench_id, quick=quick).read_text())
    target, measured = SUMMARIES[bench_id](result)
    runs = result.get("runs") or []
    newest = runs[-1] if runs else {}
    row: dict[str, Any] = {
        "id": bench_id,
        "target": target,
        "measured": measured,
        "met": verdict(result["met"]),
        "met_rule": result.get("met_rule"),
        "runs": len(runs),
        "date": newest.get("date"),
        "commit": newest.get("commit"),
    }
    if seconds is not None:
        row["seconds"] = round(seconds, 1)
    return row


def write_summary(rows: list[dict[str, Any]], *, quick: bool, total_s: float | None) -> Path:
    path = RESULTS / "summary.json"
    summary = {"quick": quick, "total_s": total_s, "rows": rows, "machine": machine_info()}
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the benchmarks P1-P9.")
    parser.add_argument("--quick", action="store_true", help="smaller, faster runs")
    parser.add_argument("--only", default="", help="comma-separated ids, e.g. P1,P3")
    parser.add_argument(
        "--summary-only",
        action="store_true",
        help="run nothing: rebuild summary.json and the performance page's table from the "
        "result files",
    )
    args = parser.parse_args(argv)
    if args.summary_only:
        write_summary([summary_row(b) for b in ORDER], quick=False, total_s=None)
        write_performance_table()
        return 0
    wanted = [x.strip().upper() for x in args.only.split(",") if x.strip()] or list(MODULES)
    unknown = sorted(set(wanted) - set(MODULES))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    started = time.monotonic()
    durations: dict[str, float] = {}
    failures: dict[str, int] = {}
    for bench_id, module in MODULES.items():
        if bench_id not in wanted:
            continue
        print(f"{bench_id} ({module}){' quick' if args.quick else ''}", flush=True)
        began = time.monotonic()
        command = [PYTHON, "-m", module, *(["--quick"] if args.quick else [])]
        code = subprocess.call(command, cwd=REPO)
        durations[bench_id] = time.monotonic() - began
        if code != 0:
            failures[bench_id] = code
            print(f"{bench_id} failed with exit code {code}", flush=True)
    rows = [
        summary_row(bench_id, quick=args.quick, seconds=durations[bench_id])
        for bench_id in ORDER
        if bench_id in wanted and bench_id not in failures and bench_id in durations
    ]
    total = time.monotonic() - started
    print(f"\n{'id':3s} | {'met':5s} | {'s':>5s} | target / measured")
    for row in rows:
        print(f"{row['id']:3s} | {row['met']!s:5s} | {row['seconds']:5.0f} | {row['target']}")
        print(f"{'':3s} | {'':5s} | {'':5s} |   {row['measured']}")
    print(f"total {total:.0f} s{' (quick)' if args.quick else ''}")
    path = RESULTS / "summary.json"
    if len(wanted) < len(MODULES) and path.exists():  # keep the rows of the other benchmarks
        kept = [r for r in json.loads(path.read_text())["rows"] if r["id"] not in wanted]
        rows = sorted(kept + rows, key=lambda r: ORDER.index(r["id"]))
    write_summary(rows, quick=args.quick, total_s=total)
    if not args.quick:
        write_performance_table()
    return 1 if failures else 0


def performance_table() -> str:
    """The performance page's table, from summary.json: each figure with its date, commit,
    the runs it was decided on and the rule."""
    rows = json.loads((RESULTS / "summary.json").read_text())["rows"]
    lines = [
        "| id | target | measured (newest run) | met | runs | date | commit |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [
            row["id"].replace("_", " "),
            row["target"],
            row["measured"],
            "yes" if row["met"] else "no",
            str(row.get("runs", "")),
            (row.get("date") or "")[:10],
            f"`{row.get('commit') or ''}`",
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def write_performance_table() -> None:
    page = PERFORMANCE_PAGE.read_text()
    before, rest = page.split(TABLE_START, 1)
    _, after = rest.split(TABLE_END, 1)
    PERFORMANCE_PAGE.write_text(f"{before}{TABLE_START}\n{performance_table()}\n{TABLE_END}{after}")


if __name__ == "__main__":
    sys.exit(main())
