"""The submit flow: identity, preflight, launch directory, uploads, runs/submit, permissions.

Round trips on the critical path (docs/spec/targets.md P3): the identity; then preflight,
folder creation, image checks (and re-registration of ``tag_policy: latest`` images) and
code archives all at once; then every upload at once; then the submit. Permissions follow
the submit and never fail it.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .._errors import (
    AirError,
    AuthError,
    ConfigurationError,
    NotFound,
    PlatformError,
    Problem,
    RateLimited,
    WorkloadError,
)
from .._snapshot import PackedSnapshot, artifact_dir
from .._states import mlflow_ids
from ._checkpoint_folders import files_api_path
from ._core import ClientCore, Flow, RetryPolicy, Sleep, SubmittedRun, gather, offload
from ._identity import whoami
from ._policies import resolve_usage_policy
from ._refusals import field_problems

if TYPE_CHECKING:
    from ..plan import CodeSnapshot, Stage, SubmissionPlan
    from ..workload import Workload

logger = logging.getLogger("air_runtime.client")

PREFLIGHT_PATH = "/api/2.0/ai-training/config:validate"
# validateconfig.go preflightValidate: one attempt, bounded by submissionValidationTimeout
# (5 s); the submit validates again, so a sick validation service must not hold it up.
PREFLIGHT_TIMEOUT_S = 5.0
_PREFLIGHT_RETRY = RetryPolicy(max_attempts=1, max_total_s=PREFLIGHT_TIMEOUT_S)
_PREFLIGHT_UNAVAILABLE = (
    "server-side config validation was unavailable; continuing with submission (%s)"
)


def _preflight(core: ClientCore, body: dict[str, Any]) -> Flow[list[Problem]]:
    """The workspace's own check before anything is uploaded (validateconfig.go): field
    errors and any refusal block the submit; a service that is not there or not well
    (404, 408, 429, 501, 5xx, FEATURE_DISABLED, no answer within 5 s) is warned about and
    does not, since the submit validates again."""
    try:
        answer = yield from core.call(
            "POST",
            PREFLIGHT_PATH,
            json=body,
            policy=_PREFLIGHT_RETRY,
            timeout_s=PREFLIGHT_TIMEOUT_S,
        )
    except AuthError:
        raise
    except (NotFound, RateLimited) as error:
        logger.warning(_PREFLIGHT_UNAVAILABLE, error)
        return []
    except PlatformError as error:
        status = error.status_code
        if (
            status is None
            or status >= 500
            or status == 408
            or error.error_code == "FEATURE_DISABLED"
        ):
            logger.warning(_PREFLIGHT_UNAVAILABLE, error)
            return []
        return [Problem(path="", message=str(error), hint="the workspace refused the workload")]
    return field_problems(answer)


def _mkdirs(core: ClientCore, path: str) -> Flow[None]:
    yield from core.call("POST", "/api/2.0/workspace/mkdirs", json={"path": path})


def leaf_folders(folders: Sequence[str]) -> list[str]:
    """mkdirs is ``mkdir -p``: creating the deepest folders creates their parents too."""
    unique = sorted(set(folders))
    return [f for f in unique if not any(other.startswith(f.rstrip("/") + "/") for other in unique)]


def _upload_path(path: str) -> str:
    if path.startswith("/Volumes/"):
        return files_api_path(path)
    return f"/api/2.0/workspace-files/import-file/{quote(path.lstrip('/'))}"


def upload_file(core: ClientCore, path: str, content: bytes) -> Flow[None]:
    """Write one workspace file (a volume path through the Files API), making its folder
    when it is missing."""
    method = "PUT" if path.startswith("/Volumes/") else "POST"
    api_path = _upload_path(path)
    try:
        yield from core.call(method, api_path, params={"overwrite": "true"}, content=content)
    except NotFound:
        if method == "PUT":
            raise
        # The folder vanished or was never made: make it and try once more.
        yield from _mkdirs(core, str(PurePosixPath(path).parent))
        yield from core.call(method, api_path, params={"overwrite": "true"}, content=content)


# Job permission levels and the experiment level each grants (runpermissions.go):
# experiments only know CAN_READ, CAN_EDIT and CAN_MANAGE.
_EXPERIMENT_LEVELS = {
    "CAN_VIEW": "CAN_READ",
    "CAN_MANAGE_RUN": "CAN_EDIT",
    "CAN_MANAGE": "CAN_MANAGE",
    "IS_OWNER": "CAN_MANAGE",
}
# How long the experiment grant waits for runs/get-output to name the run's experiment.
EXPERIMENT_ID_WAIT_S = 2.0
_EXPERIMENT_ID_POLL_S = 0.1


def experiment_access_control(acl: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job ACL as experiment permissions; levels without an equivalent are left out."""
    entries = []
    for entry in acl:
        level = _EXPERIMENT_LEVELS.get(str(entry.get("permission_level")))
        if level is not None:
            entries.append({**entry, "permission_level": level})
    return entries


