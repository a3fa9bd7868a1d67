"""Flows about runs: state, output, list, wait, cancel, failure details, logs."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._diagnosis import Diagnosis, Termination, diagnose
from .._errors import AirError, NotFound, PlatformError, RunFailed
from .._failure_policy import RetryDecision
from .._polling import Examine, Pause, Tally, jittered, until_ended
from .._states import (
    RunState,
    TaskState,
    _repair_ranks,
    failure_message,
    mlflow_ids,
    mlflow_run_url,
)
from .._sweeps import MAX_LIST_PAGES, Sweep, SweepSpend
from .._wait_policy import WaitPolicy
from ._checkpoint_folders import newest_checkpoint_of_task
from ._core import ClientCore, Emit, EndSignal, Flow, LogRecord, Sleep, gather

logger = logging.getLogger("air_runtime.client")

RUNS_API = "/api/2.2/jobs/runs"
# The platform's launcher prints this line on the node whose command failed.
_FAILED_SCRIPT_MARK = "ERROR: Script failed"
_MAX_NODES_SEARCHED = 8
_LOG_TAIL = 20
_LOG_PAGE_SIZE = 500
# While the platform waits for GPUs nothing changes for minutes: poll less, up to this factor.
FOLLOW_POLL_S = 2.0


def get_run(core: ClientCore, run_id: int, *, include_history: bool = False) -> Flow[RunState]:
    return RunState.from_api((yield from get_run_body(core, run_id, include_history)))


def get_run_body(
    core: ClientCore, run_id: int, include_history: bool = False
) -> Flow[dict[str, Any]]:
    """``runs/get`` as the API answers it, with every page of its tasks (and, with
    ``include_history``, the run's ``repair_history``)."""
    params: dict[str, Any] = {"run_id": run_id}
    if include_history:  # Jobs API runs/get: "whether to include the repair history"
        params["include_history"] = "true"
    body: dict[str, Any] = yield from core.call("GET", f"{RUNS_API}/get", params=params)
    # Tasks may be paged: fetch the rest so the latest attempt of every task is known.
    tasks = list(body.get("tasks") or [])
    page_token = body.get("next_page_token")
    while page_token:
        page = yield from core.call(
            "GET", f"{RUNS_API}/get", params={**params, "page_token": page_token}
        )
        tasks.extend(page.get("tasks") or [])
        page_token = page.get("next_page_token")
    if tasks:
        body["tasks"] = tasks
    return body


def get_output(core: ClientCore, task_run_id: int) -> Flow[dict[str, Any]]:
    body: dict[str, Any] = yield from core.call(
        "GET", f"{RUNS_API}/get-output", params={"run_id": task_run_id}
    )
    return body


def list_runs(
    core: ClientCore, *, active_only: bool, limit: int, page_token: str | None
) -> Flow[tuple[list[RunState], str | None]]:
    # As the CLI lists (list.go newJobsScanStrategy): one-time submit runs, with their tasks.
    params: dict[str, Any] = {"run_type": "SUBMIT_RUN", "expand_tasks": "true", "limit": limit}
    if active_only:
        params["active_only"] = "true"
    if page_token:
        params["page_token"] = page_token
    body = yield from core.call("GET", f"{RUNS_API}/list", params=params)
    runs = [RunState.from_api(run) for run in body.get("runs") or []]
    next_token = body.get("next_page_token") if body.get("has_more", True) else None
    return runs, next_token or None


def list_runs_raw(core: ClientCore, params: dict[str, Any]) -> Flow[dict[str, Any]]:
    body: dict[str, Any] = yield from core.call("GET", f"{RUNS_API}/list", params=params)
    return body


def cancel(core: ClientCore, run_id: int) -> Flow[None]:
    yield from core.call("POST", f"{RUNS_API}/cancel", json={"run_id": run_id})


def sweep_spend(core: ClientCore, sweep: Sweep) -> Flow[SweepSpend]:
    """What ``sweep`` spent: every page of ``runs/list`` since it began
    (``Sweep.list_params``: submit runs with their tasks, as the CLI lists runs), counted by
    ``Sweep.tally``. A sweep of a few dozen runs is one request."""
    listed: list[dict[str, Any]] = []
    token: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_LIST_PAGES):
        params = sweep.list_params()
        if token:
            params["page_token"] = token
        page = yield from core.call("GET", f"{RUNS_API}/list", params=params)
        listed.extend(r for r in page.get("runs") or [] if isinstance(r, dict))
        token = page.get("next_page_token") if page.get("has_more", True) else None
        if not token or token in seen:
            break
        seen.add(token)
    return sweep.tally(listed)


