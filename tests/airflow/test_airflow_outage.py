"""Deferred tasks through a workspace outage, in Airflow's real ``TriggerRunner``: the
workspace stops answering (every request held, as behind a dead load balancer) while two
triggers wait on running runs and a third submits its plan (``submit_in_triggerer``). Each
trigger's own log (the task's log: the triggerer routes a line by the ``trigger_id`` bound
to the trigger's context) says once that the workspace is unreachable since when and once
that it is back; every trigger yields its run's success after the return; one submit."""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from air_runtime import AirClient, Submission, SubmissionKey, load_workload

OUTAGE_S = 25.0
END_SEEN_WITHIN_S = 30.0


def _workload(name: str, command: str):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": command,
        }
    )


def _running(workspace, run_id: int) -> bool:
    with AirClient(workspace.host, workspace.token) as client:
        return client.get_run(run_id).life_cycle_state == "RUNNING"


async def _until(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(predicate):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def _through_an_outage(workspace, triggers, planned, marker) -> tuple[dict, float]:
    """Run ``triggers`` in one TriggerRunner, take the workspace away once they all wait,
    add ``planned`` (a trigger that submits) during the outage, end the runs during it;
    answers each trigger's event and the time it was yielded, and the outage's end."""
    from airflow.jobs.triggerer_job_runner import TriggerRunner

    runner = TriggerRunner()
    tasks: dict[int, asyncio.Task] = {}

    def start(trigger_id: int, trigger) -> None:
        runner.triggers[trigger_id] = {
            "task": None,
            "name": "air",
            "events": 0,
            "is_watcher": False,
        }
        tasks[trigger_id] = asyncio.create_task(runner.run_trigger(trigger_id, trigger))
        runner.triggers[trigger_id]["task"] = tasks[trigger_id]

    for trigger_id, trigger in triggers.items():
        start(trigger_id, trigger)
    served = await asyncio.to_thread(lambda: sum(workspace.admin.counters()["requests"].values()))
    await _until(
        lambda: sum(workspace.admin.counters()["requests"].values()) > served + 2 * len(triggers),
        "the triggers' first polls",
    )
    await asyncio.to_thread(workspace.admin.outage, OUTAGE_S, "hang")
    start(len(triggers) + 1, planned)  # submits while nobody answers
    marker.touch()  # the runs end during the outage
    returned = await asyncio.to_thread(workspace.admin.wait_outage_end, 120.0)
    fired: dict[int, tuple[dict, float]] = {}
    deadline = time.monotonic() + 120
    while len(fired) < len(tasks):
        while runner.events:
            entry = runner.events.popleft()
            fired[entry.trigger_id] = (entry.event.payload, time.time())
        assert time.monotonic() < deadline, f"events so far: {fired}"
        await asyncio.sleep(0.05)
    for task in tasks.values():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
    return fired, returned


def test_deferred_tasks_wait_out_an_outage_and_say_so_once(workspace, tmp_path):
    from airflow_air.triggers import AirRunTrigger

    marker = tmp_path / "go"
    command = f"while [ ! -e {marker} ]; do sleep 0.5; done; echo trained"
    with AirClient(workspace.host, workspace.token) as client:
        run_ids = [client.submit_workload(_workload(f"outage_{i}", command)).run_id for i in (1, 2)]
        planned = Submission(SubmissionKey("airflow", "ns", "sweep", "manual__9", "trial", 3))
        plan = planned.plan(client, _workload("outage_planned", "echo planned"), "0.0")
    for run_id in run_ids:
        asyncio.run(_until(lambda run_id=run_id: _running(workspace, run_id), "a RUNNING run"))
    workspace.admin.reset_counters()
    triggers = {i + 1: AirRunTrigger(run_id, poll_interval=0.2) for i, run_id in enumerate(run_ids)}
    submitting = AirRunTrigger(None, plan=plan.to_json(), poll_interval=0.2)

    capture = structlog.testing.LogCapture()
    previous = structlog.get_config()["processors"]
    # Each event with the context the triggerer routes it by (its trigger_id).
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
    try:
        fired, returned = asyncio.run(_through_an_outage(workspace, triggers, submitting, marker))
    finally:
        structlog.configure(processors=previous)

    for trigger_id, (payload, seen_at) in fired.items():
        assert payload["status"] == "success", payload
        late = seen_at - returned
        assert late <= END_SEEN_WITHIN_S, f"trigger {trigger_id}: {late:.1f} s after the return"
    host = workspace.host.removeprefix("http://")
    for trigger_id in fired:
        lines = [
            str(e.get("event"))
            for e in capture.entries
            if e.get("trigger_id") == trigger_id and "workspace" in str(e.get("event"))
        ]
        down = [line for line in lines if "unreachable since" in line]
        back = [line for line in lines if "reachable again after" in line]
        assert len(down) == 1 and len(back) == 1, (trigger_id, lines)
        assert down[0].startswith(f"workspace {host} unreachable since ")
        assert down[0].endswith("; runs keep going, waiting")
    counters = workspace.admin.counters()
    assert counters["runs_created"] == 1  # the planned run, submitted once
    assert counters["submits_per_token"] == {plan.idempotency_token: 1}
    assert fired[3][0]["run_id"] and fired[3][0]["run_id"] not in run_ids
    # One probe for every trigger while it was down (the submit's own requests aside).
    polls = ("jobs/runs/list", "jobs/runs/get")
    held = sum(counters["responses"].get(e, {}).get("outage", 0) for e in polls)
    assert held <= 10, counters
