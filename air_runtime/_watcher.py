"""``RunWatcher``: one coalescing poller per workspace per event loop.

Thousands of waiters (Airflow triggers, Dagster steps) in one event loop share a watcher.
A waiter costs a future and a few slots; it never polls. One poller task refreshes every
watched run at most once per interval and picks the cheaper of two ways each cycle:

- few runs: ``runs/get`` per run, spread evenly over the interval;
- many runs: ``runs/list`` pages, 25 runs a request. The Jobs API lists runs newest-started
  first and filters them by start time (``start_time_from``/``start_time_to``) and by
  ``active_only`` or ``completed_only``; it has no filter on the end time. So the watched
  runs are cut into start-time blocks of about a page, each block is listed from whichever
  side is smaller there, and neighbouring blocks of one side are listed as one range. The
  completed side: the entries (tasks included) are the final states, so a run ending
  between two sweeps is found in the next one, however long ago it started; it tells
  nothing of a run still going, so a block with a run not seen running yet is listed from
  the active side (each waiter hears its run start). The active
  side: a watched run missing from it has ended and is looked up among the completed runs
  of its range (or with ``runs/get`` when fewer). A run whose start time is not known yet is
  learnt with ``runs/get`` when few, else from one pass over all active runs. A sweep costs
  about the smaller side of each range over 25, not one request per 25 watched runs.

Every request passes the watcher's ``RequestBudget`` (``_request_budget``: admitted and
counted by the client's transport), so requests to the workspace stay under ``budget_rps``
however many runs are watched (the cycle stretches instead).

Young runs. A run watched for less than 25 s is looked at more often (``_polling``: a fifth of
its age, at least 1 s): one by one with ``runs/get``, or, while the watcher lists, by sweeping
as often as the youngest run asks when a sweep costs at most half the budget. A run of a few
seconds is so seen ended about a second after its end (P10, one event loop: p99 0.94 s
alone, 1.09 s in a 50-trial sweep), not up to an interval later.

Sweep budgets. Waits whose runs share a sweep's GPU-hour budget (``air_runtime._sweeps``)
share what it spent: one listing of the sweep per interval after a cycle, for all of them, due
sooner when the last listing says the budget is spent by then at the pace of the runs going;
once it is spent, each of those waits ends with ``SweepBudgetSpent``. A stage's wait asks the
same shared listing (``sweep_spend``).

A workspace that stops answering. The runs exist (their ids prove the host was right) and go
on without us, so nothing the watcher cannot hear ends a wait or drops a run: a transport
error, a 5xx past the client's own retries, a host this process never reached
(``_polling.unreachable_cause``), or a request without an answer within ``request_timeout``
(10 s) that one direct question confirms (``CONFIRM_TIMEOUT_S``, 5 s) marks the workspace
down. Then nothing else is sent: one probe asks for every waiter (a
``runs/list`` of one run, one attempt), 1 s after the failure, doubling up to 10 s, within
the request budget. Each waiter hears once that the workspace is unreachable since when and
why (``on_workspace``, in its own context; one warning in the watcher's log), and once that
it is reachable again; then every run is refreshed at once, so each run's end is seen within
about 11 s of the workspace's return plus one sweep. ``through_outages`` lets a waiter's own
request that is safe to repeat (a submit with its idempotency token) wait out an outage the
same way. Nothing waits on the event loop: requests time out there.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import dataclasses
import hashlib
import logging
import math
import random
import time
import weakref
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
)
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from ._auth import Credentials, OAuthM2M, StaticToken, resolve_credentials
from ._errors import AirError, AuthError, NotFound, PlatformError, RunTimeout
from ._failure_policy import FailurePolicy, RetryDecision
from ._polling import (
    PROBE_MAX_S,
    UNANSWERED_AFTER_S,
    YOUNG_MIN_INTERVAL,
    Examine,
    Pause,
    Tally,
    WorkspaceNotice,
    attempts_to_examine,
    jittered,
    next_interval,
    probe_pause,
    retried_attempts,
    retry_examined,
    tell_retry,
    unreachable_cause,
    until_ended,
    utc_text,
    workspace_name,
    young_interval,
)
from ._request_budget import Lane, RequestBudget, timeout_once_admitted
from ._states import RunState
from ._sweeps import MAX_LIST_PAGES, Sweep, SweepSpend, spent_error
from ._wait_policy import WaitPolicy
from ._watch_lines import (
    FollowedRun,
    LineBudget,
    LineReader,
    OnLines,
    OnProgress,
    RunLines,
)
from .client import AsyncAirClient
from .client._core import NO_RETRY
from .client._live_lines import LineStream
from .client._runs import RUNS_API, attempt_diagnosis

logger = logging.getLogger("air_runtime.watcher")

# The Jobs API answers at most this many runs per runs/list page.
LIST_PAGE_SIZE = 25
_PARALLEL_GETS = 8

OnUpdate = Callable[[RunState], None]
# The workspace stopped answering, or answers again (once each per outage).
OnWorkspace = Callable[[WorkspaceNotice], None]
OnRetry = Callable[[RetryDecision], None]
T = TypeVar("T")
# A request without an answer in time is followed by one direct question, this long at most,
# before the workspace is called unreachable: a request the client is still retrying (a 429
# storm) does not make an outage.
CONFIRM_TIMEOUT_S = 5.0


def _in_waiter_context(on_update: Callable[..., None]) -> Callable[..., None]:
    """``on_update`` bound to the context of the task that waits.

    The poller task serves every waiter, so a callback run there would log in the poller's
    context: the one of whichever waiter started it. Orchestrators route log lines by context
    (Airflow's triggerer binds each trigger's task instance into contextvars), so a run's
    lines must be emitted in its own waiter's context, never in another's."""
    context = contextvars.copy_context()

    def run_in_waiter_context(*args: Any) -> None:
        context.run(on_update, *args)

    return run_in_waiter_context


class _Down(Exception):
    """The workspace did not answer (or is known to be down): the wait goes on."""


@dataclass(slots=True, eq=False)
class _Outage:
    since: float  # wall clock: when the first unanswered request was sent
    cause: str
    back: asyncio.Event  # set once it answers again (or nobody waits any more)

    def notice(self, host: str) -> WorkspaceNotice:
        return WorkspaceNotice(host, False, self.since, self.cause)


@dataclass(slots=True, eq=False)
class _Ear:
    """One waiter's hearing of the workspace: told once per outage that it is down, then
    once that it is back."""

    on_workspace: OnWorkspace | None
    told: _Outage | None = None


@dataclass(slots=True)
class _Waiter:
    future: asyncio.Future[RunState]
    on_update: OnUpdate | None
    on_lines: OnLines | None
    on_progress: OnProgress | None = None
    policy: WaitPolicy = field(default_factory=WaitPolicy)
    examines: bool = False  # whether failed attempts are diagnosed for this waiter
    on_retry: OnRetry | None = None

    @property
    def follows(self) -> bool:
        return self.on_lines is not None or self.on_progress is not None


@dataclass(slots=True, eq=False)
class _SweepBudget:
    """What one sweep spent as last listed, shared by every wait on its runs."""

    sweep: Sweep
    spend: SweepSpend | None = None
    listed_at: float = -math.inf  # loop time of the last listing
    due: float = -math.inf  # loop time the next listing is due
    listing: asyncio.Task[SweepSpend] | None = None


class _Watched:
    """One run and the waiters on it."""

    __slots__ = (
        "attempts",
        "examined",
        "interval",
        "key",
        "lines",
        "next_due",
        "run_id",
        "since",
        "start_ms",
        "state",
        "waiters",
        "warned",
    )

    def __init__(self, run_id: int, now: float, first_poll: float, interval: float) -> None:
        self.run_id = run_id
        self.start_ms: int | None = None  # the run's start_time, once a listing or get shows it
        self.waiters: list[_Waiter] = []
        self.lines = RunLines(now)  # its live lines and progress
        self.key: tuple[Any, Any, Any] | None = None
        self.state: RunState | None = None
        self.since = now
        self.next_due = first_poll
        self.interval = interval
        self.warned = False
        # Failed attempts already diagnosed for the retry policy: (task, attempt).
        self.examined: set[tuple[str, int]] = set()
        self.attempts: tuple[Any, ...] = ()  # (attempt, result) of each task, last listed


# Before a run runs (the Jobs API's states): a waiter hears when it starts running.
_BEFORE_RUNNING = frozenset({"QUEUED", "PENDING", "BLOCKED", "WAITING_FOR_RETRY"})


def _not_running_yet(watched: _Watched) -> bool:
    state = watched.state
    return state is None or state.life_cycle_state in _BEFORE_RUNNING


@dataclass(slots=True)
class _Segment:
    """A start-time range of watched runs and the side it is listed from."""

    low: int
    high: int
    members: list[_Watched]
    completed_side: bool


def _loop_limit(deadline: float | None) -> float | None:
    """A wall-clock ``deadline`` as event loop time (None: none)."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.time())


