"""Blocking asset checks inside one step: a stage whose blocking check failed keeps the
stages downstream of it from running at all.

Dagster's contract (``AssetCheckSpec(blocking=True)``): when a blocking check fails with
ERROR severity, the assets downstream of the checked one are not materialized. Dagster
enforces it between steps; the stages of one workflow are one step, so the step does it
itself. The platform knows nothing of the checks: in one multi-task run a downstream task
starts as soon as its upstream task succeeds, so the step plans the downstream stages as a
later run of their own (``_plan``'s waves), submitted once the checked task's final attempt
has ended and its checks, reported through Pipes, passed. A blocked task is never submitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import dagster as dg

from air_runtime import RunState


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
    """Which tasks of the step a failed blocking check blocks.

    A task's blocking check failed when its final, ended attempt reported it failed with
    ERROR severity, or ended well without reporting it (the step records an unreported
    check as failed, so it blocks as one). Its downstream tasks are planned in later runs
    (``_plan``'s waves): blocked, they are never submitted."""

    tasks: Mapping[str, RunTask]
    blocking: set[dg.AssetCheckKey]
    # task key -> why it is blocked ("blocking check X of asset Y [partition p] failed")
    blocked: dict[str, str] = field(default_factory=dict)

    def failed_checks(self, state: RunState, reports: list[AttemptReports]) -> dict[str, str]:
        """Task key -> the failed blocking checks of its final, ended attempt in ``state``."""
        by_attempt = {(r.task_key, r.attempt): r for r in reports}
        failed: dict[str, str] = {}
        for key, task in self.tasks.items():
            mine = sorted((k.name for k in self.blocking if k.asset_key == task.asset_key), key=str)
            current = state.task(key) if mine else None
            if current is None or current.task_key != key or not current.is_terminal:
                continue  # not a task of this run, or still running
            report = by_attempt.get((key, current.attempt_number))
            reported = {str(c.check_name): c for c in (report.checks if report else ())}
            names = []
            for name in mine:
                check = reported.get(name)
                if check is None:
                    if current.is_success:
                        names.append(f"{name} (not reported)")
                elif not check.passed and check.severity == dg.AssetCheckSeverity.ERROR:
                    names.append(name)
            if names:
                where = f" partition {task.partition}" if task.partition is not None else ""
                failed[key] = (
                    f"blocking check {', '.join(names)} of {task.asset_key.to_user_string()}"
                    f"{where} failed"
                )
        return failed

    def update(self, state: RunState, reports: list[AttemptReports]) -> None:
        """Block every task downstream of a failed blocking check of the ended ``state``."""
        if not self.blocking:
            return
        for root, reason in self.failed_checks(state, reports).items():
            for key in downstream_of(self.tasks, [root]):
                self.blocked.setdefault(key, reason)
