"""Usage policy names resolved to ids before the submit, as the CLI does (usagepolicy.go)."""

from __future__ import annotations

from typing import Any

from .._errors import ConfigurationError
from ._core import ClientCore, Flow

SERVERLESS_POLICIES_PATH = "/api/2.0/serverless-policies"
# The server's largest page: most workspaces answer in one round trip.
POLICY_PAGE_SIZE = 1000
_MAX_SUGGESTIONS = 10


def list_usage_policies(core: ClientCore, name: str) -> Flow[list[dict[str, Any]]]:
    """Every policy the server's partial, case-insensitive ``filter_by.policy_name`` filter
    returns for ``name``, all pages; a policy repeated on another page, or a page token seen
    before, ends nothing twice (usagepolicy.go listUsagePolicies)."""
    policies: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    seen_tokens: set[str] = set()
    token: str | None = None
    while True:
        params: dict[str, Any] = {"filter_by.policy_name": name, "page_size": POLICY_PAGE_SIZE}
        if token:
            params["page_token"] = token
        body = yield from core.call("GET", SERVERLESS_POLICIES_PATH, params=params)
        for policy in body.get("policies") or []:
            if not isinstance(policy, dict):
                continue
            policy_id = str(policy.get("policy_id") or "")
            if policy_id in seen_ids:
                continue
            seen_ids.add(policy_id)
            policies.append(policy)
        token = body.get("next_page_token") or None
        if token is None or token in seen_tokens:
            return policies
        seen_tokens.add(token)


def resolve_usage_policy(core: ClientCore, name: str) -> Flow[str]:
    """The id of the policy whose ``policy_name`` is ``name`` (case-insensitive); an error
    naming up to ten candidates when none is, or the ids when several are."""
    target = name.strip()
    if not target:
        raise ConfigurationError("usage_policy_name must not be blank")
    candidates = yield from list_usage_policies(core, target)
    matches = [
        p
        for p in candidates
        if str(p.get("policy_name") or "").strip().casefold() == target.casefold()
    ]
    if len(matches) == 1:
        policy_id = str(matches[0].get("policy_id") or "")
        if not policy_id:
            raise ConfigurationError(f"usage policy {target!r} has no policy_id on {core.host}")
        return policy_id
    if not matches:
        names = sorted({str(p["policy_name"]) for p in candidates if p.get("policy_name")})
        hint = ""
        if names:
            shown = ", ".join(repr(n) for n in names[:_MAX_SUGGESTIONS])
            hint = (
                f"; did you mean one of: {shown}{', ...' if len(names) > _MAX_SUGGESTIONS else ''}?"
            )
        raise ConfigurationError(
            f"no usage policy named {target!r} was found on {core.host}{hint} "
            "(or set usage_policy_id to the policy's id)"
        )
    ids = ", ".join(repr(str(p.get("policy_id"))) for p in matches)
    raise ConfigurationError(
        f"several usage policies are named {target!r} (ids: {ids}): set usage_policy_id to "
        "the one you mean"
    )
