"""Fault injection, request counters and the request log, as one ASGI middleware.

Faults are off by default. Settings are per endpoint key (e.g. `jobs/runs/submit`, see
`endpoint_key`), with `*` for every endpoint (an endpoint's own settings win), and an
optional top-level `seed` for the random draws:

    {"seed": 7, "*": {"latency_ms": 50},
     "jobs/runs/submit": {"rate_429": 0.2, "retry_after_s": 1, "rate_5xx": 0.1,
                          "status_5xx": 503, "rate_drop": 0.05, "rate_response_lost": 0.3}}

`latency_ms` waits before the request is handled, `answer_latency_ms` after (the request has
taken effect, a submitted run exists, and the caller does not know yet).
`rate_drop` closes the connection before answering; `rate_response_lost` (alias
`submit_response_lost`) handles the request, then closes the connection without the answer.
`rate_404` answers 404 ENDPOINT_NOT_FOUND, as a workspace where the call is not exposed does
(e.g. `{"ai-compute-manager/images:checkImageAccess": {"rate_404": 1}}`: the CLI reads any
error of that probe as "unknown", image_client.go).

An outage (`Outage`, `POST /api/2.0/airo-admin/outage {"seconds": N, "mode": ...}`) takes the
whole API away for N seconds, as a workspace that is restarting or behind a dead load
balancer: the run engine goes on (ranks keep running, runs end and are reported ended once it
is over), only nobody is answered.

- `hang`: connections are accepted and every request other than the admin API is held
  without an answer until the outage ends; then its connection is closed without an answer.
  Held requests are counted (`requests`, and `faults` kind `outage`).
- `refuse`: the listening socket is closed and every open connection with it, so a new
  connection is refused by the kernel (ECONNREFUSED), the admin API's too; at the end the
  server listens again on the same address. Refused connections never reach the workspace,
  so its counters do not see them.

`GET /api/2.0/airo-admin/outage` answers `{"active": ..., "mode": ..., "started_at": ...,
"ends_at": ..., "ended_at": ...}` (Unix times); `ended_at` is set when the API answers again.
`DELETE` ends it early (in `hang` mode: in `refuse` mode the admin API is refused as well).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode

from air_runtime.local._security import open_private_append

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

FAULT_FIELDS = {
    "latency_ms": float,
    "answer_latency_ms": float,
    "rate_429": float,
    "retry_after_s": float,
    "rate_5xx": float,
    "status_5xx": int,
    "rate_drop": float,
    "rate_response_lost": float,
    "rate_404": float,
}
_ALIASES = {"submit_response_lost": "rate_response_lost"}
_SENSITIVE_QUERY = re.compile(r"token|secret|password|credential|value|auth", re.I)
ADMIN_PREFIX = "/api/2.0/airo-admin/"
# The run pages (`pages`) are not the REST API: never faulted, counted or logged here.
PAGE_PREFIXES = ("/jobs/runs", "/login", "/logout", "/ml/experiments/")


def endpoint_key(path: str) -> str:
    if path.startswith("/api/2.0/workspace-files/import-file/"):
        return "workspace-files/import-file"
    if path.startswith("/api/2.0/fs/files/"):
        return "fs/files"
    if path.startswith("/api/2.0/fs/directories/"):
        return "fs/directories"
    if path.startswith("/api/2.0/ai-training/workflows/by-run-id/"):
        return "ai-training/logs"
    if path.startswith("/api/2.0/ai-training/provisioned-capacities/"):
        return "ai-training/provisioned-capacities/get"
    if path.startswith("/api/2.0/permissions/jobs/"):
        return "permissions/jobs"
    if path.startswith("/api/2.0/permissions/experiments/"):
        return "permissions/experiments"
    match = re.match(r"^/api/2\.\d+/(.+)$", path)
    return match.group(1) if match else path.lstrip("/")


def normalize_faults(faults: Any) -> dict[str, Any]:
    """Check a fault configuration; ValueError names the bad entry."""
    if faults is None:
        return {}
    if not isinstance(faults, dict):
        raise ValueError("faults must be a JSON object of endpoint -> settings")
    result: dict[str, Any] = {}
    for endpoint, settings in faults.items():
        if endpoint == "seed":
            result["seed"] = int(settings)
            continue
        if not isinstance(settings, dict):
            raise ValueError(f"faults[{endpoint!r}] must be an object of settings")
        clean: dict[str, float | int] = {}
        for name, value in settings.items():
            name = _ALIASES.get(name, name)
            if name not in FAULT_FIELDS:
                raise ValueError(
                    f"faults[{endpoint!r}]: unknown setting {name!r}; "
                    f"known: {', '.join(sorted(FAULT_FIELDS))}, submit_response_lost"
                )
            clean[name] = FAULT_FIELDS[name](value)
            if name.startswith("rate_") and not 0 <= clean[name] <= 1:
                raise ValueError(f"faults[{endpoint!r}].{name} must be between 0 and 1")
        result[endpoint] = clean
    return result


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.requests: Counter[str] = Counter()
            self.responses: dict[str, Counter[str]] = {}
            self.faults: dict[str, Counter[str]] = {}
            self.submits_per_token: Counter[str] = Counter()
            self.runs_created = 0

    def count_request(self, endpoint: str) -> None:
        with self._lock:
            self.requests[endpoint] += 1

    def count_response(self, endpoint: str, status: int | str) -> None:
        with self._lock:
            self.responses.setdefault(endpoint, Counter())[str(status)] += 1

    def count_fault(self, endpoint: str, kind: str) -> None:
        with self._lock:
            self.faults.setdefault(endpoint, Counter())[kind] += 1

    def count_submit(self, token: str | None, created: bool) -> None:
        with self._lock:
            self.submits_per_token[token or "<none>"] += 1
            self.runs_created += int(created)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": dict(self.requests),
                "responses": {k: dict(v) for k, v in self.responses.items()},
                "faults": {k: dict(v) for k, v in self.faults.items()},
                "submits_per_token": dict(self.submits_per_token),
                "runs_created": self.runs_created,
            }


class RequestLog:
    """Method, path, status and redacted query of every request: never bodies or headers."""

    def __init__(self, path: Path, size: int) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=size)
        self._path = path
        self._size = max(1, size)
        self._file = open_private_append(path)
        with path.open("rb") as existing:  # the file is bounded, so this stays cheap
            self._written = sum(1 for _ in existing)
        self._lock = threading.Lock()

    def add(self, method: str, path: str, query: str, status: int | str) -> None:
        pairs = parse_qsl(query, keep_blank_values=True)
        redacted = urlencode(
            [(k, "REDACTED" if _SENSITIVE_QUERY.search(k) else v) for k, v in pairs]
        )
        entry = {
            "time": time.time(),
            "method": method,
            "path": path,
            "query": redacted,
            "status": status,
        }
        with self._lock:
            self.entries.append(entry)
            if not self._file.closed:
                if self._written >= self._size:
                    # Bounded on disk too: the file holds the last `size` to 2 x `size`
                    # entries (the current file and one previous).
                    self._file.close()
                    os.replace(self._path, self._path.with_name(self._path.name + ".1"))
                    self._file = open_private_append(self._path)
                    self._written = 0
                self._file.write(json.dumps(entry) + "\n")
                self._file.flush()
                self._written += 1

    def close(self) -> None:
        with self._lock:
            self._file.close()


OUTAGE_MODES = ("hang", "refuse")


class Listener(Protocol):
    """The server's listening side, for a `refuse` outage (`_server.WorkspaceServer`)."""

    async def stop_listening(self) -> None: ...

    async def listen_again(self) -> None: ...


