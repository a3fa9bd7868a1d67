"""``airo logs``: the log service's records (``--tail``, ``--minutes``, ``--attempt``), and
the MLflow artifacts the platform also writes every node's output to, read when the log
service is not there (FEATURE_DISABLED, 404) or served nothing for an ended run
(logs.go fetchLogs, logmlflow.go)."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from .._errors import AirError, ConfigurationError, InvalidResponse, PlatformError
from .._states import RunState, TaskState, mlflow_ids
from ..plan._workflow import task_key_for
from ._core import ClientCore, Emit, Flow, Sleep, Transmit
from ._runs import FOLLOW_POLL_S, get_output, get_run, iter_run_logs, record_of, task_tries

logger = logging.getLogger("air_runtime.client")

# logmlflow.go: chunk files logs-<index>.chunk.txt under logs/node_<n> (one attempt per
# MLflow run) or logs/attempt_<a>/node_<n>.
_CHUNK_RE = re.compile(r"^logs-(\d+)\.chunk\.txt$")
_OLD_NODE_DIR_RE = re.compile(r"^logs/node_\d+$")
MLFLOW_RUNS_GET = "/api/2.0/mlflow/runs/get"
ARTIFACTS_LIST = "/api/2.0/mlflow/artifacts/list"
CREDENTIALS_FOR_READ = "/api/2.0/mlflow/artifacts/credentials-for-read"


def task_keys_named(state: RunState, name: str) -> tuple[str, ...]:
    """The run's task keys ``name`` addresses: the key itself; else the key made of it
    (``task_key_for``, as a stage's key is made of its name); else every task of the stage
    ``name`` (keys ``<stage>__<partition>_<hash>``, one per partition or range value); else
    the tasks of the partition key ``name`` (its part of those keys)."""
    keys = [t.task_key for t in state.tasks]
    if name in keys:
        return (name,)
    made = task_key_for(name)
    if made in keys:
        return (made,)
    stage = tuple(k for k in keys if k.startswith(f"{made}__"))
    if stage:
        return stage
    return tuple(k for k in keys if f"__{made}_" in k or k.endswith(f"__{made}"))


def check_attempt(state: RunState, attempt: int | None, task_key: str | None) -> None:
    """An attempt past the newest is refused with the ones there are (logs.go runLogs),
    saying which are a repair's (``task_tries``: a repair's task runs count on)."""
    if attempt is None:
        return
    tries = task_tries(state, task_key)
    newest = max((t.number for t in tries), default=0)
    if attempt < 0 or attempt > newest:
        of = f"task {task_key} of run" if task_key else "run"
        repairs = sorted({t.repair for t in tries if t.repair})
        note = ""
        if repairs:
            started = ", ".join(
                f"{min(t.number for t in tries if t.repair == r)} (repair {r})" for r in repairs
            )
            note = f"; a repair's task runs count on from the tries before: {started}"
        raise ConfigurationError(
            f"invalid attempt {attempt}: {of} {state.run_id} has attempts 0 to {newest}{note}"
        )


def read_logs(
    core: ClientCore,
    run_id: int,
    *,
    task_key: str | None,
    node: int | None,
    attempt: int | None,
    tail: int | None,
    minutes: float | None,
    follow: bool,
) -> Flow[None]:
    """Emit the run's log records as ``iter_run_logs`` does, narrowed by ``attempt``
    (0-based), ``tail`` (the last N of each stream) or ``minutes`` (the last M minutes);
    from MLflow's log artifacts when the log service has nothing."""
    if tail is not None and minutes is not None:
        raise ConfigurationError(
            "cannot combine --tail with --minutes: --tail selects by line count, "
            "--minutes by time window"
        )
    state = yield from get_run(core, run_id, include_history=True)
    check_attempt(state, attempt, task_key)
    since_ns = None
    if minutes is not None:
        since_ns = int((time.time() - minutes * 60) * 1_000_000_000)
    emitted = yield from iter_run_logs(
        core,
        run_id,
        task_key=task_key,
        node=node,
        follow=follow,
        attempt=attempt,
        since_ns=since_ns,
        tail=tail,
        every_repair=True,
    )
    if emitted:
        return
    state = yield from get_run(core, run_id, include_history=True)
    if emitted == 0 and not state.is_terminal:
        return  # nothing written yet
    if minutes is not None:
        # logmlflow.go mlflowLogFallback: chunks are not time-indexed.
        logger.warning(
            "the last %g minutes cannot be picked from MLflow log artifacts: showing all", minutes
        )
    yield from mlflow_logs(
        core, state, task_key=task_key, node=node, attempt=attempt, tail=tail, follow=follow
    )


def _artifact_root(core: ClientCore, mlflow_run_id: str) -> Flow[str | None]:
    try:
        body = yield from core.call("GET", MLFLOW_RUNS_GET, params={"run_id": mlflow_run_id})
    except AirError:
        return None
    info = (body.get("run") or {}).get("info") or {}
    root = info.get("artifact_uri")
    return str(root).rstrip("/") if isinstance(root, str) and root else None


def _volume_root(root: str) -> str | None:
    # logmlflow.go volumeArtifactRoot: artifacts kept in a UC volume are read as files.
    return root.removeprefix("dbfs:") if root.startswith("dbfs:/Volumes/") else None


