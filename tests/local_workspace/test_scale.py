"""P5: latency of a 4-rank trivial workload, and 200 concurrent runs (counts, not times)."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from tests.local_workspace.conftest import Workloads


def test_four_rank_workload_submit_to_success(workloads: Workloads) -> None:
    task = workloads.command_task("echo rank $POD_RANK", nodes=4)
    timings = []
    for _ in range(3):
        started = time.monotonic()
        run_id = workloads.submit(task)
        run = workloads.wait(run_id)
        timings.append(time.monotonic() - started)
        assert run["state"]["result_state"] == "SUCCESS"
        assert [workloads.logs(run_id, n) for n in range(4)] == [[f"rank {n}"] for n in range(4)]
    print(f"4-rank submit -> TERMINATED/SUCCESS: {', '.join(f'{t:.3f}s' for t in timings)}")


@pytest.mark.slow
async def test_two_hundred_concurrent_runs(local_workspace, workloads: Workloads) -> None:
    task = workloads.command_task("echo done")
    started = time.monotonic()
    limits = httpx.Limits(max_connections=20)
    headers = {"Authorization": f"Bearer {local_workspace.token}"}
    async with httpx.AsyncClient(
        base_url=local_workspace.host, headers=headers, limits=limits, timeout=60
    ) as client:

        async def one() -> dict:
            body = {"run_name": "many", "idempotency_token": uuid.uuid4().hex, "tasks": [task]}
            response = await client.post("/api/2.2/jobs/runs/submit", json=body)
            response.raise_for_status()
            run_id = response.json()["run_id"]
            while True:
                await asyncio.sleep(0.25)
                run = (await client.get("/api/2.2/jobs/runs/get", params={"run_id": run_id})).json()
                if run["state"]["life_cycle_state"] == "TERMINATED":
                    return run

        runs = await asyncio.gather(*(one() for _ in range(200)))
    elapsed = time.monotonic() - started
    results = [r["state"]["result_state"] for r in runs]
    print(f"200 concurrent runs: {results.count('SUCCESS')} SUCCESS in {elapsed:.1f}s")
    assert results.count("SUCCESS") == 200
    assert len({r["run_id"] for r in runs}) == 200
    counters = local_workspace.admin.counters()
    assert counters["runs_created"] == 200
    assert not any(code.startswith("5") for code in counters["responses"]["jobs/runs/get"])
