"""The live lines and training progress of the runs a ``RunWatcher`` watches.

One ``LineReader`` per watcher reads the newest lines of each running run that has a line
waiter, within its ``LineBudget`` (the line share of the watcher's ``RequestBudget``), and
its training progress within the progress share. It asks through the watcher (``ask``: the
watcher's timeouts and its view of an outage) and keeps each run's reading state in the
run's ``RunLines``.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ._errors import AuthError
from ._progress import TrainingProgress
from ._request_budget import Lane, RequestBudget
from ._states import RunState
from .client import AsyncAirClient, LogRecord
from .client._live_lines import LineStream, running_streams

logger = logging.getLogger("air_runtime.watcher")

# A running run's newest node lines, oldest first, and whether older unread ones were passed
# over to keep within the line budget.
OnLines = Callable[[Sequence[LogRecord], bool], None]
# A running run's training progress and time left (eta.go), when it changed.
OnProgress = Callable[[TrainingProgress], None]
# A progress read set due with a line read must not miss it by the microseconds between them.
_PROGRESS_SLACK_S = 1.0
# Its output, then its MLflow run and history.
_PROGRESS_READS = 3


@dataclass(frozen=True, slots=True)
class LineBudget:
    """How much of a watcher's request budget goes to the live lines of running runs.

    Each running run with a line waiter is read every ``interval`` seconds at the most, one
    request per node of each running attempt, each bringing at most ``lines_per_read`` of
    its newest lines; all line reads together take at most ``share`` of the watcher's
    requests per second. Status polls keep the rest and never wait behind more than one line
    read (the reads are sent one at a time through the same first-come bucket), so lines take
    what the status polls leave: little while many runs all run, since a sweep then lists
    the smaller, completed side. With many runs a run's turn comes less often, never the
    budget more. Progress reads have ``progress_share`` of their own, taken only when it is
    there at once: the first with the run's first line read (as soon as it runs), then at
    every line read during its first ``progress_interval`` (a trainer's first steps, and a
    short run, show), then every ``progress_interval``. While the line reads fall behind
    (more running nodes than ``share`` of the budget reads every ``interval``, or a read
    came more than an interval late), progress reads and the waiters' own reads
    (``RunWatcher.aside``) drop to ``BEHIND_SHARE`` each: with 500 runs each one's lines are
    then read about every 55 s at 10 req/s."""

    interval: float = 15.0
    lines_per_read: int = 50
    share: float = 0.95
    progress_interval: float = 60.0
    # Progress reads (three requests each) take only this share, and only when it has them
    # at once: they never hold up a line read, and with many runs come less often.
    progress_share: float = 0.05


class RunLines:
    """One run's reading state: its node streams read so far (cursors), when it is next
    read, the newest line a waiter's log already holds per stream (``LogRecord.stream``),
    and its last progress told, when that is next read and when it was first read."""

    __slots__ = ("due", "progress", "progress_due", "progress_since", "shown", "streams")

    def __init__(self, now: float) -> None:
        self.streams: dict[tuple[str, int, int], LineStream] = {}
        self.due = now
        self.shown: dict[str, int] = {}
        self.progress: TrainingProgress | None = None
        self.progress_due = now
        self.progress_since: float | None = None


class Listener(Protocol):
    @property
    def on_lines(self) -> OnLines | None: ...

    @property
    def on_progress(self) -> OnProgress | None: ...


class FollowedRun(Protocol):
    """A watched run as the line reader sees it."""

    @property
    def run_id(self) -> int: ...

    @property
    def state(self) -> RunState | None: ...

    @property
    def lines(self) -> RunLines: ...

    @property
    def waiters(self) -> Sequence[Listener]: ...


def is_running(state: RunState | None) -> bool:
    return state is not None and state.life_cycle_state in ("RUNNING", "TERMINATING")


class LineReader:
    """Reads lines and progress for one watcher (see the module docstring)."""

    def __init__(
        self,
        client: AsyncAirClient,
        budget: RequestBudget,
        lines: LineBudget,
        ask: Callable[..., Awaitable[Any]],
    ) -> None:
        self.client = client
        self.budget = budget
        self.lines = lines
        self._ask = ask  # the watcher's: its timeout per request, and outages
        self.behind = False

    async def read_forever(
        self,
        following: Callable[[], list[FollowedRun]],
        down: Callable[[], bool],
        until_back: Callable[[float], Awaitable[bool]],
    ) -> None:
        """Read the newest lines of each running run ``following`` gives, the longest
        unread first, each at most every ``lines.interval``, within ``lines.share`` of the
        request budget; ends when no run is followed. While the workspace is ``down``,
        waits for it (``until_back``)."""
        loop = asyncio.get_running_loop()
        while True:
            runs = following()
            if not runs:
                return
            if down():
                await until_back(loop.time() + self.lines.interval)
                continue
            now = loop.time()
            due = sorted(
                (r for r in runs if r.lines.due <= now and is_running(r.state)),
                key=lambda r: r.lines.due,
            )
            # Behind ahead of time when the running runs' nodes, each read every interval,
            # want more than the line share: a sweep's start is behind from its first pass.
            streams = sum(max(1, len(r.lines.streams)) for r in runs if is_running(r.state))
            too_many = streams / self.lines.interval > self.budget.lines_rate
            if not due:
                self._note_behind(too_many)
            for run in due:
                read_at = loop.time()
                # A run read before is late by the budget, not by its start.
                late = bool(run.lines.streams) and read_at - run.lines.due > self.lines.interval
                self._note_behind(too_many or late)
                run.lines.due = read_at + self.lines.interval
                try:
                    await self._read_run(run)
                except AuthError:
                    return  # the poller tells the waiters
                except Exception as error:  # lines are a convenience: the wait goes on
                    logger.debug("live lines of run %s: %s", run.run_id, error)
            upcoming = min((r.lines.due for r in runs), default=now + self.lines.interval)
            await asyncio.sleep(max(0.5, min(upcoming - loop.time(), self.lines.interval)))

    def _note_behind(self, behind: bool) -> None:
        """Line reads late or on time again: the other reads' shares follow (``LineBudget``)."""
        if behind == self.behind:
            return
        self.behind = behind
        self.budget.fall_behind(behind)
        logger.debug("live line reads %s", "behind" if behind else "on time again")

    async def _read_run(self, run: FollowedRun) -> None:
        state, lines = run.state, run.lines
        assert state is not None
        waiters = list(run.waiters)
        now = asyncio.get_running_loop().time()
        if (
            any(w.on_progress for w in waiters)
            and lines.progress_due <= now + _PROGRESS_SLACK_S
            and self.budget.may_read_progress()
        ):
            if lines.progress_since is None:
                lines.progress_since = now
            interval = self.lines.progress_interval
            if now - lines.progress_since < interval:  # the first minute: every line read
                interval = min(interval, self.lines.interval)
            lines.progress_due = now + interval
            await self._read_progress(run.run_id, state, lines, waiters)
        if not any(w.on_lines for w in waiters):
            return

        def hearing() -> list[OnLines]:
            # Asked at each delivery: a wait that ended during a read hears nothing more.
            return [w.on_lines for w in run.waiters if w.on_lines is not None]

        if not await self.read_streams(lines.streams, state, None, hearing, lines.shown):
            lines.due = math.inf  # the workspace serves no logs: stop asking

    async def read_streams(
        self,
        streams: dict[tuple[str, int, int], LineStream],
        state: RunState,
        task_key: str | None,
        hearing: Callable[[], list[OnLines]],
        lines_shown: Mapping[str, int],
    ) -> bool:
        """One read of each running node stream of the run (of the stage ``task_key``), the
        newest lines to each of ``hearing()``, after those ``lines_shown`` says a log already
        holds; False when the workspace serves no logs."""
        for stream in running_streams(state, task_key):
            kept = streams.get(stream.key)
            if kept is None:
                kept = streams[stream.key] = stream
                if stream.name in lines_shown:
                    stream.cursor.resume_after(lines_shown[stream.name])
            with self.budget.spending(Lane.LINES):
                read = await self._ask(
                    self.client.read_newest_lines(kept, self.lines.lines_per_read)
                )
            if read is None:
                return False
            if not read.records and not read.passed_over:
                continue
            for on_lines in hearing():
                try:
                    on_lines(read.records, read.passed_over)
                except Exception:
                    logger.exception("on_lines callback for run %s failed", state.run_id)
        return True

    async def _read_progress(
        self, run_id: int, state: RunState, lines: RunLines, waiters: Sequence[Listener]
    ) -> None:
        with self.budget.spending(Lane.PROGRESS):
            progress = await self._ask(
                self.client.training_progress(state, live=True), _PROGRESS_READS
            )
        if progress is None or progress == lines.progress:
            return
        lines.progress = progress
        for waiter in waiters:
            if waiter.on_progress is not None:
                try:
                    waiter.on_progress(progress)
                except Exception:
                    logger.exception("on_progress callback for run %s failed", run_id)