def repair_run(
    core: ClientCore, run_id: int, rerun_tasks: Sequence[str], latest_repair_id: int | None
) -> Flow[int]:
    """Re-run tasks of an ended run as new task runs of the same run; the repair's id.

    Jobs API ``POST /api/2.2/jobs/runs/repair`` (docs.databricks.com/api/workspace/jobs/
    repairrun): ``latest_repair_id`` must name the run's newest repair once it has one, so
    a request repeated after a lost answer, or a second caller that read the run before the
    first repair, is refused instead of repairing twice; retrying it is safe."""
    body: dict[str, Any] = {"run_id": run_id, "rerun_tasks": list(rerun_tasks)}
    if latest_repair_id is not None:
        body["latest_repair_id"] = latest_repair_id
    answer = yield from core.call("POST", f"{RUNS_API}/repair", json=body)
    return int(answer["repair_id"])


def _jittered(seconds: float, core: ClientCore) -> float:
    return jittered(seconds, core.rng)


def wait(
    core: ClientCore,
    run_id: int,
    policy: WaitPolicy,
    *,
    poll_interval: float,
    on_update: Callable[[RunState], None] | None = None,
    on_retry: Callable[[RetryDecision], None] | None = None,
) -> Flow[RunState]:
    """Poll until the run (with the policy's ``task_key``: that task of it) ends, under
    ``policy`` (``WaitPolicy``: its deadline, budgets, failure policy); returns the state that
    shows the end (success or not). Decisions on failed attempts go to ``on_retry``."""
    loop = until_ended(
        run_id,
        policy,
        poll_interval=poll_interval,
        rng=core.rng,
        on_update=on_update,
        on_retry=on_retry,
    )
    request = next(loop)
    while True:
        answer: RunState | Diagnosis | SweepSpend | None = None
        if isinstance(request, Pause):
            yield Sleep(request.seconds)
        elif isinstance(request, Examine):
            answer = yield from attempt_diagnosis(core, request.state, request.attempt)
        elif isinstance(request, Tally):
            answer = yield from sweep_spend(core, request.sweep)
        else:
            answer = yield from get_run(core, run_id)
        try:
            request = loop.send(answer)
        except StopIteration as stop:
            result: RunState = stop.value
            return result


def _logs_path(run_id: int) -> str:
    return f"/api/2.0/ai-training/workflows/by-run-id/{run_id}/logs"


def _logs_unavailable(error: AirError) -> bool:
    if isinstance(error, NotFound):
        return True
    return isinstance(error, PlatformError) and error.error_code == "FEATURE_DISABLED"


@dataclass
class _LogCursor:
    """Where one log stream (a run or attempt, one node) was read up to. The server's
    ``from`` is inclusive and in whole seconds, so the records of the last second come
    again: those already emitted are dropped."""

    run_id: int
    node: int
    attempt: int | None = None
    last_time: int | None = None
    at_last_time: set[str] = field(default_factory=set)

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "ascending": "true",
            "filter.node_index": self.node,
            "page_size": _LOG_PAGE_SIZE,
        }
        if self.attempt is not None:
            # One retry attempt of a Jobs run (logbricklens.go ref.attempt_number).
            params["ref.attempt_number"] = self.attempt
        if self.last_time:
            # Unix epoch seconds, the last record's time_unix_nano / 1e9 (logbricklens.go,
            # logstream.go).
            params["from"] = self.last_time // 1_000_000_000
        return params

    def resume_after(self, shown: int) -> None:
        """Stand after every record up to time ``shown`` (ns): a log that showed them before
        (another process's) is taken over without showing them again."""
        if self.last_time is None or shown >= self.last_time:
            self.last_time, self.at_last_time = shown + 1, set()

    def fresh(self, raw: dict[str, Any]) -> tuple[int, str] | None:
        """The record's time and body when it was not emitted yet; marks it emitted."""
        stamp = int(raw.get("time_unix_nano") or 0)
        body = str(raw.get("body") or "")
        if self.last_time is not None and stamp < self.last_time:
            return None
        if stamp == self.last_time:
            if body in self.at_last_time:
                return None
            self.at_last_time.add(body)
        else:
            self.last_time, self.at_last_time = stamp, {body}
        return stamp, body


