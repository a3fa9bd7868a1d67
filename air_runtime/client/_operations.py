"""Operations both clients get from these mixins (the ones behind ``airo pools``, ``get``,
``list``, ``logs --tail``, ``cancel --all`` and ``run --dry-run``, and a run's repair): each
method drives one flow of ``_pools``, ``_run_views``, ``_log_reads``, ``_dry_run`` or
``_runs`` with the client's own driver (``_run``, ``_steps``, ``_items``). Those modules are
imported by the methods that use them: a task that submits and defers uses none of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from . import _runs
from ._core import ClientCore, Flow, LogRecord

if TYPE_CHECKING:
    from .._checkpoints import Checkpoint
    from .._errors import Problem
    from .._progress import TrainingProgress
    from .._states import RunState
    from ..plan import Stage
    from ..workload import Workload
    from ._cancel_causes import CancelCause
    from ._dry_run import SecretCheck
    from ._pools import GpuPool
    from ._run_views import CancelResult, RunFilters, RunSummary, TaskRunRef

T = TypeVar("T")


class SyncOperations:
    _core: ClientCore

    if TYPE_CHECKING:

        def _run(self, flow: Flow[T]) -> T: ...

        def _steps(self, flow: Flow[Any]) -> Iterator[Any]: ...

    def list_gpu_pools(self) -> list[GpuPool]:
        """Every GPU pool of the workspace (without usage: only ``get_gpu_pool`` has it)."""
        from . import _pools

        return self._run(_pools.list_gpu_pools(self._core))

    def get_gpu_pool(self, pool_id: str | None = None) -> GpuPool:
        """One pool with its reserved, used and idle accelerators; without ``pool_id`` the
        workspace's only pool (an error naming them when there are several)."""
        from . import _pools

        return self._run(_pools.get_gpu_pool(self._core, pool_id))

    def repair_run(
        self, run_id: int, rerun_tasks: Sequence[str], *, latest_repair_id: int | None = None
    ) -> int:
        """Re-run the tasks ``rerun_tasks`` of the ended run ``run_id`` as new task runs of
        the same run (Jobs ``runs/repair``); the repair's id. ``latest_repair_id``: the
        run's newest repair (``get_run(run_id, include_history=True).latest_repair_id``),
        required once it has one; a stale one is refused (``PlatformError``)."""
        return self._run(_runs.repair_run(self._core, run_id, rerun_tasks, latest_repair_id))

    def newest_checkpoint(self, state: RunState, task_key: str | None = None) -> Checkpoint | None:
        """The newest checkpoint in the folder the run's task (``task_key``; a one-task run's
        only task) was submitted with (its ``AIRO_CHECKPOINT_DIR``); None without one."""
        from . import _checkpoint_folders

        return self._run(_checkpoint_folders.newest_checkpoint_of_run(self._core, state, task_key))

    def run_summary(self, run_id: int) -> RunSummary:
        """State, duration, newest attempt, experiment, MLflow link and GPU-hours."""
        from . import _run_views

        return self._run(_run_views.run_summary(self._core, run_id))

    def list_run_summaries(
        self,
        *,
        limit: int = 20,
        all_status: bool = False,
        filters: RunFilters | None = None,
        all_users: bool = False,
    ) -> list[RunSummary]:
        """The caller's newest AI Runtime runs (``all_users``: everyone's) that pass
        ``filters``: active ones, or with ``all_status`` all."""
        from . import _run_views

        return self._run(
            _run_views.list_runs(
                self._core,
                limit=limit,
                all_status=all_status,
                filters=filters,
                all_users=all_users,
            )
        )

    def task_run_ref(self, run_id: int) -> TaskRunRef | None:
        """None when ``run_id`` is a run; the task (and its run) when it is a task run."""
        from . import _run_views

        return self._run(_run_views.task_run_ref(self._core, run_id))

    def training_progress(
        self, run: RunState | int, task_key: str | None = None, *, live: bool = False
    ) -> TrainingProgress | None:
        """Progress and time left of a running run's newest attempt (of ``task_key`` in a
        multi-task run), from what it logs to MLflow, as ``databricks air get`` computes it
        (``live``: from the first logged step, as a waiter shows it); None when it has
        ended or logs no progress. Pass the ``RunState`` you already have to save its
        runs/get."""
        from . import _run_views

        return self._run(_run_views.training_progress(self._core, run, task_key, live=live))

    def active_runs_of_current_user(self) -> list[RunSummary]:
        from . import _run_views

        return self._run(_run_views.active_runs_of_current_user(self._core))

    def cancel_runs(self, run_ids: list[int], cause: CancelCause | None = None) -> CancelResult:
        """Cancel each run (keeping ``cause`` next to each first); the ones that could not
        be, with why."""
        from . import _run_views

        return self._run(_run_views.cancel_runs(self._core, run_ids, cause))

    def cancel_all_active(self) -> CancelResult:
        """Cancel every active run of the caller (listed in full first)."""
        from . import _run_views

        return self._run(_run_views.cancel_all_active(self._core))

    def preflight(
        self, workload: Workload | Sequence[Stage], *, idempotency_token: str | None = None
    ) -> list[Problem]:
        """The workspace's field errors for the workload (none: it would be accepted);
        nothing is uploaded or submitted."""
        from . import _dry_run

        return self._run(
            _dry_run.preflight(self._core, workload, idempotency_token=idempotency_token)
        )

    def check_secrets(self, workload: Workload) -> SecretCheck:
        """The workload's secret references looked up in their scopes (keys only): the
        missing ones as problems, nothing uploaded or submitted."""
        from . import _dry_run

        return self._run(_dry_run.check_secrets(self._core, workload))

    def read_logs(
        self,
        run_id: int,
        *,
        task_key: str | None = None,
        node: int | None = None,
        attempt: int | None = None,
        tail: int | None = None,
        minutes: float | None = None,
        follow: bool = False,
    ) -> Iterator[LogRecord]:
        """``iter_run_logs`` narrowed to one ``attempt`` (0-based), the last ``tail``
        records of each stream or the last ``minutes``; from MLflow's log artifacts when
        the log service has nothing."""
        from . import _log_reads

        yield from self._steps(
            _log_reads.read_logs(
                self._core,
                run_id,
                task_key=task_key,
                node=node,
                attempt=attempt,
                tail=tail,
                minutes=minutes,
                follow=follow,
            )
        )


