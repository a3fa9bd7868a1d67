"""Usage (serverless budget) policies of the workspace: added when it starts (option
`usage_policies`) or by an admin, found by name the way the CLI resolves
`usage_policy_name` (usagepolicy.go)."""

from __future__ import annotations

import uuid
from typing import Any

from air_runtime.local._errors import invalid
from air_runtime.local._store import UsagePolicy, UsagePolicyTable


class UsagePolicies:
    def __init__(self, table: UsagePolicyTable) -> None:
        self._table = table

    def add(self, name: Any, policy_id: Any = None) -> UsagePolicy:
        """Add (or rename) a policy; without an id, one derived from the name."""
        if not isinstance(name, str) or not name.strip() or len(name) > 255:
            raise invalid("policy_name must be a non-empty string of at most 255 characters.")
        if policy_id is None:
            policy_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"airo-usage-policy/{name}"))
        try:
            policy_id = str(uuid.UUID(str(policy_id)))
        except ValueError:
            raise invalid("policy_id must be a UUID.") from None
        self._table.put(policy_id, name)
        return UsagePolicy(policy_id, name)

    def matching(self, name_part: str) -> list[UsagePolicy]:
        """The policies whose name holds ``name_part`` (case-insensitive), by name."""
        wanted = name_part.strip().casefold()
        return [p for p in self._table.all() if wanted in p.policy_name.casefold()]