def _logs_page(
    core: ClientCore, run_id: int, params: dict[str, Any]
) -> Flow[dict[str, Any] | None]:
    """One page of a stream's log records; None when the log service is not there."""
    try:
        body: dict[str, Any] = yield from core.call("GET", _logs_path(run_id), params=params)
    except AirError as error:
        if _logs_unavailable(error):
            return None
        raise
    return body


def _read_new(core: ClientCore, cursor: _LogCursor) -> Flow[list[tuple[int, str]] | None]:
    """The records of one stream not read before, every page of them; None when logs are
    unavailable."""
    fresh: list[tuple[int, str]] = []
    page_token: str | None = None
    params = cursor.params()
    while True:
        if page_token:
            params["page_token"] = page_token
        body = yield from _logs_page(core, cursor.run_id, params)
        if body is None:
            return None
        for raw in body.get("log_records") or []:
            if isinstance(raw, dict) and (item := cursor.fresh(raw)) is not None:
                fresh.append(item)
        page_token = body.get("next_page_token")
        if not page_token:
            return fresh


def _waking(until: EndSignal | None) -> EndSignal | None:
    """What ends a follower's pause: ``until`` being set, once. Set already (the caller saw
    an end that runs/get does not show yet), pauses are whole again, never a busy loop."""
    return until if until is not None and not until.is_set() else None


def iter_logs(
    core: ClientCore,
    run_id: int,
    *,
    node: int,
    follow: bool,
    until: EndSignal | None = None,
) -> Flow[None]:
    """Emit each log record of one node of ``run_id`` (a run or a task run) once.

    Following stops after one last read once the run has ended: ``until`` says so when
    given (set by a caller that already watches the run; the pause between reads ends
    when it is), else a runs/get between reads."""
    cursor = _LogCursor(run_id, node)
    while True:
        records = yield from _read_new(core, cursor)
        if records is None:
            logger.info("logs of run %s are not available on %s", run_id, core.host)
            return
        for stamp, body in records:
            yield Emit(LogRecord(stamp, body, node))
        if not follow:
            return
        if until is not None:
            ended = until.is_set()
        else:
            state = yield from get_run(core, run_id)
            ended = state.is_terminal
        if ended:
            follow = False  # one last read picks up what was written before the end
            continue
        yield Sleep(_jittered(FOLLOW_POLL_S, core), wake=_waking(until))


# While following, runs/get is asked at most every this many reads when the caller says
# when the run ends (``until``): only to learn of new attempts.
_STATE_EVERY_READS = 5


@dataclass(frozen=True, slots=True)
class TaskTry:
    """One task run of a task, as its logs are addressed and labelled. ``number`` counts the
    task's task runs from 0 in the order they ran, platform retries and repairs alike: for a
    run never repaired it is the platform's ``attempt_number``, as ``databricks air logs
    --retry N`` counts (cmd/air/logs.go resolveLogAttempt); a repair's task run (Jobs
    ``runs/repair``: attempt 0 of its task again, under a task-run id of its own, listed in
    ``repair_history[].task_run_ids``) counts on, so ``--retry 1`` is a stage's first repair
    when the platform never retried it. ``repair``: 0 for the original run, N for its Nth
    repair."""

    attempt: TaskState
    number: int
    repair: int

    @property
    def task_key(self) -> str:
        return self.attempt.task_key


def task_tries(state: RunState, task_key: str | None = None) -> tuple[TaskTry, ...]:
    """Every task run of the task ``task_key`` (of every task when None), each task's in the
    order they ran: by repair (``repair_history`` when the answer has it), then attempt."""
    ranks = _repair_ranks(state.attempts, state.repairs)
    keys = {a.task_key for a in state.task_attempts(task_key)}
    by_task: dict[str, list[tuple[int, TaskState]]] = {}
    for rank, attempt in zip(ranks, state.attempts, strict=True):
        if attempt.task_key in keys:
            by_task.setdefault(attempt.task_key, []).append((rank, attempt))
    tries: list[TaskTry] = []
    for runs in by_task.values():
        ordered = sorted(runs, key=lambda pair: (pair[0], pair[1].attempt_number))
        tries += [TaskTry(a, n, rank) for n, (rank, a) in enumerate(ordered)]
    return tuple(tries)


