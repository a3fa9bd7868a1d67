"""The step run: one Dagster step materializing one or more stages as one remote run.

``_step_submission`` decides what the step submits; the life of the submission is
``air_runtime.Submission``'s; the translator (``DagsterAirTranslator``) says what each event
records. This module turns the run into Dagster events: state changes and node log lines
while it waits, one observation per ended attempt, then the materializations and check
results, or the failure.

Dagster Pipes: the channel is the run's own log stream. Each rank prints its messages to
its stdout (``_step_submission`` gives every workload its Pipes environment); the step reads
them back while it follows the logs and hands them to Dagster's ``PipesMessageHandler``, one
per task attempt. A line longer than the platform's log record limit (64 KiB on the local
workspace) is cut into several records and is not a message: keep reported metadata small.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import queue
import re
import sys
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster import PipesMessageHandler, PipesMessageReader
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster_pipes import PipesParams

from air_runtime import AirClient, AirError, RunFailed, RunOutcome, RunState, SubmittedRun, Workload

from ._blocking import AttemptReports, BlockingChecks, RunTask, blocking_check_keys
from ._config import AirRunConfig
from ._identity import terminal_failure_observation
from ._resource import AirWorkspace
from ._step_submission import (
    OUTPUT_URI_KEY,
    PIPES_MESSAGES_PARAMS,
    AirWorkflow,
    LoadedStage,
    RemoteRun,
    StepSubmission,
)
from ._translator import META_PREFIX, DagsterAirTranslator
from ._watch import watch_in_background

_LOCATION = re.compile(r"^(/|[a-zA-Z][a-zA-Z0-9+.-]*:/)")

# What a step yields; a step over a partition range also yields per-partition
# materializations and check evaluations, and its checks' outputs (see ``_ranges``).
AirEvent = (
    dg.MaterializeResult
    | dg.AssetObservation
    | dg.AssetCheckResult
    | dg.AssetMaterialization
    | dg.AssetCheckEvaluation
    | dg.Output
)


# --- Dagster Pipes -------------------------------------------------------------------

# How every message line starts (dagster_pipes writes json.dumps of a dict whose first key
# is the protocol version).
MESSAGE_PREFIX = '{"__dagster_pipes_version"'


def is_pipes_message(line: str) -> bool:
    return line.startswith(MESSAGE_PREFIX)


class PipesAirLogMessageReader(PipesMessageReader):
    """Reads Pipes messages that any rank printed to its stdout, from the run's logs.

    The step's log follower hands every log line to :meth:`handle_line` (on the step's
    thread, where Dagster's log manager may be called); message lines go to the handler of
    the task attempt that printed them, the others are ordinary log lines.
    """

    def __init__(
        self, expected_writers: int, route: Callable[[str, int], PipesMessageHandler]
    ) -> None:
        self._handler: PipesMessageHandler | None = None  # while the session is open
        # Every rank may open Pipes: "closed" from rank 0 must not make rank 1's messages
        # unexpected (one writer per node of every workload).
        self.expected_writers = expected_writers
        self._route = route

    @property
    def expected_writer_count(self) -> int:
        return max(1, self.expected_writers)

    @contextmanager
    def read_messages(self, handler: PipesMessageHandler) -> Iterator[PipesParams]:
        self._handler = handler
        try:
            yield PIPES_MESSAGES_PARAMS
        finally:
            self._handler = None

    def handle_line(self, line: str, task_key: str = "", attempt: int = 0) -> bool:
        """True when the line was a Pipes message (handled), False for an ordinary line.
        ``task_key`` and ``attempt`` say which task attempt printed it."""
        if self._handler is None or not is_pipes_message(line):
            return False
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or "method" not in message:
            return False
        self._route(task_key, attempt).handle_message(message)  # type: ignore[arg-type]
        return True

    def no_messages_debug_text(self) -> str:
        return (
            "Messages are read from the run's logs: the workload calls "
            "dagster_pipes.open_dagster_pipes() (dagster-pipes installed in its environment) "
            "and writes to its stdout."
        )


def _merged_reports(task_key: str, attempt: int, results: Sequence[Any]) -> AttemptReports:
    materializations: dict[dg.AssetKey, dg.MaterializeResult] = {}
    checks: list[dg.AssetCheckResult] = []
    for result in results:
        if isinstance(result, dg.MaterializeResult) and result.asset_key is not None:
            key = result.asset_key
            earlier = materializations.get(key)
            if earlier is not None:
                result = dg.MaterializeResult(
                    asset_key=key,
                    metadata={**(earlier.metadata or {}), **(result.metadata or {})},
                    data_version=result.data_version or earlier.data_version,
                )
            materializations[key] = result
        elif isinstance(result, dg.AssetCheckResult):
            checks.append(result)
    return AttemptReports(task_key, attempt, materializations, checks)


@dataclass(frozen=True)
class StepReports:
    """What a run's tasks reported through Pipes, once it ended."""

    materializations: dict[dg.AssetKey, dg.MaterializeResult]  # of final attempts
    checks: list[dg.AssetCheckResult]  # of final attempts
    earlier: list[AttemptReports]  # of attempts a platform retry superseded