def _list_artifacts(core: ClientCore, mlflow_run_id: str, root: str, path: str) -> Flow[list[str]]:
    """The paths directly under ``path`` (relative to the artifact root)."""
    volume = _volume_root(root)
    if volume is not None:
        body = yield from core.call("GET", f"/api/2.0/fs/directories{quote(f'{volume}/{path}')}")
        return [f"{path}/{e['name']}" for e in body.get("contents") or [] if e.get("name")]
    paths: list[str] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"run_id": mlflow_run_id, "path": path}
        if token:
            params["page_token"] = token
        body = yield from core.call("GET", ARTIFACTS_LIST, params=params)
        paths += [str(f["path"]) for f in body.get("files") or [] if f.get("path")]
        token = body.get("next_page_token") or None
        if token is None:
            return paths


def _download(core: ClientCore, mlflow_run_id: str, root: str, path: str) -> Flow[str]:
    volume = _volume_root(root)
    if volume is not None:
        response = yield from core.call(
            "GET", f"/api/2.0/fs/files{quote(f'{volume}/{path}')}", binary=True
        )
        return str(response.content.decode("utf-8", "replace"))
    # A pre-signed URL (logmlflow.go downloadArtifact): fetched without the workspace's
    # credentials, with the headers the workspace says the storage needs.
    body = yield from core.call(
        "GET", CREDENTIALS_FOR_READ, params={"run_id": mlflow_run_id, "path": path}
    )
    infos = body.get("credential_infos") or []
    if not infos or not infos[0].get("signed_uri"):
        raise PlatformError(f"no download credentials returned for {path}")
    headers = {h["name"]: h["value"] for h in infos[0].get("headers") or [] if "name" in h}
    request = httpx.Request("GET", str(infos[0]["signed_uri"]), headers=headers)
    answer: httpx.Response = yield Transmit(request)
    if answer.status_code >= 400:
        raise InvalidResponse(
            f"artifact download failed: HTTP {answer.status_code}", status_code=answer.status_code
        )
    return str(answer.content.decode("utf-8", "replace"))


def _node_dir(files: list[str], attempt: int, node: int) -> str:
    """logs/attempt_<a>/node_<n> when the run's logs/ has that attempt folder and no bare
    node folder, else logs/node_<n> (logmlflow.go discoverAttemptPrefix)."""
    if any(_OLD_NODE_DIR_RE.match(f) for f in files):
        return f"logs/node_{node}"
    if f"logs/attempt_{attempt}" in files:
        return f"logs/attempt_{attempt}/node_{node}"
    return f"logs/node_{node}"


def _chunks(files: list[str]) -> list[str]:
    found = []
    for path in files:
        match = _CHUNK_RE.match(path.rsplit("/", 1)[-1])
        if match:
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def _mlflow_source(core: ClientCore, task: TaskState) -> Flow[tuple[str, str, list[str]] | None]:
    """The MLflow run of one attempt, its artifact root and what is under logs/."""
    if task.run_id is None:
        return None
    output: Mapping[str, Any] = {}
    with contextlib.suppress(AirError):
        output = yield from get_output(core, task.run_id)
    _, mlflow_run = mlflow_ids(output)
    if not mlflow_run:
        return None
    root = yield from _artifact_root(core, mlflow_run)
    if root is None:
        return None
    try:
        files = yield from _list_artifacts(core, mlflow_run, root, "logs")
    except AirError:
        files = []
    return mlflow_run, root, files


def mlflow_logs(
    core: ClientCore,
    state: RunState,
    *,
    task_key: str | None,
    node: int | None,
    attempt: int | None,
    tail: int | None,
    follow: bool,
) -> Flow[None]:
    """Emit the lines of the run's MLflow log chunks, labelled like the log service's
    records (time 0: chunks carry no times, so ``--minutes`` cannot narrow them). While
    following an active run, the chunks are read again every few seconds and only the new
    complete lines are emitted."""
    offsets: dict[tuple[str, str], int] = {}
    while True:
        for one in task_tries(state, task_key):
            task = one.attempt
            if attempt is not None and one.number != attempt:
                continue
            source = yield from _mlflow_source(core, task)
            if source is None:
                continue
            mlflow_run, root, files = source
            nodes = [node] if node is not None else list(range(task.node_count))
            for index in nodes:
                folder = _node_dir(files, task.attempt_number, index)
                try:
                    chunk_paths = _chunks(
                        (yield from _list_artifacts(core, mlflow_run, root, folder))
                    )
                except AirError:
                    continue
                lines: list[tuple[str, str]] = []
                for path in chunk_paths:
                    text = yield from _download(core, mlflow_run, root, path)
                    complete = (
                        text
                        if state.is_terminal or text.endswith("\n")
                        else text.rsplit("\n", 1)[0]
                    )
                    lines += [(path, line) for line in complete.splitlines()]
                key = (mlflow_run, folder)
                fresh = lines[offsets.get(key, 0) :]
                if tail is not None and key not in offsets:
                    fresh = fresh[-tail:]
                offsets[key] = len(lines)
                for _, line in fresh:
                    yield Emit(record_of(one, index, 0, line))
        if not follow or state.is_terminal:
            return
        yield Sleep(FOLLOW_POLL_S)
        state = yield from get_run(core, state.run_id, include_history=True)
