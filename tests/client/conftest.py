"""Fixtures for client tests: local workspaces over real HTTP with a recording transport."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from air_runtime.local import LocalWorkspace, start_local_workspace


@dataclass
class Exchange:
    method: str
    path: str
    started: float
    ended: float
    status: int | None
    body: bytes
    headers: dict[str, str]


class RecordingTransport(httpx.HTTPTransport):
    """A real HTTP transport that also remembers what was sent and when (for assertions on
    timing, request bodies and round trips)."""

    def __init__(self) -> None:
        super().__init__()
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        body = request.read()
        status: int | None = None
        try:
            response = super().handle_request(request)
            response.read()
            status = response.status_code
            return response
        finally:
            with self._lock:
                self.exchanges.append(
                    Exchange(
                        request.method,
                        request.url.path,
                        started,
                        time.monotonic(),
                        status,
                        body,
                        dict(request.headers),
                    )
                )

    def to(self, fragment: str) -> list[Exchange]:
        return [e for e in self.exchanges if fragment in e.path]

    def round_trips(self) -> int:
        """Round trips on the critical path: a new one starts when a request begins after
        every earlier request has finished."""
        trips = 0
        busy_until = float("-inf")
        for exchange in sorted(self.exchanges, key=lambda e: e.started):
            if exchange.started >= busy_until:
                trips += 1
            busy_until = max(busy_until, exchange.ended)
        return trips


@pytest.fixture
def workspace_factory(tmp_path: Path) -> Iterator[Callable[..., LocalWorkspace]]:
    started: list[LocalWorkspace] = []

    def start(**options: Any) -> LocalWorkspace:
        options.setdefault("retry_interval_s", 0.05)
        options.setdefault("image_delay_s", 0.2)
        workspace = start_local_workspace(data_dir=tmp_path / f"workspace{len(started)}", **options)
        started.append(workspace)
        return workspace

    yield start
    for workspace in started:
        workspace.stop()


@pytest.fixture
def recorder() -> RecordingTransport:
    return RecordingTransport()