def _experiment_id(core: ClientCore, task_run_id: int | None) -> Flow[str | None]:
    """The run's own MLflow experiment (never one guessed from a name): runs/get-output of
    the run's first task (from the one runs/get), asked again until it names the
    experiment or the wait is over (runpermissions.go resolveSubmittedExperimentID)."""
    from ._runs import get_output

    deadline = time.monotonic() + EXPERIMENT_ID_WAIT_S
    while True:
        if task_run_id is not None:
            output = yield from get_output(core, task_run_id)
            experiment, _ = mlflow_ids(output)
            if experiment:
                return experiment
        if time.monotonic() >= deadline:
            return None
        yield Sleep(_EXPERIMENT_ID_POLL_S)


def _permissions(core: ClientCore, run_id: int, acl: tuple[dict[str, Any], ...]) -> Flow[None]:
    """Best effort after the submit, as the CLI does (runpermissions.go): the job's ACL, then
    the same principals on the run's MLflow experiment. Never fails the submit."""
    from ._runs import get_run

    try:
        state = yield from get_run(core, run_id)
    except AirError as error:
        logger.warning(
            "run %s was submitted, but its permissions were not applied: %s", run_id, error
        )
        return  # applySubmittedPermissions: nothing to grant on without the run
    task_run_id = state.tasks[0].run_id if state.tasks else None
    job_id = state.job_id or run_id
    try:
        yield from core.call(
            "PATCH", f"/api/2.0/permissions/jobs/{job_id}", json={"access_control_list": list(acl)}
        )
    except AirError as error:
        logger.warning(
            "run %s was submitted, but its permissions were not applied: %s", run_id, error
        )
    experiment_acl = experiment_access_control(acl)
    if not experiment_acl:
        return
    try:
        experiment = yield from _experiment_id(core, task_run_id)
        if experiment is None:
            logger.warning(
                "run %s was submitted, but its MLflow experiment was not known within %gs: "
                "experiment permissions were not applied",
                run_id,
                EXPERIMENT_ID_WAIT_S,
            )
            return
        yield from core.call(
            "PATCH",
            f"/api/2.0/permissions/experiments/{quote(experiment, safe='')}",
            json={"access_control_list": experiment_acl},
        )
    except AirError as error:
        logger.warning(
            "run %s was submitted, but its experiment permissions were not applied: %s",
            run_id,
            error,
        )


def _object_status(core: ClientCore, path: str) -> Flow[dict[str, Any] | None]:
    """workspace/get-status of ``path``; None when nothing is there."""
    try:
        status: dict[str, Any] = yield from core.call(
            "GET", "/api/2.0/workspace/get-status", params={"path": path}
        )
    except NotFound:
        return None
    return status


def ensure_experiment_directory(core: ClientCore, directory: str) -> Flow[None]:
    """Make sure ``mlflow_experiment_directory`` exists before the submit (runlaunch.go):
    a missing folder otherwise fails the run with only an INTERNAL_ERROR."""
    status = yield from _object_status(core, directory)
    if status is None:
        yield from _mkdirs(core, directory)
        return
    kind = status.get("object_type")
    if kind is not None and kind != "DIRECTORY":
        raise ConfigurationError(
            f"mlflow_experiment_directory {directory!r} is a {kind}, not a folder: "
            "name a workspace folder (it is created when missing)"
        )


def _snapshot_uploaded(core: ClientCore, remote_path: str) -> Flow[bool]:
    """Whether the content-addressed archive is already there (snapshot_upload.go stats it
    before packing or uploading)."""
    if remote_path.startswith("/Volumes/"):
        try:
            yield from core.call("HEAD", _upload_path(remote_path), raw=True)
        except NotFound:
            return False
        return True
    return (yield from _object_status(core, remote_path)) is not None


def _stage_snapshot(
    core: ClientCore, snapshot: CodeSnapshot, home: str
) -> Flow[tuple[PackedSnapshot, bool]]:
    from .._snapshot import resolve_snapshot

    packed = yield from offload(functools.partial(resolve_snapshot, snapshot, home))
    uploaded = yield from _snapshot_uploaded(core, packed.remote_path)
    return packed, uploaded


def _upload_snapshot(core: ClientCore, packed: PackedSnapshot) -> Flow[None]:
    content = yield from offload(packed.pack)
    logger.info("uploading code snapshot %s (%d bytes)", packed.name, len(content))
    yield from upload_file(core, packed.remote_path, content)


