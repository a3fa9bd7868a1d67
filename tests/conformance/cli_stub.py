"""A recording stub workspace for the conformance suite.

It plays the part of the databricks/cli acceptance harness (``acceptance/air/*/test.toml``):
requests matching a ``METHOD /path`` pattern get the stubbed answer (or the error an answer
raises, such as a dropped connection), everything is recorded, and recordings are normalised the way the harness's ``[[Repls]]`` do (user
names, launch suffixes, snapshot archive names, idempotency tokens). It is an ``httpx``
transport, so our real client sends real requests to it without a socket.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx

USER = "tester@example.com"
HOST = "https://workspace.example.com"

Answer = tuple[int, Any] | Callable[["Recorded"], tuple[int, Any]]

# The harness's replacements, in order (acceptance run-submit/test.toml and friends).
_REPLACEMENTS = [
    (re.compile(r"[A-Za-z0-9._-]+_[0-9a-f]{16}\.tar\.gz"), "[SNAPSHOT_TARBALL]"),
    (re.compile(r"(/cli_launch/[^/]+/[^/]+)_[0-9a-f]{16}"), r"\1_[RUN_ID]"),
    (re.compile(re.escape(USER)), "[USERNAME]"),
    (
        re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
        "[UUID]",
    ),
]


def normalise(value: Any) -> Any:
    if isinstance(value, str):
        for pattern, replacement in _REPLACEMENTS:
            value = pattern.sub(replacement, value)
        return value
    if isinstance(value, dict):
        return {normalise(k): normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    return value


@dataclass
class Recorded:
    seq: int
    method: str
    path: str
    query: dict[str, str]
    raw_body: bytes

    @property
    def body(self) -> Any:
        return json.loads(self.raw_body) if self.raw_body else None

    def view(self) -> dict[str, Any]:
        """What the harness's print_requests.py shows: method, path, query, JSON body or
        the raw body of an upload (archives by their entry names)."""
        shown: dict[str, Any] = {"method": self.method, "path": self.path}
        if self.query:
            shown["q"] = dict(self.query)
        if self.raw_body:
            if self.path.endswith(".tar.gz"):
                shown["archive"] = archive_entries(self.raw_body)
            else:
                try:
                    shown["body"] = json.loads(self.raw_body)
                except ValueError:
                    shown["raw_body"] = self.raw_body.decode("utf-8", "replace")
        return normalise(shown)


def archive_entries(content: bytes) -> dict[str, str | None]:
    """Entry name -> text (None for folders) of a tar.gz."""
    entries: dict[str, str | None] = {}
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(content))) as archive:
        for member in archive.getmembers():
            name = member.name.rstrip("/")
            if member.isdir():
                entries[name] = None
            else:
                handle = archive.extractfile(member)
                entries[name] = handle.read().decode("utf-8", "replace") if handle else ""
    return entries


@dataclass
class StubWorkspace(httpx.BaseTransport):
    """Stubbed answers by ``"METHOD /path"`` (a regular expression on the path; the first
    match wins), a plain default for the calls every flow makes, 404 otherwise."""

    stubs: list[tuple[str, Answer]] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def stub(self, pattern: str, answer: Answer) -> StubWorkspace:
        self.stubs.append((pattern, answer))
        return self

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        with self._lock:
            recorded = Recorded(
                seq=len(self.requests),
                method=request.method,
                path=request.url.path,
                query=dict(parse_qsl(request.url.query.decode(), keep_blank_values=True)),
                raw_body=body,
            )
            self.requests.append(recorded)
        status, payload = self._answer(recorded)
        if isinstance(payload, bytes | str):
            return httpx.Response(status, content=payload)
        return httpx.Response(status, json=payload)

    def _answer(self, request: Recorded) -> tuple[int, Any]:
        for pattern, answer in self.stubs:
            method, _, path = pattern.partition(" ")
            if method == request.method and re.fullmatch(path, request.path):
                return answer(request) if callable(answer) else answer
        return self._default(request)

    def _default(self, request: Recorded) -> tuple[int, Any]:
        path = request.path
        if path == "/api/2.0/preview/scim/v2/Me":
            return 200, {"userName": USER, "id": "42"}
        if path == "/api/2.0/workspace/mkdirs":
            return 200, {}
        if path.startswith("/api/2.0/workspace-files/import-file/"):
            self.files["/" + path.removeprefix("/api/2.0/workspace-files/import-file/")] = (
                request.raw_body
            )
            return 200, {}
        if path == "/api/2.0/workspace/get-status":
            known = request.query.get("path") in self.files
            if known:
                return 200, {"path": request.query["path"], "object_type": "FILE"}
        return 404, {
            "error_code": "RESOURCE_DOES_NOT_EXIST",
            "message": f"{request.method} {path}: not stubbed",
        }

    # --- reading the recording ------------------------------------------------------------

    def to(self, method: str, path_pattern: str) -> list[Recorded]:
        return [
            r for r in self.requests if r.method == method and re.fullmatch(path_pattern, r.path)
        ]

    def lines(self) -> list[str]:
        """``METHOD path`` of every request, normalised, in the order sent."""
        return [normalise(f"{r.method} {r.path}") for r in self.requests]


# --- what the acceptance scripts read back ---------------------------------------------------

LAUNCH = "/Workspace/Users/[USERNAME]/.air/cli_launch/{exp}/{exp}_[RUN_ID]"
IMPORT = "/api/2.0/workspace-files/import-file"
SNAPSHOTS = "/Workspace/Users/[USERNAME]/.air/repo_snapshots/.internal"


def submit_stub(stub: StubWorkspace, run_id: int = 555) -> StubWorkspace:
    """The answers acceptance run-submit/test.toml stubs."""
    stub.stub("POST /api/2.0/ai-training/config:validate", (200, {}))
    stub.stub("POST /api/2.2/jobs/runs/submit", (200, {"run_id": run_id}))
    return stub


def groups_in_order(stub: StubWorkspace, groups: list[list[str]]) -> None:
    """Every request is expected, and each group is sent only after the one before it
    ended (requests inside a group go at once, so their order is free)."""
    sent = stub.lines()
    assert sorted(sent) == sorted(line for group in groups for line in group)
    last = -1
    for group in groups:
        positions = [i for i, line in enumerate(sent) if line in group]
        assert min(positions) > last, f"{group} started before the previous group ended: {sent}"
        last = max(positions)


def uploads(stub: StubWorkspace) -> dict[str, Any]:
    """Uploaded files by normalised path: the exact text, or an archive's entries."""
    return {
        normalise(r.path.removeprefix(IMPORT)): archive_entries(r.raw_body)
        if r.path.endswith(".tar.gz")
        else r.raw_body.decode("utf-8")
        for r in stub.to("POST", f"{IMPORT}/.*")
    }


# Pinned dates keep the commit, and so the snapshot's cache key, the same on every run
# (acceptance/air/run-submit/script).
GIT_ENV = {
    "GIT_AUTHOR_DATE": "2020-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2020-01-01T00:00:00Z",
    "GIT_AUTHOR_NAME": "tester",
    "GIT_AUTHOR_EMAIL": "tester@example.com",
    "GIT_COMMITTER_NAME": "tester",
    "GIT_COMMITTER_EMAIL": "tester@example.com",
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    )
    return done.stdout.strip()
