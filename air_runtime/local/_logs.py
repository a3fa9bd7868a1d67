"""Per-node logs of task attempts: one JSON-lines file per (task run, node index).

Records are `{"time_unix_nano", "body", "node_index"}` (the shape of the platform's logs
endpoint, `logbricklens.go` in the `databricks air` CLI). Within a file the times strictly
increase, so a page is found by binary search on byte offsets and read from there: serving
a page never reads a whole file, however long the run's log grew.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from air_runtime.local._security import open_private_append, private_dir, write_private

Record = dict[str, Any]
_LINEAR_SCAN = 8192
_BLOCK = 65536
# A page stops early past this many bytes of bodies (at least one record), so a page of
# long lines stays a reasonable answer.
MAX_PAGE_BYTES = 8 * 1024 * 1024


class NodeLog:
    """Appends lines with strictly increasing `time_unix_nano`, so re-reading from the last
    timestamp seen (as clients following a live run do) never reorders records."""

    def __init__(self, path: Path, node_index: int) -> None:
        private_dir(path.parent)
        self.node_index = node_index
        self._file: IO[str] = open_private_append(path)
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


def _parse(line: bytes) -> Record | None:
    """A complete line's record; None for a partly written last line."""
    if not line.endswith(b"\n"):
        return None
    record: Record = json.loads(line)
    return record


def _bound(handle: IO[bytes], size: int, after: Callable[[int], bool]) -> int:
    """Offset of the first complete line whose time satisfies `after` (monotone: false
    then true), or the end of the complete lines."""
    lo, hi = 0, size
    while hi - lo > _LINEAR_SCAN:
        mid = (lo + hi) // 2
        handle.seek(mid - 1)
        handle.readline()  # to the start of the first line at or after mid
        start = handle.tell()
        if start >= hi:
            break
        line = handle.readline()
        record = _parse(line)
        if record is None or after(int(record["time_unix_nano"])):
            hi = start
        else:
            lo = start + len(line)
    handle.seek(lo)
    while True:
        position = handle.tell()
        record = _parse(handle.readline())
        if record is None or after(int(record["time_unix_nano"])):
            return position


def _forward(path: Path, start: int, end_ns: int | None) -> Iterator[tuple[int, int, Record]]:
    """(time, offset after the line, record) from `start`, while time <= end_ns."""
    with path.open("rb") as handle:
        handle.seek(start)
        while True:
            line = handle.readline()
            record = _parse(line)
            if record is None:
                return
            stamp = int(record["time_unix_nano"])
            if end_ns is not None and stamp > end_ns:
                return
            yield stamp, handle.tell(), record


def _backward(path: Path, end: int, start_ns: int | None) -> Iterator[tuple[int, int, Record]]:
    """(time, offset of the line, record) backwards from `end` (a line start), while
    time >= start_ns."""
    with path.open("rb") as handle:
        position = end
        tail = b""
        while position > 0 or tail:
            if position > 0:
                step = min(_BLOCK, position)
                position -= step
                handle.seek(position)
                tail = handle.read(step) + tail
            lines = tail.split(b"\n")
            # lines[-1] is b"" (tail ends at a line start); lines[0] may be partial.
            keep = lines[0] if position > 0 else b""
            complete = lines[1:-1] if position > 0 else lines[:-1]
            offset = position + len(tail)
            for line in reversed(complete):
                offset -= len(line) + 1
                record = json.loads(line)
                stamp = int(record["time_unix_nano"])
                if start_ns is not None and stamp < start_ns:
                    return
                yield stamp, offset, record
            if position == 0:
                return
            tail = keep + b"\n" if keep else b""
            if not keep:
                continue


def _tagged(
    items: Iterator[tuple[int, int, Record]], index: int
) -> Iterator[tuple[int, int, int, Record]]:
    for stamp, offset, record in items:
        yield stamp, index, offset, record


