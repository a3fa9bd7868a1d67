"""Reading a running run's newest node lines within a budget, for waiters that show them live
(``RunWatcher.wait(on_lines=...)``): one request per stream and read, newest lines first.

A stream is one node of one attempt (``_runs._attempt_cursors``). Each read is one page of
the logs endpoint, newest first from the stream's cursor (``from``, in whole seconds) and put
back in order, as ``databricks air logs`` drains a tail (logstream.go drainTail: ascending=false,
page_size, from/to); lines the page had no room for are passed over and counted, so a chatty
run costs one request per read however much it prints, and the newest lines are the ones shown.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._states import RunState
from ._core import ClientCore, Flow, LogRecord, stream_name
from ._runs import TaskTry, _attempt_cursors, _LogCursor, _logs_page, record_of, task_tries


@dataclass
class LiveLines:
    """The newest records of one read of a stream, oldest first; ``passed_over``: the page
    was full, so older records since the last read were not read."""

    records: list[LogRecord]
    passed_over: bool


@dataclass
class LineStream:
    """One node of one task run of a run's task (``TaskTry``: a repair's re-run is a try of
    its own), and where it was read up to."""

    one: TaskTry
    cursor: _LogCursor

    @property
    def task_key(self) -> str:
        return self.one.task_key

    @property
    def attempt(self) -> int:
        return self.one.number

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.task_key, self.attempt, self.cursor.node)

    @property
    def name(self) -> str:
        """As its records name it (``LogRecord.stream``)."""
        return stream_name(self.task_key, self.attempt, self.cursor.node)


def running_streams(state: RunState, task_key: str | None) -> list[LineStream]:
    """The streams that can print now: every node of each running attempt of the run (of
    the task ``task_key``)."""
    streams: list[LineStream] = []
    for one in task_tries(state, task_key):
        attempt = one.attempt
        if attempt.is_terminal or attempt.life_cycle_state not in ("RUNNING", "TERMINATING"):
            continue
        for cursor in _attempt_cursors(state, attempt, None):
            streams.append(LineStream(one, cursor))
    return streams


def read_newest(core: ClientCore, stream: LineStream, count: int) -> Flow[LiveLines | None]:
    """At most ``count`` records of ``stream`` not read before, the newest; None when the
    log service is not there."""
    cursor = stream.cursor
    params = {**cursor.params(), "ascending": "false", "page_size": count}
    body = yield from _logs_page(core, cursor.run_id, params)
    if body is None:
        return None
    raws = [raw for raw in body.get("log_records") or [] if isinstance(raw, dict)]
    records = [
        record_of(stream.one, cursor.node, stamp, text)
        for raw in reversed(raws)
        if (fresh := cursor.fresh(raw)) is not None
        for stamp, text in [fresh]
    ]
    return LiveLines(records, passed_over=bool(body.get("next_page_token")))
