"""Settings of one local workspace, shared by the server, the CLI and `start_local_workspace`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_USER = "local-user@example.com"


@dataclass
class WorkspaceOptions:
    """Everything a local workspace can be configured with (all JSON-serializable)."""

    # Accepted bearer tokens. Empty: the workspace uses the random token kept in
    # `<data dir>/token` (created on first start, mode 0600); there is no well-known default.
    tokens: list[str] = field(default_factory=list)
    mode: str = "execute"  # "execute" runs commands; "simulate" follows a scripted timeline
    user_name: str = DEFAULT_USER
    user_id: str = "4611686018427387904"
    workspace_id: str = "1234567890123456"
    # The metastore's region (`GET /api/2.1/unity-catalog/metastore_summary`).
    region: str = "us-west-2"
    # The Artifact Registry this workspace pairs with (`host:port` of a registry whose token
    # service is this workspace, see `_registry_tokens.py`). When set, a submitted run's
    # Unity Catalog images must be there; empty: they are not checked.
    artifact_registry_host: str = ""
    # endpoint key (or "*") -> fault settings, plus an optional "seed"; see _faults.py
    faults: dict[str, Any] = field(default_factory=dict)
    # default timeline of simulated runs; a run can override it with AIRO_SIMULATE
    simulate: dict[str, Any] = field(
        default_factory=lambda: {"pending_s": 0.0, "running_s": 2.0, "result": "SUCCESS"}
    )
    image_delay_s: float = 1.0
    # "docker.io/<org>/<repo>" -> {"user": ..., "password": ...}
    private_images: dict[str, dict[str, str]] = field(default_factory=dict)
    # OAuth M2M service principals: client id -> client secret
    oauth_clients: dict[str, str] = field(default_factory=dict)
    oauth_token_lifetime_s: float = 3600.0
    max_local_ranks: int = 16
    retry_interval_s: float = 0.2  # used when a task sets no min_retry_interval_millis
    kill_grace_s: float = 3.0  # SIGTERM -> SIGKILL delay when stopping ranks
    request_log_size: int = 10_000
    # Extra names accepted in the `Host` header besides the loopback names and the bound
    # address (a guard against DNS rebinding: a web page cannot make a browser talk to us).
    allowed_hosts: list[str] = field(default_factory=list)
    # Size limits, answered 413: any request body, and the file uploads (workspace
    # import-file / import, volume files).
    max_request_bytes: int = 10 * 1024 * 1024
    max_upload_bytes: int = 500 * 1024 * 1024
    # Policies served by `GET /api/2.0/serverless-policies` (usage policies): each
    # {"policy_name": ..., "policy_id"?: uuid}; more can be added with the admin API.
    usage_policies: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> WorkspaceOptions:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(
                f"unknown local workspace option(s): {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        options = cls(**dict(values))
        if options.mode not in ("execute", "simulate"):
            raise ValueError(f"mode must be 'execute' or 'simulate', got {options.mode!r}")
        return options

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))


def normalize_tokens(token: str | Sequence[str] | None) -> list[str]:
    if token is None:
        return []
    if isinstance(token, str):
        return [token]
    return list(token)