class AsyncOperations:
    _core: ClientCore

    if TYPE_CHECKING:

        async def _run(self, flow: Flow[T]) -> T: ...

        def _items(self, flow: Flow[Any]) -> AsyncIterator[Any]: ...

    async def list_gpu_pools(self) -> list[GpuPool]:
        from . import _pools

        return await self._run(_pools.list_gpu_pools(self._core))

    async def get_gpu_pool(self, pool_id: str | None = None) -> GpuPool:
        from . import _pools

        return await self._run(_pools.get_gpu_pool(self._core, pool_id))

    async def repair_run(
        self, run_id: int, rerun_tasks: Sequence[str], *, latest_repair_id: int | None = None
    ) -> int:
        return await self._run(_runs.repair_run(self._core, run_id, rerun_tasks, latest_repair_id))

    async def newest_checkpoint(
        self, state: RunState, task_key: str | None = None
    ) -> Checkpoint | None:
        from . import _checkpoint_folders

        return await self._run(
            _checkpoint_folders.newest_checkpoint_of_run(self._core, state, task_key)
        )

    async def run_summary(self, run_id: int) -> RunSummary:
        from . import _run_views

        return await self._run(_run_views.run_summary(self._core, run_id))

    async def list_run_summaries(
        self,
        *,
        limit: int = 20,
        all_status: bool = False,
        filters: RunFilters | None = None,
        all_users: bool = False,
    ) -> list[RunSummary]:
        from . import _run_views

        return await self._run(
            _run_views.list_runs(
                self._core,
                limit=limit,
                all_status=all_status,
                filters=filters,
                all_users=all_users,
            )
        )

    async def task_run_ref(self, run_id: int) -> TaskRunRef | None:
        from . import _run_views

        return await self._run(_run_views.task_run_ref(self._core, run_id))

    async def training_progress(
        self, run: RunState | int, task_key: str | None = None, *, live: bool = False
    ) -> TrainingProgress | None:
        from . import _run_views

        return await self._run(_run_views.training_progress(self._core, run, task_key, live=live))

    async def active_runs_of_current_user(self) -> list[RunSummary]:
        from . import _run_views

        return await self._run(_run_views.active_runs_of_current_user(self._core))

    async def cancel_runs(
        self, run_ids: list[int], cause: CancelCause | None = None
    ) -> CancelResult:
        from . import _run_views

        return await self._run(_run_views.cancel_runs(self._core, run_ids, cause))

    async def cancel_all_active(self) -> CancelResult:
        from . import _run_views

        return await self._run(_run_views.cancel_all_active(self._core))

    async def preflight(
        self, workload: Workload | Sequence[Stage], *, idempotency_token: str | None = None
    ) -> list[Problem]:
        from . import _dry_run

        return await self._run(
            _dry_run.preflight(self._core, workload, idempotency_token=idempotency_token)
        )

    async def check_secrets(self, workload: Workload) -> SecretCheck:
        from . import _dry_run

        return await self._run(_dry_run.check_secrets(self._core, workload))

    async def read_logs(
        self,
        run_id: int,
        *,
        task_key: str | None = None,
        node: int | None = None,
        attempt: int | None = None,
        tail: int | None = None,
        minutes: float | None = None,
        follow: bool = False,
    ) -> AsyncIterator[LogRecord]:
        from . import _log_reads

        async for record in self._items(
            _log_reads.read_logs(
                self._core,
                run_id,
                task_key=task_key,
                node=node,
                attempt=attempt,
                tail=tail,
                minutes=minutes,
                follow=follow,
            )
        ):
            yield record