def _repaired(state: RunState) -> bool:
    """Whether a task of the run ran again in a repair (two task runs, one attempt number)."""
    return len({(a.task_key, a.attempt_number) for a in state.attempts}) < len(state.attempts)


def _attempt_cursors(state: RunState, attempt: TaskState, node: int | None) -> list[_LogCursor]:
    nodes = [node] if node is not None else list(range(attempt.node_count))
    if len({a.task_key for a in state.attempts}) <= 1 and not _repaired(state):
        # A one-task run is read as the CLI reads it: the Jobs run id and the attempt
        # (logs.go resolveLogAttempt, logbricklens.go).
        return [_LogCursor(state.run_id, n, attempt.attempt_number) for n in nodes]
    if attempt.run_id is None:
        return []  # not started yet
    # A task of a multi-task (or repaired) run is addressed by its own task-run id: each
    # attempt and each repair's re-run has one, where ref.attempt_number would mix a
    # repair's attempt 0 with the original's.
    return [_LogCursor(attempt.run_id, n) for n in nodes]


def tail_records(
    core: ClientCore, cursor: _LogCursor, count: int
) -> Flow[list[tuple[int, str]] | None]:
    """The last ``count`` records of one stream, oldest first: newest-first pages, put back
    in order (logstream.go drainTail); the cursor then stands after them. None when logs
    are unavailable."""
    newest: list[tuple[int, str]] = []
    params: dict[str, Any] = {**cursor.params(), "ascending": "false"}
    params.pop("from", None)
    while len(newest) < count:
        params["page_size"] = min(_LOG_PAGE_SIZE, count - len(newest))
        body = yield from _logs_page(core, cursor.run_id, params)
        if body is None:
            return None
        for raw in body.get("log_records") or []:
            if isinstance(raw, dict):
                newest.append((int(raw.get("time_unix_nano") or 0), str(raw.get("body") or "")))
        params["page_token"] = body.get("next_page_token")
        if not params["page_token"]:
            break
    records = list(reversed(newest[:count]))
    for stamp, body_text in records:
        cursor.fresh({"time_unix_nano": stamp, "body": body_text})
    return records


def iter_run_logs(
    core: ClientCore,
    run_id: int,
    *,
    task_key: str | None,
    node: int | None,
    follow: bool,
    until: EndSignal | None = None,
    attempt: int | None = None,
    since_ns: int | None = None,
    tail: int | None = None,
    every_repair: bool = False,
) -> Flow[int | None]:
    """Emit every node's records of every attempt of every task of a run (or of the task
    ``task_key``, or only node ``node``), each once, labelled with task, node and attempt
    (``task_tries``: each task run is a stream of its own, a repair's too).

    One task (``task_key``) is read as a workflow stage's try sees it: the task runs of the
    newest repair that ran it (its platform retries included), never an earlier try's;
    ``every_repair`` reads all of them (``airo logs --task``).

    Nodes and attempts come from the run (each attempt's compute; a retry adds an attempt
    while following). Each read asks every open stream for what is new; a stream closes
    after one read past its attempt's end, and following ends after one read past the
    run's end (past the task's, with ``task_key``). ``until``, set by a caller that already
    watches the run once it has seen the run end, spares most runs/get calls: the run is
    then read only every few reads (to learn of retries), and at once when it is set (it
    ends the pause between reads), so the last read follows the end without a pause.

    ``attempt`` keeps one try (``TaskTry.number``: 0-based, the API's attempt number for a
    run never repaired); ``since_ns`` starts every stream at that time (``airo logs
    --minutes``), ``tail`` at its last records (``--tail``). Returns how many records were
    emitted, None when the log service is not available (404, FEATURE_DISABLED)."""
    streams: dict[tuple[str, int, int], tuple[TaskTry, _LogCursor]] = {}
    closed: set[tuple[str, int, int]] = set()
    tailed: set[tuple[str, int, int]] = set()
    state = yield from get_run(core, run_id, include_history=True)
    reads = 0
    emitted = 0
    while True:
        tries = task_tries(state, task_key)
        if task_key is not None and not every_repair:
            newest = max((t.repair for t in tries), default=0)
            tries = tuple(t for t in tries if t.repair == newest)
        for one in tries:
            if attempt is not None and one.number != attempt:
                continue
            for cursor in _attempt_cursors(state, one.attempt, node):
                # A try's number is its place among its task's task runs: new ones only
                # ever come after, so the key names one task run for good.
                key = (one.task_key, one.number, cursor.node)
                if key not in streams and since_ns is not None:
                    cursor.last_time = since_ns
                # The attempt as last seen decides when its stream closes.
                streams[key] = (one, streams[key][1] if key in streams else cursor)
        for key, (one, cursor) in streams.items():
            seen = one.attempt
            if key in closed:
                continue
            if tail is not None and key not in tailed:
                tailed.add(key)
                records = yield from tail_records(core, cursor, tail)
            else:
                records = yield from _read_new(core, cursor)
            if records is None:
                logger.info("logs of run %s are not available on %s", run_id, core.host)
                return None
            for stamp, body in records:
                emitted += 1
                yield Emit(record_of(one, cursor.node, stamp, body))
            if seen.is_terminal or state.is_terminal:
                closed.add(key)
        # Following one task ends with that task (the rest of its run may go on).
        if not follow or state.has_ended(task_key):
            return emitted
        yield Sleep(_jittered(FOLLOW_POLL_S, core), wake=_waking(until))
        reads += 1
        if until is None or reads % _STATE_EVERY_READS == 0 or until.is_set():
            state = yield from get_run(core, run_id, include_history=True)