class Outage:
    """The API down for a while (see the module docstring). Lives on the server's event
    loop: started and ended by the admin API or its own timer."""

    def __init__(self) -> None:
        self.mode: str | None = None
        self.started_at: float | None = None
        self.ends_at: float | None = None
        self.ended_at: float | None = None
        self.last_mode: str | None = None
        self.held = 0  # requests held by the current (or last) outage
        # Set by the server that serves the app; without one only `hang` is possible.
        self.listener: Listener | None = None
        self._over: asyncio.Event | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._ending: asyncio.Task[None] | None = None
        self._turn: asyncio.Lock | None = None

    @property
    def active(self) -> bool:
        return self.mode is not None

    def status(self) -> dict[str, Any]:
        return {
            "active": self.active,
            "mode": self.mode or self.last_mode,
            "started_at": self.started_at,
            "ends_at": self.ends_at,
            "ended_at": self.ended_at,
            "held": self.held,
        }

    def start(self, seconds: float, mode: str) -> None:
        """Begin an outage of ``seconds``; ValueError names a bad argument. A `refuse`
        outage stops listening only in ``begin_refusing``, once the caller was answered."""
        if mode not in OUTAGE_MODES:
            raise ValueError(f"outage mode must be one of {', '.join(OUTAGE_MODES)}, got {mode!r}")
        if not 0 < seconds <= 24 * 3600:
            raise ValueError(f"outage seconds must be > 0 and at most a day, got {seconds!r}")
        if self.active:
            raise ValueError("an outage is already under way; end it first (DELETE)")
        if mode == "refuse" and self.listener is None:
            raise ValueError(
                "a refuse outage needs the server's listening socket: serve the workspace "
                "with start_local_workspace or `airo workspace`"
            )
        loop = asyncio.get_running_loop()
        now = time.time()
        self.mode, self.last_mode = mode, mode
        self.started_at, self.ends_at, self.ended_at = now, now + seconds, None
        self.held = 0
        self._over = asyncio.Event()
        self._turn = self._turn or asyncio.Lock()
        self._timer = loop.call_later(seconds, self._end_on_time)

    def _end_on_time(self) -> None:
        self._ending = asyncio.get_running_loop().create_task(self.end())

    async def begin_refusing(self) -> None:
        """Close the listening socket and the open connections (a `refuse` outage)."""
        assert self._turn is not None
        async with self._turn:
            if self.mode == "refuse" and self.listener is not None:
                await self.listener.stop_listening()

    async def end(self, *, listen: bool = True) -> None:
        """End the outage now (no-op without one): listen again after `refuse`, then let
        the held requests go (each closed without an answer)."""
        if self._turn is None:
            return
        async with self._turn:
            if self.mode is None:
                return
            if self._timer is not None:
                self._timer.cancel()
            if self.mode == "refuse" and listen and self.listener is not None:
                await self.listener.listen_again()
            self.mode = None
            self.ended_at = time.time()
            assert self._over is not None
            self._over.set()

    async def hold(self) -> None:
        """Wait until the outage is over (a held request)."""
        self.held += 1
        if self._over is not None:
            await self._over.wait()


