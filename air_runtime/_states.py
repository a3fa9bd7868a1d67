"""Run-state normalization (docs/spec/workload.md §8) and the failure message both orchestrators show.

The platform adds life-cycle states over time, so anything not known here counts as still in
flight (with ``unknown_state`` set so callers can warn once) instead of failing a run that is
in fact fine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ._diagnosis import Diagnosis, Termination
from .platform import GPUS_PER_NODE

IN_FLIGHT_STATES = frozenset(
    {"QUEUED", "PENDING", "RUNNING", "TERMINATING", "BLOCKED", "WAITING_FOR_RETRY"}
)
TERMINAL_STATES = frozenset({"TERMINATED", "SKIPPED", "INTERNAL_ERROR"})
KNOWN_STATES = IN_FLIGHT_STATES | TERMINAL_STATES

# Words the platform uses in PENDING messages when it waits for GPUs rather than booting.
_CAPACITY_WORDS = ("capacity", "waiting for gpu", "no gpu", "insufficient", "quota")

# What each result tells the user, in words they can act on.
_RESULT_EXPLANATIONS = {
    "CANCELED": "the run was cancelled (by a user, the orchestrator or the platform) before it finished",
    "TIMEDOUT": "the run exceeded its timeout (timeout_minutes) and was stopped",
    "FAILED": "a command exited with an error",
    "INTERNAL_ERROR": "the platform failed while setting up or running the workload; "
    "this is usually transient, resubmitting may help",
    "SKIPPED": "the run was skipped: an upstream task failed or its run_if condition was not met",
    "MAXIMUM_CONCURRENT_RUNS_REACHED": "the workspace's limit of concurrent runs was reached, "
    "so the run never started; retry later or raise the limit",
    "UPSTREAM_FAILED": "a task it depends on failed, so it did not run",
    "UPSTREAM_CANCELED": "a task it depends on was cancelled, so it did not run",
    "EXCLUDED": "the task was excluded from this run",
}

_LOG_TAIL_LINES = 20
_TRACE_TAIL_LINES = 15


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _state_fields(body: Mapping[str, Any]) -> tuple[str, str | None, str]:
    state = body.get("state")
    if not isinstance(state, Mapping):
        state = {}
    life_cycle = _text(state.get("life_cycle_state")) or "PENDING"
    return life_cycle, _text(state.get("result_state")), _text(state.get("state_message")) or ""


def _is_terminal(life_cycle_state: str, result_state: str | None) -> bool:
    return life_cycle_state in TERMINAL_STATES or result_state is not None


def _command_path(body: Mapping[str, Any]) -> str | None:
    """Where the task's (first) command was uploaded: its plain variables sit next to it
    (``env_vars.json``, runupload.go)."""
    task = body.get("ai_runtime_task")
    deployments = task.get("deployments") if isinstance(task, Mapping) else None
    if not isinstance(deployments, list) or not deployments:
        return None
    first = deployments[0] if isinstance(deployments[0], Mapping) else {}
    containers = first.get("containers")
    if isinstance(containers, list) and containers and isinstance(containers[0], Mapping):
        return _text(containers[0].get("command_path"))
    return _text(first.get("command_path"))


def _compute(body: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """Accelerator type and count of a task, from its first deployment's compute, where
    the CLI reads them (joblist.go jobCompute)."""
    task = body.get("ai_runtime_task")
    deployments = task.get("deployments") if isinstance(task, Mapping) else None
    if not isinstance(deployments, list) or not deployments:
        return None, None
    first = deployments[0]
    compute = first.get("compute") if isinstance(first, Mapping) else None
    if not isinstance(compute, Mapping):
        return None, None
    return _text(compute.get("accelerator_type")), _int(compute.get("accelerator_count"))


@dataclass(frozen=True, slots=True)
class TaskState:
    """One attempt of one task of a run (``RunState.tasks`` holds each task's newest)."""

    task_key: str
    run_id: int | None
    attempt_number: int
    life_cycle_state: str
    result_state: str | None = None
    state_message: str = ""
    start_time: int | None = None
    end_time: int | None = None
    accelerator_type: str | None = None
    num_accelerators: int | None = None
    max_retries: int | None = None  # -1: unlimited (format.go maxRetries)
    termination: Termination | None = None  # status.termination_details
    command_path: str | None = None

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> TaskState:
        life_cycle, result, message = _state_fields(body)
        accelerator_type, num_accelerators = _compute(body)
        retries = body.get("max_retries")
        return cls(
            task_key=_text(body.get("task_key")) or "",
            run_id=_int(body.get("run_id")),
            attempt_number=_int(body.get("attempt_number")) or 0,
            life_cycle_state=life_cycle,
            result_state=result,
            state_message=message,
            start_time=_int(body.get("start_time")) or None,
            end_time=_int(body.get("end_time")) or None,
            accelerator_type=accelerator_type,
            num_accelerators=num_accelerators,
            max_retries=retries
            if isinstance(retries, int) and not isinstance(retries, bool)
            else None,
            termination=Termination.from_api(body),
            command_path=_command_path(body),
        )

    @property
    def node_count(self) -> int:
        """How many nodes the attempt runs on: accelerators over accelerators per node, as
        the CLI maps them onto node indices (logdownload.go resolveNodeCount); 1 when the
        compute is not known."""
        per_node = GPUS_PER_NODE.get(self.accelerator_type or "")
        if not per_node or not self.num_accelerators:
            return 1
        return max(1, self.num_accelerators // per_node)

    def gpu_hours(self, now_ms: int | None = None) -> float:
        """Accelerators times the attempt's duration in hours; an attempt still running
        counts up to ``now_ms`` (epoch milliseconds) when given, else not at all."""
        if not self.num_accelerators or not self.start_time:
            return 0.0
        end = self.end_time or now_ms
        if not end or end <= self.start_time:
            return 0.0
        return self.num_accelerators * (end - self.start_time) / 3_600_000

    @property
    def is_terminal(self) -> bool:
        return _is_terminal(self.life_cycle_state, self.result_state)

    @property
    def is_success(self) -> bool:
        return self.result_state == "SUCCESS"


@dataclass(frozen=True, slots=True)
class RepairItem:
    """One item of a run's ``repair_history`` (``runs/get?include_history=true``): the
    original run (``repair_id`` None) or one repair, and the task runs it started."""

    repair_id: int | None
    start_time: int | None = None
    end_time: int | None = None
    life_cycle_state: str = "PENDING"
    result_state: str | None = None
    task_run_ids: tuple[int, ...] = ()

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> RepairItem:
        life_cycle, result, _ = _state_fields(body)
        ids = body.get("task_run_ids")
        return cls(
            repair_id=_int(body.get("id")) if body.get("type") == "REPAIR" else None,
            start_time=_int(body.get("start_time")) or None,
            end_time=_int(body.get("end_time")) or None,
            life_cycle_state=life_cycle,
            result_state=result,
            task_run_ids=tuple(i for i in map(_int, ids if isinstance(ids, list) else ()) if i),
        )


def _repair_ranks(raw_tasks: Sequence[TaskState], history: Sequence[RepairItem]) -> list[int]:
    """Which repair (0: the original run) started each task run: from the repair history
    when the answer has it, else from the order of the task runs (one task's runs come
    oldest first; an attempt number that does not go up starts the runs of a repair)."""
    by_run = {i: rank for rank, item in enumerate(history) for i in item.task_run_ids}
    if by_run:
        return [by_run.get(t.run_id or -1, 0) for t in raw_tasks]
    ranks: list[int] = []
    last: dict[str, tuple[int, int]] = {}  # task key -> (rank, attempt) of its last run
    for task in raw_tasks:
        rank, attempt = last.get(task.task_key, (-1, -1))
        rank = rank + 1 if task.attempt_number <= attempt or rank < 0 else rank
        last[task.task_key] = (rank, task.attempt_number)
        ranks.append(rank)
    return ranks


@dataclass(frozen=True, slots=True)
class RunState:
    """A normalized view of ``runs/get`` (or a ``runs/list`` entry, which has no tasks)."""

    run_id: int
    life_cycle_state: str
    result_state: str | None = None
    state_message: str = ""
    run_name: str | None = None
    run_page_url: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    tasks: tuple[TaskState, ...] = field(default=())
    job_id: int | None = None
    # Every attempt of every task, in the API's order (a retried task appears once per
    # attempt, a repaired one once per task run); ``tasks`` keeps only each task's newest.
    attempts: tuple[TaskState, ...] = field(default=())
    # The original run and its repairs, when asked for (``include_history``).
    repairs: tuple[RepairItem, ...] = field(default=())
    # The run a one-stage view (``stage``) was taken of: its run_id is then the task run's.
    stage_of: int | None = None
    termination: Termination | None = None  # status.termination_details

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> RunState:
        """Build from an API answer; missing or odd fields get neutral defaults."""
        life_cycle, result, message = _state_fields(body)
        raw_tasks = body.get("tasks")
        attempts = [
            TaskState.from_api(raw)
            for raw in (raw_tasks if isinstance(raw_tasks, list) else ())
            if isinstance(raw, Mapping)
        ]
        raw_history = body.get("repair_history")
        repairs = tuple(
            RepairItem.from_api(item)
            for item in (raw_history if isinstance(raw_history, list) else ())
            if isinstance(item, Mapping)
        )
        # A retried task appears once per attempt, a repaired one once per task run: the
        # newest (of the latest repair, then the highest attempt) decides.
        latest: dict[str, tuple[tuple[int, int], TaskState]] = {}
        for rank, task in zip(_repair_ranks(attempts, repairs), attempts, strict=True):
            order = (rank, task.attempt_number)
            seen = latest.get(task.task_key)
            if seen is None or order >= seen[0]:
                latest[task.task_key] = (order, task)
        return cls(
            run_id=_int(body.get("run_id")) or 0,
            life_cycle_state=life_cycle,
            result_state=result,
            state_message=message,
            run_name=_text(body.get("run_name")),
            run_page_url=_text(body.get("run_page_url")),
            start_time=_int(body.get("start_time")) or None,
            end_time=_int(body.get("end_time")) or None,
            tasks=tuple(task for _, task in latest.values()),
            job_id=_int(body.get("job_id")),
            attempts=tuple(attempts),
            repairs=repairs,
            termination=Termination.from_api(body),
        )

    @property
    def latest_repair_id(self) -> int | None:
        """The id of the run's newest repair (None: never repaired, or the history was not
        asked for); ``runs/repair`` wants it once a run has a repair."""
        ids = [item.repair_id for item in self.repairs if item.repair_id is not None]
        return ids[-1] if ids else None

    @property
    def unknown_state(self) -> bool:
        """True for a life-cycle state this version does not know (treated as in flight)."""
        return self.life_cycle_state not in KNOWN_STATES

    @property
    def is_terminal(self) -> bool:
        return _is_terminal(self.life_cycle_state, self.result_state)

    @property
    def is_success(self) -> bool:
        return self.result_state == "SUCCESS"

    @property
    def is_waiting_for_capacity(self) -> bool:
        if self.is_terminal:
            return False
        if self.life_cycle_state == "QUEUED":
            return True
        if self.life_cycle_state != "PENDING":
            return False
        message = self.state_message.lower()
        return any(word in message for word in _CAPACITY_WORDS)

    def task(self, task_key: str) -> TaskState | None:
        """The newest attempt of the task ``task_key``; the only task of a single-task run
        when no task has that key (its key is the experiment's name)."""
        for task in self.tasks:
            if task.task_key == task_key:
                return task
        return self.tasks[0] if len(self.tasks) == 1 else None

    def has_ended(self, task_key: str | None = None) -> bool:
        """Whether the run, or for a workflow stage its task, has ended: a stage ends before
        its run does, and a run that ended without starting the stage's task ends it too."""
        task = self.task(task_key) if task_key is not None else None
        return self.is_terminal or (task is not None and task.is_terminal)

    def task_attempts(self, task_key: str | None = None) -> tuple[TaskState, ...]:
        """Every attempt of the task ``task_key`` (of every task when None), oldest first;
        the single task of a one-task run when no task has that key."""
        if task_key is None:
            return self.attempts
        chosen = self.task(task_key)
        if chosen is None:
            return ()
        return tuple(a for a in self.attempts if a.task_key == chosen.task_key)

    def accelerators_at_once(self, now_ms: int | None = None) -> dict[str, int]:
        """The most accelerators the run's attempts held at one time, by type: the tasks of
        a partition range or a sweep run side by side, a pipeline's stages one after another,
        a task's retries one after another. An attempt with no end time holds them until
        ``now_ms`` (when None: from its start on). Before any attempt started: what the
        newest attempt asks for."""
        events: list[tuple[int, int, str, int]] = []
        for attempt in self.attempts:
            if not attempt.start_time or not attempt.num_accelerators:
                continue
            kind = attempt.accelerator_type or ""
            end = attempt.end_time or now_ms
            events.append((attempt.start_time, 1, kind, attempt.num_accelerators))
            if end is not None:
                events.append((max(end, attempt.start_time), 0, kind, -attempt.num_accelerators))
        if not events:
            newest = max(self.attempts, key=lambda a: a.attempt_number, default=None)
            if newest is None or not newest.num_accelerators:
                return {}
            return {newest.accelerator_type or "": newest.num_accelerators}
        held: dict[str, int] = {}
        peak: dict[str, int] = {}
        for _, _, kind, change in sorted(events):  # at one instant, ends before starts
            held[kind] = held.get(kind, 0) + change
            if sum(held.values()) > sum(peak.values()):
                peak = {k: n for k, n in held.items() if n > 0}
        return peak

    def gpu_hours(self, task_key: str | None = None, now_ms: int | None = None) -> float:
        """Accelerator-hours of every attempt of the run (or of one task): what the
        platform held, retries included."""
        return sum(a.gpu_hours(now_ms) for a in self.task_attempts(task_key))

    def gpu_hours_by_type(
        self, task_key: str | None = None, now_ms: int | None = None
    ) -> dict[str, float]:
        """``gpu_hours`` by accelerator type ("" when an attempt's is not known): what a
        price per GPU-hour of each type turns into money."""
        hours: dict[str, float] = {}
        for attempt in self.task_attempts(task_key):
            used = attempt.gpu_hours(now_ms)
            if used:
                kind = attempt.accelerator_type or ""
                hours[kind] = hours.get(kind, 0.0) + used
        return hours

    def stage(self, task_key: str | None) -> RunState:
        """The run as one workflow stage sees it: its task's state stands for the run's, so
        failure messages and output lookups describe that stage (the run itself when
        ``task_key`` is None or unknown)."""
        task = self.task(task_key) if task_key is not None else None
        if task is None:
            return self
        return replace(
            self,
            stage_of=self.stage_of or self.run_id,
            run_id=task.run_id or self.run_id,
            life_cycle_state=task.life_cycle_state,
            result_state=task.result_state,
            state_message=task.state_message or self.state_message,
            tasks=(task,),
            attempts=self.task_attempts(task_key),
        )

    @property
    def failed_task(self) -> TaskState | None:
        """The task that explains the failure: one that failed itself before one only
        skipped because of an upstream task."""
        unsuccessful = [t for t in self.tasks if t.is_terminal and not t.is_success]
        for task in unsuccessful:
            if not (task.result_state or "").startswith("UPSTREAM_") and task.result_state not in (
                "SKIPPED",
                "EXCLUDED",
            ):
                return task
        return unsuccessful[0] if unsuccessful else None

    def describe(self) -> str:
        """One line for logs: ``RUNNING``, ``TERMINATED/FAILED: <message>``."""
        text = self.life_cycle_state + (f"/{self.result_state}" if self.result_state else "")
        return f"{text}: {self.state_message}" if self.state_message else text


def explain_result(result_state: str | None) -> str:
    if result_state is None:
        return "the run ended without a result"
    if result_state in _RESULT_EXPLANATIONS:
        return _RESULT_EXPLANATIONS[result_state]
    if result_state.startswith("UPSTREAM_"):
        return f"a task it depends on ended with {result_state.removeprefix('UPSTREAM_')}"
    return f"the run ended with result {result_state}"


def _tail(text: str, lines: int) -> list[str]:
    return text.rstrip().splitlines()[-lines:]


def failure_message(
    state: RunState,
    *,
    output: Mapping[str, Any] | None = None,
    log_tail: Sequence[str] | None = None,
    node: int | None = None,
    diagnosis: Diagnosis | None = None,
) -> str:
    """A message a user can act on: why it failed first (``diagnosis``, when known), then
    what ended how, where, the last log lines, the error and its trace, MLflow ids and the
    run page. ``node`` is the node ``log_tail`` came from. The run named is the run, never
    a task run of it (that one is named beside)."""
    name = f" ({state.run_name})" if state.run_name else ""
    run_id = state.stage_of or state.run_id
    result = state.result_state or state.life_cycle_state
    if state.life_cycle_state == "INTERNAL_ERROR" and state.result_state is None:
        result = "INTERNAL_ERROR"
    task = state.failed_task
    beside = ""
    if task is not None and task.run_id is not None and task.run_id != run_id:
        beside = f", task run {task.run_id}"
    explained = explain_result(result if result == "INTERNAL_ERROR" else state.result_state)
    lines = [f"Run {run_id}{name} ended {result}{beside}: {explained}."]
    if diagnosis is not None:
        lines.insert(0, f"Run {run_id}{name} failed{beside}: {diagnosis.headline()}")
    output = output or {}
    runtime_output = output.get("ai_runtime_task_output")
    if not isinstance(runtime_output, Mapping):
        runtime_output = {}
    if task is not None:
        where = f"Failed task: {task.task_key}"
        details = []
        if task.result_state:
            details.append(task.result_state)
        if task.run_id is not None:
            details.append(f"task run {task.run_id}")
        if task.attempt_number:
            details.append(f"attempt {task.attempt_number}")
        if node is not None:
            details.append(f"node {node}")
        if details:
            where += f" ({', '.join(details)})"
        lines.append(where)
    elif node is not None:
        lines.append(f"Failed node: {node}")
    # The platform repeats one reason in several places (the run's and the task's state
    # message, the output's status and error): each distinct reason once, the fullest wins.
    reasons = [
        ("State message", state.state_message),
        ("Task message", task.state_message if task is not None else None),
        ("Platform status", _text(runtime_output.get("status_message"))),
        ("Error", _text(output.get("error"))),
    ]
    for label, reason in _distinct_reasons(reasons):
        lines.append(f"{label}: {reason}")
    tail = list(log_tail or [])[-_LOG_TAIL_LINES:]
    if tail:
        origin = f" of node {node}" if node is not None else ""
        lines.append(f"Last log lines{origin}:")
        lines.extend(f"  | {line}" for line in tail)
    trace = _text(output.get("error_trace"))
    trace_tail = _tail(trace, _TRACE_TAIL_LINES) if trace else []
    shown = {line.strip() for line in tail}
    if trace_tail and not all(line.strip() in shown for line in trace_tail):
        lines.append("Error trace (last lines):")
        lines.extend(f"  | {line}" for line in trace_tail)
    experiment, mlflow_run = mlflow_ids(output)
    if experiment or mlflow_run:
        text = f"MLflow: experiment {experiment or '?'}, run {mlflow_run or '?'}"
        host = _host_of_page(state.run_page_url)
        url = mlflow_run_url(host, experiment, mlflow_run) if host else None
        lines.append(f"{text}: {url}" if url else text)
    if state.run_page_url:
        lines.append(f"Run page: {state.run_page_url}")
    return "\n".join(lines)


def _distinct_reasons(reasons: Sequence[tuple[str, str | None]]) -> list[tuple[str, str]]:
    """``reasons`` without blanks, repeats and texts another one contains."""
    texts = [(label, reason.strip()) for label, reason in reasons if reason and reason.strip()]
    kept: list[tuple[str, str]] = []
    for index, (label, reason) in enumerate(texts):
        inside_other = any(
            reason in other and (reason != other or j < index)
            for j, (_, other) in enumerate(texts)
            if j != index
        )
        if not inside_other:
            kept.append((label, reason))
    return kept


def _host_of_page(run_page_url: str | None) -> str:
    from urllib.parse import urlsplit

    url = urlsplit(run_page_url or "")
    return f"{url.scheme}://{url.netloc}" if url.netloc else ""


def mlflow_ids(output: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The MLflow experiment and run ids in a task's ``runs/get-output``."""
    runtime = output.get("ai_runtime_task_output")
    if not isinstance(runtime, Mapping):
        return None, None
    return _text(runtime.get("mlflow_experiment_id")), _text(runtime.get("mlflow_run_id"))


def mlflow_run_url(host: str, experiment_id: str | None, run_id: str | None) -> str | None:
    """The workspace's MLflow page of a run (``<host>/ml/experiments/<exp>/runs/<run>``)."""
    if not experiment_id or not run_id:
        return None
    return f"{host.rstrip('/')}/ml/experiments/{experiment_id}/runs/{run_id}"
