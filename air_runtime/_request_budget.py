"""A watcher's request budget, counted where requests are sent.

A ``RequestBudget`` holds a watcher's token buckets: one for every request it sends, and the
shares of it that line reads, progress reads and the waiters' own reads may take. Code that
reads on the budget's behalf marks its requests with a lane (``budget.spending(Lane.LINES)``,
a context variable); the client puts the mark in each request it builds (its extensions),
and ``BudgetedTransport``, which every ``AsyncAirClient`` composes over its transport,
admits each marked request through the budget before it goes out and counts it. So the
count is what was sent, retries included, and no caller prices a read by hand. Requests
without a mark (a submit, a cancel, a user's own call) pass untouched.

This is the only module that counts requests or holds a bucket (a rule test keeps it so).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import httpx

# The request extension that carries a request's budget and lane to the transport.
BUDGET_EXTENSION = "air_budget"

# The share of the request budget the waiters' own reads (an MLflow link) may take.
ASIDE_SHARE = 0.2
# While line reads fall behind (more running nodes than the line share reads every
# ``LineBudget.interval``, or a read came more than an interval late), the waiters' own reads
# and the progress reads each drop to this share, so the lines of many runs stay within a
# minute of being printed.
BEHIND_SHARE = 0.02


class Lane(StrEnum):
    """What a request is for, which decides the share it is admitted from."""

    POLL = "poll"  # status polls, listings, budget and retry checks, outage probes
    LINES = "lines"  # a running node's newest lines
    PROGRESS = "progress"  # a run's training progress (its output, MLflow run and history)
    ASIDE = "aside"  # a waiter's own read (an MLflow link)


class TokenBucket:
    """At most ``rate`` acquisitions per second, bursts of ``burst`` (default 1: requests
    evenly spaced, so a list sweep is spread out rather than fired at once).

    Acquirers reserve a token even when none is left and sleep until it is theirs, so
    concurrent acquirers queue in order without a lock."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        if rate <= 0:
            raise ValueError("the request budget must be positive")
        self.rate = rate
        self.capacity = burst if burst is not None else 1.0
        self._tokens = self.capacity
        self._stamp = time.monotonic()

    def retune(self, rate: float) -> None:
        """From now on ``rate`` per second (the tokens earned so far kept)."""
        self._refill()
        self.rate = rate

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def seconds_to_token(self) -> float:
        """How long until one token is there at the current rate (0: now)."""
        self._refill()
        return max(0.0, (1.0 - self._tokens) / self.rate)

    def has_token(self) -> bool:
        return self.seconds_to_token() == 0.0

    def take(self) -> None:
        """Take one token without waiting, into debt if none is left: the next ones come
        that much later."""
        self._refill()
        self._tokens -= 1

    def try_acquire(self) -> bool:
        """Take a token if one is there now; never waits, never borrows."""
        self._refill()
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    async def acquire(self) -> None:
        self._refill()
        self._tokens -= 1
        if self._tokens < 0:
            await asyncio.sleep(-self._tokens / self.rate)


@dataclass(frozen=True)
class _Spending:
    budget: RequestBudget
    lane: Lane
    on_admitted: Callable[[], None] | None = None


_SPENDING: contextvars.ContextVar[_Spending | None] = contextvars.ContextVar(
    "air_request_budget", default=None
)


def request_extensions() -> dict[str, Any]:
    """The extensions of a request built now: the budget and lane it is spent from, if any
    (``RequestBudget.spending``)."""
    spending = _SPENDING.get()
    return {} if spending is None else {BUDGET_EXTENSION: spending}


@contextlib.asynccontextmanager
async def timeout_once_admitted(seconds: float) -> AsyncIterator[None]:
    """``asyncio.timeout(seconds)`` for a block whose requests are spent from a budget,
    counted from the first request's admission: a wait for the budget is not the
    workspace's delay. Counted from now when the block spends from no budget."""
    spending = _SPENDING.get()
    if spending is None:
        async with asyncio.timeout(seconds):
            yield
        return
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(None) as clock:

        def admitted() -> None:
            if clock.when() is None:
                clock.reschedule(loop.time() + seconds)

        reset = _SPENDING.set(replace(spending, on_admitted=admitted))
        try:
            yield
        finally:
            _SPENDING.reset(reset)


class RequestBudget:
    """``rate`` requests per second in all, of which line reads take at most ``lines_share``,
    progress reads ``progress_share`` (only when a token is there at once: they never hold up
    a line read) and the waiters' own reads ``ASIDE_SHARE`` (they take turns). While line
    reads fall behind (``behind``), progress and the waiters' reads drop to
    ``BEHIND_SHARE``."""

    def __init__(self, rate: float, *, lines_share: float, progress_share: float) -> None:
        self.total = TokenBucket(rate)
        self._progress_share = progress_share
        self._lines = TokenBucket(rate * lines_share)
        # A progress read is three requests: a burst of three, so one read goes out at once.
        self._progress = TokenBucket(rate * progress_share, burst=3)
        self._aside = TokenBucket(rate * ASIDE_SHARE)
        self._aside_turn = asyncio.Lock()
        self._behind = False
        self.sent: Counter[Lane] = Counter()

    @property
    def rate(self) -> float:
        return self.total.rate

    @property
    def lines_rate(self) -> float:
        return self._lines.rate

    @property
    def progress_rate(self) -> float:
        return self._progress.rate

    @property
    def aside_rate(self) -> float:
        return self._aside.rate

    @property
    def requests(self) -> int:
        """Requests sent through this budget, every lane."""
        return sum(self.sent.values())

    @contextlib.contextmanager
    def spending(self, lane: Lane) -> Iterator[None]:
        """Requests the client builds in this block (in this task, and in tasks it starts)
        are admitted through this budget's ``lane``."""
        reset = _SPENDING.set(_Spending(self, lane))
        try:
            yield
        finally:
            _SPENDING.reset(reset)

    def may_read_progress(self) -> bool:
        """Whether a progress read may start now: its share has a token at once."""
        return self._progress.has_token()

    def fall_behind(self, behind: bool) -> None:
        """Line reads late, or on time again: the progress and waiters' shares follow."""
        if behind == self._behind:
            return
        self._behind = behind
        rate = self.total.rate
        self._aside.retune(rate * (BEHIND_SHARE if behind else ASIDE_SHARE))
        self._progress.retune(rate * (BEHIND_SHARE if behind else self._progress_share))

    async def admit(self, lane: Lane) -> None:
        """Wait until a request of ``lane`` may go out, then count it as sent. Line reads wait
        for their share, then the whole budget; progress reads take their share without
        waiting (a read that started is finished; the next one starts that much later); the
        waiters' reads take turns (a fair lock) and the one whose turn it is waits for a token
        at the share's current rate, so a share that drops while hundreds of reads wait
        applies to them all."""
        if lane is Lane.LINES:
            await self._lines.acquire()
        elif lane is Lane.PROGRESS:
            self._progress.take()
        elif lane is Lane.ASIDE:
            async with self._aside_turn:
                while not self._aside.try_acquire():
                    await asyncio.sleep(min(1.0, max(0.01, self._aside.seconds_to_token())))
        await self.total.acquire()
        self.sent[lane] += 1


class BudgetedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over another: a request marked with a budget
    (``BUDGET_EXTENSION``) is admitted through it first; any other goes straight on."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        spending = request.extensions.get(BUDGET_EXTENSION)
        if isinstance(spending, _Spending):
            await spending.budget.admit(spending.lane)
            if spending.on_admitted is not None:
                spending.on_admitted()
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()
