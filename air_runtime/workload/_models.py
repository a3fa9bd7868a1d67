"""The validated workload (docs/spec/workload.md §1-§3), already in normal form.

Instances come from ``load_workload``, which applies every rule and reports all problems at
once; the models themselves only fix the shape and keep the result immutable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

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


class Workload(_Frozen):
    experiment_name: str
    compute: Compute
    environment: Environment = Field(default_factory=Environment)
    command: str | None = None
    containers: tuple[Container, ...] | None = None
    env_variables: dict[str, str] = {}
    secrets: dict[str, SecretRef] = {}
    code_source: CodeSource | None = None
    max_retries: int = 3
    timeout_minutes: int | None = None
    idempotency_token: str | None = None
    parameters: dict[str, Any] = {}
    mlflow_run_name: str | None = None
    mlflow_experiment_directory: str | None = None
    mlflow_artifact_location: str | None = None
    permissions: tuple[Permission, ...] = ()
    usage_policy_name: str | None = None
    usage_policy_id: str | None = None
    source_text: str = ""
    base_dir: str | None = None

    # the mapping that was validated (overrides applied), to derive new workloads from
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def gpus_per_node(self) -> int:
        return self.compute.gpus_per_node

    @property
    def num_nodes(self) -> int:
        return self.compute.num_nodes

    @property
    def max_retries_given(self) -> bool:
        """Whether the workload sets max_retries itself (the default is 3)."""
        return "max_retries" in self._raw

    def container(self, name: str) -> Container:
        for container in self.containers or ():
            if container.name == name:
                return container
        raise KeyError(f"no container named {name!r}")

    def container_env(self, name: str) -> tuple[dict[str, str], dict[str, SecretRef]]:
        """Plain and secret variables of one container after the merge of docs/spec/workload.md §3."""
        container = self.container(name)
        own = set(container.env_variables) | set(container.secrets)
        plain = {k: v for k, v in self.env_variables.items() if k not in own}
        secret = {k: v for k, v in self.secrets.items() if k not in own}
        plain.update(container.env_variables)
        secret.update(container.secrets)
        return dict(sorted(plain.items())), dict(sorted(secret.items()))

    def raw_mapping(self) -> dict[str, Any]:
        """A copy of the mapping this workload was validated from."""
        import copy

        return copy.deepcopy(self._raw)

    def with_overrides(self, overrides: Mapping[str, Any] | Sequence[str]) -> Workload:
        from air_runtime.workload._load import load_workload

        return load_workload(self.raw_mapping(), overrides, base_dir=self.base_dir)

    def with_env_variables(self, values: Mapping[str, str]) -> Workload:
        """Add plain environment variables the workload does not set itself (as a variable or
        a secret, top-level or in a container): an orchestrator's additions never replace the
        author's values. The plan builder writes them like any other (env_vars.json)."""
        own = set(self.env_variables) | set(self.secrets)
        for container in self.containers or ():
            own |= set(container.env_variables) | set(container.secrets)
        added = {k: str(v) for k, v in values.items() if k not in own}
        if not added:
            return self
        from air_runtime.workload._load import load_workload

        raw = self.raw_mapping()
        existing = raw.get("env_variables")
        raw["env_variables"] = {**(existing if isinstance(existing, dict) else {}), **added}
        return load_workload(raw, base_dir=self.base_dir)

    def with_secrets(self, refs: Mapping[str, str]) -> Workload:
        """Add ``NAME -> "scope/key"`` secrets; a plain variable of the same NAME is replaced."""
        from air_runtime.workload._load import load_workload

        raw = self.raw_mapping()
        env = raw.get("env_variables")
        if isinstance(env, dict):
            for name in refs:
                env.pop(name, None)
            if not env:
                raw.pop("env_variables")
        existing = raw.get("secrets")
        secrets: dict[str, Any] = existing if isinstance(existing, dict) else {}
        raw["secrets"] = {**secrets, **{k: str(v) for k, v in refs.items()}}
        return load_workload(raw, base_dir=self.base_dir)
