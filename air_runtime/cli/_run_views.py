"""What ``airo get``, ``airo list`` and ``airo cancel`` show of runs: one run's summary
(acceptance/air/get's fields: state, duration, attempt, experiment, MLflow link; and GPU-hours), the
caller's AI Runtime runs newest first (list.go), what a task-run id given for a run id
belongs to, and what a cancel of several runs did. Flows over the client's core, each run
with ``client.run_flow``: only ``airo`` shows them, so the clients do not carry them."""

from __future__ import annotations

import contextlib
import fnmatch
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from air_runtime._checkpoints import Checkpoint
from air_runtime._diagnosis import Diagnosis, Termination
from air_runtime._errors import AirError, ConfigurationError
from air_runtime._progress import TrainingProgress
from air_runtime._states import RunState, mlflow_ids, mlflow_run_url
from air_runtime.client._cancel_causes import CancelCause, cancel_with_cause, read_cause
from air_runtime.client._checkpoint_folders import newest_checkpoint_of_task
from air_runtime.client._core import ClientCore, Flow, gather
from air_runtime.client._identity import whoami
from air_runtime.client._runs import RUNS_API, failure_report, get_output, get_run_body
from air_runtime.client._training_progress import mlflow_progress, training_progress

# list.go: runs/list pages of 25, at most 2,000 runs scanned, 8 lookups at once.
LIST_PAGE_LIMIT = 25
MAX_LIST_SCAN = 2000
_HYDRATE_CONCURRENCY = 8
# aitraining.go aiTrainingWorkflowsPath: the caller's own runs, as (job_run_id, submit_time).
WORKFLOWS_PATH = "/api/2.0/ai-training/workflows"
# How many of the newest runs are searched for the parent of a task run.
_PARENT_SEARCH_RUNS = 200


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _task_experiments(body: Mapping[str, Any]) -> dict[str, str]:
    """Each task's experiment (``ai_runtime_task.experiment``), by task key, in task order."""
    found: dict[str, str] = {}
    for task in body.get("tasks") or []:
        ai = task.get("ai_runtime_task") if isinstance(task, Mapping) else None
        if isinstance(ai, Mapping) and _text(ai.get("experiment")):
            found[str(task.get("task_key") or "")] = str(ai["experiment"])
    return found


def _experiment(body: Mapping[str, Any]) -> str | None:
    """The run's experiment; a multi-task run whose stages log to several names them all
    (``rl_train, rl_eval``), never only the first stage's."""
    names = list(dict.fromkeys(_task_experiments(body).values()))
    return ", ".join(names) if names else None


def is_ai_runtime_run(body: Mapping[str, Any]) -> bool:
    """A run with an AI Runtime task (list.go isAirRun): runs/list returns every kind."""
    return any(
        isinstance(t, Mapping) and isinstance(t.get("ai_runtime_task"), Mapping)
        for t in body.get("tasks") or []
    )


