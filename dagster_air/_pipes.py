"""The Pipes session of one step: the channel is the run's own log stream.

Each rank prints its messages to its stdout (every workload gets its Pipes environment from
``pipes_env``: ``PipesEnvContextInjector``'s context naming only that task's asset, and in a
range run its own partition, so ``report_asset_materialization()`` and ``report_asset_check()``
need no asset key; the writer prints each message as one JSON line). The step reads them back
while it follows the logs and hands them to Dagster's ``PipesMessageHandler``, one per task
attempt. A line longer than the platform's log record limit (64 KiB on the local workspace) is
cut into several records and is not a message: keep reported metadata small.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster import PipesEnvContextInjector, PipesMessageHandler, PipesMessageReader
from dagster._core.pipes.context import build_external_execution_context_data
from dagster_pipes import (
    DAGSTER_PIPES_CONTEXT_ENV_VAR,
    DAGSTER_PIPES_MESSAGES_ENV_VAR,
    PipesDefaultMessageWriter,
    PipesParams,
    encode_param,
)

from air_runtime import RunState

from ._blocking import AttemptReports
from ._translator import META_PREFIX

# Where every rank's Pipes messages go: its stdout, which the platform keeps in the run's
# logs (the same logs endpoint ``databricks air logs`` reads), so the messages need no
# volume, no DBFS and no extra credentials.
PIPES_MESSAGES_PARAMS: PipesParams = {
    PipesDefaultMessageWriter.STDIO_KEY: PipesDefaultMessageWriter.STDOUT
}


@dataclass(frozen=True)
class PartitionScope:
    """The one partition a task of a partition range run works on, for its Pipes context."""

    key: str
    time_window: dg.TimeWindow | None = None


def pipes_env(
    context: dg.AssetExecutionContext,
    asset_key: dg.AssetKey,
    stage_key: str,
    partition: PartitionScope | None = None,
) -> dict[str, str]:
    """``DAGSTER_PIPES_CONTEXT``/``DAGSTER_PIPES_MESSAGES`` for one task's workload: its
    asset, and (a task of a partition range run) its own partition."""
    data = build_external_execution_context_data(context, {"air_stage": stage_key})
    name = asset_key.to_user_string()
    data["asset_keys"] = [name]
    for name_field in ("code_version_by_asset_key", "provenance_by_asset_key"):
        by_key = data.get(name_field)
        if isinstance(by_key, Mapping):
            data[name_field] = {k: v for k, v in by_key.items() if k == name}
    if partition is not None:
        data["partition_key"] = partition.key
        data["partition_key_range"] = {"start": partition.key, "end": partition.key}
        data["partition_time_window"] = (
            {
                "start": partition.time_window.start.isoformat(),
                "end": partition.time_window.end.isoformat(),
            }
            if partition.time_window is not None
            else None
        )
    with PipesEnvContextInjector().inject_context(data) as context_params:
        return {
            DAGSTER_PIPES_CONTEXT_ENV_VAR: encode_param(context_params),
            DAGSTER_PIPES_MESSAGES_ENV_VAR: encode_param(PIPES_MESSAGES_PARAMS),
        }


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
        f"{META_PREFIX}attempt_number": reports.attempt,
        f"{META_PREFIX}superseded_by_retry": True,
    }
    for result in reports.materializations.values():
        metadata.update(result.metadata or {})
    for check in reports.checks:
        metadata[f"{META_PREFIX}check/{check.check_name}"] = "passed" if check.passed else "failed"
    return dg.AssetObservation(asset_key=asset_key, partition=partition, metadata=metadata)
