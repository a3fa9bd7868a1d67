"""Deferring only when there is something to wait for, and triggers that do not fire at once.

Airflow 3.3 can fail a deferred task whose trigger fires right after the deferral (the
executor's event of the deferring try is read after the task was resumed; see
``airflow_air.triggers``). So an operator whose run has already ended finishes in the worker,
and a trigger's first request waits until ``first_poll_at``.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import time

import pytest
from airflow_runs import clear_task, load_test_dag, run_next_try, set_state, task_states, xcom

from air_runtime import AirClient, load_workload

DEFERRED = "Pausing task as DEFERRED"
NOT_DEFERRING = "has already ended; finishing without deferring"


def _text(events: list[dict]) -> str:
    return "\n".join(" ".join(f"{k}={v}" for k, v in event.items()) for event in events)


def test_retry_reattaching_to_a_finished_run_completes_without_deferring(workspace, task_log):
    dag = load_test_dag("air_test_deferred")
    dag_run = dag.test(run_conf={"command": "sleep 1; echo done"})
    assert task_states(dag_run) == {"run": "success"}
    assert DEFERRED in task_log.text()  # the first try waited in the trigger
    run_id = xcom(dag.dag_id, dag_run.run_id, "run", "run_id")

    # The worker died after the run ended, before the task was marked successful: the
    # scheduler retries, and the retry reattaches to the run that has already succeeded.
    set_state(dag.dag_id, dag_run.run_id, "run", "up_for_retry")
    seen = len(task_log.events)
    assert run_next_try(dag, dag_run.run_id, "run") == "success"

    retry = _text(task_log.events[seen:])
    assert "Reattaching to run" in retry
    assert NOT_DEFERRING in retry
    assert DEFERRED not in retry
    result = xcom(dag.dag_id, dag_run.run_id, "run")
    assert result["run_id"] == run_id and result["result_state"] == "SUCCESS"
    assert workspace.admin.counters()["runs_created"] == 1


def test_cleared_stage_of_a_finished_run_completes_without_deferring(workspace, task_log):
    dag = load_test_dag("air_test_workflow")
    dag_run = dag.test()
    assert set(task_states(dag_run).values()) == {"success"}

    # Clearing only a stage waits on the same run again; that run (and stage) has ended.
    clear_task(dag.dag_id, dag_run.run_id, "pipeline.second")
    seen = len(task_log.events)
    assert run_next_try(dag, dag_run.run_id, "pipeline.second") == "success"

    retry = _text(task_log.events[seen:])
    assert NOT_DEFERRING in retry and "(stage second)" in retry
    assert DEFERRED not in retry
    second = xcom(dag.dag_id, dag_run.run_id, "pipeline.second")
    assert second["task_key"] == "second" and second["result_state"] == "SUCCESS"
    assert workspace.admin.counters()["runs_created"] == 1


def _finished_run(workspace) -> int:
    workload = load_workload(
        {
            "experiment_name": "first_poll",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": "echo ok",
        }
    )
    with AirClient(workspace.host, workspace.token) as client:
        run_id = client.submit_workload(workload).run_id
        assert client.wait(run_id, timeout=60, poll_interval=0.1).is_success
    return run_id


def _available_image(workspace) -> str:
    with AirClient(workspace.host, workspace.token) as client:
        client.register_image("docker.io/library/ubuntu:24.04")
        return client.wait_for_image(
            "docker.io/library/ubuntu:24.04", timeout=60, poll_interval=0.1
        ).docker_image_url


async def _first_event(trigger) -> tuple[dict, float]:
    started = time.monotonic()
    events = trigger.run()
    event = await anext(events)
    await events.aclose()
    return dict(event.payload), time.monotonic() - started


@pytest.mark.parametrize("kind", ["run", "stage", "image"])
def test_trigger_does_not_poll_before_first_poll_at(workspace, kind):
    from airflow_air.triggers import AirImageTrigger, AirRunTrigger

    # Seconds, not fractions: "polls at once" must hold on a loaded machine too.
    delay = 3.0
    if kind == "image":
        image = _available_image(workspace)

        def make(first_poll_at, deadline=None):
            return AirImageTrigger(
                image, poll_interval=0.1, first_poll_at=first_poll_at, deadline=deadline
            )
    else:
        run_id = _finished_run(workspace)
        task_key = "first_poll" if kind == "stage" else None

        def make(first_poll_at, deadline=None):
            return AirRunTrigger(
                run_id,
                poll_interval=0.1,
                task_key=task_key,
                first_poll_at=first_poll_at,
                deadline=deadline,
                cancel_on_kill=False,
            )

    # The target has already ended, yet the event only comes at first_poll_at.
    event, waited = asyncio.run(_first_event(make(time.time() + delay)))
    assert event["status"] == "success", event
    assert waited >= delay - 0.05, waited

    # A first_poll_at in the past (a restarted triggerer) polls at once.
    event, waited = asyncio.run(_first_event(make(time.time() - 60)))
    assert event["status"] == "success", event
    assert waited < delay, waited

    # The deadline bounds the wait for the first poll.
    event, waited = asyncio.run(_first_event(make(time.time() + 60, deadline=time.time() + 0.3)))
    assert event["status"] in ("success", "timeout"), event
    assert waited < 30, waited


def _run_of(workspace, command: str) -> int:
    workload = load_workload(
        {
            "experiment_name": "finish_in_triggerer",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": command,
        }
    )
    with AirClient(workspace.host, workspace.token) as client:
        run_id = client.submit_workload(workload).run_id
        client.wait(run_id, timeout=120, poll_interval=0.1)
    return run_id


async def _first_raw_event(trigger):
    events = trigger.run()
    event = await anext(events)
    await events.aclose()
    return event


class _TriggererChannel:
    """The triggerer's supervisor channel as a trigger sees it (``SUPERVISOR_COMMS``): it
    records what the trigger sends. The real one forwards ``SetXCom`` to the execution API,
    as a worker's does (tests/e2e/test_airflow_trigger_ends.py runs that end to end)."""

    def __init__(self) -> None:
        self.sent: list = []

    async def asend(self, message):
        self.sent.append(message)


