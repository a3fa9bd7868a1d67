"""P3: the submit critical path. A 4-container workload with parameters is submitted to the
local workspace (its own process) with 50 ms of injected latency on every request.

Ours: ``AirClient.submit_workload``. Baseline: the same requests one after another (identity,
preflight, each folder, each file, submit), the way a CLI uploads files in sequence. A
recording transport notes when each request starts and ends; the number of sequential round
trips is the longest chain of requests in which each starts after the previous one ended.
The two sides alternate; medians."""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import httpx

from benchmarks._common import fmt, median, parser_for, write_result

LATENCY_MS = 50.0
TARGET_ROUND_TRIPS = 4
WORKLOAD = """\
experiment_name: bench_four_containers
compute:
  accelerator_type: GPU_1xA10
  num_accelerators: 4
env_variables:
  MODEL_ID: Qwen/Qwen2.5-0.5B-Instruct
parameters:
  learning_rate: 0.05
  epochs: 5
  batch_size: 16
  reward: {kind: exact_match, weight: 1.0}
containers:
  - name: inference
    ranks: [0]
    unity_catalog_image: main.rl.vllm:0.20.0
    command: python serve.py
  - name: trainer
    ranks: [1]
    unity_catalog_image: main.rl.trl:0.24.0
    command: python train.py
  - name: reward
    ranks: [2]
    unity_catalog_image: main.rl.reward:1.0
    command: python reward.py
  - name: evaluator
    ranks: [3]
    unity_catalog_image: main.rl.eval:1.0
    command: python evaluate.py
"""