def _credentials_key(credentials: Credentials) -> str:
    if isinstance(credentials, StaticToken):
        digest = hashlib.sha256(credentials.headers()["Authorization"].encode()).hexdigest()
        return f"token:{digest[:16]}"
    if isinstance(credentials, OAuthM2M):
        return f"oauth:{credentials.client_id}"
    return f"{type(credentials).__name__}:{credentials.source}"


class RunWatcher:
    """Waits on many runs of one workspace with few requests. See the module docstring."""

    _shared: ClassVar[
        weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], RunWatcher]]
    ] = weakref.WeakKeyDictionary()

    def __init__(
        self,
        client: AsyncAirClient,
        *,
        interval: float = 5.0,
        budget_rps: float = 10.0,
        page_size: int = LIST_PAGE_SIZE,
        lines: LineBudget | None = None,
    ) -> None:
        self.client = client
        self.interval = interval
        self.page_size = page_size
        self.lines = lines or LineBudget()
        self.budget = RequestBudget(
            budget_rps, lines_share=self.lines.share, progress_share=self.lines.progress_share
        )
        # A workspace that stops answering (see the module docstring).
        self.host = workspace_name(client.host)
        self.request_timeout = UNANSWERED_AFTER_S
        self.outages = 0  # seen by this watcher
        self.probes = 0  # of which requests
        self._outage: _Outage | None = None
        self._ears: set[_Ear] = set()
        self._prober: asyncio.Task[None] | None = None
        self._confirming = asyncio.Lock()
        self._runs: dict[int, _Watched] = {}
        # Sweeps whose budgets the waits share (``Sweep.key``), one listing per interval each.
        self._sweeps: dict[tuple[Any, ...], _SweepBudget] = {}
        self.sweep_listings = 0  # listings of sweeps (their pages are in ``requests``)
        self._poller: asyncio.Task[None] | None = None
        self._lines_reader = LineReader(client, self.budget, self.lines, self._ask)
        self._lines_task: asyncio.Task[None] | None = None
        self._active_estimate = 0  # runs a sweep costs, in list entries (pages x page size)
        self._active_total = 0  # active runs the last pass over all of them saw
        self._rng = random.Random()
        # Start times of completed runs seen in listings (sorted), to price a segment's
        # completed side; run ids alongside so each counts once.
        self._completed_starts: list[int] = []
        self._completed_ids: dict[int, int] = {}

    @classmethod
    def shared(
        cls,
        host: str | None = None,
        token: str | None = None,
        *,
        credentials: Credentials | None = None,
        client: AsyncAirClient | None = None,
        interval: float = 5.0,
        budget_rps: float = 10.0,
        lines: LineBudget | None = None,
        **client_options: Any,
    ) -> RunWatcher:
        """The watcher of this workspace (and identity) in the running event loop, created
        on first use. Later callers share the first caller's interval and budget."""
        loop = asyncio.get_running_loop()
        watchers = cls._shared.setdefault(loop, {})
        if client is not None:
            key = (client.host, f"client:{id(client)}")
        else:
            # Key first, client only for a new watcher: building an HTTP client (its TLS
            # context) costs tens of milliseconds, once per trigger if done on every call.
            host, credentials = resolve_credentials(host, token, credentials)
            key = (host, _credentials_key(credentials))
            if key not in watchers:
                client = AsyncAirClient(host, credentials=credentials, **client_options)
        watcher = watchers.get(key)
        if watcher is None:
            assert client is not None
            watcher = watchers[key] = cls(
                client, interval=interval, budget_rps=budget_rps, lines=lines
            )
        return watcher

    @property
    def watched(self) -> int:
        return len(self._runs)

    @property
    def requests(self) -> int:
        """Requests this watcher sent (its budget's count), for budget checks and
        benchmarks."""
        return self.budget.requests

    @property
    def line_requests(self) -> int:
        """Of which line and progress reads."""
        return self.budget.sent[Lane.LINES] + self.budget.sent[Lane.PROGRESS]

    @property
    def lines_behind(self) -> bool:
        """Whether the line reads fall behind (see ``LineBudget``): more running nodes than
        the line share reads every interval, or the last read came more than an interval
        late."""
        return self._lines_reader.behind

    async def wait(
        self,
        run_id: int,
        policy: WaitPolicy | None = None,
        *,
        on_update: OnUpdate | None = None,
        on_lines: OnLines | None = None,
        on_progress: OnProgress | None = None,
        on_retry: OnRetry | None = None,
        on_workspace: OnWorkspace | None = None,
        lines_shown: Mapping[str, int] | None = None,
        **options: Any,
    ) -> RunState:
        """Wait until the run ends, or with the policy's ``task_key`` until that workflow
        stage ends; return the state that shows it (success or not). ``policy``
        (``WaitPolicy``, the default when None; ``options`` are its fields by name, in place
        of or over it) says what else ends the wait, as below.

        ``on_update`` hears each state change; ``on_lines`` the run's (the stage's) newest
        node lines while it runs and ``on_progress`` its training progress when it changes
        (from the first logged step; read as ``LineBudget`` says; a whole run's wait only), both
        within the watcher's ``LineBudget``. All are called in the context of the task that
        waits.

        ``deadline`` is a wall-clock time (``time.time()``), so it survives serialization
        (a trigger's kwargs); ``timeout`` is relative. Past either: ``RunTimeout`` (the run
        itself is left alone).

        ``max_gpu_hours`` and ``task_budgets``: past one (the run's, the stage's or a task's
        GPU-hours, computed from the states the watcher reads anyway, so at most a poll late;
        a breach confirmed with one fresh read): ``BudgetExceeded`` (the run itself is left
        alone: the caller cancels it).

        ``sweep``: the sweep the run belongs to (``air_runtime._sweeps``). What its runs
        spent is listed once per interval for every wait on it in this process (and when the
        last listing says its budget is spent by now, at that moment); once spent:
        ``SweepBudgetSpent`` (the caller cancels the run and the sweep's others).

        ``failure_policy`` (by default a deterministic failure stops): an attempt that failed while the
        platform will retry it is diagnosed from its nodes' last lines and the platform's
        state message (a few requests, only then); a class the policy does not leave to the
        platform ends the wait with ``RetriesStopped`` (the caller cancels). ``on_retry``
        hears each decision (``RetryDecision``, its line for the task log).

        ``on_workspace`` hears once that the workspace stopped answering (since when, why)
        and once that it answers again (``WorkspaceNotice``); the wait goes on through it.

        ``lines_shown``: per node stream (``LogRecord.stream``), the time of the newest line
        the waiter's log already holds (a wait taken over from another process): ``on_lines``
        hears only the lines after it.
        """
        wait = WaitPolicy.of(policy, **options)
        retry_heard = None if on_retry is None else _in_waiter_context(on_retry)
        ear = _Ear(None if on_workspace is None else _in_waiter_context(on_workspace))
        self._listen(ear)
        try:
            if wait.task_key is not None:
                return await self._wait_for_stage(
                    run_id,
                    wait,
                    on_update,
                    retry_heard,
                    None if on_lines is None else _in_waiter_context(on_lines),
                    dict(lines_shown or {}),
                )
            return await self._wait_for_run(
                run_id, wait, on_update, on_lines, on_progress, retry_heard, lines_shown or {}
            )
        finally:
            self._ears.discard(ear)

    async def _wait_for_run(
        self,
        run_id: int,
        wait: WaitPolicy,
        on_update: OnUpdate | None,
        on_lines: OnLines | None,
        on_progress: OnProgress | None,
        on_retry: OnRetry | None,
        lines_shown: Mapping[str, int],
    ) -> RunState:
        loop = asyncio.get_running_loop()
        now = loop.time()
        limit = _loop_limit(wait.ends_by())
        watched = self._runs.get(run_id)
        if watched is None:
            first = now + self._rng.uniform(0, min(self.interval, YOUNG_MIN_INTERVAL))
            watched = self._runs[run_id] = _Watched(run_id, now, first, self.interval)
        future: asyncio.Future[RunState] = loop.create_future()
        entry = _Waiter(
            future,
            None if on_update is None else _in_waiter_context(on_update),
            None if on_lines is None else _in_waiter_context(on_lines),
            on_progress=None if on_progress is None else _in_waiter_context(on_progress),
            policy=wait,
            examines=wait.failure_policy.examines or on_retry is not None,
            on_retry=on_retry,
        )
        watched.waiters.append(entry)
        for name, shown in lines_shown.items():
            watched.lines.shown[name] = max(shown, watched.lines.shown.get(name, shown))
        if watched.state is not None:
            self._check_budgets(watched, watched.state)
        # Contexts of their own: the poller and the line reader belong to no waiter (see
        # _in_waiter_context).
        if self._poller is None or self._poller.done():
            self._poller = loop.create_task(
                self._poll_forever(), name="air-run-watcher", context=contextvars.Context()
            )
        if entry.follows and (self._lines_task is None or self._lines_task.done()):
            self._lines_task = loop.create_task(
                self._lines_reader.read_forever(
                    self._following, lambda: self._outage is not None, self._until_back
                ),
                name="air-run-lines",
                context=contextvars.Context(),
            )
        try:
            async with asyncio.timeout_at(limit):
                state = await future
            if on_retry is not None:
                await self._tell_unseen_retries(
                    state, watched.examined, wait.failure_policy, on_retry
                )
            return state
        except TimeoutError:
            last = watched.state.describe() if watched.state else "not yet seen"
            raise RunTimeout(
                f"run {run_id} did not end before the deadline (last state: {last}); it keeps "
                "running on the workspace unless cancelled",
                run_id=run_id,
            ) from None
        finally:
            if entry in watched.waiters:
                watched.waiters.remove(entry)
            if not watched.waiters and self._runs.get(run_id) is watched:
                del self._runs[run_id]

    @contextlib.asynccontextmanager
    async def aside(self) -> AsyncIterator[None]:
        """For reads a waiter sends of its own (an MLflow link): once the workspace answers,
        each request in the block is admitted from the budget's share for them
        (``Lane.ASIDE``), so that many waiters' reads never queue ahead of the status
        polls."""
        await self._until_back()
        with self.budget.spending(Lane.ASIDE):
            yield

    async def _wait_for_stage(
        self,
        run_id: int,
        wait: WaitPolicy,
        on_update: OnUpdate | None,
        on_retry: OnRetry | None,
        on_lines: OnLines | None = None,
        lines_shown: dict[str, int] | None = None,
    ) -> RunState:
        """A stage ends before its run does and the coalesced list view has no per-task
        states, so a stage reads runs/get itself, within this watcher's request budget; its
        task's newest lines (``on_lines``) are read between its polls, at most every
        ``LineBudget.interval``, within the line share. While the workspace does not answer
        it waits for the shared probe (past the deadline: ``RunTimeout``)."""
        ends_by = wait.ends_by()
        limit = _loop_limit(ends_by)
        task_key = wait.task_key
        assert task_key is not None
        # The deadline as computed here: the loop's and the generator's are the same moment.
        loop = until_ended(
            run_id,
            dataclasses.replace(wait, deadline=ends_by, timeout=None),
            poll_interval=self.interval,
            rng=self._rng,
            on_update=on_update,
            on_retry=on_retry,
        )
        request = next(loop)
        streams: dict[tuple[str, int, int], LineStream] = {}
        lines_due = 0.0
        state: RunState | None = None
        while True:
            answer: Any = None
            if isinstance(request, Pause):
                now = asyncio.get_running_loop().time()
                if on_lines is not None and state is not None and lines_due <= now:
                    lines_due = now + self.lines.interval
                    try:
                        await self._lines_reader.read_streams(
                            streams, state, task_key, lambda: [on_lines], lines_shown or {}
                        )
                    except AuthError:
                        raise
                    except Exception as error:  # lines are a convenience: the wait goes on
                        logger.debug("live lines of run %s: %s", run_id, error)
                await asyncio.sleep(
                    max(0.0, request.seconds - (asyncio.get_running_loop().time() - now))
                )
            else:
                try:
                    if isinstance(request, Examine):
                        answer = await self._diagnose(request)
                    elif isinstance(request, Tally):
                        answer = await self.sweep_spend(request.sweep)
                    else:
                        with self.budget.spending(Lane.POLL):
                            answer = state = await self._ask(self.client.get_run(run_id))
                except _Down:
                    if not await self._until_back(limit):
                        raise RunTimeout(
                            f"stage {task_key} of run {run_id} did not end before the deadline "
                            f"(the workspace {self.host} was not answering); it keeps running "
                            "on the workspace unless cancelled",
                            run_id=run_id,
                        ) from None
                    continue  # the same request again
            try:
                request = loop.send(answer)
            except StopIteration as stop:
                result: RunState = stop.value
                return result

    # --- a workspace that stops answering ------------------------------------------------

    @property
    def unreachable(self) -> WorkspaceNotice | None:
        """The current outage (None while the workspace answers)."""
        return None if self._outage is None else self._outage.notice(self.host)

    async def through_outages(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        on_workspace: OnWorkspace | None = None,
        deadline: float | None = None,
    ) -> T:
        """``operation()``'s answer, sent again each time the workspace did not answer it,
        once the shared probe sees the workspace back: for a waiter's own request that is
        safe to repeat (a submit with its idempotency token), so an outage delays it instead
        of failing it. ``on_workspace`` as for ``wait``. Its other errors are raised as they
        come; past ``deadline`` (wall clock) the last unanswered one."""
        ear = _Ear(None if on_workspace is None else _in_waiter_context(on_workspace))
        self._listen(ear)
        limit = _loop_limit(deadline)
        try:
            while True:
                await self._until_back(limit)
                sent = time.time()
                try:
                    return await operation()
                except Exception as error:
                    cause = unreachable_cause(error)
                    if cause is None:
                        raise
                    self._went_down(sent, cause)
                    if not await self._until_back(limit):
                        raise
        finally:
            self._ears.discard(ear)

    def _listen(self, ear: _Ear) -> None:
        self._ears.add(ear)
        if self._outage is not None:  # a waiter that comes during an outage hears it at once
            self._tell_down(ear, self._outage)

    async def _ask(self, request: Coroutine[Any, Any, T], reads: int = 1) -> T:
        """One request of the watcher (its retries by the client included), or a flow of
        ``reads`` requests, without an answer for at most ``request_timeout`` each; one that
        finds nobody answering marks the workspace down and raises ``_Down``. While it is
        down nothing is sent (the probe asks for everyone)."""
        if self._outage is not None:
            request.close()
            raise _Down
        sent = time.time()
        bound = reads * self.request_timeout
        try:
            async with timeout_once_admitted(bound):
                return await request
        except TimeoutError:
            # Still retrying inside the client (a refused connection, 5xx) or held: one
            # direct question tells which, and why.
            async with self._confirming:  # requests timing out together ask once
                if self._outage is not None:
                    raise _Down from None
                cause = await self._ask_directly(min(CONFIRM_TIMEOUT_S, self.request_timeout))
            if cause is None:
                raise PlatformError(
                    f"a request to {self.host} had no answer within {bound:g} s, though the "
                    "workspace answers"
                ) from None
            self._went_down(sent, cause)
            raise _Down from None
        except Exception as error:
            cause = unreachable_cause(error)
            if cause is None:
                raise
            self._went_down(sent, cause)
            raise _Down from error

    def _went_down(self, since: float, cause: str) -> None:
        if self._outage is not None:
            return
        outage = self._outage = _Outage(since, cause, asyncio.Event())
        self.outages += 1
        # The watcher's own line, in no waiter's context: the orchestrator's own log (each
        # waiter hears it in its own, ``_tell``).
        contextvars.Context().run(
            logger.warning,
            "workspace %s has not answered since %s (%s): its %d watched runs keep going; "
            "asking again every %g s at most",
            self.host,
            utc_text(since),
            cause,
            len(self._runs),
            PROBE_MAX_S,
        )
        for ear in list(self._ears):
            self._tell_down(ear, outage)
        self._prober = asyncio.get_running_loop().create_task(
            self._probe_until_back(outage),
            name="air-workspace-probe",
            context=contextvars.Context(),
        )

    def _tell_down(self, ear: _Ear, outage: _Outage) -> None:
        if ear.told is outage:
            return
        ear.told = outage
        self._tell(ear, outage.notice(self.host))

    def _tell(self, ear: _Ear, notice: WorkspaceNotice) -> None:
        if ear.on_workspace is None:
            return
        try:
            ear.on_workspace(notice)
        except Exception:
            logger.exception("on_workspace callback failed")

    async def _probe_until_back(self, outage: _Outage) -> None:
        """One request at a time for every waiter, backing off (``_polling.probe_pause``),
        until the workspace answers: any answer, an error answer included."""
        failed = 0
        while self._outage is outage:
            await asyncio.sleep(jittered(probe_pause(failed), self._rng))
            if not self._ears:  # nobody waits any more: the next request finds out
                self._outage = None
                outage.back.set()
                return
            if await self._ask_directly(self.request_timeout) is not None:
                failed += 1
                continue
            self._came_back(outage)

    async def _ask_directly(self, timeout: float) -> str | None:
        """The cheapest question (one run of the list, one attempt, no answer within
        ``timeout`` counted as none): why nobody answered, or None when the workspace did
        (an error answer included)."""

        def probe(core: Any) -> Any:
            return core.call(
                "GET",
                f"{RUNS_API}/list",
                params={"limit": 1, "run_type": "SUBMIT_RUN"},
                policy=NO_RETRY,
                timeout_s=timeout,
            )

        self.probes += 1
        try:
            with self.budget.spending(Lane.POLL):
                async with timeout_once_admitted(timeout + 1.0):
                    await self.client.run_flow(probe)
        except TimeoutError:
            return f"no answer within {timeout:g} s"
        except Exception as error:
            return unreachable_cause(error)
        return None

    def _came_back(self, outage: _Outage) -> None:
        self._outage = None
        notice = WorkspaceNotice(
            self.host, True, outage.since, outage.cause, time.time() - outage.since
        )
        contextvars.Context().run(
            logger.warning, "workspace %s answers again after %.0f s", self.host, notice.down_s
        )
        now = asyncio.get_running_loop().time()
        for watched in self._runs.values():  # every run refreshed at once
            watched.next_due = now
        for ear in list(self._ears):
            if ear.told is outage:
                ear.told = None
                self._tell(ear, notice)
        outage.back.set()

    async def _until_back(self, limit: float | None = None) -> bool:
        """Wait while the workspace does not answer, at most until ``limit`` (loop time);
        whether it answers (or nobody waits on it any more)."""
        outage = self._outage
        if outage is None:
            return True
        try:
            async with asyncio.timeout_at(limit):
                await outage.back.wait()
        except TimeoutError:
            return False
        return True

    # --- polling ------------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while self._runs:
            if self._outage is not None:  # the probe asks; every run is refreshed after it
                await self._until_back(loop.time() + 1.0)
                continue
            started = loop.time()
            sent = self.budget.sent[Lane.POLL]
            try:
                await self._cycle(started)
                await self._check_every_budget()
                await self._check_every_sweep()
                await self._check_every_retry()
            except _Down:
                continue
            except AuthError as error:
                # No request can succeed: tell every waiter instead of polling in vain.
                self._fail(list(self._runs.values()), error)
            except Exception:
                logger.exception("run watcher cycle failed; retrying next interval")
            pause = (
                min(
                    self._next_cycle_at(loop.time(), started, self.budget.sent[Lane.POLL] - sent),
                    self._next_sweep_due(),
                )
                - loop.time()
            )
            if pause > 0 and self._runs:
                await asyncio.sleep(pause)

    def _following(self) -> list[FollowedRun]:
        """The runs with a waiter on their lines or progress."""
        return [w for w in self._runs.values() if any(x.follows for x in w.waiters)]

    def _next_cycle_at(self, now: float, started: float, cost: int = 0) -> float:
        if self._prefers_list(len(self._runs)):
            # While a run is young, sweep as often as its own pause would be (see _polling),
            # with at most half the budget; else once per interval.
            youngest = now - max((w.since for w in self._runs.values()), default=now)
            pause = max(young_interval(self.interval, youngest), 2 * cost / self.budget.rate)
            return started + jittered(min(pause, self.interval), self._rng)
        upcoming = min((w.next_due for w in self._runs.values()), default=now)
        return max(upcoming, now + 0.01)

    def _prefers_list(self, due: int) -> bool:
        pages = max(1, math.ceil(self._active_estimate / self.page_size))
        return due > pages

    async def _cycle(self, started: float) -> None:
        if self._prefers_list(len(self._runs)):
            await self._sweep_list(started)
            return
        # Few runs: each keeps its own phase (a random first poll), which spreads requests.
        await self._get_each([w for w in self._runs.values() if w.next_due <= started])

    async def _get_each(self, batch: list[_Watched]) -> None:
        """``runs/get`` each run (a few at a time, within the budget)."""
        if not batch:
            return
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(_PARALLEL_GETS)
        pending: list[asyncio.Task[None]] = []
        for watched in batch:
            if self._outage is not None:
                break  # the probe asks now
            await slots.acquire()
            pending.append(loop.create_task(self._refresh(watched, slots)))
        await asyncio.gather(*pending)

    async def _refresh(self, watched: _Watched, slots: asyncio.Semaphore) -> None:
        try:
            with self.budget.spending(Lane.POLL):
                state = await self._ask(self.client.get_run(watched.run_id))
        except _Down:
            return  # refreshed once the workspace answers again
        except NotFound as error:
            self._fail([watched], error)
            return
        except AuthError:
            raise
        except AirError as error:
            logger.warning("could not refresh run %s: %s", watched.run_id, error)
            watched.next_due = asyncio.get_running_loop().time() + watched.interval
            return
        finally:
            slots.release()
        self._observe(watched, state, final=True)

    async def _list_pages(
        self, params: dict[str, Any], max_pages: int | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Yield ``runs/list`` pages, each through the budget. The request is the CLI's
        (experimental/air/cmd/list.go: SUBMIT_RUN runs, tasks expanded, paged) with the
        Jobs API's documented state and start-time filters (ListRunsRequest:
        active_only/completed_only, start_time_from/start_time_to)."""
        params = {
            **params,
            "run_type": "SUBMIT_RUN",
            "expand_tasks": "true",
            "limit": self.page_size,
        }
        pages = 0
        while max_pages is None or pages < max_pages:
            pages += 1
            with self.budget.spending(Lane.POLL):
                body = await self._ask(self.client.list_runs_raw(params))
            yield body
            token = body.get("next_page_token")
            if not token or not body.get("has_more", True):
                return
            params["page_token"] = token

    async def _sweep_list(self, started: float) -> None:
        requests_before = self.budget.sent[Lane.POLL]
        segments: list[_Segment] | None = None
        unknown = [w for w in self._runs.values() if w.start_ms is None]
        if unknown:
            # One pass over every active run (the workspace's and the watched ones) learns
            # them all; a runs/get each is cheaper for a few.
            active = max(self._active_total, len(self._runs))
            full_pass = max(1, math.ceil(active / self.page_size))
            if len(unknown) <= full_pass:
                await self._get_each(unknown)
            else:
                await self._sweep_active(started, None, None, list(self._runs.values()))
                segments = []  # that pass saw every watched run
        segments = self._segments() if segments is None else segments
        if segments:
            self._forget_completed_before(segments[0].low)
        for segment in segments:
            members = [m for m in segment.members if m.run_id in self._runs]
            if not members:
                continue
            if segment.completed_side:
                wanted = {m.run_id: m for m in members}
                await self._sweep_completed(segment.low, segment.high, wanted)
            else:
                await self._sweep_active(started, segment.low, segment.high, members)
        now = asyncio.get_running_loop().time()
        for watched in self._runs.values():
            watched.next_due = now
        self._active_estimate = (self.budget.sent[Lane.POLL] - requests_before) * self.page_size

    def _completed_between(self, low: int, high: int) -> int:
        starts = self._completed_starts
        return bisect.bisect_right(starts, high) - bisect.bisect_left(starts, low)

    def _segments(self) -> list[_Segment]:
        """The watched runs of known start, cut into blocks of about a page each (runs of
        one start time together); each block is priced on both sides (its watched runs,
        which are active as far as is known, against the completed runs seen in its
        start-time range), and neighbouring blocks of the same cheaper side are listed as
        one range. Runs ending in start order (trials of one sweep) leave few ranges,
        whatever their number."""
        known = sorted(
            (w for w in self._runs.values() if w.start_ms is not None),
            key=lambda w: w.start_ms or 0,
        )
        segments: list[_Segment] = []
        i = 0
        while i < len(known):
            j = min(len(known), i + self.page_size)
            while j < len(known) and known[j].start_ms == known[j - 1].start_ms:
                j += 1
            low = known[i].start_ms or 0
            high = (known[j].start_ms or 0) - 1 if j < len(known) else known[-1].start_ms or 0
            # The completed side tells ends only: a block with a run not running yet is
            # listed from the active side until each has been seen running (or ended).
            completed_side = self._completed_between(low, high) < j - i and not any(
                _not_running_yet(w) for w in known[i:j]
            )
            if segments and segments[-1].completed_side == completed_side:
                segments[-1].high = high
                segments[-1].members += known[i:j]
            else:
                segments.append(_Segment(low, high, known[i:j], completed_side))
            i = j
        return segments

    def _seen_completed(self, raw: dict[str, Any]) -> None:
        run_id, start = raw.get("run_id"), raw.get("start_time")
        if isinstance(run_id, int) and isinstance(start, int) and run_id not in self._completed_ids:
            self._completed_ids[run_id] = start
            bisect.insort(self._completed_starts, start)

    def _forget_completed_before(self, start_ms: int) -> None:
        """Completed runs older than every watched run are never priced again."""
        cut = bisect.bisect_left(self._completed_starts, start_ms)
        if cut > 1024:
            del self._completed_starts[:cut]
            self._completed_ids = {r: s for r, s in self._completed_ids.items() if s >= start_ms}

    async def _sweep_completed(self, low: int, high: int, wanted: dict[int, _Watched]) -> None:
        """The segment's completed runs: watched ones among them have ended, with the
        entry (tasks expanded) as their final state; the others are still going."""
        params = {"completed_only": "true", "start_time_from": low, "start_time_to": high}
        async for body in self._list_pages(params):
            for raw in body.get("runs") or []:
                self._seen_completed(raw)
                watched = wanted.pop(raw.get("run_id"), None)
                if watched is not None:
                    self._observe(watched, RunState.from_api(raw), final=True)

    async def _sweep_active(
        self, started: float, low: int | None, high: int | None, members: list[_Watched]
    ) -> None:
        """The active runs (of the segment, or all): watched runs among them are refreshed
        from their entries; watched ones missing have ended and are looked up."""
        params: dict[str, Any] = {"active_only": "true"}
        if low is not None and high is not None:
            params.update(start_time_from=low, start_time_to=high)
        listed: set[int] = set()
        ended: list[_Watched] = []
        total = 0
        async for body in self._list_pages(params):
            for raw in body.get("runs") or []:
                total += 1
                run_id = raw.get("run_id")
                watched = self._runs.get(run_id) if isinstance(run_id, int) else None
                if watched is None:
                    continue
                start = raw.get("start_time")
                if watched.start_ms is None and isinstance(start, int):
                    watched.start_ms = start
                listed.add(watched.run_id)
                if self._observe_raw(watched, raw):  # ended: the entry has its tasks
                    self._seen_completed(raw)
                    self._observe(watched, RunState.from_api(raw), final=True)
        if low is None:
            self._active_total = total
        # A run registered after the sweep began may simply be too new to be listed yet.
        ended += [
            w
            for w in members
            if w.run_id not in listed and w.since <= started and w.run_id in self._runs
        ]
        ended = list({w.run_id: w for w in ended}.values())
        if len(ended) > 1:
            ended = await self._resolve_from_completed(ended)
        await self._get_each(ended)

    async def _resolve_from_completed(self, ended: list[_Watched]) -> list[_Watched]:
        """Runs that left the active list, looked up among completed runs (one page answers
        25) when that is cheaper than a ``runs/get`` each: within their start times when
        known, else the newest few pages. Answers the runs not found (they get
        ``runs/get``)."""
        wanted = {w.run_id: w for w in ended}
        starts = [w.start_ms for w in ended if w.start_ms is not None]
        params: dict[str, Any] = {"completed_only": "true"}
        if len(starts) == len(ended):
            low, high = min(starts), max(starts)
            priced = bisect.bisect_right(self._completed_starts, high) - bisect.bisect_left(
                self._completed_starts, low
            )
            if math.ceil((priced + len(ended)) / self.page_size) >= len(ended):
                return ended
            params.update(start_time_from=low, start_time_to=high)
            max_pages = None
        else:
            max_pages = math.ceil(len(wanted) / self.page_size) + 2
        pages = self._list_pages(params, max_pages)
        async with contextlib.aclosing(pages):
            async for body in pages:
                for raw in body.get("runs") or []:
                    self._seen_completed(raw)
                    watched = wanted.pop(raw.get("run_id"), None)
                    if watched is not None:
                        self._observe(watched, RunState.from_api(raw), final=True)
                if not wanted:
                    break
        return list(wanted.values())

    def _observe_raw(self, watched: _Watched, raw: dict[str, Any]) -> bool:
        """Update from a list entry without building objects when nothing changed; True
        when the run ended (the caller finishes it)."""
        state_body = raw.get("state") or {}
        key = (
            state_body.get("life_cycle_state"),
            state_body.get("result_state"),
            state_body.get("state_message"),
        )
        if key == watched.key:
            if any(w.examines for w in watched.waiters):
                # An attempt can fail and be retried under one run state: keep its tasks
                # (parsed only when an attempt's state changed: most listings change none).
                attempts = tuple(
                    (t.get("attempt_number"), (t.get("state") or {}).get("result_state"))
                    for t in raw.get("tasks") or ()
                )
                if attempts != watched.attempts:
                    watched.attempts = attempts
                    watched.state = RunState.from_api(raw)
            if any(w.policy.has_budget for w in watched.waiters):
                self._check_budgets(watched, RunState.from_api(raw))  # its attempts changed
            return False
        state = RunState.from_api(raw)
        if state.is_terminal:
            return True
        watched.key = key
        self._changed(watched, state)
        self._check_budgets(watched, state)
        return False

    def _observe(self, watched: _Watched, state: RunState, *, final: bool) -> None:
        if watched.start_ms is None and state.start_time:
            watched.start_ms = state.start_time
        key = (state.life_cycle_state, state.result_state, state.state_message or None)
        if key != watched.key:
            watched.key = key
            self._changed(watched, state)
        watched.state = state  # its attempts may have changed under one run state
        if state.is_terminal and final:
            self._finish(watched, state)
            return
        self._check_budgets(watched, state)
        now = asyncio.get_running_loop().time()
        watched.interval = next_interval(watched.interval, self.interval, state)
        pause = young_interval(watched.interval, now - watched.since)
        watched.next_due = now + jittered(pause, self._rng)

    def _changed(self, watched: _Watched, state: RunState) -> None:
        watched.state = state
        if state.unknown_state and not watched.warned:
            watched.warned = True
            logger.warning(
                "run %s is in state %s, unknown to this version; still waiting",
                watched.run_id,
                state.life_cycle_state,
            )
        for waiter in list(watched.waiters):
            if waiter.on_update is None:
                continue
            try:
                waiter.on_update(state)
            except Exception:
                logger.exception("on_update callback for run %s failed", watched.run_id)

    async def _check_every_budget(self) -> None:
        """After each cycle, each budgeted run from its last state read: a listing of
        completed runs says nothing new of one still going, and its attempts' start times
        (with the time now) are all the arithmetic needs. That state may be older than the
        run's end, so a run it shows over budget is read once more before a wait ends: one
        request, only then, so a run that ended within its budget is never called over it."""
        for watched in list(self._runs.values()):
            state = watched.state
            if state is None or not any(
                w.policy.has_budget and w.policy.over_budget(state) is not None
                for w in watched.waiters
                if not w.future.done()
            ):
                continue
            with self.budget.spending(Lane.POLL):
                fresh = await self._ask(self.client.get_run(watched.run_id))
            if fresh.is_terminal:
                self._finish(watched, fresh)
            else:
                self._check_budgets(watched, fresh)

    # --- sweep budgets ----------------------------------------------------------------

    def _sweep_waits(self) -> dict[tuple[Any, ...], list[tuple[_Watched, _Waiter]]]:
        """The run waits still going that share each sweep's budget."""
        found: dict[tuple[Any, ...], list[tuple[_Watched, _Waiter]]] = {}
        for watched in self._runs.values():
            for waiter in watched.waiters:
                sweep = waiter.policy.sweep
                if sweep is not None and not waiter.future.done():
                    found.setdefault(sweep.key, []).append((watched, waiter))
        return found

    def _next_sweep_due(self) -> float:
        """When the next listing of a sweep a run wait shares is due (loop time)."""
        waits = self._sweep_waits()
        dues = [e.due for key, e in self._sweeps.items() if key in waits]
        if len(dues) < len(waits):  # a sweep never listed: now
            return asyncio.get_running_loop().time()
        return min(dues, default=math.inf)

    async def _check_every_sweep(self) -> None:
        """After each cycle, each sweep whose listing is due (once per interval, or when the
        last one says its budget is spent by now): one listing for every wait on its runs;
        once spent, each of those waits ends with ``SweepBudgetSpent``."""
        now = asyncio.get_running_loop().time()
        waits = self._sweep_waits()
        for key in [k for k, e in self._sweeps.items() if k not in waits and not e.listing]:
            if now - self._sweeps[key].listed_at > 10 * self.interval:
                del self._sweeps[key]  # no wait left on it (a stage wait lists it again)
        for key, sharing in waits.items():
            entry = self._sweeps.get(key)
            if entry is not None and entry.due > now:
                continue
            sweep = sharing[0][1].policy.sweep
            assert sweep is not None
            spend = await self.sweep_spend(sweep, fresh_within=0.0)
            for watched, waiter in sharing:
                stopped = spent_error(spend, watched.run_id)
                if stopped is not None and not waiter.future.done():
                    waiter.future.set_exception(stopped)

    async def sweep_spend(self, sweep: Sweep, *, fresh_within: float | None = None) -> SweepSpend:
        """What ``sweep`` spent, shared by every wait of this watcher: the last listing
        counted up to now when it is younger than ``fresh_within`` (default: the interval)
        and its budget is not spent by now at the pace of its runs, else one new listing
        (several callers at once share it), within the request budget."""
        loop = asyncio.get_running_loop()
        entry = self._sweeps.get(sweep.key)
        if entry is None:
            entry = self._sweeps[sweep.key] = _SweepBudget(sweep)
        within = self.interval if fresh_within is None else fresh_within
        if entry.listing is None and entry.spend is not None:
            projected = entry.spend.at(int(time.time() * 1000))
            if loop.time() - entry.listed_at < within and not projected.spent:
                return projected
        if entry.listing is None:
            entry.listing = loop.create_task(
                self._list_sweep(entry), name="air-sweep-budget", context=contextvars.Context()
            )
        listing = entry.listing
        return await asyncio.shield(listing)

    async def _list_sweep(self, entry: _SweepBudget) -> SweepSpend:
        # A listing that fails is tried again an interval later, not at once.
        entry.due = asyncio.get_running_loop().time() + self.interval
        try:
            listed: list[dict[str, Any]] = []
            pages = self._list_pages(entry.sweep.list_params(), MAX_LIST_PAGES)
            async with contextlib.aclosing(pages):
                async for body in pages:
                    listed.extend(r for r in body.get("runs") or [] if isinstance(r, dict))
            self.sweep_listings += 1
            spend = entry.sweep.tally(listed)
            now = asyncio.get_running_loop().time()
            entry.spend, entry.listed_at = spend, now
            entry.due = now + min(self.interval, max(spend.seconds_to_spent(), 0.05))
            return spend
        finally:
            entry.listing = None

    async def _check_every_retry(self) -> None:
        """After each cycle, each run one of whose waiters has a retry policy to apply: an
        attempt its last state shows failed, with a retry to follow, is diagnosed (its
        nodes' last lines, within the request budget) once, and each waiter's policy
        decides (told to its ``on_retry``); a decision against the platform's retry ends
        that wait. Nothing is read for a run whose attempts have not failed."""
        for watched in list(self._runs.values()):
            state = watched.state
            deciding = [w for w in watched.waiters if w.examines and not w.future.done()]
            if state is None or not deciding:
                continue
            found = attempts_to_examine(state, None, watched.examined)
            for i, attempt in enumerate(found):
                try:
                    diagnosis = await self._diagnose(Examine(state, attempt))
                except _Down:  # examined once the workspace answers again
                    watched.examined -= {(a.task_key, a.attempt_number) for a in found[i:]}
                    raise
                for waiter in deciding:
                    if waiter.future.done():
                        continue
                    stopped = retry_examined(
                        waiter.policy.failure_policy, state, diagnosis, None, waiter.on_retry
                    )
                    if stopped is not None:
                        waiter.future.set_exception(stopped)

    async def _tell_unseen_retries(
        self,
        state: RunState,
        examined: set[tuple[str, int]],
        policy: FailurePolicy,
        on_retry: OnRetry,
    ) -> None:
        """A run that ended between two polls had retries the cycle never saw: its waiter's
        log still hears what each failed attempt was (a few log reads, only then)."""
        for attempt in retried_attempts(state, None, examined):
            try:
                diagnosis = await self._diagnose(Examine(state, attempt))
            except Exception as error:  # the log line is a courtesy: the wait has ended
                logger.debug("diagnosis of run %s: %s", state.run_id, error)
                return
            tell_retry(on_retry, policy.decide(diagnosis), state.run_id)

    async def _diagnose(self, request: Examine) -> Any:
        # One log read per node (8 at most), then the task's variables and its checkpoint
        # folder: one timeout each.
        reads = min(request.attempt.node_count, 8) + 2
        with self.budget.spending(Lane.POLL):
            return await self._ask(
                self.client.run_flow(
                    lambda core: attempt_diagnosis(core, request.state, request.attempt)
                ),
                reads,
            )

    def _check_budgets(self, watched: _Watched, state: RunState) -> None:
        """End the wait of each waiter whose budget (``WaitPolicy.over_budget``) the run has
        passed."""
        for waiter in watched.waiters:
            if not waiter.policy.has_budget or waiter.future.done():
                continue
            exceeded = waiter.policy.over_budget(state)
            if exceeded is not None:
                waiter.future.set_exception(exceeded)

    def _finish(self, watched: _Watched, state: RunState) -> None:
        watched.state = state
        for waiter in watched.waiters:
            if not waiter.future.done():
                waiter.future.set_result(state)
        self._runs.pop(watched.run_id, None)

    def _fail(self, runs: Iterable[_Watched], error: BaseException) -> None:
        for watched in runs:
            for waiter in watched.waiters:
                if not waiter.future.done():
                    waiter.future.set_exception(error)
            self._runs.pop(watched.run_id, None)

    async def aclose(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        if self._prober is not None:
            self._prober.cancel()
        if self._outage is not None:  # nothing probes any more: no wait is left holding on
            outage, self._outage = self._outage, None
            outage.back.set()
        for watchers in self._shared.values():
            for key, watcher in list(watchers.items()):
                if watcher is self:
                    del watchers[key]
        await self.client.aclose()