def _in_triggerer(trigger, monkeypatch, run_id: str, map_index: int) -> _TriggererChannel:
    """``trigger`` as the triggerer runs it for task ``trial`` of Dag ``sweep``: its task
    instance set, its supervisor channel recording what it sends."""
    from types import SimpleNamespace

    from airflow.sdk.execution_time import task_runner

    trigger.task_instance = SimpleNamespace(
        dag_id="sweep", task_id="trial", run_id=run_id, map_index=map_index
    )
    channel = _TriggererChannel()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", channel, raising=False)
    return channel


def test_trigger_ends_a_successful_run_itself(workspace, task_log, monkeypatch):
    """A success is a TaskSuccessEvent once the trigger has left the XComs the worker would
    leave (written as a worker writes them), the node's lines in the trigger's log and the
    submission's secret keys deleted; the first-poll delay does not hold it back (a task the
    trigger ends cannot meet the deferral race)."""
    from airflow.sdk.serde import deserialize
    from airflow.triggers.base import TaskSuccessEvent
    from airflow_air.links import AirMlflowRunLink, AirRunLink
    from airflow_air.triggers import AirRunTrigger

    from air_runtime import Submission, SubmissionKey

    run_id = _run_of(workspace, 'echo "trial line one"\necho "trial line two"')
    submission = Submission(SubmissionKey("airflow", "ns", "sweep", "manual__1", "trial", 3))
    secrets = submission.key.secrets("finish-scope")
    with AirClient(workspace.host, workspace.token) as client:
        submission.store(client, {"HF_TOKEN": "hf-value-123456"}, scope=secrets.scope)
        assert any(s.key.startswith(secrets.prefix) for s in client.list_secrets(secrets.scope))

    trigger = AirRunTrigger(
        run_id,
        poll_interval=0.1,
        first_poll_at=time.time() + 3600,  # would hold a resume event for an hour
        cancel_on_kill=False,
        finish_in_triggerer=True,
        submission=submission.attach(run_id).to_json(),
    )
    # The kwargs survive serialization (the triggerer rebuilds the trigger from them).
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_air.triggers.AirRunTrigger"
    trigger = AirRunTrigger(**kwargs)
    channel = _in_triggerer(trigger, monkeypatch, "manual__1", 3)
    event = asyncio.run(_first_raw_event(trigger))

    assert isinstance(event, TaskSuccessEvent), event
    assert not event.xcoms  # Airflow 3.3 would store these JSON-encoded once more
    set_xcoms = [m for m in channel.sent if m.type == "SetXCom"]
    assert {(m.dag_id, m.task_id, m.run_id, m.map_index) for m in set_xcoms} == {
        ("sweep", "trial", "manual__1", 3)
    }
    xcoms = {m.key: deserialize(m.value) for m in set_xcoms}
    url = f"{workspace.host.rstrip('/')}/jobs/runs/{run_id}"
    # The try that deferred wrote the run id and page (the run link's XCom): not again.
    assert AirRunLink().xcom_key == "run_page_url"
    assert not {"run_id", "run_page_url"} & set(xcoms), xcoms
    result = xcoms["return_value"]
    assert result["run_id"] == run_id and result["result_state"] == "SUCCESS"
    assert result["run_page_url"] == url
    assert result["gpu_hours"] == xcoms["gpu_hours"] and xcoms["gpu_hours"] > 0
    if result["mlflow_run_id"]:
        assert xcoms[AirMlflowRunLink().xcom_key] == xcoms["mlflow_run_url"]
    log = task_log.text()
    assert "node 0 attempt 0] trial line one" in log and "trial line two" in log, log
    assert f"Run {run_id} succeeded" in log
    assert "hf-value-123456" not in log
    with AirClient(workspace.host, workspace.token) as client:
        left = [s.key for s in client.list_secrets(secrets.scope)]
    assert not [k for k in left if k.startswith(secrets.prefix)], left


