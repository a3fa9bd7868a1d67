"""Run-state normalization (docs/spec/workload.md §8) and failure messages."""

from __future__ import annotations

import pytest

from air_runtime._states import RunState, failure_message


def _run(life_cycle: str | None = None, result: str | None = None, message: str = "", **extra):
    state = {}
    if life_cycle is not None:
        state["life_cycle_state"] = life_cycle
    if result is not None:
        state["result_state"] = result
    if message:
        state["state_message"] = message
    return {"run_id": 7, "run_name": "exp", "state": state, **extra}


@pytest.mark.parametrize(
    "life_cycle", ["QUEUED", "PENDING", "RUNNING", "TERMINATING", "BLOCKED", "WAITING_FOR_RETRY"]
)
def test_in_flight_states(life_cycle):
    state = RunState.from_api(_run(life_cycle))
    assert not state.is_terminal
    assert not state.is_success
    assert not state.unknown_state


def test_unknown_state_is_in_flight_and_flagged():
    state = RunState.from_api(_run("HIBERNATING_ON_MARS", message="new platform state"))
    assert state.unknown_state
    assert not state.is_terminal
    assert state.life_cycle_state == "HIBERNATING_ON_MARS"


def test_unknown_state_with_a_result_is_terminal():
    state = RunState.from_api(_run("SOMETHING_NEW", "SUCCESS"))
    assert state.is_terminal and state.is_success


@pytest.mark.parametrize("life_cycle", ["TERMINATED", "SKIPPED", "INTERNAL_ERROR"])
def test_terminal_life_cycles(life_cycle):
    state = RunState.from_api(_run(life_cycle))
    assert state.is_terminal
    assert not state.is_success


@pytest.mark.parametrize(
    "result",
    [
        "CANCELED",
        "TIMEDOUT",
        "FAILED",
        "INTERNAL_ERROR",
        "SKIPPED",
        "MAXIMUM_CONCURRENT_RUNS_REACHED",
        "UPSTREAM_FAILED",
        "UPSTREAM_CANCELED",
    ],
)
def test_every_failure_result_has_its_own_message(result):
    state = RunState.from_api(_run("TERMINATED", result, run_page_url="http://ws/jobs/runs/7"))
    assert state.is_terminal and not state.is_success
    text = failure_message(state)
    assert result in text
    assert "http://ws/jobs/runs/7" in text


def test_failure_messages_differ_per_result():
    texts = {
        r: failure_message(RunState.from_api(_run("TERMINATED", r))).split(": ", 1)[1]
        for r in (
            "CANCELED",
            "TIMEDOUT",
            "FAILED",
            "INTERNAL_ERROR",
            "SKIPPED",
            "MAXIMUM_CONCURRENT_RUNS_REACHED",
            "UPSTREAM_FAILED",
            "UPSTREAM_CANCELED",
        )
    }
    assert len(set(texts.values())) == len(texts)


def test_success_only_for_success():
    assert RunState.from_api(_run("TERMINATED", "SUCCESS")).is_success


def test_missing_fields_are_tolerated():
    for body in ({}, {"run_id": "12"}, {"state": None, "tasks": None}, {"tasks": [None, 3, {}]}):
        state = RunState.from_api(body)
        assert not state.is_terminal
    assert RunState.from_api({"run_id": "12"}).run_id == 12


def test_latest_attempt_per_task_wins():
    body = _run(
        "TERMINATED",
        "SUCCESS",
        tasks=[
            {
                "task_key": "train",
                "run_id": 1,
                "attempt_number": 0,
                "state": {"life_cycle_state": "TERMINATED", "result_state": "FAILED"},
            },
            {
                "task_key": "train",
                "run_id": 2,
                "attempt_number": 1,
                "state": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"},
            },
            {
                "task_key": "eval",
                "run_id": 3,
                "state": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"},
            },
        ],
    )
    state = RunState.from_api(body)
    assert [(t.task_key, t.run_id) for t in state.tasks] == [("train", 2), ("eval", 3)]
    assert state.failed_task is None


def test_waiting_for_capacity():
    assert RunState.from_api(_run("QUEUED")).is_waiting_for_capacity
    assert RunState.from_api(
        _run("PENDING", message="Waiting for GPU capacity (GPU_8xH100)")
    ).is_waiting_for_capacity
    assert not RunState.from_api(_run("PENDING", message="Setting up")).is_waiting_for_capacity
    assert not RunState.from_api(_run("RUNNING", message="capacity ok")).is_waiting_for_capacity


def test_failure_message_names_task_node_log_error_and_mlflow():
    body = _run(
        "TERMINATED",
        "FAILED",
        message="Task train failed",
        run_page_url="http://ws/jobs/runs/7",
        tasks=[
            {
                "task_key": "rollouts",
                "run_id": 10,
                "state": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"},
            },
            {
                "task_key": "evaluate",
                "run_id": 12,
                "state": {"life_cycle_state": "TERMINATED", "result_state": "UPSTREAM_FAILED"},
            },
            {
                "task_key": "train",
                "run_id": 11,
                "attempt_number": 2,
                "state": {"life_cycle_state": "TERMINATED", "result_state": "FAILED"},
            },
        ],
    )
    output = {
        "error": "Command exited with code 3",
        "error_trace": "Traceback\n  line a\nValueError: bad lr",
        "ai_runtime_task_output": {
            "mlflow_experiment_id": "e1",
            "mlflow_run_id": "r9",
            "status_message": "node 1 failed",
        },
    }
    text = failure_message(
        RunState.from_api(body),
        output=output,
        log_tail=["step 1", "ERROR: Script failed with exit code 3 after 2s"],
        node=1,
    )
    assert "Failed task: train" in text and "task run 11" in text and "node 1" in text
    assert "ERROR: Script failed with exit code 3" in text
    assert "ValueError: bad lr" in text
    assert "Command exited with code 3" in text
    assert "experiment e1, run r9" in text
    assert "node 1 failed" in text
    assert "http://ws/jobs/runs/7" in text


def test_a_failure_names_each_reason_once_and_the_mlflow_page():
    reason = "Node 1 failed: container trainer exited with exit code 3"
    state = RunState.from_api(
        _run(
            "TERMINATED",
            "FAILED",
            f"Task train failed with message: {reason}",
            run_page_url="http://ws/jobs/runs/7",
        )
    )
    output = {
        "error": reason,
        "error_trace": "loss went to nan\nERROR: exit code 3",
        "ai_runtime_task_output": {
            "status_message": reason,
            "mlflow_experiment_id": "11",
            "mlflow_run_id": "abc",
        },
    }
    text = failure_message(
        state, output=output, log_tail=["step 9", "loss went to nan", "ERROR: exit code 3"], node=1
    )
    assert text.count(reason) == 1, text  # the fullest of the four places that repeat it
    assert text.count("loss went to nan") == 1, text  # the trace adds nothing to the tail
    assert "Last log lines of node 1:" in text
    assert "MLflow: experiment 11, run abc: http://ws/ml/experiments/11/runs/abc" in text
    assert text.endswith("Run page: http://ws/jobs/runs/7")
