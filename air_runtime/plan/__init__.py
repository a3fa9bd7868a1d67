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

__all__ = [
    "CodeSnapshot",
    "ImageRequirement",
    "Stage",
    "SubmissionPlan",
    "UploadFile",
    "build_plan",
    "build_workflow_plan",
    "default_launch_suffix",
    "environment_spec",
    "make_idempotency_token",
]
