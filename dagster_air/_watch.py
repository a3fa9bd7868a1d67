"""The wait of one step, on the background loop: state changes and node logs go to a queue
that the step's thread turns into Dagster log lines (Dagster's log manager is not called
from another thread)."""

from __future__ import annotations

import asyncio
import contextlib
import queue
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from air_runtime import (
    AirError,
    LineBudget,
    LogRecord,
    RunState,
    RunWatcher,
    TrainingProgress,
    WaitPolicy,
)

from ._loop import run_in_background

if TYPE_CHECKING:
    from ._resource import AirWorkspace

# After the run ends, give the log follower this long to read the last lines.
_LOG_DRAIN_S = 10.0


# What the wait hands the step's thread, one kind each.
@dataclass(frozen=True, slots=True)
class StateSeen:
    state: RunState


@dataclass(frozen=True, slots=True)
class ProgressSeen:
    progress: TrainingProgress


@dataclass(frozen=True, slots=True)
class WatchWarning:
    text: str


@dataclass(frozen=True, slots=True)
class NodeLine:
    record: LogRecord
    line: str


WatchEvent = StateSeen | ProgressSeen | WatchWarning | NodeLine
WatchEvents = queue.SimpleQueue[WatchEvent]


def shared_watcher(workspace: AirWorkspace) -> RunWatcher:
    """The process-wide watcher of this workspace; call on the background loop."""
    from ._resource import USER_AGENT_EXTRA

    return RunWatcher.shared(
        workspace.host,
        workspace.token,
        credentials=workspace.credentials(),
        interval=workspace.poll_interval,
        budget_rps=workspace.request_budget,
        lines=LineBudget(progress_interval=workspace.progress_interval or 60.0),
        timeout=workspace.request_timeout,
        user_agent_extra=USER_AGENT_EXTRA,
    )


async def _follow_logs(
    watcher: RunWatcher,
    run_id: int,
    node: int | None,
    events: WatchEvents,
    ended: asyncio.Event,
) -> None:
    try:
        # Every task, attempt and node (or one node); the watcher's wait says when the run
        # ended, so the follower asks for the run only now and then (to learn of retries).
        async for record in watcher.client.iter_run_logs(
            run_id, node=node, follow=True, until=ended
        ):
            for line in record.body.splitlines() or [""]:
                events.put(NodeLine(record, line))
    except AirError as error:
        events.put(WatchWarning(f"stopped streaming logs of run {run_id}: {error}"))


async def watch_run(
    workspace: AirWorkspace,
    run_id: int,
    events: WatchEvents,
    log_node: int | None,
    policy: WaitPolicy,
    follow_logs: bool = True,
) -> RunState:
    """Wait for the run to end through the shared watcher under ``policy``, following every
    node's logs (only ``log_node``'s when set). Past one of its budgets (the watcher's
    arithmetic, from the states it reads anyway): ``BudgetExceeded``; an attempt that failed
    in a way its ``failure_policy`` does not leave to the platform: ``RetriesStopped``;
    either way the run left going; once its ``sweep``'s budget is spent (one listing per poll
    interval for every step of the process): ``SweepBudgetSpent``. Each retry the policy
    leaves to the platform is a warning in the step log."""
    watcher = shared_watcher(workspace)
    ended = asyncio.Event()
    follower = (
        asyncio.create_task(_follow_logs(watcher, run_id, log_node, events, ended))
        if follow_logs
        else None
    )
    try:
        state = await watcher.wait(
            run_id,
            policy,
            on_update=lambda s: events.put(StateSeen(s)),
            on_progress=(lambda p: events.put(ProgressSeen(p)))
            if workspace.progress_interval
            else None,
            on_retry=lambda decision: events.put(WatchWarning(decision.line())),
        )
        ended.set()
        if follower is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(follower), _LOG_DRAIN_S)
        return state
    finally:
        if follower is not None and not follower.done():
            follower.cancel()


def watch_in_background(
    workspace: AirWorkspace,
    run_id: int,
    events: WatchEvents,
    policy: WaitPolicy,
    follow_logs: bool,
) -> Future[RunState]:
    """``watch_run`` of every node on this process's background loop: all assets of one
    process share one ``RunWatcher`` per workspace (one coalescing poller under
    ``request_budget``), while the step's main thread stays free to receive Dagster's
    interrupt on run termination."""
    return run_in_background(watch_run(workspace, run_id, events, None, policy, follow_logs))
