"""Task log lines of a run while it is waited on: state changes and every node's log lines.

Only imported from ``execute`` and the triggers (it pulls in the core client's types).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from air_runtime import BudgetExceeded, RetriesStopped

if TYPE_CHECKING:
    from air_runtime import AirClient, RunState, WaitPolicy


class TaskLog(Protocol):
    """What these helpers need of a logger: the stdlib's and Airflow's task logger both fit."""

    def info(self, event: str, *args: Any) -> Any: ...

    def warning(self, event: str, *args: Any) -> Any: ...


class StateLogger:
    """Logs each state change once, with the platform's message ("waiting for GPU capacity")."""

    def __init__(self, log: TaskLog, run_id: int, task_key: str | None = None) -> None:
        self.log = log
        self.run_id = run_id
        self.task_key = task_key
        self._seen: tuple[Any, ...] | None = None

    def __call__(self, state: RunState) -> None:
        task = state.task(self.task_key) if self.task_key else None
        key: tuple[Any, ...] = (state.life_cycle_state, state.result_state, state.state_message)
        if task is not None:
            key += (task.life_cycle_state, task.result_state, task.state_message)
        if key == self._seen:
            return
        self._seen = key
        text = f"Run {self.run_id}: {state.describe()}"
        if task is not None:
            stage = task.life_cycle_state + (f"/{task.result_state}" if task.result_state else "")
            text += f"; stage {self.task_key}: {stage}"
            if task.state_message and task.state_message != state.state_message:
                text += f" ({task.state_message})"
        if state.is_waiting_for_capacity:
            text += " [waiting for GPU capacity]"
        if state.unknown_state:
            self.log.warning("%s (state unknown to this version; still waiting)", text)
        else:
            self.log.info("%s", text)


def _printed_at(time_unix_nano: int) -> str:
    """When the node printed a record, as the platform stamped it (UTC, milliseconds)."""
    printed = datetime.fromtimestamp(time_unix_nano / 1e9, tz=UTC)
    return printed.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _log_record(log: TaskLog, record: Any, *, stamped: bool = False) -> None:
    """One node's record in the task log, each line labelled ``[<task> node N attempt A]``;
    ``stamped``: prefixed with the time the node printed it, for lines copied after the fact
    (the task log's own timestamp is then the copy's, the same instant for every line)."""
    stamp = f"{_printed_at(record.time_unix_nano)} " if stamped else ""
    for line in record.body.splitlines() or [""]:
        log.info("%s[%s] %s", stamp, record.label, line)


class LogStreamer:
    """Copies every node's log lines of the run (or of one stage's task), every attempt,
    into the task log while a synchronous wait polls the run."""

    def __init__(
        self, client: AirClient, run_id: int, log: TaskLog, task_key: str | None = None
    ) -> None:
        # Set when the wait has seen the run (stage) end: the follower then reads one last
        # time instead of asking runs/get between reads.
        self._ended = threading.Event()
        self._thread = threading.Thread(
            target=self._follow,
            args=(client, run_id, task_key, log, self._ended),
            name=f"air-logs-{run_id}",
            daemon=True,
        )

    @staticmethod
    def _follow(
        client: AirClient,
        run_id: int,
        task_key: str | None,
        log: TaskLog,
        ended: threading.Event,
    ) -> None:
        try:
            for record in client.iter_run_logs(run_id, task_key=task_key, follow=True, until=ended):
                _log_record(log, record)
        except Exception as exc:  # logs are a convenience: never fail the task for them
            log.info("Log streaming of run %s stopped: %s", run_id, exc)

    def __enter__(self) -> LogStreamer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ended.set()
        self._thread.join(timeout=30)


