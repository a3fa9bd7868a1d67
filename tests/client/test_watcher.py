"""RunWatcher against the local workspace in simulate mode: many waiters, few requests."""

from __future__ import annotations

import asyncio
import contextvars
import time
from urllib.parse import parse_qs

import httpx
import pytest

from air_runtime import AsyncAirClient, LineBudget, RunWatcher, build_plan, load_workload
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
    # The ends come from listings (completed entries are final states), not a get per run.
    # A few runs left at the tail are cheaper read one by one (``_prefers_list``), more of
    # them on a loaded machine, where sweeps come later: a tenth of the runs at most.
    assert requests.get("jobs/runs/get", 0) < WAITERS / 10, requests
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


async def test_sweep_finds_each_end_once_from_completed_listings(workspace_factory):
    """Many watched runs: ends are learnt from start-time segments of completed runs, with
    the listed entry as the final state (no runs/get); a run that ended long before the
    watcher started is found too; every end reaches its waiter once."""
    ws = workspace_factory(
        mode="simulate", simulate={"pending_s": 0.0, "running_s": 0.0, "result": "SUCCESS"}
    )
    (old,) = await _submit_many(ws, 1, "ended-long-ago")
    async with AsyncAirClient(ws.host, ws.token) as client:
        while not (await client.get_run(old)).is_terminal:
            await asyncio.sleep(0.05)
        ws.admin.set_simulation(running_s=3600)
        waiting = await _submit_many(ws, 80, "sweep")
        ws.admin.reset_counters()
        counted_since = time.time()  # the request log's clock: what the counters count
        watcher = RunWatcher(client, interval=0.3, budget_rps=50)
        watching_since = time.monotonic()
        terminal_updates: dict[int, int] = {}

        def on_update(state) -> None:
            if state.is_terminal:
                terminal_updates[state.run_id] = terminal_updates.get(state.run_id, 0) + 1

        waits = {
            run_id: asyncio.ensure_future(watcher.wait(run_id, timeout=60, on_update=on_update))
            for run_id in [old, *waiting]
        }
        assert (await waits[old]).is_success
        # Two waves of ends, each between sweeps: the first wave while the rest still run.
        first, rest = waiting[:30], waiting[30:]
        for wave in (first, rest):
            # The watcher has swept again since the last wave (or its start), not a fixed pause.
            swept = watcher.requests
            async with asyncio.timeout(60):
                while watcher.requests == swept:
                    await asyncio.sleep(0.05)
            for run_id in wave:
                await client.cancel(run_id)
            states = await asyncio.gather(*(waits[r] for r in wave))
            assert {s.result_state for s in states} == {"CANCELED"}
            assert all(s.end_time and s.tasks for s in states)
            if wave is first:
                assert not any(waits[r].done() for r in rest)
        assert watcher.watched == 0
        watched_for = time.monotonic() - watching_since
    requests = ws.admin.counters()["requests"]
    # Ends are learnt from listings. A runs/get only confirms an end a listing showed (a run
    # missing from the active ones, or the run that ended before the watcher started), when
    # one get is cheaper than a listing for one or two: how many depends on where a sweep
    # falls among a wave's cancels, but no run is ever fetched before it ended, or twice.
    log = [
        e
        for e in ws.admin.request_log(limit=10_000)
        if e["time"] >= counted_since and e["path"].endswith(("runs/get", "runs/cancel"))
    ]
    cancelled = iter([*first, *rest])  # the order the test cancelled them in
    ended = {old}
    fetched: list[int] = []
    for entry in log:
        if entry["path"].endswith("runs/cancel"):
            ended.add(next(cancelled))
            continue
        run_id = int(parse_qs(entry["query"])["run_id"][0])
        assert run_id in ended, f"run {run_id} was fetched before it ended ({len(fetched)} before)"
        fetched.append(run_id)
    assert len(fetched) == len(set(fetched)) == requests.get("jobs/runs/get", 0), fetched
    assert len(fetched) < len(waiting) // 10, requests  # a few confirmations, not per-run polling
    assert requests["jobs/runs/list"] + requests.get("jobs/runs/get", 0) == watcher.requests
    # Listings come as often as the young runs ask, within the budget: how many depends on
    # how long the machine took, the budget does not (a burst of one second at most).
    assert requests["jobs/runs/list"] <= 50 * (watched_for + 1), (requests, watched_for)
    assert all(count == 1 for count in terminal_updates.values()), terminal_updates
    assert set(terminal_updates) == {old, *waiting}


