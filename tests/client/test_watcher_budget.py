"""The shared watcher ends a wait whose run passed its ``max_gpu_hours``, from the states
it reads anyway: many runs are followed through coalesced listings, and the budget costs
no request of its own but one runs/get per run at the moment the listed state shows it over
(that state may predate the run's end: a run that ended within budget is never called over)."""

from __future__ import annotations

import asyncio

import pytest

from air_runtime import AsyncAirClient, BudgetExceeded, RunWatcher
from tests.client.test_watcher import _submit_many

BUDGET = 0.0005  # one accelerator passes it after 1.8 s of running


async def test_budgeted_waits_end_over_budget_from_the_listings(workspace_factory):
    ws = workspace_factory(
        mode="simulate", simulate={"pending_s": 0.0, "running_s": 3600.0, "result": "SUCCESS"}
    )
    run_ids = await _submit_many(ws, 60, "budgeted")
    budgeted, free = run_ids[:40], run_ids[40:]
    async with AsyncAirClient(ws.host, ws.token) as client:
        ws.admin.reset_counters()
        watcher = RunWatcher(client, interval=0.3, budget_rps=50)
        waits = {
            r: asyncio.ensure_future(
                watcher.wait(r, timeout=120, max_gpu_hours=BUDGET if r in budgeted else None)
            )
            for r in run_ids
        }
        for run_id in budgeted:
            with pytest.raises(BudgetExceeded) as raised:
                await waits[run_id]
            assert raised.value.run_id == run_id and raised.value.used > BUDGET
            assert f"run {run_id} used " in str(raised.value)
            assert "over its budget of 0.0005 (max_gpu_hours)" in str(raised.value)
        assert not any(waits[r].done() for r in free)  # no budget, no end
        assert watcher.watched == len(free)
        requests = ws.admin.counters()["requests"]
        # Followed through listings; a run is fetched alone once, when it is seen over budget.
        assert requests.get("jobs/runs/get", 0) == len(budgeted), requests
        assert requests["jobs/runs/list"] + len(budgeted) == watcher.requests, requests
        for run_id in run_ids:
            await client.cancel(run_id)
        states = await asyncio.gather(*(waits[r] for r in free))
        assert {s.result_state for s in states} == {"CANCELED"}
