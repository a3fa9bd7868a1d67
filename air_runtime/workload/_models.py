"""The parts of a validated workload (docs/spec/workload.md §1-§3), already in normal form:
compute, environment, containers, code source, permissions. ``Workload`` itself, which
re-validates whatever is derived from it, lives with its loader in ``_workload``."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from air_runtime.platform import GPUS_PER_NODE

PRIORITY_CLASSES = ("BEST_EFFORT", "NORMAL", "CRITICAL")
PERMISSION_LEVELS = ("CAN_VIEW", "CAN_MANAGE_RUN", "CAN_MANAGE", "IS_OWNER")
PRINCIPAL_FIELDS = ("user_name", "group_name", "service_principal_name")
DEFAULT_ENVIRONMENT_VERSION = "6"
# Overrides the default runtime, as in the CLI (runsubmit.go dlRuntimeImage).
RUNTIME_IMAGE_ENV = "DATABRICKS_DL_RUNTIME_IMAGE"


def default_environment_version() -> str:
    """The runtime of a workload that names none: $DATABRICKS_DL_RUNTIME_IMAGE (its
    ``CLIENT-GPU-`` prefix dropped, as the CLI does), else 6."""
    value = os.environ.get(RUNTIME_IMAGE_ENV, "").strip()
    return value.removeprefix("CLIENT-GPU-") or DEFAULT_ENVIRONMENT_VERSION


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SecretRef(_Frozen):
    """A Databricks secret ``scope/key``; the value itself never enters a workload."""

    scope: str
    key: str

    def __str__(self) -> str:
        return f"{self.scope}/{self.key}"


class Compute(_Frozen):
    accelerator_type: str
    num_accelerators: int
    pool_id: str | None = None
    priority_class: str | None = None

    @property
    def gpus_per_node(self) -> int:
        return GPUS_PER_NODE[self.accelerator_type]

    @property
    def num_nodes(self) -> int:
        return self.num_accelerators // self.gpus_per_node


class DockerImage(_Frozen):
    url: str  # normal form docker.io/<org>/<repo>:<tag>
    tag_policy: Literal["auto", "latest"] = "auto"
    credentials_scope: str | None = None
    credentials_key: str | None = None


class Environment(_Frozen):
    # "6" (digits) or "databricks_ai_v<N>"; the wire form differs (see plan).
    version: str = Field(default_factory=default_environment_version)
    dependencies: tuple[str, ...] = ()
    docker_image: DockerImage | None = None
    unity_catalog_image: str | None = None

    @property
    def is_base_environment(self) -> bool:
        return self.version.startswith("databricks_ai_v")


class Container(_Frozen):
    name: str
    ranks: tuple[int, ...]  # always explicit, in the order written
    unity_catalog_image: str
    command: str
    # the container's own variables, split into plain values and secret references
    env_variables: dict[str, str] = {}
    secrets: dict[str, SecretRef] = {}


class GitSource(_Frozen):
    branch: str | None = None
    commit: str | None = None


class CodeSource(_Frozen):
    root_path: str = "."
    remote_volume: str | None = None
    include_paths: tuple[str, ...] | None = None
    git: GitSource | None = None


class Permission(_Frozen):
    user_name: str | None = None
    group_name: str | None = None
    service_principal_name: str | None = None
    level: str

    def to_access_control(self) -> dict[str, str]:
        """The ``access_control_list`` entry of the permissions API."""
        entry = {f: getattr(self, f) for f in PRINCIPAL_FIELDS if getattr(self, f)}
        entry["permission_level"] = self.level
        return entry