async def test_each_waiter_hears_its_run_in_its_own_context(workspace_factory):
    """The poller task serves every waiter; each on_update still runs in the context of the
    task that waits (orchestrators route log lines by it), whichever waiter started the poller
    and whatever context the poller itself was created in."""
    ws = workspace_factory(
        mode="simulate", simulate={"pending_s": 0.5, "running_s": 1.0, "result": "SUCCESS"}
    )
    run_ids = await _submit_many(ws, 4, "contexts")
    owner: contextvars.ContextVar[int] = contextvars.ContextVar("owner")
    heard: dict[int, set[int]] = {run_id: set() for run_id in run_ids}
    async with AsyncAirClient(ws.host, ws.token) as client:
        watcher = RunWatcher(client, interval=1.0)

        async def wait_as_owner(run_id: int) -> None:
            owner.set(run_id)

            def on_update(state) -> None:
                heard[state.run_id].add(owner.get(-1))

            await watcher.wait(run_id, timeout=60, on_update=on_update)

        # Each waiter is its own task with its own copy of the context, as a trigger is.
        await asyncio.gather(*(asyncio.create_task(wait_as_owner(r)) for r in run_ids))

    for run_id in run_ids:
        assert heard[run_id] == {run_id}, heard


async def _submit_real(client: AsyncAirClient, name: str, command: str) -> int:
    workload = load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 2},
            "max_retries": 0,
            "command": command,
        }
    )
    return (await client.submit_workload(workload)).run_id


async def test_live_lines_reach_the_waiter_while_the_run_runs(local_workspace):
    """on_lines hears every node's new lines while the run is RUNNING (not at its end),
    each line once, labelled with node and attempt, in the waiter's own context."""
    owner: contextvars.ContextVar[str] = contextvars.ContextVar("owner")
    batches: list[tuple[list, bool, bool, str]] = []
    async with AsyncAirClient(local_workspace.host, local_workspace.token) as client:
        run_id = await _submit_real(
            client,
            "live",
            'for i in 1 2 3 4 5 6 7 8; do echo "rank $POD_RANK line $i"; sleep 0.7; done\n'
            "sleep 3\n",
        )
        watcher = RunWatcher(client, interval=0.5, lines=LineBudget(interval=0.5))
        state_seen: list[str] = []

        def on_update(state) -> None:
            state_seen.append(state.life_cycle_state)

        def on_lines(records, passed_over) -> None:
            ended = bool(state_seen) and state_seen[-1] == "TERMINATED"
            batches.append((list(records), passed_over, ended, owner.get("")))

        async def wait() -> object:
            owner.set("the waiter")
            return await watcher.wait(run_id, timeout=90, on_update=on_update, on_lines=on_lines)

        final = await asyncio.create_task(wait())
    assert final.is_success
    lines = [(r.node_index, r.attempt, r.body) for batch in batches for r in batch[0]]
    expected = {(node, 0, f"rank {node} line {i}") for node in (0, 1) for i in range(1, 9)}
    assert expected <= set(lines), lines
    assert len(lines) == len(set(lines)), "a line was delivered twice"
    # Lines came in several reads while the run was still running, in the waiter's context.
    assert len(batches) >= 2 and not batches[0][2], batches
    assert {b[3] for b in batches} == {"the waiter"}
    assert watcher.line_requests >= 2 and watcher.line_requests <= watcher.requests


