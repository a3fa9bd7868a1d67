"""GPU pools (`ai-training/provisioned-capacities`): the accelerator reservations a workload
targets with `compute.pool_id`, configured when the workspace starts (option `gpu_pools`,
`airo workspace --gpu-pool ID=TYPE:COUNT`).

What is served follows pools.go and acceptance/air/pools/test.toml: resource names
`provisioned-capacities/<id>`, the reservation in `spec`, usage in `status.usage` only on
get (the list never carries it), `page_size`/`page_token` paging. Used accelerators are
those held by the attempts this workspace runs on the pool (`backend`: from the moment
an attempt gets them until it ends); the rest are idle. With the
feature disabled (option `disabled_features: ["gpu-pools"]`) every call answers
FEATURE_DISABLED, as a workspace the API is not rolled out to does (pools.go poolAPIError).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._errors import invalid
from air_runtime.local._request_params import (
    get_params,
    int_param,
    make_page_token,
    read_page_token,
    workspace_state,
)

router = APIRouter()

POOLS_PATH = "/api/2.0/ai-training/provisioned-capacities"
RESOURCE_PREFIX = "provisioned-capacities/"
_MAX_PAGE = 100


def _pool_json(pool: dict[str, Any], used: int | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "name": RESOURCE_PREFIX + pool["pool_id"],
        "spec": {
            "accelerator_type": pool["accelerator_type"],
            "accelerator_count": pool["accelerator_count"],
        },
    }
    if used is not None:
        item["status"] = {
            "usage": {
                "used_accelerator_count": used,
                "idle_accelerator_count": max(0, pool["accelerator_count"] - used),
            }
        }
    return item


@router.get(POOLS_PATH)
async def list_pools(request: Request) -> dict[str, Any]:
    pools = workspace_state(request).pools.all()
    params = await get_params(request)
    size = int_param(params.get("page_size") or _MAX_PAGE, "page_size")
    if not 1 <= size <= _MAX_PAGE:
        raise invalid(f"page_size must be between 1 and {_MAX_PAGE}, got {size}.")
    start = read_page_token(params.get("page_token")) or 0
    page = pools[start : start + size]
    result: dict[str, Any] = {"provisioned_capacities": [_pool_json(p) for p in page]}
    if start + size < len(pools):
        result["next_page_token"] = make_page_token(start + size)
    return result


@router.get(POOLS_PATH + "/{pool_id}")
async def get_pool(request: Request, pool_id: str) -> dict[str, Any]:
    pool, used = workspace_state(request).pools.get(pool_id)
    return _pool_json(pool, used)