@dataclass(frozen=True, slots=True)
class TaskLine:
    """One task of a run as ``airo get`` lists it: its newest attempt's state and retry
    (0-based, as the CLI counts retries), the retries allowed, and the GPU-hours of all its
    attempts."""

    task_key: str
    task_run_id: int | None
    status: str
    attempt_number: int
    max_retries: int | None
    gpu_hours: float
    progress: TrainingProgress | None = None  # a running task's (eta.go)
    experiment_name: str | None = None  # the task's own (stages may log to different ones)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_key": self.task_key,
            "task_run_id": None if self.task_run_id is None else str(self.task_run_id),
            "experiment_name": self.experiment_name,
            "status": self.status,
            "attempt_number": self.attempt_number,
            "max_retries": self.max_retries,
            "gpu_hours": self.gpu_hours,
            "est_remaining_seconds": self.progress.remaining_seconds if self.progress else None,
            "est_percent_complete": self.progress.percent_complete if self.progress else None,
        }


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as ``airo get`` and ``airo list`` show it."""

    run_id: int
    status: str  # the result when the run has ended, else its life-cycle state
    life_cycle_state: str
    result_state: str | None
    state_message: str
    run_name: str | None
    experiment_name: str | None
    user: str | None
    start_time: int | None  # epoch ms
    end_time: int | None
    duration_seconds: int | None
    attempt_number: int  # the newest attempt, 0-based as the API counts
    accelerator_type: str | None
    num_accelerators: int | None  # the most held at once across its tasks
    gpu_hours: float
    run_page_url: str | None
    mlflow_experiment_id: str | None = None
    mlflow_run_id: str | None = None
    mlflow_run_url: str | None = None
    progress: TrainingProgress | None = None  # a running run's, when it logs one (eta.go)
    max_retries: int | None = None  # of the newest task (format.go maxRetries)
    tasks: tuple[TaskLine, ...] = ()
    # The most accelerators held at once, by type (``RunState.accelerators_at_once``).
    accelerators: tuple[tuple[str, int], ...] = ()
    # A failed run: why (the core's diagnosis), and the last lines of the node that failed.
    diagnosis: Diagnosis | None = None
    failed_node: int | None = None
    last_lines: tuple[str, ...] = ()
    # The task-run id the summary was asked for, when one was given instead of the run's.
    asked_for: int | None = None
    # A one-task run with a checkpoint folder: its newest checkpoint (where a retry resumes).
    checkpoint: Checkpoint | None = None
    # How the API says the run ended (``status.termination_details``), and, for a run our
    # code cancelled, why (``_cancel_causes``: kept next to its command by the canceller).
    termination: Termination | None = None
    cancel_cause: CancelCause | None = None

    @property
    def is_terminal(self) -> bool:
        return RunState(self.run_id, self.life_cycle_state, self.result_state).is_terminal

    @property
    def started_at(self) -> str | None:
        if not self.start_time:
            return None
        return datetime.fromtimestamp(self.start_time / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def mlflow_logs_url(self) -> str | None:
        """The CLI's ``mlflow_url``: node 0's log artifacts (mlflow.go mlflowLogsURL)."""
        if not self.mlflow_run_url:
            return None
        return f"{self.mlflow_run_url}/artifacts/logs/node_0"

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` payload: acceptance/air/get's fields (ids as strings, as the CLI prints
        them) with GPU-hours and the state's parts."""
        return {
            "run_id": str(self.run_id),
            "run_name": self.run_name,
            "status": self.status,
            "life_cycle_state": self.life_cycle_state,
            "result_state": self.result_state,
            "state_message": self.state_message,
            "started_at": self.started_at,
            "duration_seconds": self.duration_seconds,
            "attempt_number": self.attempt_number,
            "experiment_name": self.experiment_name,
            "user": self.user,
            "accelerator_type": self.accelerator_type,
            "num_accelerators": self.num_accelerators,
            "accelerators": {kind: count for kind, count in self.accelerators},
            "gpu_hours": self.gpu_hours,
            "dashboard_url": self.run_page_url,
            "mlflow_url": self.mlflow_logs_url,
            "mlflow_run_url": self.mlflow_run_url,
            "est_remaining_seconds": self.progress.remaining_seconds if self.progress else None,
            "est_percent_complete": self.progress.percent_complete if self.progress else None,
            "max_retries": self.max_retries,
            "tasks": [t.to_dict() for t in self.tasks],
            "diagnosis": self.diagnosis.headline() if self.diagnosis else None,
            "failed_node": self.failed_node,
            "last_lines": list(self.last_lines),
            "task_run_id": None if self.asked_for is None else str(self.asked_for),
            "checkpoint": None if self.checkpoint is None else self.checkpoint.to_dict(),
            "termination": None
            if self.termination is None
            else {
                "code": self.termination.code,
                "type": self.termination.type,
                "message": self.termination.message,
            },
            "cause": None if self.cancel_cause is None else self.cancel_cause.to_json(),
        }


# list_filter.go supportedFilterKeys, and ours: the run's state and its name.
FILTER_KEYS = ("accelerator_type", "experiment", "num_accelerators", "user", "state", "name")
# format.go gpuDisplayNames: accelerator_type filters match the short name shown.
_GPU_DISPLAY_NAMES = {"h100_80gb": "H100", "a10": "A10", "GPU_1xA10": "A10", "GPU_8xH100": "H100"}
_GPU_DISPLAY_NAMES["GPU_1xH100"] = "H100"


