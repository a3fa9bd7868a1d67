"""R1 duplicate GPU runs: exactly 1 run per logical submission.

Randomized trials, each one logical submission hit by one hazard:

- ``response_lost``: the workspace creates the run but the submit answer never arrives;
- ``worker_sigkill``: a worker process is SIGKILLed at a random point of its submit, then
  the same logical submission is retried by another process;
- ``triggerer_restart``: the trigger waiting on the run is cancelled mid-wait and a new one
  is built from ``serialize()`` in a new event loop;
- ``task_retry``: a real Airflow task (``dag.test``) whose first try dies after the submit
  (before or after it recorded the run), retried automatically;
- ``repeated_request``: the identical submit request is sent again (and again).

``task_sigkill`` (test_airflow_daemons.py) adds the real thing to this row: the task process
of a real Airflow deployment SIGKILLed between its submit and its deferral, then retried by
the scheduler.

The local workspace counts created runs and submits per idempotency token; a trial passes
when exactly one run was created for it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import httpx
import pytest
from conftest import rng_for, trials
from helpers import (
    LoopThread,
    client_for,
    first_event,
    runs_created,
    trigger_from,
    workload,
)

from air_runtime import build_plan, make_idempotency_token

pytestmark = [pytest.mark.row("R1"), pytest.mark.timeout(1200)]

SCENARIOS = (
    "response_lost",
    "worker_sigkill",
    "triggerer_restart",
    "task_retry",
    "repeated_request",
)


def _token(trial: int, scenario: str) -> str:
    return make_idempotency_token("reliability", "R1", f"trial-{trial}", scenario)


def _response_lost(ws: Any, trial: int, rng: Any) -> dict[str, Any]:
    from air_runtime._errors import PlatformError

    rate = rng.choice([0.3, 0.5, 0.8])
    ws.admin.set_faults(
        {"seed": rng.randrange(10**6), "jobs/runs/submit": {"rate_response_lost": rate}}
    )
    name, token = f"r1-lost-{trial}", _token(trial, "lost")
    gave_up = False
    try:
        with client_for(ws) as client:
            submitted = client.submit_workload(workload(name, "echo ok"), idempotency_token=token)
    except PlatformError:
        # The client's retries are bounded; the caller (a task retry) submits the same
        # logical submission again, which must get the same run.
        gave_up = True
        ws.admin.set_faults({})
        with client_for(ws) as client:
            submitted = client.submit_workload(workload(name, "echo ok"), idempotency_token=token)
    finally:
        ws.admin.set_faults({})
    lost = ws.admin.counters()["faults"].get("jobs/runs/submit", {}).get("response_lost", 0)
    return {"run_id": submitted.run_id, "lost_answers": lost, "client_gave_up": gave_up}


_KILLED_SUBMIT = """
import json, sys
from air_runtime import AirClient, load_workload
host, token, idem, name = sys.argv[1:5]
with AirClient(host, token) as client:
    run = client.submit_workload(load_workload({
        "experiment_name": name,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0, "command": "echo ok"}), idempotency_token=idem)
    print(json.dumps({"run_id": run.run_id}), flush=True)
