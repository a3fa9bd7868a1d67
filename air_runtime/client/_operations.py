"""Operations added to both clients by mixins: each method drives one flow (of ``_pools``
...) with the client's own driver (``_run``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from . import _pools
from ._core import ClientCore, Flow
from ._pools import GpuPool

T = TypeVar("T")


class SyncOperations:
    _core: ClientCore

    if TYPE_CHECKING:

        def _run(self, flow: Flow[T]) -> T: ...

    def list_gpu_pools(self) -> list[GpuPool]:
        """Every GPU pool of the workspace (without usage: only ``get_gpu_pool`` has it)."""
        return self._run(_pools.list_gpu_pools(self._core))

    def get_gpu_pool(self, pool_id: str | None = None) -> GpuPool:
        """One pool with its reserved, used and idle accelerators; without ``pool_id`` the
        workspace's only pool (an error naming them when there are several)."""
        return self._run(_pools.get_gpu_pool(self._core, pool_id))


class AsyncOperations:
    _core: ClientCore

    if TYPE_CHECKING:

        async def _run(self, flow: Flow[T]) -> T: ...

    async def list_gpu_pools(self) -> list[GpuPool]:
        return await self._run(_pools.list_gpu_pools(self._core))

    async def get_gpu_pool(self, pool_id: str | None = None) -> GpuPool:
        return await self._run(_pools.get_gpu_pool(self._core, pool_id))