class FaultInjector:
    def __init__(
        self, app: ASGIApp, faults: dict[str, Any], counters: Counters, log: RequestLog
    ) -> None:
        self.app = app
        self.counters = counters
        self.log = log
        self.outage = Outage()
        self.set_faults(faults)

    def set_faults(self, faults: Any) -> None:
        self.faults = normalize_faults(faults)
        self.rng = random.Random(self.faults.get("seed", 0))

    def settings(self, endpoint: str) -> dict[str, Any]:
        merged = dict(self.faults.get("*", {}))
        merged.update(self.faults.get(endpoint, {}))
        return merged

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(ADMIN_PREFIX):
            await self.app(scope, receive, send)
            return
        if self.outage.active:
            await self._held(scope, send)
            return
        if scope["path"].startswith(PAGE_PREFIXES):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        endpoint = endpoint_key(path)
        query = scope.get("query_string", b"").decode("latin-1")
        self.counters.count_request(endpoint)
        settings = self.settings(endpoint)
        status: list[int] = []

        def record(result: int | str) -> None:
            self.counters.count_response(endpoint, result)
            self.log.add(scope["method"], path, query, result)

        if settings.get("latency_ms"):
            await asyncio.sleep(settings["latency_ms"] / 1000)
        draw = self.rng.random()
        lost = self.rng.random() < settings.get("rate_response_lost", 0.0)
        threshold = settings.get("rate_drop", 0.0)
        if draw < threshold:
            self.counters.count_fault(endpoint, "drop")
            record("dropped")
            await _drop(send)
            return
        threshold += settings.get("rate_429", 0.0)
        if draw < threshold:
            self.counters.count_fault(endpoint, "429")
            retry_after = settings.get("retry_after_s", 1)
            await _answer(
                send,
                429,
                {
                    "error_code": "REQUEST_LIMIT_EXCEEDED",
                    "message": "Too many requests (injected).",
                },
                {"retry-after": f"{retry_after:g}"},
            )
            record(429)
            return
        threshold += settings.get("rate_404", 0.0)
        if draw < threshold:
            self.counters.count_fault(endpoint, "404")
            await _answer(
                send,
                404,
                {"error_code": "ENDPOINT_NOT_FOUND", "message": "No API found for this path."},
                {},
            )
            record(404)
            return
        threshold += settings.get("rate_5xx", 0.0)
        if draw < threshold:
            code = int(settings.get("status_5xx", 503))
            self.counters.count_fault(endpoint, str(code))
            await _answer(
                send,
                code,
                {"error_code": "TEMPORARILY_UNAVAILABLE", "message": "Injected server error."},
                {"retry-after": "1"} if code == 503 else {},
            )
            record(code)
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
                if settings.get("answer_latency_ms"):
                    await asyncio.sleep(settings["answer_latency_ms"] / 1000)
            if not lost:
                await send(message)

        await self.app(scope, receive, watch)
        if lost:
            self.counters.count_fault(endpoint, "response_lost")
            record(f"lost:{status[0] if status else '?'}")
            await _drop(send)
            return
        record(status[0] if status else "?")

    async def _held(self, scope: Scope, send: Send) -> None:
        """A request during an outage: no answer until it is over, then a closed connection
        (what a caller sees from a dead load balancer)."""
        path: str = scope["path"]
        api = not path.startswith(PAGE_PREFIXES)
        endpoint = endpoint_key(path)
        if api:
            self.counters.count_request(endpoint)
            self.counters.count_fault(endpoint, "outage")
        await self.outage.hold()
        if api:
            self.counters.count_response(endpoint, "outage")
            self.log.add(
                scope["method"], path, scope.get("query_string", b"").decode("latin-1"), "outage"
            )
        await _drop(send)


async def _answer(send: Send, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


async def _drop(send: Send) -> None:
    """Close the TCP connection without a byte of answer. uvicorn's `send` is a bound
    method of the request cycle, which holds the transport; elsewhere, start an answer
    and never finish it, which makes the server abort the connection."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is not None:
        transport.close()
        await asyncio.sleep(0)  # let the server see the connection is gone
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1")]}
    )
