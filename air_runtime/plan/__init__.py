"""Pure ``Workload`` -> ``SubmissionPlan``: launch directory files, preflight and submit bodies."""

from air_runtime.plan._build import (
    build_plan,
    build_workflow_plan,
    default_launch_suffix,
    environment_spec,
    make_idempotency_token,
)
from air_runtime.plan._models import (
    CodeSnapshot,
    ImageRequirement,
    Stage,
    SubmissionPlan,
    UploadFile,
)
from air_runtime.plan._workflow import (
    RUN_IF_VALUES,
    TASK_KEY_HINT,
    TASK_KEY_RE,
    check_stages,
    task_key_for,
    task_key_problem,
)

__all__ = [
    "RUN_IF_VALUES",
    "TASK_KEY_HINT",
    "TASK_KEY_RE",
    "CodeSnapshot",
    "ImageRequirement",
    "Stage",
    "SubmissionPlan",
    "UploadFile",
    "build_plan",
    "build_workflow_plan",
    "check_stages",
    "default_launch_suffix",
    "environment_spec",
    "make_idempotency_token",
    "task_key_for",
    "task_key_problem",
]
