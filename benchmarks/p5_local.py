"""P5: the local workspace in execute mode (its own process).

- latency: a 4-rank trivial workload (``true`` on every rank), from the start of
  ``AirClient.submit_workload`` (identity, preflight, folders, uploads, submit) until the
  client sees ``TERMINATED/SUCCESS`` (polling every 20 ms); median of several runs, one at a
  time. The workspace's own start/end times of each run are recorded too.
- concurrency: 200 runs (trivial command, one node) submitted at once with the async client
  and awaited together; errors counted: failed submits, runs not ending in SUCCESS, waits
  that raised, server errors (5xx) in the workspace's counters.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks._common import fmt, median, parser_for, write_result

TARGET_LATENCY_S = 1.5
CONCURRENT = 200
FOUR_RANKS = """\
experiment_name: bench_four_ranks
compute:
  accelerator_type: GPU_1xA10
  num_accelerators: 4
command: "true"
"""
ONE_RANK = """\
experiment_name: bench_concurrent
compute:
  accelerator_type: GPU_1xA10
  num_accelerators: 1
command: "true"
"""


def latency(workspace: Any, runs: int) -> list[dict[str, Any]]:
    from air_runtime import AirClient, load_workload

    workload = load_workload(FOUR_RANKS)
    rows = []
    with AirClient(workspace.host, workspace.token) as client:
        client.whoami()  # connection and identity, outside the timing
        for i in range(runs + 1):
            started = time.perf_counter()
            submitted = client.submit_workload(workload, idempotency_token=f"bench-p5-lat-{i}")
            accepted = time.perf_counter()
            state = client.wait(submitted.run_id, poll_interval=0.02, timeout=120)
            ended = time.perf_counter()
            if i == 0:
                continue  # warm-up
            rows.append(
                {
                    "run_id": submitted.run_id,
                    "result": f"{state.life_cycle_state}/{state.result_state}",
                    "submit_s": accepted - started,
                    "total_s": ended - started,
                    "workspace_run_s": (state.end_time - state.start_time) / 1000
                    if state.end_time and state.start_time
                    else None,
                }
            )
    return rows


async def concurrent(workspace: Any, count: int) -> dict[str, Any]:
    from air_runtime import AsyncAirClient, load_workload

    workload = load_workload(ONE_RANK)
    errors: list[str] = []
    results: dict[str, int] = {}
    async with AsyncAirClient(workspace.host, workspace.token) as client:
        await client.whoami()
        started = time.perf_counter()

        async def one(i: int) -> None:
            try:
                submitted = await client.submit_workload(
                    workload, idempotency_token=f"bench-p5-many-{i}"
                )
            except Exception as exc:
                errors.append(f"submit {i}: {type(exc).__name__}: {exc}")
                return
            try:
                state = await client.wait(submitted.run_id, poll_interval=0.5, timeout=600)
            except Exception as exc:
                errors.append(f"wait {submitted.run_id}: {type(exc).__name__}: {exc}")
                return
            key = f"{state.life_cycle_state}/{state.result_state}"
            results[key] = results.get(key, 0) + 1
            if not state.is_success:
                errors.append(f"run {submitted.run_id}: {key} {state.state_message}")

        await asyncio.gather(*(one(i) for i in range(count)))
        elapsed = time.perf_counter() - started
    counters = workspace.admin.counters()
    server_errors = sum(
        n
        for responses in counters.get("responses", {}).values()
        for status, n in responses.items()
        if str(status).startswith("5") or status == "dropped"
    )
    return {
        "runs": count,
        "elapsed_s": elapsed,
        "results": results,
        "errors": len(errors) + server_errors,
        "client_errors": errors[:20],
        "server_errors": server_errors,
    }


def measure(quick: bool = False) -> dict[str, Any]:
    from air_runtime.local import start_local_workspace

    runs = 3 if quick else 7
    count = 50 if quick else CONCURRENT
    with start_local_workspace(mode="execute", in_process=False) as workspace:
        rows = latency(workspace, runs)
        many = asyncio.run(concurrent(workspace, count))
    total = median(r["total_s"] for r in rows)
    ok = all(r["result"] == "TERMINATED/SUCCESS" for r in rows)
    result = {
        "what": "local workspace, execute mode: 4-rank trivial run latency; concurrent runs",
        "inputs": {"latency_runs": runs, "concurrent_runs": count, "poll_interval_s": 0.02},
        "target": {"latency_s_max": TARGET_LATENCY_S, "concurrent_runs": CONCURRENT, "errors": 0},
        "latency_s_median": total,
        "submit_s_median": median(r["submit_s"] for r in rows),
        "workspace_run_s_median": median(
            r["workspace_run_s"] for r in rows if r["workspace_run_s"] is not None
        ),
        "latency_runs": rows,
        "concurrent": many,
        "met_detail": {
            "latency": ok and total <= TARGET_LATENCY_S,
            "concurrent": many["errors"] == 0 and count >= CONCURRENT,
        },
    }
    result["met"] = all(result["met_detail"].values())
    print(
        f"  P5 4-rank run: {fmt(total)} s submit->SUCCESS (submit {fmt(result['submit_s_median'])}"
        f" s); {count} concurrent runs: {many['errors']} errors in {fmt(many['elapsed_s'])} s "
        f"{many['results']}; target <= {TARGET_LATENCY_S:g} s, 0 errors",
        flush=True,
    )
    return result


def main(argv: list[str] | None = None) -> None:
    parser = parser_for(__doc__)
    args = parser.parse_args(argv)
    write_result("P5", measure(args.quick))


if __name__ == "__main__":
    main()