def wait_logging(
    client: AirClient,
    run_id: int,
    log: TaskLog,
    policy: WaitPolicy,
    *,
    poll_interval: float | None,
    stream: bool,
    on_stop: Callable[[BudgetExceeded | RetriesStopped], None] | None = None,
    on_update: Callable[[RunState], None] | None = None,
) -> RunState:
    """Wait in the worker for the run (or the policy's ``task_key`` stage) to end under
    ``policy``, logging each state change (then telling ``on_update``) and, with ``stream``,
    every node's lines as they come (``poll_interval`` None: the client's); past the policy's
    ``max_gpu_hours``, ``on_stop`` (which cancels the run: the streamer's last read waits for
    the run to end), then ``BudgetExceeded``; the same once its ``sweep``'s budget is spent
    (``SweepBudgetSpent``), and when its ``failure_policy`` stops the platform's retries, then
    ``RetriesStopped``. Each decision of the failure policy is logged as it is made."""
    task_key = policy.task_key
    streaming = LogStreamer(client, run_id, log, task_key) if stream else contextlib.nullcontext()
    logger = StateLogger(log, run_id, task_key)

    def on_state(state: RunState) -> None:
        logger(state)
        if on_update is not None:
            on_update(state)

    with streaming:
        try:
            return client.wait(
                run_id,
                policy,
                poll_interval=poll_interval,
                on_update=on_state,
                on_retry=lambda decision: log.warning("%s", decision.line()),
            )
        except (BudgetExceeded, RetriesStopped) as stopped:
            if on_stop is not None:
                on_stop(stopped)
            raise


def _stream_key(record: Any) -> str:
    return str(record.stream)


class LiveLines:
    """A deferred task's log of its run's node lines while the run runs (the shared
    watcher's ``on_lines``), stamped with the time each was printed. ``shown`` (per node
    stream, the newest time shown) travels in the trigger's event so that the copy at the
    end adds only what was not shown; it starts from what an earlier trigger of the same
    wait showed (``shown``), and ``on_shown`` hears it after each batch of lines logged."""

    def __init__(
        self,
        log: TaskLog,
        run_id: int,
        shown: dict[str, int] | None = None,
        on_shown: Callable[[dict[str, int]], None] | None = None,
    ) -> None:
        self.log = log
        self.run_id = run_id
        self.shown: dict[str, int] = dict(shown or {})
        self.on_shown = on_shown

    def __call__(self, records: Any, passed_over: bool) -> None:
        if passed_over:
            self.log.info(
                "(earlier lines of run %s passed over to keep within [air] live_lines_per_read: "
                "`airo logs %s` has them all)",
                self.run_id,
                self.run_id,
            )
        for record in records:
            _log_record(self.log, record, stamped=True)
            key = _stream_key(record)
            self.shown[key] = max(self.shown.get(key, 0), record.time_unix_nano)
        if records and self.on_shown is not None:
            self.on_shown(dict(self.shown))


class LogCopy:
    """Every node's lines of an ended run (or stage), every attempt, into the task log at
    once: how a try that did not stream them gets them (it waited in the triggerer, or found
    the run ended). ``add`` is the sink of the core's ``end_of_try_flow``: whole records
    until ``max_lines`` would be passed, then one line that says where the rest is (``airo
    logs``); the records ``shown`` live while the run ran (``LiveLines.shown``) are skipped."""

    def __init__(
        self,
        log: TaskLog,
        run_id: int,
        task_key: str | None,
        max_lines: int,
        shown: dict[str, int] | None = None,
    ) -> None:
        self.log = log
        self.run_id = run_id
        self.task_key = task_key
        self.max_lines = max_lines
        self.shown = shown or {}
        self.written = 0

    def add(self, record: Any) -> bool:
        """Log ``record``; False once the budget is spent (stop reading)."""
        if record.time_unix_nano <= self.shown.get(_stream_key(record), -1):
            return True
        lines = record.body.count("\n") + 1
        if self.written + lines > self.max_lines:
            where = f" --task {self.task_key}" if self.task_key else ""
            self.log.info(
                "Log copy stopped after %d lines ([air] completed_log_lines): the rest "
                "with `airo logs %s%s`",
                self.written,
                self.run_id,
                where,
            )
            return False
        _log_record(self.log, record, stamped=True)
        self.written += lines
        return True


