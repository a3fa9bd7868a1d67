"""Blocking asset checks inside one step: a stage whose blocking check failed keeps the
stages downstream of it (in the same remote run) from being recorded as materialized.

Dagster's contract (``AssetCheckSpec(blocking=True)``): when a blocking check fails with
ERROR severity, the assets downstream of the checked one are not materialized. Dagster
enforces it between steps; stages of one multi-task run are one step, so the step does it
itself. It reads the checks each task reports through Pipes while the run goes on; once the
checked task's final attempt has ended, its downstream tasks are blocked, and the run is
cancelled when every unfinished task of it is blocked (the platform cancels whole runs, so a
run that still holds an unblocked task keeps going, and the blocked tasks' results are
dropped when it ends).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import dagster as dg

from air_runtime import AirError, RunState


@dataclass(frozen=True)
class AttemptReports:
    """What one attempt of one task reported through Pipes: materializations (several
    reports of one asset merged, later keys winning) and asset check results."""

    task_key: str
    attempt: int  # the platform's attempt_number (0 for the first)
    materializations: dict[dg.AssetKey, dg.MaterializeResult]
    checks: list[dg.AssetCheckResult]


@dataclass(frozen=True)
class RunTask:
    """One task of a remote run as the step sees it."""

    task_key: str
    asset_key: dg.AssetKey
    partition: str | None = None
    depends_on: tuple[str, ...] = ()  # task keys of the same run


def blocking_check_keys(context: dg.AssetExecutionContext) -> set[dg.AssetCheckKey]:
    """The selected checks of this step that are blocking."""
    selected = context.selected_asset_check_keys
    return {
        spec.key
        for spec in context.assets_def.check_specs
        if spec.blocking and spec.key in selected
    }


def downstream_of(tasks: Mapping[str, RunTask], roots: Iterable[str]) -> set[str]:
    """Every task that depends, directly or not, on one of ``roots`` (roots excluded)."""
    found: set[str] = set()
    frontier = set(roots)
    while frontier:
        nxt = {
            t.task_key
            for t in tasks.values()
            if t.task_key not in found and frontier.intersection(t.depends_on)
        }
        found |= nxt
        frontier = nxt
    return found


@dataclass
class BlockingChecks:
    """Follows one remote run: which tasks a failed blocking check blocks, and the cancel."""

    tasks: Mapping[str, RunTask]
    blocking: set[dg.AssetCheckKey]
    # task key -> why it is blocked ("blocking check X of asset Y [partition p] failed")
    blocked: dict[str, str] = field(default_factory=dict)
    cancelled: set[int] = field(default_factory=set)  # the run ids cancelled
    _told: set[str] = field(default_factory=set)

    def failed_checks(self, state: RunState, reports: list[AttemptReports]) -> dict[str, str]:
        """Task key -> the failed blocking checks of its final, ended attempt."""
        failed: dict[str, str] = {}
        for report in reports:
            task = self.tasks.get(report.task_key)
            current = state.task(report.task_key) if task is not None else None
            if task is None or current is None or current.task_key != report.task_key:
                continue  # not a task of this run
            if not current.is_terminal or current.attempt_number != report.attempt:
                continue  # still running, or an earlier attempt a retry replaces
            names = sorted(
                str(c.check_name)
                for c in report.checks
                if not c.passed
                and c.severity == dg.AssetCheckSeverity.ERROR
                and dg.AssetCheckKey(task.asset_key, str(c.check_name)) in self.blocking
            )
            if names:
                where = f" partition {task.partition}" if task.partition is not None else ""
                failed[report.task_key] = (
                    f"blocking check {', '.join(names)} of {task.asset_key.to_user_string()}"
                    f"{where} failed"
                )
        return failed

    def awaiting_end(self, state: RunState, reports: list[AttemptReports]) -> bool:
        """A task reported a failed blocking check but ``state`` does not show it ended yet:
        the watcher reports run-level changes, so the caller reads the run again to learn
        the task's end (and cancel its downstream tasks) without waiting for the run's."""
        if not self.blocking or state.is_terminal or state.run_id in self.cancelled:
            return False
        for report in reports:
            task = self.tasks.get(report.task_key)
            current = state.task(report.task_key) if task is not None else None
            if task is None or current is None or current.is_terminal:
                continue
            if any(
                not c.passed
                and c.severity == dg.AssetCheckSeverity.ERROR
                and dg.AssetCheckKey(task.asset_key, str(c.check_name)) in self.blocking
                for c in report.checks
            ):
                return True
        return False

    def update(
        self,
        cancel: Callable[[int], object] | None,
        state: RunState,
        reports: list[AttemptReports],
        log: dg.DagsterLogManager,
        redact: Callable[[str], str],
    ) -> None:
        if not self.blocking:
            return
        for root, reason in self.failed_checks(state, reports).items():
            for key in downstream_of(self.tasks, [root]):
                self.blocked.setdefault(key, reason)
        if not self.blocked or state.is_terminal or state.run_id in self.cancelled or not cancel:
            return
        unfinished = {
            t.task_key for t in state.tasks if t.task_key in self.tasks and not t.is_terminal
        }
        blocked_unfinished = unfinished & set(self.blocked)
        if not blocked_unfinished:
            return
        if unfinished <= set(self.blocked):
            names = ", ".join(sorted(blocked_unfinished))
            log.warning(
                f"cancelling run {state.run_id}: its unfinished tasks {names} are downstream "
                f"of a failed blocking check ({self.blocked[min(blocked_unfinished)]})"
            )
            try:
                cancel(state.run_id)
                self.cancelled.add(state.run_id)
            except AirError as error:
                log.error(f"could not cancel run {state.run_id}: {redact(str(error))}")
            return
        new = blocked_unfinished - self._told
        if new:
            self._told |= new
            log.warning(
                f"run {state.run_id}: tasks {', '.join(sorted(new))} are downstream of a failed "
                "blocking check and will not be recorded; they keep running because the run "
                "still holds unblocked tasks (the platform cancels whole runs only)"
            )
