"""RunWatcher against the local workspace in simulate mode: many waiters, few requests."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from air_runtime import AsyncAirClient, RunWatcher, build_plan, load_workload
from air_runtime._errors import RunTimeout

WAITERS = 500
BUDGET_RPS = 10.0


async def _submit_many(ws, count: int, name: str) -> list[int]:
    """Runs created straight through runs/submit (setup only: simulate mode needs no files)."""
    workload = load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": "true",
        }
    )
    body = build_plan(
        workload, user_name="local-user@example.com", idempotency_token="x"
    ).submit_body
    limit = asyncio.Semaphore(50)
    async with httpx.AsyncClient(
        base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=60
    ) as http:

        async def one(i: int) -> int:
            async with limit:
                response = await http.post(
                    "/api/2.2/jobs/runs/submit", json={**body, "idempotency_token": f"{name}-{i}"}
                )
                response.raise_for_status()
                return int(response.json()["run_id"])

        return await asyncio.gather(*(one(i) for i in range(count)))


@pytest.mark.slow
async def test_500_waiters_share_one_poller_within_the_budget(workspace_factory):
    ws = workspace_factory(
        mode="simulate", simulate={"pending_s": 1.0, "running_s": 6.0, "result": "SUCCESS"}
    )
    run_ids = await _submit_many(ws, WAITERS, "many")
    ws.admin.reset_counters()
    client = AsyncAirClient(ws.host, ws.token)
    watcher = RunWatcher(client, interval=1.0, budget_rps=BUDGET_RPS)
    updates = 0

    def on_update(_state) -> None:
        nonlocal updates
        updates += 1

    started = time.monotonic()
    states = await asyncio.gather(
        *(watcher.wait(run_id, timeout=120, on_update=on_update) for run_id in run_ids)
    )
    elapsed = time.monotonic() - started
    await client.aclose()

    assert all(s.is_success for s in states)
    assert [s.run_id for s in states] == run_ids
    requests = ws.admin.counters()["requests"]
    total = sum(requests.values())
    print(
        f"\n{WAITERS} waiters: {total} requests in {elapsed:.1f}s "
        f"({total / elapsed:.2f} req/s, budget {BUDGET_RPS}); by endpoint {requests}; "
        f"{updates} state updates delivered"
    )
    assert total == watcher.requests
    # Requests are spaced by the token bucket: the budget holds over the whole wait.
    assert total <= BUDGET_RPS * elapsed + 1
    # Coalesced: far fewer requests than one per run, let alone one per run per interval.
    assert total < WAITERS / 2
    assert watcher.watched == 0


async def test_waiters_on_the_same_run_share_its_polls(workspace_factory):
    ws = workspace_factory(mode="simulate", simulate={"pending_s": 0.0, "running_s": 1.5})
    (run_id,) = await _submit_many(ws, 1, "one")
    ws.admin.reset_counters()
    async with AsyncAirClient(ws.host, ws.token) as client:
        watcher = RunWatcher(client, interval=0.3)
        states = await asyncio.gather(*(watcher.wait(run_id) for _ in range(50)))
    assert {s.result_state for s in states} == {"SUCCESS"}
    gets = ws.admin.counters()["requests"].get("jobs/runs/get", 0)
    assert gets <= 12  # ~1.5 s / 0.3 s polls, not 50 waiters' worth


async def test_deadline_raises_run_timeout_and_unregisters(workspace_factory):
    ws = workspace_factory(mode="simulate", simulate={"pending_s": 0.0, "running_s": 60})
    (run_id,) = await _submit_many(ws, 1, "long")
    async with AsyncAirClient(ws.host, ws.token) as client:
        watcher = RunWatcher(client, interval=0.2)
        try:
            await watcher.wait(run_id, deadline=time.time() + 0.6)
        except RunTimeout as error:
            assert error.run_id == run_id
        else:
            raise AssertionError("expected RunTimeout")
        assert watcher.watched == 0
        await client.cancel(run_id)


async def test_shared_watcher_is_one_per_workspace_and_loop(workspace_factory):
    ws = workspace_factory()
    first = RunWatcher.shared(ws.host, ws.token)
    assert RunWatcher.shared(ws.host, ws.token) is first
    assert RunWatcher.shared(ws.host, "another-token") is not first
    await first.aclose()


async def test_a_stage_ends_before_its_run(local_workspace):
    """RunWatcher.wait(task_key=...): the stage's own end, read through the watcher's
    budget, while the run's next stage still runs."""
    from air_runtime import Stage

    def workload(name: str, command: str):
        return load_workload(
            {
                "experiment_name": name,
                "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                "command": command,
            }
        )

    async with AsyncAirClient(local_workspace.host, local_workspace.token) as client:
        submitted = await client.submit_workload(
            [
                Stage("quick", workload("quick", "echo done")),
                Stage("slow", workload("slow", "sleep 30"), depends_on=("quick",)),
            ],
            run_name="stages",
        )
        watcher = RunWatcher(client, interval=0.2)
        state = await watcher.wait(submitted.run_id, task_key="quick", timeout=25)
        assert state.has_ended("quick") and not state.is_terminal
        assert state.stage("quick").result_state == "SUCCESS"
        try:
            await watcher.wait(submitted.run_id, task_key="slow", timeout=0.5)
        except RunTimeout as timeout:
            assert "stage slow" in str(timeout)
        else:
            raise AssertionError("the slow stage cannot have ended")
        await client.cancel(submitted.run_id)
        assert watcher.requests >= 2