# How long a trigger waits for its last line to reach its log file before it ends: the
# triggerer drains trigger lines 4 KiB per loop and closes a trigger's file as soon as the
# trigger ends, so under a burst of lines the last ones would land in the triggerer's own log
# instead of the task's (apache/airflow#66158).
LAST_LINE_WAIT_SECONDS = 30.0
# Given up sooner when no file of this trigger shows up at all (logs not on this machine).
NO_LOG_FILE_SECONDS = 3.0
_TAIL_BYTES = 64 * 1024


def _attempt_log(task_instance: Any) -> Path | None:
    """This try's log file as the log filename template names it; None when it cannot be
    rendered (an unusual template)."""
    try:
        from airflow.configuration import conf
        from airflow.utils.helpers import log_filename_template_renderer

        relative = log_filename_template_renderer()(ti=task_instance)
        return Path(conf.get("logging", "base_log_folder")) / relative
    except Exception:
        return None


def _trigger_files_of(attempt: Path) -> list[Path]:
    return sorted(attempt.parent.glob(f"{attempt.name}.trigger.*.log"))


def trigger_log_files(task_instance: Any) -> list[Path]:
    """The files the triggerers on this machine write this try's trigger lines to
    (``<attempt's log>.trigger.<triggerer job>.log``); empty when they cannot be found."""
    attempt = _attempt_log(task_instance)
    return [] if attempt is None else _trigger_files_of(attempt)


class _TailSearch:
    """Looks for one line in files that grow, reading each byte once: the first look reads
    a file's last ``_TAIL_BYTES``, each later one only what was appended since (and the
    needle's length before it, for a line split across two looks)."""

    def __init__(self, needle: bytes) -> None:
        self.needle = needle
        self._searched: dict[Path, int] = {}  # file -> bytes searched up to

    def found_in(self, path: Path) -> bool:
        try:
            with path.open("rb") as f:
                size = f.seek(0, 2)
                start = self._searched.get(path, size - _TAIL_BYTES)
                if start > size:  # a file written anew
                    start = size - _TAIL_BYTES
                f.seek(max(0, start - len(self.needle) + 1))
                appended = f.read()
                self._searched[path] = f.tell()
        except OSError:
            return False
        return self.needle in appended


async def wait_until_in_trigger_log(task_instance: Any, line: str) -> bool:
    """Wait until ``line`` (the last one the trigger logged) is in one of this try's trigger
    log files, so that every line before it is too; False when it did not get there in
    ``LAST_LINE_WAIT_SECONDS`` or no file of this try could be found."""
    import asyncio
    import json

    search = _TailSearch(json.dumps(line, ensure_ascii=False)[1:-1].encode())
    loop = asyncio.get_running_loop()
    started = loop.time()
    # Rendered once: with hundreds of triggers ending together, each look is a few small
    # reads, not a template render and a 64 KiB read ten times a second per trigger.
    attempt = _attempt_log(task_instance)
    while True:
        # Listed each time: a trigger taken over by another triggerer writes a new file.
        files = [] if attempt is None else _trigger_files_of(attempt)
        if any(search.found_in(path) for path in files):
            return True
        waited = loop.time() - started
        if waited >= LAST_LINE_WAIT_SECONDS or (not files and waited >= NO_LOG_FILE_SECONDS):
            return False
        await asyncio.sleep(0.1)


async def lines_in_trigger_logs(task_instance: Any, shown: dict[str, int]) -> dict[str, int]:
    """The streams of ``shown`` (stream -> the newest shown line's time) whose newest line is
    in one of this try's trigger log files on this machine (found by its printed stamp)."""
    import asyncio

    def read() -> bytes:
        texts = []
        for path in trigger_log_files(task_instance):
            with contextlib.suppress(OSError):
                texts.append(path.read_bytes())
        return b"\n".join(texts)

    text = await asyncio.to_thread(read)
    return {
        stream: newest
        for stream, newest in shown.items()
        if f"{_printed_at(newest)} [".encode() in text
    }
