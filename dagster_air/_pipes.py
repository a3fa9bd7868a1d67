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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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

# How every message line starts (dagster_pipes writes json.dumps of a dict whose first key
# is the protocol version).
MESSAGE_PREFIX = '{"__dagster_pipes_version"'


def is_pipes_message(line: str) -> bool:
    return line.startswith(MESSAGE_PREFIX)


class PipesAirLogMessageReader(PipesMessageReader):
    """Reads Pipes messages that any rank printed to its stdout, from the run's logs.

    The step's log follower hands every log line to :meth:`handle_line` (on the step's
    thread, where Dagster's log manager may be called); message lines go to the handler,
    the others are ordinary log lines.
    """

    def __init__(self, expected_writers: int = 1) -> None:
        self._handler: PipesMessageHandler | None = None
        self._expected_writers = max(1, expected_writers)
        self.messages = 0

    @property
    def expected_writer_count(self) -> int:
        # Every rank may open Pipes: "closed" from rank 0 must not make rank 1's messages
        # unexpected.
        return self._expected_writers

    @contextmanager
    def read_messages(self, handler: PipesMessageHandler) -> Iterator[PipesParams]:
        self._handler = handler
        try:
            yield {PipesDefaultMessageWriter.STDIO_KEY: PipesDefaultMessageWriter.STDOUT}
        finally:
            self._handler = None

    def handle_line(self, line: str) -> bool:
        """True when the line was a Pipes message (handled), False for an ordinary line."""
        if self._handler is None or not is_pipes_message(line):
            return False
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or "method" not in message:
            return False
        self._handler.handle_message(message)  # type: ignore[arg-type]
        self.messages += 1
        return True

    def no_messages_debug_text(self) -> str:
        return (
            "Messages are read from the run's logs: the workload calls "
            "dagster_pipes.open_dagster_pipes() (dagster-pipes installed in its environment) "
            "and writes to its stdout."
        )


class StepPipes:
    """The Pipes session of one step: per stage environment variables before the submit,
    reported results after the run."""

    def __init__(self, context: dg.AssetExecutionContext, expected_writers: int) -> None:
        self.context = context
        self.reader = PipesAirLogMessageReader(expected_writers)
        self.handler = PipesMessageHandler(context, self.reader)

    @contextmanager
    def open(self) -> Iterator[StepPipes]:
        with self.handler.handle_messages() as params:
            self._messages_params = params
            yield self

    def env_for(self, asset_key: dg.AssetKey, stage_key: str) -> dict[str, str]:
        """``DAGSTER_PIPES_CONTEXT``/``DAGSTER_PIPES_MESSAGES`` for one stage's workload."""
        data = build_external_execution_context_data(self.context, {"air_stage": stage_key})
        name = asset_key.to_user_string()
        data["asset_keys"] = [name]
        for field in ("code_version_by_asset_key", "provenance_by_asset_key"):
            by_key = data.get(field)
            if isinstance(by_key, Mapping):
                data[field] = {k: v for k, v in by_key.items() if k == name}
        with PipesEnvContextInjector().inject_context(data) as context_params:
            return {
                DAGSTER_PIPES_CONTEXT_ENV_VAR: encode_param(context_params),
                DAGSTER_PIPES_MESSAGES_ENV_VAR: encode_param(self._messages_params),
            }

    def reported(self) -> tuple[dict[dg.AssetKey, dg.MaterializeResult], list[Any]]:
        """Materializations reported per asset (several reports of one asset merged, later
        keys winning) and the asset check results."""
        materializations: dict[dg.AssetKey, dg.MaterializeResult] = {}
        checks: list[Any] = []
        for result in self.handler.get_reported_results():
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
        return materializations, checks