class RecordingTransport(httpx.BaseTransport):
    """Notes (start, end, method, path) of every request, thread-safe."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.records: list[tuple[float, float, str, str]] = []
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.perf_counter()
        response = self.inner.handle_request(request)
        response.read()
        ended = time.perf_counter()
        with self._lock:
            self.records.append((started, ended, request.method, request.url.path))
        return response

    def close(self) -> None:
        self.inner.close()


def sequential_round_trips(records: list[tuple[float, float, str, str]]) -> int:
    """Length of the longest chain of requests, each starting after the previous ended."""
    ordered = sorted(records, key=lambda r: r[1])
    depth: list[int] = []
    for i, (start, _, _, _) in enumerate(ordered):
        before = [depth[j] for j in range(i) if ordered[j][1] <= start]
        depth.append(1 + max(before, default=0))
    return max(depth, default=0)


def phases(records: list[tuple[float, float, str, str]]) -> list[list[str]]:
    """Requests grouped by their position on the longest chain (for the report)."""
    ordered = sorted(records, key=lambda r: r[1])
    depth: list[int] = []
    for i, (start, _, _, _) in enumerate(ordered):
        before = [depth[j] for j in range(i) if ordered[j][1] <= start]
        depth.append(1 + max(before, default=0))
    grouped: dict[int, list[str]] = {}
    for level, (_, _, method, path) in zip(depth, ordered, strict=True):
        grouped.setdefault(level, []).append(f"{method} {_short(path)}")
    return [grouped[k] for k in sorted(grouped)]


def _short(path: str) -> str:
    for marker in ("/import-file/", "/fs/files/"):
        if marker in path:
            return path.split(marker)[0] + marker + "…/" + path.rsplit("/", 1)[-1]
    return path


def ours(
    host: str, token: str, workload: Any, idempotency_token: str, **options: Any
) -> dict[str, Any]:
    from air_runtime import AirClient

    transport = RecordingTransport()
    started = time.perf_counter()
    with AirClient(host, token, transport=transport, **options) as client:
        client.submit_workload(workload, idempotency_token=idempotency_token)
    wall = time.perf_counter() - started
    return _trial(transport, wall)


def sequential(host: str, token: str, workload: Any, idempotency_token: str) -> dict[str, Any]:
    """The same requests, one after another."""
    from urllib.parse import quote

    from air_runtime import build_plan
    from air_runtime.client._submit import PREFLIGHT_PATH, leaf_folders

    transport = RecordingTransport()
    started = time.perf_counter()
    with httpx.Client(
        base_url=host, transport=transport, headers={"Authorization": f"Bearer {token}"}
    ) as http:
        me = http.get("/api/2.0/preview/scim/v2/Me")
        me.raise_for_status()
        plan = build_plan(
            workload, user_name=me.json()["userName"], idempotency_token=idempotency_token
        )
        for body in plan.preflight_bodies:
            http.post(PREFLIGHT_PATH, json=body).raise_for_status()
        for folder in leaf_folders(plan.folders):
            http.post("/api/2.0/workspace/mkdirs", json={"path": folder}).raise_for_status()
        for item in plan.files:
            http.post(
                f"/api/2.0/workspace-files/import-file/{quote(item.path.lstrip('/'))}",
                params={"overwrite": "true"},
                content=item.content,
            ).raise_for_status()
        http.post("/api/2.2/jobs/runs/submit", json=plan.submit_body).raise_for_status()
    wall = time.perf_counter() - started
    return _trial(transport, wall)


def _trial(transport: RecordingTransport, wall: float) -> dict[str, Any]:
    transport.close()
    return {
        "wall_s": wall,
        "requests": len(transport.records),
        "round_trips": sequential_round_trips(transport.records),
        "phases": phases(transport.records),
    }


def measure(quick: bool = False) -> dict[str, Any]:
    from air_runtime import load_workload
    from air_runtime.local import start_local_workspace

    trials = 3 if quick else 5
    workload = load_workload(WORKLOAD)
    sides: dict[str, Any] = {
        "air": ours,
        "sequential": sequential,
        # what the default would give if every upload of this plan could run at once
        "air_max_concurrent_uploads_16": functools.partial(ours, max_concurrent_uploads=16),
    }
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with start_local_workspace(
        mode="simulate", in_process=False, faults={"*": {"latency_ms": LATENCY_MS}}
    ) as workspace:
        # one untimed submit per side: imports, connection setup
        for side, submit in sides.items():
            submit(workspace.host, workspace.token, workload, f"bench-p3-warm-{side}")
        for i in range(trials):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for side in order:
                token = f"bench-p3-{side}-{i}"
                results[side].append(sides[side](workspace.host, workspace.token, workload, token))
    summary: dict[str, Any] = {}
    for side, rows in results.items():
        summary[side] = {
            "round_trips_median": median(r["round_trips"] for r in rows),
            "round_trips": [r["round_trips"] for r in rows],
            "wall_s_median": median(r["wall_s"] for r in rows),
            "wall_s": [round(r["wall_s"], 4) for r in rows],
            "requests": rows[0]["requests"],
            "phases_of_first_trial": rows[0]["phases"],
        }
    mine, base = summary["air"], summary["sequential"]
    result = {
        "what": "submit of a 4-container workload with parameters, 50 ms latency per request",
        "inputs": {"latency_ms": LATENCY_MS, "trials_per_side": trials, "workload": WORKLOAD},
        "target": {"round_trips_max": TARGET_ROUND_TRIPS},
        **summary,
        "wall_ratio": mine["wall_s_median"] / base["wall_s_median"],
        "met": max(mine["round_trips"]) <= TARGET_ROUND_TRIPS,
    }
    print(
        f"  P3 AirClient: {fmt(mine['round_trips_median'])} round trips, "
        f"{fmt(mine['wall_s_median'])} s ({mine['requests']} requests); sequential: "
        f"{fmt(base['round_trips_median'])} round trips, {fmt(base['wall_s_median'])} s; "
        f"target <= {TARGET_ROUND_TRIPS}",
        flush=True,
    )
    wide = summary["air_max_concurrent_uploads_16"]
    print(
        f"     AirClient(max_concurrent_uploads=16): {fmt(wide['round_trips_median'])} round "
        f"trips, {fmt(wide['wall_s_median'])} s",
        flush=True,
    )
    return result


def main(argv: list[str] | None = None) -> None:
    parser = parser_for(__doc__)
    args = parser.parse_args(argv)
    write_result("P3", measure(args.quick))


if __name__ == "__main__":
    main()