@dataclass(frozen=True, slots=True)
class RunFilters:
    """``airo list --filter KEY=VALUE`` (list_filter.go listFilters): ``user`` the exact
    creator, ``experiment`` a case-insensitive glob, ``accelerator_type`` a case-insensitive
    substring of the accelerator's short name (H100, A10), ``num_accelerators`` the exact
    count; and ours: ``state`` the status word (a result, else the life-cycle state; any
    case), ``name`` a case-insensitive glob of the run's name."""

    user: str | None = None
    experiment: str | None = None
    accelerator_type: str | None = None
    num_accelerators: int | None = None
    state: str | None = None
    name: str | None = None

    @classmethod
    def parse(cls, items: list[str]) -> RunFilters:
        """From ``KEY=VALUE`` items, refused as list_filter.go parseListFilters refuses."""
        values: dict[str, Any] = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ConfigurationError(f'invalid --filter "{item}": expected KEY=VALUE')
            if key not in FILTER_KEYS:
                raise ConfigurationError(
                    f'unsupported --filter key "{key}": supported keys are {", ".join(FILTER_KEYS)}'
                )
            if key == "num_accelerators":
                if not value.isdigit() or int(value) <= 0:
                    raise ConfigurationError(
                        f'invalid --filter num_accelerators="{value}": must be a positive integer'
                    )
                values[key] = int(value)
            else:
                values[key] = value
        return cls(**values)

    def keeps(self, body: Mapping[str, Any]) -> bool:
        """Whether a run (runs/get or expanded runs/list) passes every filter but ``user``
        (matched while scanning, on the run's creator)."""
        state = RunState.from_api(body)
        newest = max(state.attempts, key=lambda a: a.attempt_number, default=None)
        # A multi-task run matches when any of its tasks' experiments does.
        experiments = list(_task_experiments(body).values()) or [state.run_name or ""]
        if self.experiment is not None and not any(
            fnmatch.fnmatchcase(e.lower(), self.experiment.lower()) for e in experiments
        ):
            return False
        if self.name is not None and not fnmatch.fnmatchcase(
            (state.run_name or "").lower(), self.name.lower()
        ):
            return False
        gpu_type = (newest.accelerator_type if newest else None) or ""
        if self.accelerator_type is not None:
            shown = _GPU_DISPLAY_NAMES.get(gpu_type, gpu_type).lower()
            if self.accelerator_type.lower() not in shown:
                return False
        count = newest.num_accelerators if newest else None
        if self.num_accelerators is not None and count != self.num_accelerators:
            return False
        status = state.result_state or state.life_cycle_state
        return self.state is None or status.upper() == self.state.upper()

    @property
    def on_runs(self) -> bool:
        """Whether a filter other than ``user`` is set (list_filter.go hasTaskFilter)."""
        return any(
            v is not None
            for v in (
                self.experiment,
                self.accelerator_type,
                self.num_accelerators,
                self.state,
                self.name,
            )
        )


def summarize(
    body: Mapping[str, Any],
    host: str,
    output: Mapping[str, Any] | None = None,
    progress: TrainingProgress | None = None,
) -> RunSummary:
    """A summary of a runs/get (or expanded runs/list) answer; ``output`` is the newest
    task's runs/get-output, where the MLflow ids are."""
    state = RunState.from_api(body)
    now = int(time.time() * 1000)
    end = state.end_time or (None if state.is_terminal else now)
    duration = (end - state.start_time) // 1000 if state.start_time and end else None
    newest = max(state.attempts, key=lambda a: a.attempt_number, default=None)
    experiment_id, mlflow_run = mlflow_ids(output or {})
    experiments = _task_experiments(body)
    at_once = state.accelerators_at_once(now_ms=now)
    lines = tuple(
        TaskLine(
            task_key=t.task_key,
            task_run_id=t.run_id,
            status=t.result_state or t.life_cycle_state,
            attempt_number=t.attempt_number,
            max_retries=t.max_retries,
            gpu_hours=round(state.gpu_hours(t.task_key, now_ms=now), 6),
            experiment_name=experiments.get(t.task_key),
        )
        for t in state.tasks
    )
    return RunSummary(
        run_id=state.run_id,
        status=state.result_state or state.life_cycle_state,
        life_cycle_state=state.life_cycle_state,
        result_state=state.result_state,
        state_message=state.state_message,
        run_name=state.run_name,
        experiment_name=_experiment(body) or state.run_name,
        user=_text(body.get("creator_user_name")),
        start_time=state.start_time,
        end_time=state.end_time,
        duration_seconds=duration,
        attempt_number=newest.attempt_number if newest else 0,
        accelerator_type=next(iter(at_once)) if len(at_once) == 1 else None,
        num_accelerators=sum(at_once.values()) or None,
        accelerators=tuple(sorted(at_once.items())),
        gpu_hours=round(state.gpu_hours(now_ms=now), 6),
        run_page_url=state.run_page_url,
        mlflow_experiment_id=experiment_id,
        mlflow_run_id=mlflow_run,
        mlflow_run_url=mlflow_run_url(host, experiment_id, mlflow_run),
        progress=progress,
        max_retries=newest.max_retries if newest else None,
        tasks=lines,
        termination=state.termination,
    )