def _encode_token(offsets: Sequence[int]) -> str:
    raw = ".".join(str(o) for o in offsets).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, files: int) -> list[int]:
    """Per-file byte offsets of a page token this workspace issued (ValueError otherwise)."""
    try:
        padded = token + "=" * (-len(token) % 4)
        parts = base64.urlsafe_b64decode(padded.encode()).decode().split(".")
        offsets = [int(p) for p in parts]
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError(f"page_token {token!r} is not a token this workspace issued") from None
    if len(offsets) != files or any(o < 0 for o in offsets):
        raise ValueError(f"page_token {token!r} is not a token this workspace issued")
    return offsets


class LogBook:
    def __init__(self, root: Path) -> None:
        self.root = root
        private_dir(root)

    def path(self, task_run_id: int, node_index: int) -> Path:
        return self.root / str(task_run_id) / f"node-{node_index}.jsonl"

    def open(self, task_run_id: int, node_index: int) -> NodeLog:
        return NodeLog(self.path(task_run_id, node_index), node_index)

    def page(
        self,
        task_run_ids: Sequence[int],
        node_index: int,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        ascending: bool = True,
        size: int = 1000,
        token: str | None = None,
    ) -> tuple[list[Record], str | None]:
        """One page of the merged records of these attempts (in time order), and the token
        of the next page (None when this is the last). Blocking: call it off the loop."""
        paths = [self.path(t, node_index) for t in task_run_ids]
        offsets = decode_token(token, len(paths)) if token else None
        streams: list[Iterator[tuple[int, int, int, Record]]] = []
        positions: list[int] = []
        for i, path in enumerate(paths):
            try:
                file_size = os.path.getsize(path)
            except OSError:
                positions.append(0)
                continue
            if offsets is not None:
                position = min(offsets[i], file_size)
            else:
                with path.open("rb") as handle:
                    if ascending:
                        position = (
                            0
                            if start_ns is None
                            else _bound(handle, file_size, lambda t: t >= start_ns)
                        )
                    else:
                        position = _bound(
                            handle, file_size, lambda t: end_ns is not None and t > end_ns
                        )
            positions.append(position)
            if ascending:
                items = _forward(path, position, end_ns)
            else:
                items = _backward(path, position, start_ns)
            streams.append(_tagged(items, i))
        merged = heapq.merge(*streams, key=lambda item: item[0], reverse=not ascending)
        page: list[Record] = []
        more = False
        page_bytes = 0
        for _stamp, i, offset, record in merged:
            if len(page) == size or (page and page_bytes >= MAX_PAGE_BYTES):
                more = True
                break
            page.append(record)
            page_bytes += len(str(record.get("body", "")))
            positions[i] = offset
        for stream in streams:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return page, (_encode_token(positions) if more else None)

    def record_exit(
        self, task_run_id: int, node_index: int, exit_code: int, *, stopped: bool
    ) -> None:
        """How a node's process ended, kept beside its log for the run pages: its exit code,
        and whether the workspace stopped it (cancel, timeout, another node failed)."""
        record = {"exit_code": exit_code, "stopped": stopped}
        path = self.path(task_run_id, node_index).with_suffix(".exit.json")
        write_private(path, json.dumps(record))

    def exit_record(self, task_run_id: int, node_index: int) -> dict[str, Any] | None:
        """What `record_exit` kept for this node; None while it runs or when it never started."""
        path = self.path(task_run_id, node_index).with_suffix(".exit.json")
        try:
            record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record

    def last_records(self, task_run_id: int, node_index: int, lines: int) -> list[Record]:
        """The last `lines` records of a node's log, oldest first (read from the end)."""
        path = self.path(task_run_id, node_index)
        if not path.exists():
            return []
        records: list[Record] = []
        for _, _, record in _backward(path, _complete_end(path), None):
            records.append(record)
            if len(records) == lines:
                break
        return list(reversed(records))

    def tail(self, task_run_id: int, node_index: int, lines: int) -> list[str]:
        return [str(r["body"]) for r in self.last_records(task_run_id, node_index, lines)]


def _complete_end(path: Path) -> int:
    """Offset just after the last complete line."""
    with path.open("rb") as handle:
        size = os.path.getsize(path)
        position = size
        while position > 0:
            step = min(_BLOCK, position)
            handle.seek(position - step)
            block = handle.read(step)
            index = block.rfind(b"\n")
            if index >= 0:
                return position - step + index + 1
            position -= step
        return 0