def test_trigger_resumes_a_failed_run_in_a_worker_after_first_poll_at(workspace):
    from airflow.triggers.base import BaseTaskEndEvent
    from airflow_air.triggers import AirRunTrigger

    run_id = _run_of(workspace, 'echo "about to fail"\nexit 3')
    first_poll_at = time.time() + 0.5
    trigger = AirRunTrigger(
        run_id,
        poll_interval=0.1,
        first_poll_at=first_poll_at,
        cancel_on_kill=False,
        finish_in_triggerer=True,
    )
    event = asyncio.run(_first_raw_event(trigger))
    # Not before first_poll_at: a resumed task must not meet the deferral race.
    assert time.time() >= first_poll_at
    assert not isinstance(event, BaseTaskEndEvent), event
    assert event.payload["status"] == "failed", event.payload
    assert "exit code 3" in event.payload["message"], event.payload


def test_inline_triggers_do_not_wait_for_the_first_poll_delay(workspace, task_log, monkeypatch):
    """``dag.test()`` / ``airflow dags test`` run the trigger inline, with no scheduler to
    race: a delay of an hour would hang this test (its timeout fails it) if it were paid."""
    monkeypatch.setenv("AIRFLOW__AIR__TRIGGER_FIRST_POLL_DELAY", "3600")
    dag = load_test_dag("air_test_deferred")
    dag_run = dag.test(run_conf={"command": "sleep 5; echo done"})
    assert task_states(dag_run) == {"run": "success"}
    assert DEFERRED in task_log.text()


def _planned(workspace, command: str, map_index: int):
    """The plan an operator with ``submit_in_triggerer`` hands its trigger: generation 0.0
    of one task instance's submission."""
    from air_runtime import Submission, SubmissionKey

    workload = load_workload(
        {
            "experiment_name": "submit_in_triggerer",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": command,
        }
    )
    submission = Submission(
        SubmissionKey("airflow", "ns", "sweep", "manual__2", "trial", map_index)
    )
    with AirClient(workspace.host, workspace.token) as client:
        return submission.plan(client, workload, "0.0")


def test_a_trigger_submits_its_plan_once_however_often_it_starts(workspace, monkeypatch):
    """``submit_in_triggerer``: the trigger submits the plan, writes the run id and page
    right after (as a worker after its submit), and ends the task; a trigger rebuilt from the
    same kwargs (a restarted triggerer) submits again and gets the same run back."""
    from airflow.sdk.serde import deserialize
    from airflow.triggers.base import TaskSuccessEvent
    from airflow_air.triggers import AirRunTrigger

    plan = _planned(workspace, 'echo "planned here, submitted there"', 5)
    _, kwargs = AirRunTrigger(
        None, plan=plan.to_json(), poll_interval=0.1, finish_in_triggerer=True
    ).serialize()
    assert kwargs["run_id"] is None and json.loads(json.dumps(kwargs)) == kwargs
    ids = []
    for _ in range(2):
        trigger = AirRunTrigger(**kwargs)
        channel = _in_triggerer(trigger, monkeypatch, "manual__2", 5)
        event = asyncio.run(_first_raw_event(trigger))
        assert isinstance(event, TaskSuccessEvent), event
        xcoms = [(m.key, deserialize(m.value)) for m in channel.sent if m.type == "SetXCom"]
        run_id = dict(xcoms)["run_id"]
        url = f"{workspace.host.rstrip('/')}/jobs/runs/{run_id}"
        # The run's XComs first (the live link while the task is deferred), each once.
        assert xcoms[:2] == [("run_id", run_id), ("run_page_url", url)], xcoms
        assert [k for k, _ in xcoms].count("run_id") == 1
        assert dict(xcoms)["return_value"]["run_id"] == run_id
        ids.append(run_id)
    assert ids[0] == ids[1]
    assert workspace.admin.counters()["runs_created"] == 1


def test_a_plan_the_workspace_refuses_is_an_event_without_a_run(workspace, monkeypatch):
    """The workspace's own validation refuses the trigger's submit: one ``error`` event
    marked ``refused`` (the task fails without retries, as a refusal in a worker), no run."""
    from airflow_air.triggers import AirRunTrigger

    plan = _planned(workspace, "echo never", 6)
    body = copy.deepcopy(plan.preflight_bodies[0])
    body["task"]["deployments"][0]["compute"]["accelerator_type"] = "GPU_9xZ"  # no such GPU
    refused = dataclasses.replace(plan, preflight_bodies=(body,))
    trigger = AirRunTrigger(None, plan=refused.to_json(), poll_interval=0.1)
    event = asyncio.run(_first_raw_event(trigger))
    assert event.payload["status"] == "error" and event.payload["refused"] is True, event
    assert not event.payload["run_id"]
    assert "submit the planned run" in event.payload["message"]
    assert workspace.admin.counters()["runs_created"] == 0
