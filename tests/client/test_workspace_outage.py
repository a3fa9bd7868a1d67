"""A workspace that answered and goes away is waited out: the local workspace stops answering
(``hang``) or refuses connections (``refuse``) for a while, its ranks running on; the shared
watcher's waits end with every run's true end after it returns, each waiter told once each
way, with one probe for all of them in between and the event loop free throughout."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

import httpx
import pytest

from air_runtime import (
    AsyncAirClient,
    RetryPolicy,
    RunWatcher,
    WorkspaceNotice,
    build_plan,
    load_workload,
)

# Each test waits out an outage of several seconds (the HTTP side of an outage is in
# tests/local_workspace/test_outage.py, fast).
pytestmark = pytest.mark.slow

OUTAGE_S = 15.0
RUNS = 50
# The watcher's request bound (10 s by default), shorter so an outage is told within seconds.
REQUEST_TIMEOUT_S = 3.0
# The promise: each run's end seen within this long of the workspace's return.
END_SEEN_WITHIN_S = 30.0


def _workload(name: str, command: str):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": command,
        }
    )


async def _until(predicate, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def _held(counters: dict) -> int:
    return sum(r.get("outage", 0) for r in counters["responses"].values())


@pytest.mark.parametrize("mode", ["hang", "refuse"])
async def test_waiters_wait_out_an_outage_and_see_every_end(workspace_factory, tmp_path, mode):
    ws = workspace_factory()
    marker = tmp_path / "go"
    workload = _workload("outage", f"while [ ! -e {marker} ]; do sleep 1; done; echo done")
    async with AsyncAirClient(ws.host, ws.token) as client:
        limit = asyncio.Semaphore(10)

        async def submit(i: int) -> int:
            async with limit:
                return (
                    await client.submit_workload(workload, idempotency_token=f"{mode}-{i}")
                ).run_id

        run_ids = await asyncio.gather(*(submit(i) for i in range(RUNS)))
        watcher = RunWatcher(client, interval=1.0)
        watcher.request_timeout = REQUEST_TIMEOUT_S
        heard: dict[int, list[WorkspaceNotice]] = {run_id: [] for run_id in run_ids}
        seen: dict[int, str] = {}
        ended_seen: dict[int, float] = {}
        requests_at_return: list[int] = []

        def hear(run_id: int):
            def on_workspace(notice: WorkspaceNotice) -> None:
                heard[run_id].append(notice)
                if notice.reachable and not requests_at_return:
                    requests_at_return.append(watcher.requests)

            return on_workspace

        async def wait(run_id: int):
            state = await watcher.wait(
                run_id,
                timeout=300,
                on_update=lambda s: seen.__setitem__(run_id, s.life_cycle_state),
                on_workspace=hear(run_id),
            )
            ended_seen[run_id] = time.time()
            return state

        waits = [asyncio.create_task(wait(run_id)) for run_id in run_ids]
        try:
            await _until(lambda: sum(s == "RUNNING" for s in seen.values()) == RUNS, "RUNNING runs")
        except AssertionError:
            lagging = [r for r in run_ids if seen.get(r) != "RUNNING"]
            truth = {r: (await client.get_run(r)).life_cycle_state for r in lagging}
            raise AssertionError(
                f"seen {dict((r, seen.get(r)) for r in lagging)}; the workspace: {truth}; "
                f"watcher requests {watcher.requests}"
            ) from None

        await asyncio.to_thread(ws.admin.reset_counters)
        before = watcher.requests
        await asyncio.to_thread(ws.admin.outage, OUTAGE_S, mode)
        marker.touch()  # the ranks end while nobody is answered
        returned = await asyncio.to_thread(ws.admin.wait_outage_end, 120.0)
        states = await asyncio.wait_for(asyncio.gather(*waits), 120)

    assert [s.result_state for s in states] == ["SUCCESS"] * RUNS  # no wait ended in error
    assert all(s.end_time is not None and s.end_time / 1000 < returned for s in states), (
        "every run ended during the outage"
    )
    late = max(ended_seen.values()) - returned
    assert late <= END_SEEN_WITHIN_S, f"the last end was seen {late:.1f} s after the return"
    for run_id, notices in heard.items():  # each waiter told once each way
        assert [n.reachable for n in notices] == [False, True], (run_id, notices)
    down, back = heard[run_ids[0]]
    assert "unreachable since" in down.message and "runs keep going, waiting" in down.message
    assert ws.host.removeprefix("http://") in down.message
    assert back.message.startswith(f"workspace {ws.host.removeprefix('http://')} reachable again")
    assert watcher.outages == 1
    # No storm: all waiters shared one probe (1, 2, 4, 8 s apart) while it was down.
    sent_while_down = requests_at_return[0] - before
    assert sent_while_down <= 12, sent_while_down
    counters = ws.admin.counters()
    if mode == "hang":  # refused connections never reach the workspace's counters
        assert 1 <= _held(counters) <= 12, counters
    print(
        f"{mode}: told after {down.since - (returned - OUTAGE_S):+.1f} s, return seen after "
        f"{back.down_s:.1f} s down, last end {late:.1f} s after the return, "
        f"{sent_while_down} watcher requests while down ({watcher.probes} probes), "
        f"held {_held(counters)}"
    )


async def test_a_stage_wait_goes_on_through_an_outage(workspace_factory, tmp_path):
    """A workflow stage's wait (its own runs/get within the budget) through a refused
    workspace: told once each way, its stage's end seen after the return."""
    from air_runtime import Stage

    ws = workspace_factory()
    marker = tmp_path / "go"
    async with AsyncAirClient(ws.host, ws.token) as client:
        submitted = await client.submit_workload(
            [
                Stage("train", _workload("train", f"while [ ! -e {marker} ]; do sleep 0.5; done")),
                Stage("later", _workload("later", "sleep 60"), depends_on=("train",)),
            ],
            run_name="stages",
        )
        watcher = RunWatcher(client, interval=0.5)
        watcher.request_timeout = REQUEST_TIMEOUT_S
        heard: list[WorkspaceNotice] = []
        running: list[bool] = []
        wait = asyncio.create_task(
            watcher.wait(
                submitted.run_id,
                task_key="train",
                timeout=180,
                on_update=lambda s: running.append(s.life_cycle_state == "RUNNING"),
                on_workspace=heard.append,
            )
        )
        await _until(lambda: any(running), "the stage running")
        await asyncio.to_thread(ws.admin.outage, 8.0, "refuse")
        marker.touch()
        returned = await asyncio.to_thread(ws.admin.wait_outage_end, 120.0)
        state = await asyncio.wait_for(wait, 120)
        seen = time.time()
        await client.cancel(submitted.run_id)
    assert state.stage("train").result_state == "SUCCESS"
    assert seen - returned <= END_SEEN_WITHIN_S
    assert [n.reachable for n in heard] == [False, True]
    assert watcher.outages == 1


