"""Each node's output as MLflow log artifacts, the way the platform's sidecar writes them
(logmlflow.go): `logs/node_<n>/logs-<i>.chunk.txt`, chunks of at most 4 MiB cut at line
ends. Every task attempt here has its own MLflow run (the ids in its runs/get-output), so
the layout has no attempt folders. A task whose `mlflow_artifact_location` is a Unity
Catalog volume gets its artifacts written there when the attempt ends, under
`<location>/<mlflow run id>/artifacts` (the artifact URI `dbfs:/Volumes/...` clients read
with the Files API); the others are served by the MLflow artifact endpoints
(`routes`)."""

from __future__ import annotations

import logging
import re
from typing import Any

from air_runtime.local._errors import ApiError
from air_runtime.local._logs import LogBook
from air_runtime.local.files.backend import VolumeTree

logger = logging.getLogger("air_runtime.local")
CHUNK_BYTES = 4 * 1024 * 1024


def mlflow_ids(output: dict[str, Any]) -> dict[str, str]:
    """The MLflow ids in a task run's output (runs/get-output without its metadata)."""
    ids = output.get("ai_runtime_task_output") or {}
    return {k: str(v) for k, v in ids.items() if k.startswith("mlflow_") and v}


def artifact_uri(spec: dict[str, Any], output: dict[str, Any]) -> str:
    ids = mlflow_ids(output)
    location = str((spec.get("ai_runtime_task") or {}).get("mlflow_artifact_location") or "")
    location = location.removeprefix("dbfs:")  # sent as dbfs:/Volumes/... (runsubmit.go)
    if location.startswith("/Volumes/"):
        return f"dbfs:{location.rstrip('/')}/{ids.get('mlflow_run_id')}/artifacts"
    return (
        f"dbfs:/databricks/mlflow-tracking/{ids.get('mlflow_experiment_id')}/"
        f"{ids.get('mlflow_run_id')}/artifacts"
    )


def nodes(logbook: LogBook, task_run_id: int) -> list[int]:
    """The nodes that wrote output (the log book keeps one file per node)."""
    folder = logbook.path(task_run_id, 0).parent
    found = {
        int(match.group(1))
        for path in (folder.glob("node-*.jsonl") if folder.is_dir() else [])
        if (match := re.fullmatch(r"node-(\d+)\.jsonl", path.name))
    }
    return sorted(found) or [0]


def node_chunks(logbook: LogBook, task_run_id: int, node: int) -> list[bytes]:
    """One node's output as chunk files' contents."""
    lines: list[str] = []
    token: str | None = None
    while True:
        page, token = logbook.page([task_run_id], node, size=10_000, token=token)
        lines += [str(r["body"]) for r in page]
        if not token:
            break
    chunks: list[bytes] = []
    current = bytearray()
    for line in lines:
        data = (line.rstrip("\n") + "\n").encode()
        if current and len(current) + len(data) > CHUNK_BYTES:
            chunks.append(bytes(current))
            current = bytearray()
        current += data
    if current:
        chunks.append(bytes(current))
    return chunks


def publish_to_volume(
    volumes: VolumeTree,
    logbook: LogBook,
    spec: dict[str, Any],
    task_run_id: int,
    output: dict[str, Any],
) -> None:
    """Write an ended attempt's log chunks into its volume artifact location, if it has one."""
    root = artifact_uri(spec, output)
    if not root.startswith("dbfs:/Volumes/") or not mlflow_ids(output).get("mlflow_run_id"):
        return
    base = root.removeprefix("dbfs:")
    try:
        for node in nodes(logbook, task_run_id):
            volumes.mkdirs(f"{base}/logs/node_{node}")
            for index, chunk in enumerate(node_chunks(logbook, task_run_id, node)):
                path = f"{base}/logs/node_{node}/logs-{index}.chunk.txt"
                volumes.put(path, chunk, overwrite=True)
    except (ApiError, OSError) as error:  # a bad location must not change the run's outcome
        logger.warning(
            "log artifacts of task run %s not written to %s: %s", task_run_id, base, error
        )