async def test_a_wait_taken_over_shows_only_the_lines_after_those_shown(local_workspace, tmp_path):
    """A waiter in another process (a new watcher and client) that takes a wait over with what
    the first one showed (``lines_shown``, per ``LogRecord.stream``) hears only newer lines:
    the first 'before' lines once in all, every 'after' line, none twice."""
    release, end = tmp_path / "release", tmp_path / "end"
    # The run ends only once the takeover has shown 'after 5': lines printed just before a
    # run's end are the end copy's to show, not the live reads'.
    command = (
        'for i in 1 2 3 4 5; do echo "before $i"; done\n'
        f'while [ ! -e "{release}" ]; do sleep 0.1; done\n'
        'for i in 1 2 3 4 5; do echo "after $i"; sleep 0.2; done\n'
        f'while [ ! -e "{end}" ]; do sleep 0.1; done\n'
    )
    first: list = []
    async with AsyncAirClient(local_workspace.host, local_workspace.token) as client:
        run_id = await _submit_real(client, "takeover", command)
        watcher = RunWatcher(client, interval=0.5, lines=LineBudget(interval=0.5))
        seen_all = asyncio.Event()

        def on_first(records, passed_over) -> None:
            first.extend(records)
            if [r.body for r in first if r.node_index == 0][-1:] == ["before 5"]:
                seen_all.set()

        waiting = asyncio.create_task(watcher.wait(run_id, timeout=90, on_lines=on_first))
        await asyncio.wait_for(seen_all.wait(), 60)
        waiting.cancel()  # the first waiter's process is gone
        with pytest.raises(asyncio.CancelledError):
            await waiting
    shown: dict[str, int] = {}
    for record in first:
        shown[record.stream] = max(shown.get(record.stream, 0), record.time_unix_nano)
    assert "takeover/0/0" in shown, shown

    second: list = []
    async with AsyncAirClient(local_workspace.host, local_workspace.token) as client:
        watcher = RunWatcher(client, interval=0.5, lines=LineBudget(interval=0.5))

        def on_second(records, passed_over) -> None:
            second.extend(records)
            if any(r.body == "after 5" for r in records):
                end.touch()

        waiting = asyncio.create_task(
            watcher.wait(run_id, timeout=90, on_lines=on_second, lines_shown=shown)
        )
        # Released once the takeover has read both nodes' streams: a reading that started
        # from the beginning would show the 'before' lines again then.
        deadline = time.monotonic() + 60
        while watcher.line_requests < 2:
            assert not waiting.done() and time.monotonic() < deadline, watcher.line_requests
            await asyncio.sleep(0.05)
        release.touch()
        final = await waiting
    assert final.is_success, final.describe()
    both = [(r.node_index, r.body) for r in first + second]
    assert len(both) == len(set(both)), both
    assert not [r for r in second if r.body.startswith("before") and r.node_index == 0], second
    assert [r.body for r in second if r.node_index == 0] == [f"after {i}" for i in range(1, 6)]


async def test_live_lines_keep_the_newest_when_a_read_has_no_room(local_workspace):
    """A read brings at most lines_per_read lines: the newest, and says older ones were
    passed over."""
    batches: list[tuple[list, bool]] = []
    async with AsyncAirClient(local_workspace.host, local_workspace.token) as client:
        run_id = await _submit_real(
            client, "chatty", 'for i in $(seq 1 40); do echo "burst $i"; done\nsleep 6\n'
        )
        watcher = RunWatcher(client, interval=0.5, lines=LineBudget(interval=0.5, lines_per_read=3))
        await watcher.wait(
            run_id, timeout=90, on_lines=lambda records, over: batches.append((list(records), over))
        )
    node0 = [(b, over) for b, over in batches if b and b[0].node_index == 0]
    first, passed_over = node0[0]
    assert [r.body for r in first] == ["burst 38", "burst 39", "burst 40"]
    assert passed_over


async def test_other_reads_yield_to_line_reads_that_fall_behind(local_workspace):
    """More running runs than the budget reads every interval: the line reads fall behind and
    the waiters' own reads and the progress reads drop to BEHIND_SHARE; once the reads keep up
    again (runs cancelled), both get their shares back."""
    from air_runtime._request_budget import ASIDE_SHARE, BEHIND_SHARE

    budget = 2.0
    async with AsyncAirClient(local_workspace.host, local_workspace.token) as client:
        run_ids = [
            await _submit_real(client, f"behind-{i}", 'while :; do echo "tick"; sleep 0.5; done\n')
            for i in range(6)
        ]
        watcher = RunWatcher(
            client, interval=1.0, budget_rps=budget, lines=LineBudget(interval=2.0)
        )
        waits = [
            asyncio.ensure_future(
                watcher.wait(run_id, timeout=180, on_lines=lambda records, over: None)
            )
            for run_id in run_ids
        ]

        async def until(behind: bool) -> None:
            async with asyncio.timeout(120):
                while watcher.lines_behind is not behind:
                    await asyncio.sleep(0.1)

        try:
            # 6 runs of 2 nodes read every 2 s want 6 req/s of a 2 req/s budget.
            await until(True)
            assert watcher.budget.aside_rate == pytest.approx(budget * BEHIND_SHARE)
            assert watcher.budget.progress_rate == pytest.approx(budget * BEHIND_SHARE)
            for run_id in run_ids[1:]:
                await client.cancel(run_id)
            # One run of 2 nodes read every 2 s: 1 req/s, on time.
            await until(False)
            assert watcher.budget.aside_rate == pytest.approx(budget * ASIDE_SHARE)
            assert watcher.budget.progress_rate == pytest.approx(
                budget * watcher.lines.progress_share
            )
        finally:
            await client.cancel(run_ids[0])
            await asyncio.gather(*waits, return_exceptions=True)
            await watcher.aclose()


