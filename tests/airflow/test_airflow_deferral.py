"""Deferring only when there is something to wait for, and triggers that do not fire at once.

Airflow 3.3 can fail a deferred task whose trigger fires right after the deferral (the
executor's event of the deferring try is read after the task was resumed; see
``airflow_air.triggers``). So an operator whose run has already ended finishes in the worker,
and a trigger's first request waits until ``first_poll_at``.
"""

from __future__ import annotations

import asyncio
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
