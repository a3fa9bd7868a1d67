"""The workload: YAML loading, the validated model and every rule of docs/spec/workload.md §1-§3."""

from air_runtime.platform import ENV_NAME_RE, MAX_IDEMPOTENCY_TOKEN_LENGTH
from air_runtime.workload._models import (
    GPUS_PER_NODE,
    PERMISSION_LEVELS,
    PRINCIPAL_FIELDS,
    CodeSource,
    Compute,
    Container,
    DockerImage,
    Environment,
    GitSource,
    Permission,
    SecretRef,
)
from air_runtime.workload._schema import workload_json_schema
from air_runtime.workload._source import locate_problems
from air_runtime.workload._workload import Workload, lint_workload, load_workload

__all__ = [
    "ENV_NAME_RE",
    "GPUS_PER_NODE",
    "MAX_IDEMPOTENCY_TOKEN_LENGTH",
    "PERMISSION_LEVELS",
    "PRINCIPAL_FIELDS",
    "CodeSource",
    "Compute",
    "Container",
    "DockerImage",
    "Environment",
    "GitSource",
    "Permission",
    "SecretRef",
    "Workload",
    "lint_workload",
    "load_workload",
    "locate_problems",
    "workload_json_schema",
]