class StepPipes:
    """The Pipes session of one step: what each task attempt reported.

    Messages are kept apart per task attempt (each log record names its task and attempt):
    a platform retry of a task reports again, and only the task's final attempt stands for
    it (see :meth:`final_reports`); earlier attempts' reports become observations.
    """

    def __init__(self, context: dg.AssetExecutionContext, writers: int) -> None:
        self.context = context
        self.reader = PipesAirLogMessageReader(writers, self._handler_of)
        self.handler = PipesMessageHandler(context, self.reader)
        self._attempts: dict[tuple[str, int], PipesMessageHandler] = {}

    def _handler_of(self, task_key: str, attempt: int) -> PipesMessageHandler:
        handler = self._attempts.get((task_key, attempt))
        if handler is None:
            handler = self._attempts[(task_key, attempt)] = PipesMessageHandler(
                self.context, self.reader
            )
        return handler

    def reports(self) -> list[AttemptReports]:
        """Every task attempt's reports so far, in the order they first reported."""
        return [
            _merged_reports(task_key, attempt, handler.get_reported_results())
            for (task_key, attempt), handler in self._attempts.items()
        ]

    def final_reports(self, state: RunState) -> tuple[list[AttemptReports], list[AttemptReports]]:
        """(the reports of each task's final attempt, those of earlier attempts)."""
        final: list[AttemptReports] = []
        earlier: list[AttemptReports] = []
        for reports in self.reports():
            task = state.task(reports.task_key) if reports.task_key else None
            last = task.attempt_number if task is not None else reports.attempt
            (final if reports.attempt >= last else earlier).append(reports)
        return final, earlier

    def reported(self, state: RunState) -> StepReports:
        """What the run reported: materializations per asset and the asset check results of
        each task's final attempt, and what earlier attempts reported."""
        final, earlier = self.final_reports(state)
        materializations: dict[dg.AssetKey, dg.MaterializeResult] = {}
        checks: list[dg.AssetCheckResult] = []
        for reports in final:
            materializations.update(reports.materializations)
            checks.extend(reports.checks)
        return StepReports(materializations, checks, earlier)


@contextmanager
def open_step_pipes(context: dg.AssetExecutionContext, writers: int) -> Iterator[StepPipes]:
    """The step's Pipes session, open while the step waits and records: ``writers`` ranks
    (one per node of every workload submitted) may print messages."""
    pipes = StepPipes(context, writers)
    with pipes.handler.handle_messages():
        yield pipes


def earlier_attempt_observation(
    reports: AttemptReports,
    asset_key: dg.AssetKey,
    partition: str | None,
    run_id: int,
) -> dg.AssetObservation:
    """What an earlier (retried) attempt of a task reported, kept as an observation: the
    final attempt's reports are the materialization and the check results."""
    metadata: dict[str, Any] = {
        f"{META_PREFIX}run_id": dg.MetadataValue.int(run_id),
        f"{META_PREFIX}attempt": reports.attempt + 1,
        f"{META_PREFIX}superseded_by_retry": True,
    }
    for result in reports.materializations.values():
        metadata.update(result.metadata or {})
    for check in reports.checks:
        metadata[f"{META_PREFIX}check/{check.check_name}"] = "passed" if check.passed else "failed"
    return dg.AssetObservation(asset_key=asset_key, partition=partition, metadata=metadata)


# --- the step run ---------------------------------------------------------------------


