"""A running run's training progress, from what it logs to MLflow (eta.go): what a waiter
(``RunWatcher``), the orchestrators and ``airo get``/``airo list`` show of a run that runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._errors import AirError
from .._progress import PROGRESS_METRIC, MetricPoint, TrainingProgress, compute_progress, has_total
from .._states import RunState, mlflow_ids
from ._core import ClientCore, Flow
from ._runs import get_output, get_run_body

MLFLOW_API = "/api/2.0/mlflow"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def mlflow_progress(
    core: ClientCore, mlflow_run_id: str, *, live: bool = False
) -> Flow[TrainingProgress | None]:
    """A running MLflow run's progress as eta.go estimateTrainingETA reads it: runs/get for
    the params, and only when they hold a total, every page of the ``epoch`` history. Any
    failure is "no estimate": progress is a convenience, never an error of the run.
    ``live``: as a waiter shows it, from the first logged step (``compute_progress``)."""
    try:
        body = yield from core.call(
            "GET", f"{MLFLOW_API}/runs/get", params={"run_id": mlflow_run_id}
        )
        data = (body.get("run") or {}).get("data") or {}
        params = {
            str(p.get("key")): str(p.get("value"))
            for p in data.get("params") or []
            if isinstance(p, Mapping)
        }
        if not has_total(params):
            return None
        points: list[MetricPoint] = []
        token: str | None = None
        seen: set[str] = set()
        while True:
            query = {"run_id": mlflow_run_id, "metric_key": PROGRESS_METRIC}
            if token:
                query["page_token"] = token
            page = yield from core.call("GET", f"{MLFLOW_API}/metrics/get-history", params=query)
            for item in page.get("metrics") or []:
                point = MetricPoint.from_api(item) if isinstance(item, Mapping) else None
                if point is not None:
                    points.append(point)
            token = _text(page.get("next_page_token"))
            if token is None or token in seen:
                break
            seen.add(token)
    except AirError:
        return None
    return compute_progress(params, points, live=live)


def training_progress(
    core: ClientCore, run: RunState | int, task_key: str | None = None, *, live: bool = False
) -> Flow[TrainingProgress | None]:
    """The progress of a run's newest attempt (of ``task_key`` in a multi-task run): its
    MLflow run from runs/get-output, then ``mlflow_progress`` (``live`` as there). None for
    an ended attempt, or when the attempt logs no progress."""
    state = run if isinstance(run, RunState) else (yield from _state_of(core, run))
    if not state.attempts and not state.is_terminal:
        state = yield from _state_of(core, state.run_id)  # a runs/list entry has no tasks
    attempts = state.task_attempts(task_key) if task_key is not None else state.attempts
    if task_key is None and len(state.tasks) != 1:
        return None
    newest = max(attempts, key=lambda a: a.attempt_number, default=None)
    if newest is None or newest.run_id is None or newest.is_terminal or state.is_terminal:
        return None
    try:
        output = yield from get_output(core, newest.run_id)
    except AirError:
        return None
    _, mlflow_run = mlflow_ids(output)
    if mlflow_run is None:
        return None
    return (yield from mlflow_progress(core, mlflow_run, live=live))


def _state_of(core: ClientCore, run_id: int) -> Flow[RunState]:
    return RunState.from_api((yield from get_run_body(core, run_id)))
