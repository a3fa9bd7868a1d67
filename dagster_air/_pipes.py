"""Dagster Pipes from the ranks of a run.

Channel: the run's own log stream. Dagster's default message writer, given
``{"stdio": "stdout"}``, prints each message as one JSON line (``{"__dagster_pipes_version":
...}``) to the rank's stdout; the platform keeps every node's stdout in the run's logs (the
same logs endpoint ``databricks air logs`` reads), and the local workspace does the same, so
the messages need no volume, no DBFS and no extra credentials on either. The step reads
them back while it follows the logs and hands them to Dagster's ``PipesMessageHandler``.

Context: ``PipesEnvContextInjector`` (the context in ``DAGSTER_PIPES_CONTEXT``), set as
workload environment variables through ``Workload.with_overrides`` like any other variable.
Each stage gets its own context naming only its asset, so ``report_asset_materialization()``
and ``report_asset_check()`` need no asset key in the workload.

A line longer than the platform's log record limit (64 KiB on the local workspace) is cut
into several records and is not a message: keep reported metadata small.
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

from ._translator import META_PREFIX

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
        self,
        expected_writers: int = 0,
        route: Callable[[str, int], PipesMessageHandler] | None = None,
    ) -> None:
        self._handler: PipesMessageHandler | None = None
        # Every rank may open Pipes: "closed" from rank 0 must not make rank 1's messages
        # unexpected. Each task's context adds its nodes (``StepPipes.env_for``).
        self.expected_writers = expected_writers
        self._route = route
        self.messages = 0

    @property
    def expected_writer_count(self) -> int:
        return max(1, self.expected_writers)

    @contextmanager
    def read_messages(self, handler: PipesMessageHandler) -> Iterator[PipesParams]:
        self._handler = handler
        try:
            yield {PipesDefaultMessageWriter.STDIO_KEY: PipesDefaultMessageWriter.STDOUT}
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
        handler = self._route(task_key, attempt) if self._route is not None else self._handler
        handler.handle_message(message)  # type: ignore[arg-type]
        self.messages += 1
        return True

    def no_messages_debug_text(self) -> str:
        return (
            "Messages are read from the run's logs: the workload calls "
            "dagster_pipes.open_dagster_pipes() (dagster-pipes installed in its environment) "
            "and writes to its stdout."
        )


@dataclass(frozen=True)
class PartitionScope:
    """The one partition a task of a partition range run works on, for its Pipes context."""

    key: str
    time_window: dg.TimeWindow | None = None


@dataclass(frozen=True)
class AttemptReports:
    """What one attempt of one task reported: materializations (several reports of one
    asset merged, later keys winning) and asset check results."""

    task_key: str
    attempt: int  # the platform's attempt_number (0 for the first)
    materializations: dict[dg.AssetKey, dg.MaterializeResult]
    checks: list[dg.AssetCheckResult]


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
    """The Pipes session of one step: per task environment variables before the submit,
    reported results per task attempt after the run.

    Messages are kept apart per task attempt (each log record names its task and attempt):
    a platform retry of a task reports again, and only the task's final attempt stands for
    it (see :meth:`final_reports`); earlier attempts' reports become observations.
    """

    def __init__(self, context: dg.AssetExecutionContext) -> None:
        self.context = context
        self.reader = PipesAirLogMessageReader(route=self._handler_of)
        self._messages_params: PipesParams = {}  # once open (``open_step_pipes``)
        self.handler = PipesMessageHandler(context, self.reader)
        self._attempts: dict[tuple[str, int], PipesMessageHandler] = {}

    def _handler_of(self, task_key: str, attempt: int) -> PipesMessageHandler:
        handler = self._attempts.get((task_key, attempt))
        if handler is None:
            handler = self._attempts[(task_key, attempt)] = PipesMessageHandler(
                self.context, self.reader
            )
        return handler

    def env_for(
        self,
        asset_key: dg.AssetKey,
        stage_key: str,
        nodes: int,
        partition: PartitionScope | None = None,
    ) -> dict[str, str]:
        """``DAGSTER_PIPES_CONTEXT``/``DAGSTER_PIPES_MESSAGES`` for one task's workload (of
        ``nodes`` nodes, each a writer): its asset, and (a task of a partition range run)
        its own partition."""
        self.reader.expected_writers += nodes
        data = build_external_execution_context_data(self.context, {"air_stage": stage_key})
        name = asset_key.to_user_string()
        data["asset_keys"] = [name]
        for field in ("code_version_by_asset_key", "provenance_by_asset_key"):
            by_key = data.get(field)
            if isinstance(by_key, Mapping):
                data[field] = {k: v for k, v in by_key.items() if k == name}
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
                DAGSTER_PIPES_MESSAGES_ENV_VAR: encode_param(self._messages_params),
            }

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
def open_step_pipes(context: dg.AssetExecutionContext) -> Iterator[StepPipes]:
    """The step's Pipes session, open for the whole step (its messages' parameters are
    known from here on)."""
    pipes = StepPipes(context)
    with pipes.handler.handle_messages() as params:
        pipes._messages_params = params
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
