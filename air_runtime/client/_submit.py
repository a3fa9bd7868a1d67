"""The submit flow: identity, preflight, launch directory, uploads, runs/submit, permissions.

Round trips on the critical path (design/targets.md P3): the identity; then preflight,
folder creation, image checks (and re-registration of ``tag_policy: latest`` images) and
code archives all at once; then every upload at once; then the submit. Permissions follow
the submit and never fail it.
"""

from __future__ import annotations

import functools
import gzip
import io
import logging
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .._errors import (
    AirError,
    AuthError,
    ConfigurationError,
    NotFound,
    PlatformError,
    Problem,
    WorkloadError,
)
from ._core import ClientCore, Flow, Identity, RetryPolicy, SubmittedRun, gather, offload

if TYPE_CHECKING:
    from ..plan import CodeSnapshot, Stage, SubmissionPlan
    from ..workload import Workload

logger = logging.getLogger("air_runtime.client")

PREFLIGHT_PATH = "/api/2.0/ai-training/config:validate"
# Preflight is an optimisation (the submit validates again): do not let a sick validation
# service hold up the submit for the full retry budget.
_PREFLIGHT_RETRY = RetryPolicy(max_attempts=2, max_total_s=5.0)
_SKIPPED_IN_ARCHIVE = frozenset({".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"})


def whoami(core: ClientCore) -> Flow[Identity]:
    if core.identity is not None:
        return core.identity
    response = yield from core.call("GET", "/api/2.0/preview/scim/v2/Me", raw=True)
    body = response.json()
    user_name = body.get("userName")
    if not user_name:
        raise PlatformError(f"{core.host} answered the current-user request without a userName")
    core.identity = Identity(
        user_name=str(user_name),
        user_id=str(body.get("id") or ""),
        org_id=response.headers.get("X-Databricks-Org-Id"),
    )
    return core.identity


def _preflight(core: ClientCore, body: dict[str, Any]) -> Flow[list[Problem]]:
    try:
        answer = yield from core.call("POST", PREFLIGHT_PATH, json=body, policy=_PREFLIGHT_RETRY)
    except AuthError:
        raise
    except AirError as error:
        # 404/501/408/429/5xx/FEATURE_DISABLED/network: the submit validates again.
        logger.info("preflight validation unavailable, continuing: %s", error)
        return []
    problems = []
    for item in answer.get("errors") or []:
        if isinstance(item, dict):
            code = item.get("code")
            problems.append(
                Problem(
                    path=str(item.get("path") or ""),
                    message=str(item.get("message") or "rejected by the workspace"),
                    hint=f"workspace validation code {code}" if code else None,
                )
            )
    return problems


def _mkdirs(core: ClientCore, path: str) -> Flow[None]:
    yield from core.call("POST", "/api/2.0/workspace/mkdirs", json={"path": path})


def leaf_folders(folders: Sequence[str]) -> list[str]:
    """mkdirs is ``mkdir -p``: creating the deepest folders creates their parents too."""
    unique = sorted(set(folders))
    return [f for f in unique if not any(other.startswith(f.rstrip("/") + "/") for other in unique)]


def _upload_path(path: str) -> str:
    if path.startswith("/Volumes/"):
        return f"/api/2.0/fs/files{quote(path)}"
    return f"/api/2.0/workspace-files/import-file/{quote(path.lstrip('/'))}"


def _upload(core: ClientCore, path: str, content: bytes) -> Flow[None]:
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


def build_code_archive(snapshot: CodeSnapshot) -> bytes:
    """A reproducible tar.gz of the snapshot (same tree → same bytes)."""
    root = Path(snapshot.local_root)
    if not root.is_dir():
        raise ConfigurationError(f"code_source.root_path {root} is not a folder")
    members = list(snapshot.include_paths) or ["."]
    files: list[Path] = []
    for member in members:
        start = (root / member).resolve()
        if not start.is_relative_to(root.resolve()):
            raise ConfigurationError(f"code_source.include_paths entry {member!r} leaves {root}")
        if start.is_file():
            files.append(start)
            continue
        for folder, dirnames, filenames in os.walk(start):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_IN_ARCHIVE)
            files.extend(
                Path(folder) / name for name in sorted(filenames) if not name.endswith(".pyc")
            )
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as archive,
    ):
        for path in sorted(set(files)):
            info = archive.gettarinfo(
                str(path), arcname=path.relative_to(root.resolve()).as_posix()
            )
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as handle:
                archive.addfile(info, handle)
    return buffer.getvalue()


def _permissions(core: ClientCore, run_id: int, acl: tuple[dict[str, Any], ...]) -> Flow[None]:
    from ._runs import get_run

    try:
        state = yield from get_run(core, run_id)
        job_id = state.job_id or run_id
        yield from core.call(
            "PATCH", f"/api/2.0/permissions/jobs/{job_id}", json={"access_control_list": list(acl)}
        )
    except AirError as error:
        logger.warning(
            "run %s was submitted, but its permissions were not applied: %s", run_id, error
        )


def submit(core: ClientCore, plan: SubmissionPlan) -> Flow[SubmittedRun]:
    from .. import _images

    body = dict(plan.submit_body)
    if plan.usage_policy_name and "budget_policy_id" not in body:
        raise ConfigurationError(
            f"usage_policy_name {plan.usage_policy_name!r} cannot be resolved through the "
            "workspace API; set usage_policy_id to the policy's id instead "
            "(Settings > Usage policies shows it)"
        )
    # Round trip 2: everything that only needs the plan, at once.
    preflight = [_preflight(core, b) for b in plan.preflight_bodies]
    folders = [_mkdirs(core, f) for f in leaf_folders(plan.folders)]
    archives = [offload(functools.partial(build_code_archive, s)) for s in plan.code_snapshots]
    # Images: `auto` ones are checked; `latest` ones are registered again and waited for
    # (only workloads with such images spend longer in this phase).
    required = plan.required_images()
    checks = [_images.prepare_images(core, required)] if required else []
    first = yield from gather(
        [*preflight, *checks, *archives, *folders],
        max(1, len(preflight) + len(checks) + len(archives) + len(folders)),
    )
    problems = [p for found in first[: len(preflight)] for p in found]
    if problems:
        raise WorkloadError(problems, source="(rejected by the workspace's validation)")
    contents: list[bytes] = first[
        len(preflight) + len(checks) : len(preflight) + len(checks) + len(archives)
    ]

    # Round trip 3: every upload at once (bounded).
    uploads = [_upload(core, f.path, f.content) for f in plan.files]
    uploads += [
        _upload(core, s.target_path, content)
        for s, content in zip(plan.code_snapshots, contents, strict=True)
    ]
    yield from gather(uploads, core.max_concurrent_uploads)

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


def submit_workload(
    core: ClientCore,
    workload: Workload | Sequence[Stage],
    *,
    idempotency_token: str | None,
    run_name: str | None,
) -> Flow[SubmittedRun]:
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
        )
    else:
        plan = build_plan(
            workload, user_name=identity.user_name, idempotency_token=idempotency_token
        )
    return (yield from submit(core, plan))
