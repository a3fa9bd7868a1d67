"""Usage (serverless budget) policies: the workspace-scoped list the CLI resolves
`usage_policy_name` with (usagepolicy.go), kept by `UsagePolicies`."""

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
from air_runtime.local._store import UsagePolicy

router = APIRouter()

# `filter_by.policy_name` is a partial, case-insensitive server-side filter; `page_size` is
# capped at 1000 (larger values are coerced down); paging with `page_token` /
# `next_page_token`; each policy carries `policy_id` and `policy_name`.
_MAX_POLICY_PAGE = 1000
_DEFAULT_POLICY_PAGE = 100


def _policy_json(policy: UsagePolicy) -> dict[str, Any]:
    return {
        "policy_id": policy.policy_id,
        "policy_name": policy.policy_name,
        "display_name": policy.policy_name,
        "custom_tags": [],
    }


@router.get("/api/2.0/serverless-policies")
async def serverless_policies_list(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    size = int_param(params.get("page_size") or _DEFAULT_POLICY_PAGE, "page_size")
    if size < 0:
        raise invalid(f"page_size must not be negative, got {size}.")
    size = min(size or _DEFAULT_POLICY_PAGE, _MAX_POLICY_PAGE)
    offset = read_page_token(params.get("page_token")) or 0
    policies = state.usage_policies.matching(params.get("filter_by.policy_name") or "")
    page = policies[offset : offset + size]
    result: dict[str, Any] = {"policies": [_policy_json(p) for p in page]}
    if offset + size < len(policies):
        result["next_page_token"] = make_page_token(offset + size)
    return result
