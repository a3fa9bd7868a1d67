"""The Jobs API shapes of a run, of a task run and of a run's repair history (`runs/get`,
`runs/list`, `runs/get-output` metadata), drawn from the store's records."""

from __future__ import annotations

from typing import Any

from air_runtime.local._store import Repair, Run, TaskRun


def _state(record: Run | TaskRun | Repair) -> dict[str, Any]:
    state: dict[str, Any] = {
        "life_cycle_state": record.life_cycle_state,
        "state_message": record.state_message,
        "user_cancelled_or_timedout": record.result_state in ("CANCELED", "TIMEDOUT"),
    }
    if record.result_state:
        state["result_state"] = record.result_state
    return state


# ``status.state`` (the Jobs API's RunLifecycleStateV2State) of each life-cycle state.
_STATUS_STATES = {
    "INTERNAL_ERROR": "TERMINATED",
    "SKIPPED": "TERMINATED",
    "WAITING_FOR_RETRY": "WAITING",
}


def termination_details(record: Run | TaskRun) -> dict[str, str] | None:
    """``status.termination_details`` as the API gives them (``code``, ``type``,
    ``message``) once the run ended with a result this workspace knows the cause of: a
    success, or a cancel through ``runs/cancel`` (USER_CANCELED, of type SUCCESS, whoever
    asked: the API takes no reason)."""
    if record.result_state == "SUCCESS":
        return {"code": "SUCCESS", "type": "SUCCESS", "message": ""}
    if record.result_state == "CANCELED":
        return {"code": "USER_CANCELED", "type": "SUCCESS", "message": record.state_message}
    return None


def _status(record: Run | TaskRun) -> dict[str, Any]:
    """``status``: the state (RunLifecycleStateV2State) and ``termination_details``."""
    life_cycle = record.life_cycle_state
    status: dict[str, Any] = {"state": _STATUS_STATES.get(life_cycle, life_cycle)}
    details = termination_details(record)
    if details is not None:
        status["termination_details"] = details
    return status


def task_json(task: TaskRun, spec: dict[str, Any], host: str) -> dict[str, Any]:
    """A task run, with the fields of its submitted task ``spec`` the API repeats."""
    item: dict[str, Any] = {
        "task_key": task.task_key,
        "run_id": task.task_run_id,
        "attempt_number": task.attempt_number,
        "state": _state(task),
        "status": _status(task),
        "start_time": task.start_time,
        "end_time": task.end_time,
        "run_page_url": f"{host}/jobs/runs/{task.task_run_id}",
        "run_if": spec.get("run_if", "ALL_SUCCESS"),
    }
    if task.start_time and task.end_time:
        item["execution_duration"] = task.end_time - task.start_time
    for name in (
        "depends_on",
        "ai_runtime_task",
        "environment_key",
        "max_retries",
        "timeout_seconds",
    ):
        if name in spec:
            item[name] = spec[name]
    return item


def run_json(
    run: Run,
    host: str,
    *,
    tasks: list[TaskRun] | None = None,
    history: list[dict[str, Any]] | None = None,
    task_offset: int = 0,
    task_page: int = 100,
) -> dict[str, Any]:
    """A run; with a page of its task runs when ``tasks`` are given (all of them), and its
    ``repair_history`` when given."""
    run_id = run.run_id
    result: dict[str, Any] = {
        "run_id": run_id,
        "job_id": run_id,
        "number_in_job": run_id,
        "run_name": run.run_name,
        "run_type": "SUBMIT_RUN",
        "run_page_url": f"{host}/jobs/runs/{run_id}",
        "state": _state(run),
        "status": _status(run),
        "start_time": run.start_time,
        "end_time": run.end_time,
        "format": "MULTI_TASK",
    }
    if run.idempotency_token:
        result["idempotency_token"] = run.idempotency_token
    if run.end_time:
        result["run_duration"] = run.end_time - run.start_time
    if tasks is not None:
        page = tasks[task_offset : task_offset + task_page]
        result["tasks"] = [task_json(t, run.spec(t.task_key), host) for t in page]
        if task_offset + task_page < len(tasks):
            result["next_page_token"] = str(task_offset + task_page)
    if history is not None:
        result["repair_history"] = history
    return result


def repair_history(run: Run, tasks: list[TaskRun], repairs: list[Repair]) -> list[dict[str, Any]]:
    """The original run and each repair, with the task runs each started (Jobs
    ``runs/get?include_history=true``, the ``RepairHistoryItem`` of the Jobs API)."""
    task_run_ids: dict[int, list[int]] = {}
    for task in tasks:
        task_run_ids.setdefault(task.repair_id, []).append(task.task_run_id)
    if not repairs:  # never repaired: the run is its original
        items: list[tuple[Run | Repair, int, str]] = [(run, 0, "ORIGINAL")]
    else:
        items = [(r, 0 if r.kind == "ORIGINAL" else r.repair_id, r.kind) for r in repairs]
    history = []
    for item, repair_id, kind in items:
        entry: dict[str, Any] = {
            "type": kind,
            "start_time": item.start_time,
            "end_time": item.end_time,
            "state": _state(item),
            "task_run_ids": sorted(task_run_ids.get(repair_id, [])),
        }
        if kind == "REPAIR":
            entry["id"] = repair_id
        history.append(entry)
    return history
