"""Settings of one local workspace, shared by the server, the CLI and `start_local_workspace`."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_USER = "local-user@example.com"
GPU_POOLS_FEATURE = "gpu-pools"
LOG_RECORDS_FEATURE = "log-records"
KNOWN_FEATURES = frozenset({GPU_POOLS_FEATURE, LOG_RECORDS_FEATURE})


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
    # service is this workspace, see `registry_tokens/backend.py`). When set, a submitted run's
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
    # The Unity Catalog volumes that exist ("catalog.schema.volume"); None: every volume a
    # path names exists (made on first write). With a list, the Files API answers 404 for a
    # path in any other volume, as the platform does for a volume nobody created.
    volumes: list[str] | None = None
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
    # GPU pools served by `ai-training/provisioned-capacities`: each {"pool_id",
    # "accelerator_type", "accelerator_count"}; runs naming one in compute.pool_id use it.
    gpu_pools: list[dict[str, Any]] = field(default_factory=list)
    # Services answered FEATURE_DISABLED, as on a workspace they are not rolled out to:
    # "gpu-pools", "log-records" (the log service; clients then read MLflow artifacts).
    disabled_features: list[str] = field(default_factory=list)
    # Refuse `jobs/runs/repair` for every run (400), as a workspace where a run cannot be
    # repaired: what makes a client take its other way (a new run of the tasks to re-run).
    refuse_repair: bool = False

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
        options.gpu_pools = [check_pool(p) for p in options.gpu_pools]
        ids = [p["pool_id"] for p in options.gpu_pools]
        if len(set(ids)) != len(ids):
            raise ValueError(f"GPU pool ids must be unique, got {', '.join(ids)}")
        unknown = sorted(set(options.disabled_features) - KNOWN_FEATURES)
        if unknown:
            raise ValueError(
                f"unknown disabled_features {', '.join(unknown)}; known: "
                f"{', '.join(sorted(KNOWN_FEATURES))}"
            )
        return options

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))


def normalize_tokens(token: str | Sequence[str] | None) -> list[str]:
    if token is None:
        return []
    if isinstance(token, str):
        return [token]
    return list(token)


POOL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")


def check_pool(pool: Any) -> dict[str, Any]:
    """A configured pool `{"pool_id", "accelerator_type", "accelerator_count"}`, checked."""
    if not isinstance(pool, dict):
        raise ValueError(f"a GPU pool is an object, got {pool!r}")
    pool_id = pool.get("pool_id")
    if not isinstance(pool_id, str) or not POOL_ID_RE.match(pool_id):
        raise ValueError(f"GPU pool id {pool_id!r}: letters, digits, '.', '_', '-' (1-255)")
    accelerator_type = pool.get("accelerator_type")
    if not isinstance(accelerator_type, str) or not accelerator_type.startswith("GPU_"):
        raise ValueError(
            f"GPU pool {pool_id}: accelerator_type like GPU_8xH100, got {accelerator_type!r}"
        )
    count = pool.get("accelerator_count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"GPU pool {pool_id}: accelerator_count must be a positive integer")
    return {"pool_id": pool_id, "accelerator_type": accelerator_type, "accelerator_count": count}


def parse_pool_argument(text: str) -> dict[str, Any]:
    """`ID=TYPE:COUNT` (`airo workspace --gpu-pool pool-a10=GPU_1xA10:8`)."""
    pool_id, _, rest = text.partition("=")
    accelerator_type, _, count = rest.rpartition(":")
    if not pool_id or not accelerator_type or not count.strip().isdigit():
        raise ValueError(f"--gpu-pool {text!r}: expected ID=TYPE:COUNT, e.g. pool-a10=GPU_1xA10:8")
    return check_pool(
        {
            "pool_id": pool_id.strip(),
            "accelerator_type": accelerator_type.strip(),
            "accelerator_count": int(count),
        }
    )