# A process that never heard from the workspace (a triggerer started during the outage):
# the client fails such a host within seconds (WorkspaceUnreachable), and the watcher takes
# that for the outage it is, since the run exists.
_FRESH_WAITER = """
import asyncio, json, os, sys
from air_runtime import AsyncAirClient, RunWatcher

async def main():
    async with AsyncAirClient(sys.argv[1], os.environ["OUTAGE_TEST_TOKEN"]) as client:
        watcher = RunWatcher(client, interval=0.5)
        watcher.request_timeout = 3.0
        heard = lambda n: print(json.dumps({"reachable": n.reachable, "cause": n.cause}), flush=True)
        state = await watcher.wait(int(sys.argv[2]), timeout=120, on_workspace=heard)
        print(json.dumps({"result": state.result_state}), flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["hang", "refuse"])
async def test_a_waiter_that_starts_during_an_outage_waits_it_out(
    workspace_factory, tmp_path, mode
):
    ws = workspace_factory()
    marker = tmp_path / "go"
    async with AsyncAirClient(ws.host, ws.token) as client:
        run_id = (
            await client.submit_workload(
                _workload("fresh", f"while [ ! -e {marker} ]; do sleep 0.5; done")
            )
        ).run_id
    await asyncio.to_thread(ws.admin.outage, 10.0, mode)
    waiter = subprocess.Popen(
        [sys.executable, "-c", _FRESH_WAITER, ws.host, str(run_id)],
        stdout=subprocess.PIPE,
        env={**os.environ, "OUTAGE_TEST_TOKEN": ws.token},
        text=True,
    )
    try:
        marker.touch()
        await asyncio.to_thread(ws.admin.wait_outage_end, 120.0)
        out, _ = await asyncio.to_thread(waiter.communicate, timeout=120)
    finally:
        if waiter.poll() is None:
            waiter.kill()
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1] == {"result": "SUCCESS"}, lines
    notices = lines[:-1]
    assert [n["reachable"] for n in notices] == [False, True], notices
    expected = "connection refused" if mode == "refuse" else "no answer"
    assert notices[0]["cause"].startswith(expected), notices


async def _submit_simulated(ws, count: int, name: str) -> list[int]:
    """Runs created straight through runs/submit (setup only: simulate mode needs no files)."""
    body = build_plan(
        _workload(name, "true"), user_name="local-user@example.com", idempotency_token="x"
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


async def test_loop_lag_with_200_waiters_through_an_outage(workspace_factory):
    """p99 of how late a 10 ms sleep wakes up (as benchmarks/p12_probe.py samples it) while
    200 waiters wait out an outage: requests time out on the loop, nothing blocks it. The
    workspace is a subprocess, so its own threads take nothing from this loop."""
    ws = workspace_factory(
        in_process=False,
        mode="simulate",
        simulate={"pending_s": 0.5, "running_s": 3600, "result": "SUCCESS"},
    )
    run_ids = await _submit_simulated(ws, 200, "lag")
    async with AsyncAirClient(ws.host, ws.token) as client:
        watcher = RunWatcher(client, interval=1.0)
        watcher.request_timeout = REQUEST_TIMEOUT_S
        told: list[WorkspaceNotice] = []
        seen: set[int] = set()
        waits = [
            asyncio.create_task(
                watcher.wait(
                    run_id,
                    on_update=lambda s: seen.add(s.run_id),
                    on_workspace=told.append,
                )
            )
            for run_id in run_ids
        ]
        await _until(lambda: len(seen) == len(run_ids), "every run seen")
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(ws.admin.outage, OUTAGE_S, "hang")
        over = asyncio.ensure_future(asyncio.to_thread(ws.admin.wait_outage_end, 120.0))
        lags: list[float] = []
        while not over.done():
            before = loop.time()
            await asyncio.sleep(0.01)
            lags.append(loop.time() - before - 0.01)
        await over
        await _until(lambda: len(told) == 2 * len(run_ids), "every waiter told it is back")
        assert not any(w.done() for w in waits)  # no wait ended
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        await watcher.aclose()
    assert sum(not n.reachable for n in told) == len(run_ids)
    p99 = statistics.quantiles(lags, n=100)[98]
    print(f"loop lag during the outage: p99 {p99 * 1000:.1f} ms, max {max(lags) * 1000:.1f} ms")
    assert p99 <= 0.020


async def test_a_submit_waits_out_an_outage_and_makes_one_run(workspace_factory):
    """A waiter's own request that is safe to repeat (a submit with its idempotency token)
    sent again once the workspace answers: one run. The client here gives up at once (one
    attempt), as the client does for a host it never heard from, so the watcher's wait is
    what carries the submit through."""
    ws = workspace_factory()
    async with AsyncAirClient(ws.host, ws.token, retry=RetryPolicy(max_attempts=1)) as client:
        user = (await client.whoami()).user_name
        plan = build_plan(
            _workload("submit_outage", "echo submitted"),
            user_name=user,
            idempotency_token="outage-submit",
        )
        watcher = RunWatcher(client, interval=0.5)
        heard: list[WorkspaceNotice] = []
        await asyncio.to_thread(ws.admin.reset_counters)
        await asyncio.to_thread(ws.admin.outage, 5.0, "refuse")
        submitted = await asyncio.wait_for(
            watcher.through_outages(lambda: client.submit(plan), on_workspace=heard.append), 90
        )
        state = await watcher.wait(submitted.run_id, timeout=60)
    assert state.result_state == "SUCCESS"
    counters = ws.admin.counters()
    assert counters["runs_created"] == 1
    assert counters["submits_per_token"] == {"outage-submit": 1}
    assert [n.reachable for n in heard] == [False, True]
    # The open connection closed, or a new one refused.
    assert heard[0].cause in ("connection lost", "connection refused", "cannot connect"), heard[0]