def run_summary(core: ClientCore, run_id: int) -> Flow[RunSummary]:
    """runs/get, and the newest task's runs/get-output for the MLflow ids (list_detail.go,
    mlflow.go mlflowIDs); a missing output only leaves the MLflow link out. A task-run id
    is read as its run (``asked_for`` keeps it). A running run gets its progress, a failed
    one its diagnosis and the failing node's last lines."""
    body = yield from get_run_body(core, run_id)
    asked_for = None
    if _text(body.get("task_key")) and not body.get("tasks"):
        ref = yield from _task_run_ref_of(core, run_id, body)
        if ref.parent_run_id is not None:
            asked_for = run_id
            body = yield from get_run_body(core, ref.parent_run_id)
    state = RunState.from_api(body)
    output: dict[str, Any] = {}
    newest = max(state.attempts, key=lambda a: a.attempt_number, default=None)
    if newest is not None and newest.run_id is not None and len(state.tasks) == 1:
        with contextlib.suppress(AirError):
            output = yield from get_output(core, newest.run_id)
    progress = None
    _, mlflow_run = mlflow_ids(output)
    if mlflow_run and not state.is_terminal:
        progress = yield from mlflow_progress(core, mlflow_run)
    summary = summarize(body, core.host, output, progress)
    if len(state.tasks) > 1 and not state.is_terminal:
        # A workflow's running tasks each with its own progress.
        each = yield from gather(
            [training_progress(core, state, t.task_key) for t in state.tasks],
            _HYDRATE_CONCURRENCY,
        )
        lines = tuple(replace(t, progress=p) for t, p in zip(summary.tasks, each, strict=True))
        summary = replace(summary, tasks=lines)
    elif progress is not None and summary.tasks:
        summary = replace(summary, tasks=(replace(summary.tasks[0], progress=progress),))
    if state.is_terminal and not state.is_success and state.result_state != "CANCELED":
        report = yield from failure_report(core, state)
        summary = replace(
            summary,
            diagnosis=report.diagnosis,
            failed_node=report.node,
            last_lines=tuple(report.tail or ()),
        )
    if state.result_state == "CANCELED":
        summary = replace(summary, cancel_cause=(yield from read_cause(core, state)))
    if len(state.tasks) == 1:
        checkpoint = yield from newest_checkpoint_of_task(core, state.tasks[0])
        summary = replace(summary, checkpoint=checkpoint)
    return replace(summary, asked_for=asked_for) if asked_for is not None else summary


