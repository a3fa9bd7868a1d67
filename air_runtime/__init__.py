# --- workload and plan -------------------------------------------------------------------
from air_runtime._docker_ref import (
    DockerRef,
    DockerRefError,
    normalize_docker_ref,
    parse_docker_ref,
)
from air_runtime.plan import (
    CodeSnapshot,
    Stage,
    SubmissionPlan,
    UploadFile,
    build_plan,
    build_workflow_plan,
    make_idempotency_token,
)
from air_runtime.workload import (
    CodeSource,
    Compute,
    Container,
    DockerImage,
    Environment,
    Permission,
    SecretRef,
    Workload,
    lint_workload,
    load_workload,
    workload_json_schema,
)

__all__ = [
    *globals().get("__all__", []),
    "CodeSnapshot",
    "CodeSource",
    "Compute",
    "Container",
    "DockerImage",
    "DockerRef",
    "DockerRefError",
    "Environment",
    "Permission",
    "SecretRef",
    "Stage",
    "SubmissionPlan",
    "UploadFile",
    "Workload",
    "build_plan",
    "build_workflow_plan",
    "lint_workload",
    "load_workload",
    "make_idempotency_token",
    "normalize_docker_ref",
    "parse_docker_ref",
    "workload_json_schema",
]

# --- client, states, watcher -------------------------------------------------------------
# The client pulls in httpx: load it on first use so importing air_runtime (e.g. from a DAG
# file) stays cheap.
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from air_runtime._states import RunState, TaskState, failure_message

if _TYPE_CHECKING:
    from air_runtime._auth import Credentials as Credentials
    from air_runtime._auth import OAuthM2M as OAuthM2M
    from air_runtime._auth import SdkConfigCredentials as SdkConfigCredentials
    from air_runtime._auth import StaticToken as StaticToken
    from air_runtime._watcher import RunWatcher as RunWatcher
    from air_runtime.client import AirClient as AirClient
    from air_runtime.client import AsyncAirClient as AsyncAirClient
    from air_runtime.client import Identity as Identity
    from air_runtime.client import ImageRegistration as ImageRegistration
    from air_runtime.client import LogRecord as LogRecord
    from air_runtime.client import RetryPolicy as RetryPolicy
    from air_runtime.client import SubmittedRun as SubmittedRun

_LAZY = {
    "AirClient": "air_runtime.client",
    "AsyncAirClient": "air_runtime.client",
    "Identity": "air_runtime.client",
    "ImageRegistration": "air_runtime.client",
    "LogRecord": "air_runtime.client",
    "RetryPolicy": "air_runtime.client",
    "SubmittedRun": "air_runtime.client",
    "RunWatcher": "air_runtime._watcher",
    "Credentials": "air_runtime._auth",
    "OAuthM2M": "air_runtime._auth",
    "SdkConfigCredentials": "air_runtime._auth",
    "StaticToken": "air_runtime._auth",
}


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'air_runtime' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    *globals().get("__all__", []),
    "RunState",
    "TaskState",
    "failure_message",
    *_LAZY,
]
