"""Operations both clients get from these mixins (the ones behind ``airo pools``,
``logs --tail`` and ``run --dry-run``, a run's repair, its newest checkpoint and its training
progress): each method drives one flow of ``_pools``, ``_training_progress``, ``_log_reads``,
``_dry_run``, ``_checkpoint_folders`` or ``_runs`` with the client's own driver (``_run``,
``_steps``, ``_items``). Those modules are imported by the methods that use them: a task
that submits and defers uses none of them. What only ``airo get``, ``list`` and ``cancel``
show is not here: ``air_runtime.cli._run_views`` runs its flows with ``run_flow``."""

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
    from ._dry_run import SecretCheck
    from ._pools import GpuPool

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

    def training_progress(
        self, run: RunState | int, task_key: str | None = None, *, live: bool = False
    ) -> TrainingProgress | None:
        """Progress and time left of a running run's newest attempt (of ``task_key`` in a
        multi-task run), from what it logs to MLflow, as ``databricks air get`` computes it
        (``live``: from the first logged step, as a waiter shows it); None when it has
        ended or logs no progress. Pass the ``RunState`` you already have to save its
        runs/get."""
        from . import _training_progress

        return self._run(_training_progress.training_progress(self._core, run, task_key, live=live))

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

    async def training_progress(
        self, run: RunState | int, task_key: str | None = None, *, live: bool = False
    ) -> TrainingProgress | None:
        from . import _training_progress

        return await self._run(
            _training_progress.training_progress(self._core, run, task_key, live=live)
        )

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