async def test_reads_waiting_aside_slow_down_as_soon_as_line_reads_fall_behind():
    """Link reads already waiting for their share (hundreds queue when a sweep starts) take
    the lower share from the moment line reads fall behind, not after their old turn."""
    from air_runtime._request_budget import ASIDE_SHARE, BEHIND_SHARE, Lane

    async with AsyncAirClient("http://127.0.0.1:9", "unused-token") as client:
        watcher = RunWatcher(client, budget_rps=10.0)
        done: list[float] = []

        async def link_read() -> None:
            await watcher.budget.admit(Lane.ASIDE)
            done.append(time.monotonic())

        reads = [asyncio.ensure_future(link_read()) for _ in range(30)]
        async with asyncio.timeout(60):
            while len(done) < 2:  # the share's pace: 2 req/s
                await asyncio.sleep(0.05)
        watcher.budget.fall_behind(True)
        assert watcher.budget.aside_rate == pytest.approx(10.0 * BEHIND_SHARE)
        before, since = len(done), time.monotonic()
        # At 0.2 req/s: a token's worth plus one already past the share come at once, the
        # third read a whole interval (5 s) later; the reservations made at the old 2 req/s
        # would have let it through within 1.5 s. A loaded machine only makes it later.
        async with asyncio.timeout(60):
            while len(done) < before + 3:
                await asyncio.sleep(0.05)
        third = done[before + 2] - since
        assert third >= 0.9 / (10.0 * BEHIND_SHARE), (third, done[before:])
        watcher.budget.fall_behind(False)
        assert watcher.budget.aside_rate == pytest.approx(10.0 * ASIDE_SHARE)
        async with asyncio.timeout(60):
            await asyncio.gather(*reads)
        assert len(done) == 30
        await watcher.aclose()


async def test_a_run_that_starts_late_is_heard_starting_while_the_watcher_lists(
    workspace_factory, tmp_path
):
    """Four runs on a pool with room for three: the fourth waits for capacity while the
    watcher lists the runs (and, none having ended, prices them on the completed side,
    which tells only ends). Once the first ends, the fourth starts: its waiter hears it
    RUNNING while the others still run."""
    ws = workspace_factory(
        gpu_pools=[{"pool_id": "pool-3", "accelerator_type": "GPU_1xA10", "accelerator_count": 3}]
    )
    seen: dict[int, str] = {}
    async with AsyncAirClient(ws.host, ws.token) as client:
        run_ids = []
        for i in range(4):
            workload = load_workload(
                {
                    "experiment_name": f"late_{i}",
                    "compute": {
                        "accelerator_type": "GPU_1xA10",
                        "num_accelerators": 1,
                        "pool_id": "pool-3",
                    },
                    "max_retries": 0,
                    "command": f"while [ ! -e {tmp_path / str(i)} ]; do sleep 0.1; done",
                }
            )
            run_ids.append((await client.submit_workload(workload)).run_id)
        watcher = RunWatcher(client, interval=0.5)
        waits = [
            asyncio.create_task(
                watcher.wait(
                    run_id,
                    timeout=120,
                    on_update=lambda s, run_id=run_id: seen.__setitem__(run_id, s.life_cycle_state),
                )
            )
            for run_id in run_ids
        ]

        async def until(what: str, predicate) -> None:
            deadline = time.monotonic() + 60
            while not predicate():
                assert time.monotonic() < deadline, f"{what}: {seen}"
                await asyncio.sleep(0.05)

        late = run_ids[3]
        await until(
            "three running, one waiting",
            lambda: [seen.get(r) for r in run_ids] == ["RUNNING"] * 3 + ["PENDING"],
        )
        (tmp_path / "0").touch()
        await until("the first ended", lambda: seen.get(run_ids[0]) == "TERMINATED")
        await until("the late run heard running", lambda: seen.get(late) == "RUNNING")
        for i in range(1, 4):
            (tmp_path / str(i)).touch()
        states = await asyncio.wait_for(asyncio.gather(*waits), 60)
    assert all(s.is_success for s in states), [s.describe() for s in states]