def record_of(one: TaskTry, node: int, stamp: int, body: str) -> LogRecord:
    """A record of the task run ``one``, labelled with its try, repair and task-run id."""
    return LogRecord(stamp, body, node, one.task_key, one.number, one.repair, one.attempt.run_id)


def log_tail(core: ClientCore, run_id: int, node: int) -> Flow[list[str] | None]:
    """The last lines of one node's log: one newest-first page, put back in order."""
    params = {"ascending": "false", "filter.node_index": node, "page_size": _LOG_TAIL}
    try:
        body = yield from core.call("GET", _logs_path(run_id), params=params)
    except AirError as error:
        if _logs_unavailable(error):
            return None
        raise
    lines: list[str] = []
    for record in reversed(body.get("log_records") or []):
        lines.extend(str(record.get("body") or "").rstrip("\n").splitlines())
    return lines[-_LOG_TAIL:]


@dataclass(frozen=True)
class FailureReport:
    """What the logs of a failed task say: each node's last lines, the node whose command
    failed (the launcher's error line; else node 0) and the diagnosis."""

    tails: dict[int, list[str]] = field(default_factory=dict)
    node: int | None = None
    diagnosis: Diagnosis | None = None

    @property
    def tail(self) -> list[str] | None:
        return self.tails.get(self.node) if self.node is not None else None


def failure_report(core: ClientCore, state: RunState) -> Flow[FailureReport]:
    """The last lines of every node of the failed task's newest attempt (read at once, up to
    8 nodes) and the diagnosis they, its exit code and the platform's termination reason
    give. Logs that cannot be read leave the diagnosis to the termination reason."""
    task = state.failed_task
    log_run = task.run_id if task is not None and task.run_id else state.run_id
    nodes = min(task.node_count if task is not None else 1, _MAX_NODES_SEARCHED)
    tails: dict[int, list[str]] = {}
    try:
        read = yield from gather([log_tail(core, log_run, n) for n in range(nodes)], nodes)
        tails = {n: lines for n, lines in enumerate(read) if lines}
    except AirError as error:
        logger.debug("no logs for run %s: %s", state.run_id, error)
    return _report(
        tails, task, (task.termination if task is not None else None) or state.termination
    )


def attempt_diagnosis(
    core: ClientCore, state: RunState, attempt: TaskState
) -> Flow[Diagnosis | None]:
    """Why one ended attempt of the run failed, while the run goes on (a retry follows): its
    nodes' last lines (up to 8 nodes, read at once), addressed as the CLI addresses an
    attempt (``ref.attempt_number``, logbricklens.go), its exit code and termination reason."""
    cursors = _attempt_cursors(state, attempt, None)[:_MAX_NODES_SEARCHED]
    tails: dict[int, list[str]] = {}
    try:
        read = yield from gather([tail_records(core, c, _LOG_TAIL) for c in cursors], len(cursors))
    except AirError as error:
        logger.debug(
            "no logs for attempt %s of run %s: %s", attempt.attempt_number, state.run_id, error
        )
        read = []
    for cursor, records in zip(cursors, read, strict=False):
        lines = [x for _, body in records or [] for x in body.rstrip("\n").splitlines()]
        if lines:
            tails[cursor.node] = lines[-_LOG_TAIL:]
    diagnosis = _report(tails, attempt, attempt.termination).diagnosis
    if diagnosis is None:
        return None
    # Where the retry resumes: two more requests, only for an attempt that failed.
    checkpoint = yield from newest_checkpoint_of_task(core, attempt)
    return dataclasses.replace(diagnosis, checkpoint=checkpoint) if checkpoint else diagnosis


