"""A task's checkpoint folder through the Files API: made (a marker file, the route the CLI
uploads volume files by), and what it holds: its listing
(``GET /api/2.0/fs/directories/Volumes/...``, ``contents`` and ``next_page_token``, as the
CLI lists a volume artifact root in logmlflow.go listArtifacts), and where a run's task keeps
its checkpoints (its ``AIRO_CHECKPOINT_DIR`` as submitted: ``env_vars.json`` next to its
command, runupload.go), so that a run found by id alone (``airo get``, a failed attempt's
diagnosis) shows its newest checkpoint too."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .._checkpoints import (
    ENV_CHECKPOINT_DIR,
    MARKER_FILE,
    RUN_RECORD_PREFIX,
    Checkpoint,
    CheckpointIdentity,
    FolderContents,
    unwritable,
)
from .._errors import AirError, NotFound, PlatformError
from .._states import RunState, TaskState
from ._core import ClientCore, Flow

if TYPE_CHECKING:
    from ..workload import Workload


def files_api_path(path: str) -> str:
    """A volume file's route in the Files API (runupload.go; ``PUT /api/2.0/fs/files/Volumes/
    ...``, asserted in runsubmit_test.go)."""
    return f"/api/2.0/fs/files{quote(path)}"


def upload_volume_file(core: ClientCore, path: str, content: bytes) -> Flow[None]:
    """One file to a volume through the Files API, as the CLI uploads volume files."""
    yield from core.call("PUT", files_api_path(path), params={"overwrite": "true"}, content=content)


# A folder of more checkpoints than this is read in pages; a few pages are enough to find
# the newest (the Files API pages at 1,000 entries).
_MAX_PAGES = 5


def folder_contents(
    core: ClientCore, folder: str, before_ms: int | None = None
) -> Flow[FolderContents]:
    """The folder's contents (empty when it does not exist yet); ``before_ms``: as they were
    then (``FolderContents.of``)."""
    entries: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(_MAX_PAGES):
        params = {"page_token": token} if token else None
        try:
            body = yield from core.call(
                "GET", f"/api/2.0/fs/directories{quote(folder)}", params=params
            )
        except NotFound:
            break
        entries += [e for e in body.get("contents") or [] if isinstance(e, dict)]
        token = body.get("next_page_token") or None
        if token is None:
            break
    return FolderContents.of(folder, entries, before_ms)


def prepare_folder(
    core: ClientCore, identity: CheckpointIdentity, volume: str, workload: Workload
) -> Flow[Workload]:
    """Make the folder of ``identity`` in ``volume`` (its marker proves the volume exists
    and is writable before anything else is uploaded) after reading what it holds:
    ``workload`` with the resume variables. A missing or read-only volume refuses the
    submission (``ConfigurationError`` with the fix)."""
    folder = identity.folder(volume)
    try:
        contents = yield from folder_contents(core, folder)
        yield from upload_volume_file(core, f"{folder}/{MARKER_FILE}", identity.marker())
    except (NotFound, PlatformError) as error:
        raise unwritable(volume, folder, error) from None
    return workload.with_env_variables(contents.environment())


def read_workspace_json(core: ClientCore, path: str) -> Flow[Any]:
    """A JSON workspace file we wrote beside a run's command (``workspace/export``, direct
    download); None when it is missing or not JSON."""
    try:
        response = yield from core.call(
            "GET",
            "/api/2.0/workspace/export",
            params={"path": path, "direct_download": "true"},
            binary=True,
        )
        return json.loads(response.content)
    except (AirError, ValueError):
        return None


def record_run(core: ClientCore, folder: str, run_id: int) -> Flow[None]:
    """Note in the folder that run ``run_id`` was submitted into it (an empty file)."""
    yield from upload_volume_file(core, f"{folder}/{RUN_RECORD_PREFIX}{run_id}", b"")


def task_checkpoint_folder(core: ClientCore, task: TaskState) -> Flow[str | None]:
    """The ``AIRO_CHECKPOINT_DIR`` a task was submitted with; None when it has none (or its
    variables cannot be read)."""
    if not task.command_path:
        return None
    path = str(PurePosixPath(task.command_path).parent / "env_vars.json")
    variables = yield from read_workspace_json(core, path)
    for item in variables if isinstance(variables, list) else ():
        if isinstance(item, dict) and item.get("name") == ENV_CHECKPOINT_DIR:
            value = str(item.get("value") or "")
            return value if value.startswith("/Volumes/") else None
    return None


def newest_checkpoint_of_run(
    core: ClientCore, state: RunState, task_key: str | None
) -> Flow[Checkpoint | None]:
    """The newest checkpoint of the run's task ``task_key`` (a one-task run's only task)."""
    tasks = [t for t in state.tasks if task_key is None or t.task_key == task_key]
    if len(tasks) != 1:
        return None
    return (yield from newest_checkpoint_of_task(core, tasks[0]))


def newest_checkpoint_of_task(core: ClientCore, task: TaskState) -> Flow[Checkpoint | None]:
    """The newest checkpoint in the folder a task was submitted with when the attempt
    ``task`` ended (None without one): where its retry resumes, however late it is asked;
    best effort: a failed read is none."""
    folder = yield from task_checkpoint_folder(core, task)
    if folder is None:
        return None
    try:
        contents = yield from folder_contents(core, folder, task.end_time)
    except AirError:
        return None
    return contents.newest