"""


def _worker_sigkill(ws: Any, trial: int, rng: Any) -> dict[str, Any]:
    # Latency widens every step of the submit so a random kill lands anywhere in it.
    ws.admin.set_faults({"*": {"latency_ms": 60}})
    token = _token(trial, "sigkill")
    name = f"r1-kill-{trial}"
    import subprocess
    import sys

    from helpers import python_env

    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SUBMIT, ws.host, ws.token, token, name],
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    # Python start + import take ~0.5-1 s; the submit's round trips ~0.3 s after that.
    delay = rng.uniform(0.3, 1.8)
    time.sleep(delay)
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    before_retry = ws.admin.counters()["submits_per_token"].get(token, 0)
    ws.admin.set_faults({})
    with client_for(ws) as client:
        submitted = client.submit_workload(workload(name, "echo ok"), idempotency_token=token)
    first = json.loads(out.splitlines()[-1])["run_id"] if out.strip() else None
    if first is not None and first != submitted.run_id:
        raise AssertionError(f"the retry got run {submitted.run_id}, the killed worker {first}")
    return {
        "run_id": submitted.run_id,
        "killed": killed,
        "kill_after_s": round(delay, 2),
        "submit_reached_before_kill": before_retry > 0,
    }


def _triggerer_restart(ws: Any, trial: int, rng: Any) -> dict[str, Any]:
    from airflow_air.triggers import AirRunTrigger

    seconds = rng.uniform(1.0, 2.5)
    fails = rng.random() < 0.3
    command = f"sleep {seconds:.2f}" + ("\nexit 3" if fails else "")
    with client_for(ws) as client:
        submitted = client.submit_workload(
            workload(f"r1-trig-{trial}", command), idempotency_token=_token(trial, "trigger")
        )
    trigger = AirRunTrigger(
        submitted.run_id, run_page_url=submitted.run_page_url, poll_interval=0.2
    )
    first_loop = LoopThread()
    pending = first_loop.submit(first_event(trigger))
    time.sleep(rng.uniform(0.2, seconds * 0.8))
    restarted_mid_wait = not pending.done()
    pending.cancel()
    first_loop.close()
    second_loop = LoopThread()
    try:
        event = second_loop.submit(first_event(trigger_from(trigger.serialize()))).result(
            timeout=60
        )
    finally:
        second_loop.close()
    expected = "failed" if fails else "success"
    if event["status"] != expected:
        raise AssertionError(f"trigger event {event} after restart, expected {expected}")
    return {"run_id": submitted.run_id, "restarted_mid_wait": restarted_mid_wait}


def _task_retry(ws: Any, trial: int, rng: Any) -> dict[str, Any]:
    """A real Airflow task whose first try dies after submitting; Airflow retries it."""
    from airflow.utils.state import DagRunState
    from helpers import reliability_dag

    from air_runtime import AirClient

    where = rng.choice(["after_submit_answer", "after_recording", "while_waiting"])
    crashes = {"left": 1}
    original_submit = AirClient.submit_workload
    original_wait = AirClient.wait

    class WorkerDied(Exception):
        pass

    def crash_once() -> None:
        if crashes["left"]:
            crashes["left"] -= 1
            raise WorkerDied(f"worker died ({where})")

    def submit_then_die(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_submit(self, *args, **kwargs)
        if where == "after_submit_answer":
            crash_once()
        return result

    def wait_then_die(*args: Any, **kwargs: Any) -> Any:
        if where in ("after_recording", "while_waiting"):
            if where == "while_waiting":
                time.sleep(0.3)
            crash_once()
        return original_wait(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AirClient, "submit_workload", submit_then_die)
        patch.setattr(AirClient, "wait", wait_then_die)
        dag = reliability_dag("reliability_retry")
        run = dag.test(run_conf={"command": f"sleep {rng.uniform(0.2, 1.0):.2f}"})
    if run.state != DagRunState.SUCCESS:
        raise AssertionError(f"the retried task ended {run.state}")
    ti = run.get_task_instance("run")
    return {"crash": where, "tries": ti.try_number if ti is not None else None}


def _repeated_request(ws: Any, trial: int, rng: Any) -> dict[str, Any]:
    with client_for(ws) as client:
        identity = client.whoami()
    plan = build_plan(
        workload(f"r1-repeat-{trial}", "echo ok"),
        user_name=identity.user_name,
        idempotency_token=_token(trial, "repeat"),
    )
    with client_for(ws) as client:
        first = client.submit(plan)
    repeats = rng.randint(1, 4)
    ids = {first.run_id}
    headers = {"Authorization": f"Bearer {ws.token}"}
    for _ in range(repeats):
        response = httpx.post(
            f"{ws.host}/api/2.2/jobs/runs/submit",
            json=plan.submit_body,
            headers=headers,
            timeout=30,
        )
        response.raise_for_status()
        ids.add(int(response.json()["run_id"]))
    if len(ids) != 1:
        raise AssertionError(f"repeated submits gave runs {sorted(ids)}")
    return {"run_id": first.run_id, "repeats": repeats}


def test_duplicates(workspace, airflow_workspace, tally) -> None:
    ws = workspace
    rng = rng_for("R1")
    count = trials(5, 100)
    # Every scenario at least once, the rest drawn at random.
    order = list(SCENARIOS) + [rng.choice(SCENARIOS) for _ in range(max(count - len(SCENARIOS), 0))]
    rng.shuffle(order)
    per_scenario: dict[str, dict[str, int]] = {}
    for trial, scenario in enumerate(order[:count]):
        before = runs_created(ws)
        stats = per_scenario.setdefault(
            scenario, {"trials": 0, "duplicates": 0, "missing": 0, "seconds": 0.0}
        )
        started = time.monotonic()
        stats["trials"] += 1
        tally.trials += 1
        try:
            detail = globals()[f"_{scenario}"](ws, trial, rng)
        except Exception as exc:  # a crash of the campaign itself is a count, not an abort
            tally.crashes += 1
            tally.fail(f"trial {trial} ({scenario}): {type(exc).__name__}: {exc}")
            ws.admin.set_faults({})
            continue
        stats["seconds"] = round(stats["seconds"] + time.monotonic() - started, 1)
        created = runs_created(ws) - before
        for key, value in detail.items():  # how often each hazard really struck
            if value is True:
                stats[key] = stats.get(key, 0) + 1
        if created > 1:
            tally.duplicates += created - 1
            stats["duplicates"] += created - 1
            tally.fail(f"trial {trial} ({scenario}): {created} runs created {detail}")
        elif created == 0:
            stats["missing"] += 1
            tally.fail(f"trial {trial} ({scenario}): no run created {detail}")
    tally.notes["scenarios"] = per_scenario
