"""air-orchestration's orchestrator-neutral core for Databricks AI Runtime.

Workload validation, submission plans, states and errors load eagerly (they are cheap);
the HTTP client, auth, watcher, training progress, Docker references and templating load on
first use so that importing ``air_runtime`` from a DAG file does not pull in httpx, and a task
that submits does not pay for what it does not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from air_runtime._checkpoints import (
    ENV_CHECKPOINT_DIR,
    ENV_RESUME_CHECKPOINT,
    ENV_RESUME_RUN,
    ENV_RESUME_STEP,
    ENV_RESUMING,
    Checkpoint,
    checkpoint_volume,
)
from air_runtime._errors import (
    AirError,
    AuthError,
    BudgetExceeded,
    CapacityError,
    ConfigurationError,
    InvalidResponse,
    NotFound,
    PlatformError,
    Problem,
    RateLimited,
    RetriesStopped,
    RunFailed,
    RunTimeout,
    WorkloadError,
    WorkspaceUnreachable,
)
from air_runtime._failure_policy import FailureClass, FailurePolicy, RetryAction, RetryDecision
from air_runtime._lazy import lazy_exports
from air_runtime._mlflow_link import MlflowLinkReader
from air_runtime._ownership import EarlierLaunch, Ownership, decide_ownership
from air_runtime._redaction import RedactingLog, Redactor, credential_secrets
from air_runtime._run_names import PartitionRange, decode_name_part, encode_name_part
from air_runtime._states import RunState, TaskState, failure_message, mlflow_ids, mlflow_run_url
from air_runtime._sweeps import (
    Prices,
    Sweep,
    SweepBudgetSpent,
    SweepMember,
    SweepSpend,
    sweep_budget,
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

if TYPE_CHECKING:
    from air_runtime._auth import Credentials as Credentials
    from air_runtime._auth import OAuthM2M as OAuthM2M
    from air_runtime._auth import SdkConfigCredentials as SdkConfigCredentials
    from air_runtime._auth import StaticToken as StaticToken
    from air_runtime._auth import normalize_host as normalize_host
    from air_runtime._docker_credentials import DockerCredential as DockerCredential
    from air_runtime._docker_credentials import find_docker_credentials as find_docker_credentials
    from air_runtime._docker_ref import DockerRef as DockerRef
    from air_runtime._docker_ref import DockerRefError as DockerRefError
    from air_runtime._docker_ref import normalize_docker_ref as normalize_docker_ref
    from air_runtime._docker_ref import parse_docker_ref as parse_docker_ref
    from air_runtime._progress import TrainingProgress as TrainingProgress
    from air_runtime._progress import compute_progress as compute_progress
    from air_runtime._submission import RunOutcome as RunOutcome
    from air_runtime._submission import RunStatus as RunStatus
    from air_runtime._submission import Submission as Submission
    from air_runtime._submission import SubmissionKey as SubmissionKey
    from air_runtime._submission import TryEnd as TryEnd
    from air_runtime._submission import end_of_try_flow as end_of_try_flow
    from air_runtime._templates import has_template_placeholders as has_template_placeholders
    from air_runtime._templates import render_workload_sample as render_workload_sample
    from air_runtime._templates import sample_template_context as sample_template_context
    from air_runtime._templates import (
        workload_template_environment as workload_template_environment,
    )
    from air_runtime._wait_policy import WaitPolicy as WaitPolicy
    from air_runtime._watch_lines import LineBudget as LineBudget
    from air_runtime._watcher import RunWatcher as RunWatcher
    from air_runtime._watcher import WorkspaceNotice as WorkspaceNotice
    from air_runtime.client import AirClient as AirClient
    from air_runtime.client import AsyncAirClient as AsyncAirClient
    from air_runtime.client import CancelCause as CancelCause
    from air_runtime.client import GpuPool as GpuPool
    from air_runtime.client import Identity as Identity
    from air_runtime.client import ImageRegistration as ImageRegistration
    from air_runtime.client import LogRecord as LogRecord
    from air_runtime.client import RetryPolicy as RetryPolicy
    from air_runtime.client import SubmittedRun as SubmittedRun

_LAZY = {
    "AirClient": "air_runtime.client",
    "AsyncAirClient": "air_runtime.client",
    "CancelCause": "air_runtime.client",
    "GpuPool": "air_runtime.client",
    "Identity": "air_runtime.client",
    "ImageRegistration": "air_runtime.client",
    "LogRecord": "air_runtime.client",
    "RetryPolicy": "air_runtime.client",
    "SubmittedRun": "air_runtime.client",
    "LineBudget": "air_runtime._watch_lines",
    "RunWatcher": "air_runtime._watcher",
    "WorkspaceNotice": "air_runtime._watcher",
    "WaitPolicy": "air_runtime._wait_policy",
    "TrainingProgress": "air_runtime._progress",
    "compute_progress": "air_runtime._progress",
    "RunOutcome": "air_runtime._submission",
    "RunStatus": "air_runtime._submission",
    "Submission": "air_runtime._submission",
    "SubmissionKey": "air_runtime._submission",
    "TryEnd": "air_runtime._submission",
    "end_of_try_flow": "air_runtime._submission",
    "Credentials": "air_runtime._auth",
    "OAuthM2M": "air_runtime._auth",
    "SdkConfigCredentials": "air_runtime._auth",
    "StaticToken": "air_runtime._auth",
    "normalize_host": "air_runtime._auth",
    "DockerCredential": "air_runtime._docker_credentials",
    "find_docker_credentials": "air_runtime._docker_credentials",
    "DockerRef": "air_runtime._docker_ref",
    "DockerRefError": "air_runtime._docker_ref",
    "normalize_docker_ref": "air_runtime._docker_ref",
    "parse_docker_ref": "air_runtime._docker_ref",
    "has_template_placeholders": "air_runtime._templates",
    "render_workload_sample": "air_runtime._templates",
    "sample_template_context": "air_runtime._templates",
    "workload_template_environment": "air_runtime._templates",
}


__getattr__ = lazy_exports(globals(), _LAZY)


__all__ = [
    "AirError",
    "AuthError",
    "BudgetExceeded",
    "CapacityError",
    "Checkpoint",
    "CodeSnapshot",
    "CodeSource",
    "Compute",
    "ConfigurationError",
    "Container",
    "DockerImage",
    "EarlierLaunch",
    "Environment",
    "FailureClass",
    "FailurePolicy",
    "InvalidResponse",
    "NotFound",
    "Ownership",
    "Permission",
    "PlatformError",
    "PartitionRange",
    "Prices",
    "Problem",
    "RateLimited",
    "RedactingLog",
    "RetriesStopped",
    "RetryAction",
    "RetryDecision",
    "Redactor",
    "RunFailed",
    "RunState",
    "RunTimeout",
    "SecretRef",
    "Stage",
    "SubmissionPlan",
    "Sweep",
    "SweepBudgetSpent",
    "SweepMember",
    "SweepSpend",
    "TaskState",
    "UploadFile",
    "Workload",
    "WorkloadError",
    "WorkspaceUnreachable",
    "ENV_CHECKPOINT_DIR",
    "ENV_RESUME_CHECKPOINT",
    "ENV_RESUME_RUN",
    "ENV_RESUME_STEP",
    "ENV_RESUMING",
    "build_plan",
    "checkpoint_volume",
    "build_workflow_plan",
    "credential_secrets",
    "decode_name_part",
    "decide_ownership",
    "encode_name_part",
    "failure_message",
    "MlflowLinkReader",
    "mlflow_ids",
    "mlflow_run_url",
    "lint_workload",
    "load_workload",
    "make_idempotency_token",
    "sweep_budget",
    "workload_json_schema",
    *_LAZY,
]
