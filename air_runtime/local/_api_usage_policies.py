"""Usage (serverless budget) policies: the workspace-scoped list the CLI resolves
`usage_policy_name` with (usagepolicy.go), and how the workspace's policies are added."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._errors import invalid
from air_runtime.local._request_params import (
    get_params,
    int_param,
    make_page_token,
    read_page_token,
)
from air_runtime.local._store import Store, now_ms
from air_runtime.local._workspace_state import workspace_state

router = APIRouter()

# `filter_by.policy_name` is a partial, case-insensitive server-side filter; `page_size` is
# capped at 1000 (larger values are coerced down); paging with `page_token` /
# `next_page_token`; each policy carries `policy_id` and `policy_name`.
_MAX_POLICY_PAGE = 1000
_DEFAULT_POLICY_PAGE = 100


def _policy_json(row: Any) -> dict[str, Any]:
    return {
        "policy_id": row["policy_id"],
        "policy_name": row["policy_name"],
        "display_name": row["policy_name"],
        "custom_tags": [],
    }


def add_usage_policy(store: Store, name: Any, policy_id: Any = None) -> dict[str, Any]:
    """Add (or rename) a policy; without an id, one derived from the name."""
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise invalid("policy_name must be a non-empty string of at most 255 characters.")
    if policy_id is None:
        policy_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"airo-usage-policy/{name}"))
    try:
        policy_id = str(uuid.UUID(str(policy_id)))
    except ValueError:
        raise invalid("policy_id must be a UUID.") from None
    with store.transaction() as db:
        db.execute(
            "INSERT OR REPLACE INTO usage_policies (policy_id, policy_name, created)"
            " VALUES (?, ?, ?)",
            (policy_id, name, now_ms()),
        )
    return {"policy_id": policy_id, "policy_name": name}


@router.get("/api/2.0/serverless-policies")
async def serverless_policies_list(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    size = int_param(params.get("page_size") or _DEFAULT_POLICY_PAGE, "page_size")
    if size < 0:
        raise invalid(f"page_size must not be negative, got {size}.")
    size = min(size or _DEFAULT_POLICY_PAGE, _MAX_POLICY_PAGE)
    offset = read_page_token(params.get("page_token")) or 0
    wanted = (params.get("filter_by.policy_name") or "").strip().casefold()
    rows = [
        r
        for r in state.store.query(
            "SELECT * FROM usage_policies ORDER BY policy_name COLLATE NOCASE, policy_id"
        )
        if wanted in str(r["policy_name"]).casefold()
    ]
    page = rows[offset : offset + size]
    result: dict[str, Any] = {"policies": [_policy_json(r) for r in page]}
    if offset + size < len(rows):
        result["next_page_token"] = make_page_token(offset + size)
    return result