def _submit_time_ms(value: Any) -> int:
    """A proto Timestamp as RFC 3339 text or ``{seconds, nanos}`` (aitraining.go
    parseSubmitTimeMs); 0 when absent or unreadable, so it sorts last."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        return 0
    if isinstance(value, Mapping):
        seconds, nanos = value.get("seconds") or 0, value.get("nanos") or 0
        with contextlib.suppress(TypeError, ValueError):
            return int(seconds) * 1000 + int(nanos) // 1_000_000
    return 0


def list_workflows(core: ClientCore, *, active_only: bool) -> Flow[list[tuple[int, int]]]:
    """The caller's runs from the AI Runtime index, ``(job_run_id, submit_time_ms)``, every
    page; a repeated page token ends the paging, a repeated run is kept once
    (aitraining.go listAiTrainingWorkflows)."""
    refs: list[tuple[int, int]] = []
    seen_ids: set[int] = set()
    seen_tokens: set[str] = set()
    token: str | None = None
    while True:
        params: dict[str, Any] = {}
        if active_only:
            params["active_only"] = "true"
        if token:
            params["page_token"] = token
        body = yield from core.call("GET", WORKFLOWS_PATH, params=params)
        for item in body.get("training_workflows") or []:
            if not isinstance(item, Mapping):
                continue
            try:
                run_id = int(item.get("job_run_id") or 0)
            except (TypeError, ValueError):
                continue
            if run_id and run_id not in seen_ids:
                seen_ids.add(run_id)
                refs.append((run_id, _submit_time_ms(item.get("submit_time"))))
        token = body.get("next_page_token") or None
        if token is None or token in seen_tokens:
            return refs
        seen_tokens.add(token)


def _scan_runs(
    core: ClientCore,
    *,
    active_only: bool,
    user: str | None,
    want: int | None,
    filters: RunFilters | None = None,
) -> Flow[tuple[list[dict[str, Any]], bool]]:
    """AI Runtime submit runs of ``user`` (every user's when None) from runs/list that pass
    ``filters``, newest first (list.go jobsScanStrategy), up to ``want``; and whether the
    scan stopped at its cap."""
    found: list[dict[str, Any]] = []
    scanned = 0
    token: str | None = None
    while want is None or len(found) < want:
        params: dict[str, Any] = {
            "run_type": "SUBMIT_RUN",
            "expand_tasks": "true",
            "limit": LIST_PAGE_LIMIT,
        }
        if active_only:
            params["active_only"] = "true"
        if token:
            params["page_token"] = token
        body = yield from core.call("GET", f"{RUNS_API}/list", params=params)
        for run in body.get("runs") or []:
            scanned += 1
            if not isinstance(run, Mapping) or not is_ai_runtime_run(run):
                continue
            if user is not None and run.get("creator_user_name") not in (None, user):
                continue
            if filters is not None and not filters.keeps(run):
                continue
            found.append(dict(run))
            if want is not None and len(found) >= want:
                break
        token = body.get("next_page_token") if body.get("has_more", True) else None
        if not token:
            return found, False
        if scanned >= MAX_LIST_SCAN:
            return found, True
    return found, False


def list_runs(
    core: ClientCore,
    *,
    limit: int,
    all_status: bool,
    filters: RunFilters | None = None,
    all_users: bool = False,
) -> Flow[list[RunSummary]]:
    """The newest AI Runtime runs that pass ``filters``: the caller's (``user=`` another's,
    ``all_users`` everyone's); the active ones from runs/list; with ``all_status`` every
    state, from the caller's AI Runtime index hydrated by runs/get, falling back to the
    runs/list scan when the index is not available or another user's runs are asked for
    (list.go newListStrategy)."""
    if limit < 1:
        raise ConfigurationError(f"invalid limit {limit}: must be a positive integer")
    filters = filters or RunFilters()
    user = filters.user
    current: str | None = None
    if user is None and not all_users:
        identity = yield from whoami(core)
        user = current = identity.user_name
    if all_status and current is not None:  # the index holds only the caller's own runs
        try:
            refs = yield from list_workflows(core, active_only=False)
        except AirError:
            refs = None
        if refs is not None:
            newest = [r for r, _ in sorted(refs, key=lambda ref: ref[1], reverse=True)]
            bodies: list[dict[str, Any]] = []
            # With a filter on the runs, read on until ``limit`` pass (list.go: the index
            # is not cut to the newest N first, so a dropped run does not shrink the list).
            while newest and len(bodies) < limit:
                batch = newest[: limit if not filters.on_runs else LIST_PAGE_LIMIT]
                newest = newest[len(batch) :]
                read = yield from gather(
                    [get_run_body(core, run_id) for run_id in batch], _HYDRATE_CONCURRENCY
                )
                bodies.extend(b for b in read if filters.keeps(b))
            return (yield from _summaries_with_progress(core, bodies[:limit]))
    runs, _ = yield from _scan_runs(
        core, active_only=not all_status, user=user, want=limit, filters=filters
    )
    return (yield from _summaries_with_progress(core, runs))


def _summaries_with_progress(
    core: ClientCore, bodies: list[dict[str, Any]]
) -> Flow[list[RunSummary]]:
    """Summaries of listed runs, each running one with its progress (list.go's Progress
    column), read a few runs at once."""
    states = [RunState.from_api(b) for b in bodies]
    progress = yield from gather([training_progress(core, s) for s in states], _HYDRATE_CONCURRENCY)
    return [summarize(b, core.host, progress=p) for b, p in zip(bodies, progress, strict=True)]


def active_runs_of_current_user(core: ClientCore) -> Flow[list[RunSummary]]:
    """Every active AI Runtime run of the caller, for ``airo cancel --all``: all pages, and
    an error rather than a partial list when the scan hits its cap (cancel.go)."""
    identity = yield from whoami(core)
    runs, truncated = yield from _scan_runs(
        core, active_only=True, user=identity.user_name, want=None
    )
    if truncated:
        raise ConfigurationError(
            f"failed to list active runs: stopped after scanning {MAX_LIST_SCAN} runs"
        )
    return [summarize(r, core.host) for r in runs]


@dataclass(frozen=True, slots=True)
class CancelResult:
    """Which runs were asked to cancel, and why the others could not be (cancel.go
    cancelData: cancelled, failed)."""

    cancelled: tuple[int, ...]
    failed: tuple[tuple[int, str], ...] = ()


def cancel_runs(
    core: ClientCore, run_ids: list[int], cause: CancelCause | None = None
) -> Flow[CancelResult]:
    """Cancel each run, keeping ``cause`` next to each first; one that cannot be cancelled
    does not stop the others."""
    cancelled: list[int] = []
    failed: list[tuple[int, str]] = []
    for run_id in run_ids:
        try:
            yield from cancel_with_cause(core, run_id, cause)
        except AirError as error:
            failed.append((run_id, core.redactor(str(error))))
            continue
        cancelled.append(run_id)
    return CancelResult(tuple(cancelled), tuple(failed))


def cancel_all_active(core: ClientCore) -> Flow[CancelResult]:
    """``airo cancel --all`` without its confirmation: every active run of the caller,
    all listed before the first cancel (cancel.go)."""
    runs = yield from active_runs_of_current_user(core)
    return (yield from cancel_runs(core, [r.run_id for r in runs]))


@dataclass(frozen=True, slots=True)
class TaskRunRef:
    """A task run's id where a run id was expected: its task and, when found, its run."""

    task_run_id: int
    task_key: str
    parent_run_id: int | None

    def describe(self) -> str:
        where = f"of run {self.parent_run_id}" if self.parent_run_id else "of a run"
        return f"{self.task_run_id} is task `{self.task_key}` {where}"


def task_run_ref(core: ClientCore, run_id: int) -> Flow[TaskRunRef | None]:
    """None when ``run_id`` is a run; else the task run it names."""
    body = yield from core.call("GET", f"{RUNS_API}/get", params={"run_id": run_id})
    if _text(body.get("task_key")) is None or body.get("tasks"):
        return None
    return (yield from _task_run_ref_of(core, run_id, body))


def _task_run_ref_of(core: ClientCore, run_id: int, body: Mapping[str, Any]) -> Flow[TaskRunRef]:
    """The task run ``body`` (its runs/get, which names its ``task_key`` and has no
    ``tasks``) and its run: ``parent_run_id`` when the answer has it, else searched for
    among the newest runs (their expanded tasks)."""
    task_key = str(body.get("task_key"))
    parent = body.get("parent_run_id")
    if isinstance(parent, int) and parent != run_id:
        return TaskRunRef(run_id, task_key, parent)
    scanned = 0
    token: str | None = None
    while scanned < _PARENT_SEARCH_RUNS:
        params: dict[str, Any] = {"expand_tasks": "true", "limit": LIST_PAGE_LIMIT}
        if token:
            params["page_token"] = token
        page = yield from core.call("GET", f"{RUNS_API}/list", params=params)
        for run in page.get("runs") or []:
            scanned += 1
            tasks = run.get("tasks") if isinstance(run, Mapping) else None
            if any(isinstance(t, Mapping) and t.get("run_id") == run_id for t in tasks or []):
                return TaskRunRef(run_id, task_key, int(run["run_id"]))
        token = page.get("next_page_token") if page.get("has_more", True) else None
        if not token:
            break
    return TaskRunRef(run_id, task_key, None)
