"""Per-node logs of task attempts: one JSON-lines file per (task run, node index)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any


class NodeLog:
    """Appends lines with strictly increasing `time_unix_nano`, so re-reading from the last
    timestamp seen (as clients following a live run do) never reorders records."""

    def __init__(self, path: Path, node_index: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.node_index = node_index
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._last_ns = 0
        self._lock = threading.Lock()

    def write(self, body: str) -> None:
        with self._lock:
            if self._file.closed:
                return
            stamp = max(time.time_ns(), self._last_ns + 1)
            self._last_ns = stamp
            record = {"time_unix_nano": stamp, "body": body, "node_index": self.node_index}
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class LogBook:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, task_run_id: int, node_index: int) -> Path:
        return self.root / str(task_run_id) / f"node-{node_index}.jsonl"

    def open(self, task_run_id: int, node_index: int) -> NodeLog:
        return NodeLog(self.path(task_run_id, node_index), node_index)

    def records(self, task_run_ids: Iterable[int], node_index: int) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for task_run_id in task_run_ids:
            path = self.path(task_run_id, node_index)
            if not path.exists():
                continue
            with path.open(encoding="utf-8") as handle:
                for line in handle:
                    if line.endswith("\n"):  # a partly written last line is read next time
                        records.append(json.loads(line))
        records.sort(key=lambda r: r["time_unix_nano"])
        return records

    def tail(self, task_run_id: int, node_index: int, lines: int) -> list[str]:
        return [r["body"] for r in self.records([task_run_id], node_index)[-lines:]]