class StepRun:
    """One Dagster step materializing one or more stages as one remote run."""

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        workflow: AirWorkflow,
        workspace: AirWorkspace,
        config: AirRunConfig,
        extra_overrides: Mapping[str, Any] | Sequence[str] | None = None,
        translator: DagsterAirTranslator | None = None,
    ) -> None:
        self.context = context
        self.workflow = workflow
        self.workspace = workspace
        self.config = config
        self.extra_overrides = extra_overrides
        self.translator = translator or workflow.translator
        self.pipes: StepPipes | None = None
        self._attempts_seen: set[tuple[str, int]] = set()
        self._client: AirClient | None = None  # while the step waits (to cancel blocked tasks)
        self.blocking: BlockingChecks | None = None
        self._last_state: RunState | None = None  # the newest state the wait saw

    @classmethod
    def run(cls, *args: Any, **kwargs: Any) -> Iterator[AirEvent]:
        """Run one step (the arguments are the constructor's)."""
        yield from cls(*args, **kwargs).execute()

    def redact(self, text: str) -> str:
        return self.step.redact(text)

    # --- the whole step -------------------------------------------------------------

    def _submission(self) -> StepSubmission:
        """What this step submits (a step over a partition range: see ``_ranges``)."""
        return StepSubmission(
            self.context, self.workflow, self.workspace, self.config, self.extra_overrides
        )

    def execute(self) -> Iterator[AirEvent]:
        with contextlib.ExitStack() as stack:
            self._client = client = stack.enter_context(self.workspace.get_client())
            self.step = step = self._submission()
            selected = step.selected
            if not selected:
                return
            try:
                workloads = step.submit(client)
                if self.workspace.pipes:  # open while the step waits and records
                    writers = sum(w.num_nodes for w in workloads.values())  # one per node
                    self.pipes = stack.enter_context(open_step_pipes(self.context, writers))
                for run in step.runs:
                    assert run.submitted is not None
                    run.state = yield from self._wait(run.submitted)
            except DagsterExecutionInterruptedError:
                for run in step.runs:
                    if run.submitted is None:
                        continue
                    ended = run.state or self._cancel_remote(client, run)
                    if ended is not None:
                        run.submission.finish(client, ended)
                    # A retry of this step (Dagster retries interrupted steps that have a
                    # retry policy) must not reattach to the run just cancelled.
                    yield terminal_failure_observation(
                        self.context, selected[0].asset_key, run.submitted, ended, step.generation
                    )
                raise
            for run in step.runs:
                run.submission.finish(client, run.state)
            yield from self._results(client, workloads)

    # --- waiting --------------------------------------------------------------------

    def _show(self, item: tuple[str, Any], run_id: int) -> Iterator[AirEvent]:
        kind, value = item
        if kind == "state":
            state: RunState = value
            text = f"run {run_id}: {state.describe()}"
            if state.is_waiting_for_capacity:
                text += " (waiting for GPU capacity)"
            self.context.log.info(self.redact(text))
            self._last_state = state
            self._follow_blocking(state)
            yield from self._attempt_ends(state)
        elif kind == "warning":
            self.context.log.warning(self.redact(str(value)))
        elif kind == "log":
            record, line = value
            line = self.redact(line)
            # Pipes messages of every node; printed lines of every node or the chosen one.
            if self.pipes is not None and self.pipes.reader.handle_line(
                line, record.task_key, record.attempt
            ):
                # A check may arrive after the state that ended its task (logs lag states).
                if self._last_state is not None:
                    self._follow_blocking(self._last_state)
                return
            node = self._log_node()
            if self.workspace.stream_logs and (node is None or record.node_index == node):
                sys.stdout.write(f"[run {run_id} {record.label}] {line}\n")
                sys.stdout.flush()

    def _follow_blocking(self, state: RunState) -> None:
        reports = self.pipes.reports() if self.pipes is not None else None
        if self.blocking is None:
            self.blocking = BlockingChecks(self._run_tasks(), blocking_check_keys(self.context))
        if reports is not None:
            self.blocking.update(
                self._cancel_run if self._client is not None else None,
                state,
                reports,
                self.context.log,
                self.redact,
            )

    def _recheck_blocking(self, run_id: int) -> None:
        """Read the run again while a failed blocking check waits for its task's end."""
        state = self._last_state
        if (
            self.blocking is None
            or self.pipes is None
            or self._client is None
            or state is None
            or state.run_id != run_id
            or not self.blocking.awaiting_end(state, self.pipes.reports())
        ):
            return
        try:
            fresh = self._client.get_run(run_id)
        except AirError as error:
            self.context.log.warning(f"could not read run {run_id}: {self.redact(str(error))}")
            return
        self._last_state = fresh
        self._follow_blocking(fresh)

    def _cancel_run(self, run_id: int) -> None:
        """Cancel one of the step's remote runs (every unfinished task of it is blocked)."""
        assert self._client is not None
        for run in self.step.runs:
            if run.submitted is not None and run.submitted.run_id == run_id:
                run.submission.cancel(self._client)

    def _log_node(self) -> int | None:
        if self.workflow.log_node is not None:
            return self.workflow.log_node
        return self.workspace.log_node

    def _attempt_ends(self, state: RunState) -> Iterator[AirEvent]:
        """One observation per attempt of a selected stage that ended (platform retries
        included), on that stage's asset, as soon as the step sees it."""
        for attempt in state.attempts:
            key = (attempt.task_key, attempt.attempt_number)
            if not attempt.is_terminal or key in self._attempts_seen:
                continue
            self._attempts_seen.add(key)
            loaded = self._stage_of_task(attempt.task_key)
            if loaded is None:
                continue
            final = attempt.result_state or attempt.life_cycle_state
            shown = dataclasses.replace(attempt, state_message=self.redact(attempt.state_message))
            self.context.log.info(
                f"run {state.run_id}: {attempt.task_key} attempt {attempt.attempt_number + 1} "
                f"ended {final}"
            )
            yield dg.AssetObservation(
                asset_key=loaded.asset_key,
                partition=self._partition_of_task(attempt.task_key),
                metadata=self.translator.get_attempt_metadata(
                    loaded.stage, loaded.workload, state.run_id, shown
                ),
            )

    def _partition_of_task(self, task_key: str) -> str | None:
        return self.context.partition_key if self.context.has_partition_key else None

    def _run_tasks(self) -> dict[str, RunTask]:
        """The tasks of the run and their dependencies (for blocking checks)."""
        if self.step.single:
            return {}
        keys = {s.key for s in self.step.selected}
        return {
            s.key: RunTask(
                s.key, s.asset_key, None, tuple(d for d in s.stage.depends_on if d in keys)
            )
            for s in self.step.selected
        }

    def _stage_of_task(self, task_key: str) -> LoadedStage | None:
        selected = self.step.selected
        if self.step.single:
            return selected[0]  # a single-task run's task is the workload's
        for loaded in selected:
            if loaded.key == task_key:
                return loaded
        return None

    def _wait(self, submitted: SubmittedRun) -> Generator[AirEvent, None, RunState]:
        events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        # Every node is followed (Pipes messages may come from any rank); log_node only
        # narrows what is printed.
        future = watch_in_background(
            self.workspace,
            submitted.run_id,
            events,
            follow_logs=self.workspace.stream_logs or self.pipes is not None,
        )
        try:
            while True:
                yield from self._drain(events, submitted.run_id)
                try:
                    state = future.result(timeout=0.5)
                    break
                except concurrent.futures.TimeoutError:
                    self._recheck_blocking(submitted.run_id)
                    continue
            yield from self._drain(events, submitted.run_id)
            # The end as any state the wait shows: blocking checks first, then the attempts.
            self._last_state = state
            self._follow_blocking(state)
            yield from self._attempt_ends(state)
            return state
        except BaseException:
            future.cancel()  # stop following this run on the background loop
            raise

    def _drain(self, events: queue.SimpleQueue[tuple[str, Any]], run_id: int) -> Iterator[AirEvent]:
        while True:
            try:
                item = events.get_nowait()
            except queue.Empty:
                return
            yield from self._show(item, run_id)

    def _cancel_remote(self, client: AirClient, run: RemoteRun) -> RunState | None:
        """The Dagster run was terminated: stop the GPU run too, and wait a little for it
        to end so the event log says how it ended. Returns the final state when it ended
        within ``cancel_wait``."""
        log = self.context.log
        submitted = run.submitted
        assert submitted is not None
        log.warning(
            f"Dagster run terminated: cancelling run {submitted.run_id} ({submitted.run_page_url})"
        )
        try:
            state = run.submission.cancel(
                client,
                wait_s=self.workspace.cancel_wait,
                poll_interval=min(1.0, self.workspace.poll_interval),
            )
        except AirError as error:
            log.error(f"could not cancel run {submitted.run_id}: {self.redact(str(error))}")
            return None
        if state is not None:
            log.warning(f"run {submitted.run_id} ended {state.describe()}")
        elif self.workspace.cancel_wait > 0:
            log.warning(
                f"run {submitted.run_id} is still ending after {self.workspace.cancel_wait:g}s"
            )
        return state

    def _output_metadata(self, workload: Workload) -> dict[str, Any]:
        name = self.workflow.output_env
        value = workload.env_variables.get(name) if name else None
        if not value:
            return {}
        metadata: dict[str, Any] = {f"{META_PREFIX}output/{name}": value}
        if _LOCATION.match(value):  # a path or a URL, not some other kind of value
            metadata[OUTPUT_URI_KEY] = value
        return metadata

    def _check_results(
        self, checks: list[dg.AssetCheckResult], materialized: set[dg.AssetKey]
    ) -> Iterator[AirEvent]:
        """The check results the workload reported, for the checks this step runs; a
        declared check the workload did not report fails (it cannot pass unseen)."""
        selected = self.context.selected_asset_check_keys
        seen = set()
        for check in checks:
            key = dg.AssetCheckKey(check.asset_key, check.check_name)  # type: ignore[arg-type]
            if key not in selected or key in seen:
                self.context.log.warning(
                    f"the workload reported check {check.check_name} of "
                    f"{key.asset_key.to_user_string()}, which this step does not run: ignored"
                )
                continue
            seen.add(key)
            yield check
        for key in sorted(selected - seen, key=str):
            if key.asset_key not in materialized:
                continue
            yield dg.AssetCheckResult(
                asset_key=key.asset_key,
                check_name=key.name,
                passed=False,
                metadata={"reason": "the workload did not report this check (dagster-pipes)"},
            )

    def _earlier_attempts(
        self, earlier: Sequence[AttemptReports], submitted: SubmittedRun
    ) -> Iterator[AirEvent]:
        """What retried attempts reported, as observations (the final attempt's reports are
        the materialization and the check results)."""
        for reports in earlier:
            loaded = self._stage_of_task(reports.task_key)
            if loaded is not None:
                yield earlier_attempt_observation(
                    reports,
                    loaded.asset_key,
                    self._partition_of_task(reports.task_key),
                    submitted.run_id,
                )

    def _blocked_message(self, blocked: Mapping[str, str]) -> str:
        cancelled = self.blocking is not None and bool(self.blocking.cancelled)
        lines = [f"{key}: not materialized, {reason}" for key, reason in sorted(blocked.items())]
        tail = " (their unfinished tasks were cancelled)" if cancelled else ""
        return "downstream of a failed blocking check" + tail + ":\n" + "\n".join(lines)

    def _results(self, client: AirClient, workloads: dict[str, Workload]) -> Iterator[AirEvent]:
        (run,) = self.step.runs
        submitted, state, generation = run.submitted, run.state, self.step.generation
        assert submitted is not None and state is not None
        selected = self.step.selected
        reported: dict[dg.AssetKey, dg.MaterializeResult] = {}
        checks: list[dg.AssetCheckResult] = []
        if self.pipes is not None:
            reports = self.pipes.reported(state)  # the wait followed its blocking checks
            yield from self._earlier_attempts(reports.earlier, submitted)
            reported, checks = reports.materializations, reports.checks
        blocked = self.blocking.blocked if self.blocking is not None else {}
        # Recorded on a failure (blocked checks, a failed run).
        run_metadata = self.translator.get_run_metadata(
            submitted.run_id, submitted.run_page_url, state
        )
        failed_asset = selected[0].asset_key
        failed_task = state.failed_task
        materialized: set[dg.AssetKey] = set()
        for loaded in selected:
            task_key = loaded.workload.experiment_name if self.step.single else loaded.key
            task = state.task(task_key)
            if (
                task is not None
                and failed_task is not None
                and task.task_key == failed_task.task_key
            ):
                failed_asset = loaded.asset_key
            if loaded.key in blocked:
                self.context.log.warning(
                    f"stage {loaded.key} is not recorded as materialized: {blocked[loaded.key]}"
                )
                continue
            if task.is_success if task is not None else state.is_success:
                outcome = RunOutcome.read(client, state, task_key)
                outcome = dataclasses.replace(outcome, run_page_url=submitted.run_page_url)
                workload = workloads[loaded.key]
                metadata = self.translator.get_materialization_metadata(
                    loaded.stage,
                    workload,
                    outcome,
                    state=state,
                    idempotency_token=submitted.idempotency_token,
                )
                metadata.update(self._output_metadata(workload))
                from_pipes = reported.get(loaded.asset_key)
                materialized.add(loaded.asset_key)
                yield dg.MaterializeResult(
                    asset_key=loaded.asset_key,
                    # What the workload reports adds to, never replaces, what the run says.
                    metadata={**(from_pipes.metadata or {} if from_pipes else {}), **metadata},
                    data_version=from_pipes.data_version if from_pipes else None,
                )
        yield from self._check_results(checks, materialized)
        if blocked:
            yield terminal_failure_observation(
                self.context, failed_asset, submitted, state, generation
            )
            raise dg.Failure(
                description=self.redact(self._blocked_message(blocked)), metadata=run_metadata
            )
        if state.is_success:
            return
        yield terminal_failure_observation(self.context, failed_asset, submitted, state, generation)
        try:
            client.raise_for_failure(state)
            message = f"run {submitted.run_id} ended {state.describe()}"
        except RunFailed as error:
            message = str(error)
        except AirError as error:
            message = f"run {submitted.run_id} ended {state.describe()} ({error})"
        raise dg.Failure(description=self.redact(message), metadata=run_metadata)
