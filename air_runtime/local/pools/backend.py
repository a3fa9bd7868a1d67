"""Accelerators held on each GPU pool by the attempts this workspace runs. An attempt whose
pool has too few idle accelerators waits, PENDING with the platform's message for it
("Waiting for GPU compute capacity to become available", logstream.go), until enough are
given back or its run is cancelled. Used only from the server's event loop.

For tests it also records, per pool, the most accelerators ever asked for at once (held plus
waited for) and how many attempts had to wait: a cap that works keeps the first within the
reservation and the second at 0."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from air_runtime.local._errors import ApiError, not_found
from air_runtime.local._options import GPU_POOLS_FEATURE, WorkspaceOptions

WAITING_FOR_CAPACITY = "Waiting for GPU compute capacity to become available."


def pool_request(spec: dict[str, Any]) -> tuple[str, int] | None:
    """The pool a task runs on and the accelerators it takes (validateconfig.go: the
    deployment's compute.provisioned_capacity_id and accelerator_count)."""
    deployments = (spec.get("ai_runtime_task") or {}).get("deployments") or [{}]
    compute = deployments[0].get("compute") or {}
    pool, count = compute.get("provisioned_capacity_id"), compute.get("accelerator_count")
    if not isinstance(pool, str) or not isinstance(count, int) or isinstance(count, bool):
        return None
    return pool.strip(), count


class PoolLedger:
    def __init__(self, pools: Sequence[dict[str, Any]]) -> None:
        self._reserved = {str(p["pool_id"]): int(p["accelerator_count"]) for p in pools}
        self._used = dict.fromkeys(self._reserved, 0)
        self._released = asyncio.Event()  # set (and replaced) whenever accelerators come back
        self._waiting = dict.fromkeys(self._reserved, 0)  # accelerators asked for, not held
        self.peak_asked = dict.fromkeys(self._reserved, 0)
        self.waits = dict.fromkeys(self._reserved, 0)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """Per pool: reserved, used, peak_asked, waits (see the module docstring)."""
        return {
            pool_id: {
                "reserved": reserved,
                "used": self._used[pool_id],
                "peak_asked": self.peak_asked[pool_id],
                "waits": self.waits[pool_id],
            }
            for pool_id, reserved in self._reserved.items()
        }

    def used(self, pool_id: str) -> int:
        return self._used.get(pool_id, 0)

    def manages(self, request: tuple[str, int] | None) -> bool:
        return request is not None and request[0] in self._reserved

    def has_room(self, pool_id: str, count: int) -> bool:
        return self._used[pool_id] + count <= self._reserved[pool_id]

    async def acquire(self, pool_id: str, count: int, cancel: asyncio.Event) -> bool:
        """Take ``count`` accelerators once the pool has them; False when cancelled first."""
        asked = self._used[pool_id] + self._waiting[pool_id] + count
        self.peak_asked[pool_id] = max(self.peak_asked[pool_id], asked)
        if not self.has_room(pool_id, count):
            self.waits[pool_id] += 1
        self._waiting[pool_id] += count
        try:
            return await self._take(pool_id, count, cancel)
        finally:
            self._waiting[pool_id] -= count

    async def _take(self, pool_id: str, count: int, cancel: asyncio.Event) -> bool:
        while not cancel.is_set():
            if self.has_room(pool_id, count):
                self._used[pool_id] += count
                return True
            waits = [
                asyncio.ensure_future(self._released.wait()),
                asyncio.ensure_future(cancel.wait()),
            ]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waits:
                    waiter.cancel()
        return False

    def release(self, pool_id: str, count: int) -> None:
        self._used[pool_id] = max(0, self._used[pool_id] - count)
        released, self._released = self._released, asyncio.Event()
        released.set()


class GpuPools:
    """The workspace's GPU pools as the API serves them: the reservations it was started
    with, and the accelerators its attempts hold on each (the engine's ledger)."""

    def __init__(self, options: WorkspaceOptions, ledger: PoolLedger) -> None:
        self._options = options
        self._ledger = ledger

    def _check_enabled(self) -> None:
        if GPU_POOLS_FEATURE in self._options.disabled_features:
            raise ApiError(403, "FEATURE_DISABLED", "GPU pools are not enabled for this workspace.")

    def all(self) -> list[dict[str, Any]]:
        """Every pool: pool_id, accelerator_type, accelerator_count."""
        self._check_enabled()
        return list(self._options.gpu_pools)

    def get(self, pool_id: str) -> tuple[dict[str, Any], int]:
        """The pool, and how many of its accelerators are used now."""
        self._check_enabled()
        for pool in self._options.gpu_pools:
            if pool["pool_id"] == pool_id:
                return pool, self._ledger.used(pool_id)
        raise not_found(f"Provisioned capacity {pool_id} does not exist.")