def submit(core: ClientCore, plan: SubmissionPlan) -> Flow[SubmittedRun]:
    """The CLI's submit (runsubmit.go submitWorkload), with what does not depend on each
    other sent at once: P3's four sequential round trips."""

    # Round trip 2: preflight, the usage policy, folders, images and the snapshots'
    # content-addressed names (packed locally) checked against the workspace.
    preflight = [_preflight(core, b) for b in plan.preflight_bodies]
    policy = [resolve_usage_policy(core, plan.usage_policy_name)] if plan.usage_policy_name else []
    snapshot_dirs = {artifact_dir(s, plan.home) for s in plan.code_snapshots if not s.remote_volume}
    folders = [_mkdirs(core, f) for f in leaf_folders([*plan.folders, *snapshot_dirs])]
    snapshots = [_stage_snapshot(core, s, plan.home) for s in plan.code_snapshots]
    # Images: `auto` ones must be registered (waited for while still importing); `latest`
    # ones are registered again and waited for.
    required = plan.required_images()
    checks = []
    if required:
        from ._images import prepare_images  # most submits name no image to prepare

        checks = [prepare_images(core, required)]
    first = yield from gather(
        [*preflight, *policy, *snapshots, *checks, *folders],
        max(1, len(preflight) + len(policy) + len(snapshots) + len(checks) + len(folders)),
    )
    problems = [p for found in first[: len(preflight)] for p in found]
    if problems:
        raise WorkloadError(problems, source="(rejected by the workspace's validation)")
    body = dict(plan.submit_body)
    if policy:
        body["budget_policy_id"] = first[len(preflight)]
    staged: list[tuple[PackedSnapshot, bool]] = first[
        len(preflight) + len(policy) : len(preflight) + len(policy) + len(snapshots)
    ]
    if staged:
        body = {
            **body,
            "tasks": plan.submit_body_with_code(
                {s.task_key: packed.remote_path for s, (packed, _) in zip(
                    plan.code_snapshots, staged, strict=True
                )}
            )["tasks"],
        }  # fmt: skip

    # Round trip 3: every upload at once (bounded), archives only when not there yet; the
    # MLflow experiment folders made when missing.
    uploads = [upload_file(core, f.path, f.content) for f in plan.files]
    uploads += [_upload_snapshot(core, packed) for packed, there in staged if not there]
    for packed, there in staged:
        if there:
            logger.info("code snapshot %s is already uploaded: reusing it", packed.name)
    directories = sorted(
        {
            str(t["ai_runtime_task"]["mlflow_experiment_directory"])
            for t in body.get("tasks") or []
            if t.get("ai_runtime_task", {}).get("mlflow_experiment_directory")
        }
    )
    yield from gather(
        [*uploads, *(ensure_experiment_directory(core, d) for d in directories)],
        core.max_concurrent_uploads,
    )

    # Round trip 4: the submit. Safe to retry only because the token makes it idempotent.
    token = body.get("idempotency_token") or plan.idempotency_token
    if token:
        body["idempotency_token"] = token
    answer = yield from core.call("POST", "/api/2.2/jobs/runs/submit", json=body, retry=bool(token))
    run_id = int(answer["run_id"])
    logger.info("submitted run %s (%s)", run_id, plan.run_name)
    if plan.permissions:
        yield from _permissions(core, run_id, plan.permissions)
    return SubmittedRun(
        run_id=run_id, run_page_url=f"{core.host}/jobs/runs/{run_id}", idempotency_token=token
    )


# The CLI's escape hatch for the per-user workspace folder (runlaunch.go).
USER_WORKSPACE_DIR_ENV = "DATABRICKS_INTERNAL_USER_WORKSPACE_DIR"


def submit_workload(
    core: ClientCore,
    workload: Workload | Sequence[Stage],
    *,
    idempotency_token: str | None,
    run_name: str | None,
) -> Flow[SubmittedRun]:
    plan = yield from plan_workload(
        core, workload, idempotency_token=idempotency_token, run_name=run_name
    )
    return (yield from submit(core, plan))


def plan_workload(
    core: ClientCore,
    workload: Workload | Sequence[Stage],
    *,
    idempotency_token: str | None,
    run_name: str | None,
) -> Flow[SubmissionPlan]:
    """The plan of a workload (or workflow stages) in the caller's own workspace folder."""
    from ..plan import build_plan, build_workflow_plan

    identity = yield from whoami(core)
    if isinstance(workload, Sequence):
        stages = list(workload)
        if not stages:
            raise ConfigurationError("a workflow needs at least one stage")
        plan = build_workflow_plan(
            stages,
            run_name=run_name or stages[0].workload.experiment_name,
            user_name=identity.user_name,
            idempotency_token=idempotency_token,
            home=os.environ.get(USER_WORKSPACE_DIR_ENV) or None,
        )
    else:
        plan = build_plan(
            workload,
            user_name=identity.user_name,
            idempotency_token=idempotency_token,
            home=os.environ.get(USER_WORKSPACE_DIR_ENV) or None,
            run_name=run_name,
        )
    return plan