def _report(
    tails: dict[int, list[str]], task: TaskState | None, termination: Termination | None
) -> FailureReport:
    """The node whose command failed (the launcher's error line; else node 0) and the
    diagnosis of the task's nodes' last lines."""
    failed = next((n for n, t in tails.items() if any(_FAILED_SCRIPT_MARK in x for x in t)), None)
    node = failed if failed is not None else (0 if 0 in tails else None)
    diagnosis = diagnose(
        tails,
        task_key=task.task_key if task is not None else None,
        attempt_number=task.attempt_number if task is not None else None,
        max_retries=task.max_retries if task is not None else None,
        termination=termination,
        failed_node=node,
        state_message=task.state_message if task is not None else None,
    )
    return FailureReport(tails, node, diagnosis)


@dataclass(frozen=True)
class RunResult:
    """How a terminal run (or a one-stage view of it) ended: the failure with its full
    message and the failed task's ``get-output`` (when read), or, on success, the ``get-output``
    of its single task (MLflow ids either way); and the
    accelerator-hours of all its attempts."""

    failure: RunFailed | None = None
    output: dict[str, Any] = field(default_factory=dict)
    gpu_hours: float = 0.0

    @property
    def mlflow_ids(self) -> tuple[str | None, str | None]:
        """The MLflow experiment and run ids of the task, when the platform gave them."""
        return mlflow_ids(self.output)

    def mlflow_url(self, host: str) -> str | None:
        """The MLflow page of the run on ``host``; None without both ids."""
        return mlflow_run_url(host, *self.mlflow_ids)


def run_result(core: ClientCore, state: RunState) -> Flow[RunResult]:
    """Everything an orchestrator reports when a run ends; missing output is not an error."""
    if not state.attempts:
        # A runs/list entry has no tasks: the attempts carry the compute and durations.
        with contextlib.suppress(AirError):
            state = yield from get_run(core, state.run_id)
    gpu_hours = round(state.gpu_hours(), 6)
    try:
        yield from raise_for_failure(core, state)
    except RunFailed as failure:
        # The output read for the message: its MLflow ids fill the failed run's links too.
        return RunResult(failure=failure, output=failure.output, gpu_hours=gpu_hours)
    task = state.tasks[0] if len(state.tasks) == 1 else None
    if task is None or task.run_id is None:
        return RunResult(gpu_hours=gpu_hours)
    try:
        output = yield from get_output(core, task.run_id)
    except AirError as error:
        logger.debug("no output for task run %s: %s", task.run_id, error)
        return RunResult(gpu_hours=gpu_hours)
    return RunResult(output=output, gpu_hours=gpu_hours)


def raise_for_failure(core: ClientCore, state: RunState) -> Flow[None]:
    """Raise ``RunFailed`` with everything a user needs for a terminal, unsuccessful run."""
    if state.is_success or not state.is_terminal:
        return
    if not state.tasks:
        with contextlib.suppress(AirError):
            state = yield from get_run(core, state.run_id)
    task = state.failed_task
    output: dict[str, Any] = {}
    if task is not None and task.run_id is not None:
        try:
            output = yield from get_output(core, task.run_id)
        except AirError as error:
            logger.debug("no output for task run %s: %s", task.run_id, error)
    report = FailureReport()
    if state.result_state not in ("SKIPPED", "MAXIMUM_CONCURRENT_RUNS_REACHED", "CANCELED"):
        # The failed task's own run id narrows the logs to its last attempt.
        report = yield from failure_report(core, state)
    raise RunFailed(
        failure_message(
            state,
            output=output,
            log_tail=report.tail,
            node=report.node,
            diagnosis=report.diagnosis,
        ),
        run_id=state.run_id,
        result_state=state.result_state or state.life_cycle_state,
        run_page_url=state.run_page_url,
        output=output,
    )
