"""GPU pools: the workspace's pre-provisioned accelerator reservations, the ones a workload
targets with ``compute.pool_id`` (pools.go). The API still calls them provisioned
capacities; the bare id (without the ``provisioned-capacities/`` resource prefix) is what
users see and type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from .._errors import ConfigurationError, NotFound, PlatformError
from ._core import ClientCore, Flow

# pools.go poolsAPIPath, resourceNamePrefix, poolListPageSize, poolListMaxPages.
POOLS_PATH = "/api/2.0/ai-training/provisioned-capacities"
RESOURCE_PREFIX = "provisioned-capacities/"
POOL_PAGE_SIZE = 100
_MAX_POOL_PAGES = 50


def pool_id(name: str) -> str:
    """The bare id of a pool from its resource name or an id a user typed (pools.go poolID)."""
    name = name.strip()
    return name[len(RESOURCE_PREFIX) :] if name.startswith(RESOURCE_PREFIX) else name


def _count(value: Any) -> int | None:
    """An int64 sent as a JSON number or, per proto3 JSON, a quoted string (pools.go apiInt64)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


@dataclass(frozen=True, slots=True)
class GpuPool:
    """One GPU pool. ``used_accelerators`` and ``idle_accelerators`` are None when the answer
    carried no usage: the list endpoint never does, only ``get_gpu_pool`` (pools.go)."""

    pool_id: str
    accelerator_type: str
    reserved_accelerators: int
    used_accelerators: int | None = None
    idle_accelerators: int | None = None

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> GpuPool:
        spec = _mapping(body.get("spec")) or {}
        usage = _mapping((_mapping(body.get("status")) or {}).get("usage"))
        used = idle = None
        if usage is not None:
            used = _count(usage.get("used_accelerator_count")) or 0
            idle = _count(usage.get("idle_accelerator_count")) or 0
        return cls(
            pool_id=pool_id(str(body.get("name") or "")),
            accelerator_type=str(spec.get("accelerator_type") or ""),
            reserved_accelerators=_count(spec.get("accelerator_count")) or 0,
            used_accelerators=used,
            idle_accelerators=idle,
        )

    def to_dict(self) -> dict[str, Any]:
        """The CLI's ``--json`` payload of ``air pools get`` (pools.go poolDetailData)."""
        return {
            "pool_id": self.pool_id,
            "accelerator_type": self.accelerator_type,
            "reserved_accelerators": self.reserved_accelerators,
            "used_accelerators": self.used_accelerators,
            "idle_accelerators": self.idle_accelerators,
        }


def _feature_disabled(core: ClientCore, error: PlatformError) -> ConfigurationError | None:
    # A permanent state of the workspace, not a retryable failure (pools.go poolAPIError).
    if error.error_code != "FEATURE_DISABLED":
        return None
    return ConfigurationError(
        f"the GPU pools API is not enabled for the workspace {core.host} (FEATURE_DISABLED)"
    )


def list_gpu_pools(core: ClientCore) -> Flow[list[GpuPool]]:
    """Every pool of the workspace, all pages (pools.go listPools); without usage."""
    pools: list[GpuPool] = []
    token: str | None = None
    seen: set[str] = set()
    for _ in range(_MAX_POOL_PAGES):
        params: dict[str, Any] = {"page_size": POOL_PAGE_SIZE}
        if token:
            params["page_token"] = token
        try:
            body = yield from core.call("GET", POOLS_PATH, params=params)
        except PlatformError as error:
            raise (_feature_disabled(core, error) or error) from None
        for item in body.get("provisioned_capacities") or []:
            if isinstance(item, Mapping):
                pools.append(GpuPool.from_api(item))
        token = body.get("next_page_token") or None
        if token is None or token in seen:
            break
        seen.add(token)
    return pools


def get_gpu_pool(core: ClientCore, pool: str | None) -> Flow[GpuPool]:
    """One pool with its usage; ``None`` is the workspace's only pool. The id is
    path-escaped: a stray ``/`` or ``?`` stays part of it (pools.go getPool); a resource
    name is accepted as well as the bare id."""
    ident = (yield from sole_gpu_pool_id(core)) if pool is None else pool_id(pool)
    if not ident:
        raise ConfigurationError("pool_id cannot be empty")
    try:
        body = yield from core.call("GET", f"{POOLS_PATH}/{quote(ident, safe='')}")
    except NotFound:
        raise NotFound(
            f"GPU pool {ident!r} not found on {core.host}: check the id with `airo pools list`"
        ) from None
    except PlatformError as error:
        raise (_feature_disabled(core, error) or error) from None
    return GpuPool.from_api(body)


def sole_gpu_pool_id(core: ClientCore) -> Flow[str]:
    """The id of the workspace's only pool, for ``airo pools get`` without an id; an error
    naming the ids when there is not exactly one (pools.go resolveSolePoolID)."""
    pools = yield from list_gpu_pools(core)
    if len(pools) == 1:
        return pools[0].pool_id
    if not pools:
        raise ConfigurationError(f"no GPU pools found in the workspace {core.host}")
    ids = ", ".join(p.pool_id for p in pools)
    raise ConfigurationError(f"the workspace has {len(pools)} GPU pools; specify one of: {ids}")
