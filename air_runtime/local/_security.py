"""Safe defaults of the local workspace: its token, private files, the `Host` allow-list,
request size limits and strict JSON.

The workspace runs arbitrary commands for whoever holds its token, so it is guarded like a
real service even on a laptop: a random token kept in a private file (never a well-known
default, never on a command line), loopback only unless asked, constant-time token
comparison, and answers in the platform's error shape for anything malformed.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from pathlib import Path
from typing import Any

from air_runtime._loopback import is_loopback_name as is_loopback
from air_runtime.local._errors import ApiError

TOKEN_FILE = "token"
TOKEN_ENV = "AIRO_WORKSPACE_TOKEN"
MAX_JSON_DEPTH = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Bodies of these paths are file contents, bounded by `max_upload_bytes` instead.
UPLOAD_PREFIXES = (
    "/api/2.0/workspace-files/import-file/",
    "/api/2.0/fs/files/",
    "/api/2.0/workspace/import",
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# --- private files ------------------------------------------------------------------------


def private_dir(path: Path) -> Path:
    """Create `path` (and each missing parent, all 0700) and make it 0700."""
    missing = []
    current = path
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        with _suppress_file_exists():
            folder.mkdir(mode=0o700)
        os.chmod(folder, 0o700)
    if not missing:
        os.chmod(path, 0o700)
    return path


class _suppress_file_exists:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is not None and issubclass(exc_type, FileExistsError)


def touch_private(path: Path) -> None:
    """Create `path` as an empty 0600 file when missing; make an existing one 0600."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def write_private(path: Path, data: str | bytes) -> None:
    """Write `path` atomically with mode 0600 (it is never readable by others, not even
    for a moment)."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.uploading")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
        os.replace(tmp, path)
    except BaseException:
        with _suppress_os_error():
            tmp.unlink()
        raise


def open_private_append(path: Path) -> Any:
    """A text file opened for appending, created 0600."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8")


def restrict_tree(root: Path) -> None:
    """Remove group/other permission bits below `root` (unpacked archives, copies)."""
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            target = os.path.join(folder, name)
            with _suppress_os_error():
                mode = os.lstat(target).st_mode
                if not os.path.islink(target) and mode & 0o077:
                    os.chmod(target, mode & 0o700)


class _suppress_os_error:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is not None and issubclass(exc_type, OSError)


# --- tokens -------------------------------------------------------------------------------


def new_token() -> str:
    return "airo-" + secrets.token_urlsafe(32)


def read_token_file(path: Path) -> str:
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError(f"the token file {path} is empty")
    return token


def ensure_token(data_dir: Path) -> tuple[str, Path]:
    """The workspace's own token: `<data dir>/token`, created (random, 0600) when missing."""
    private_dir(data_dir)
    path = data_dir / TOKEN_FILE
    try:
        return read_token_file(path), path
    except (FileNotFoundError, ValueError):
        pass
    token = new_token()
    write_private(path, token + "\n")
    return token, path


def token_matches(token: str | None, candidates: Iterable[str]) -> bool:
    """Constant-time comparison against every candidate (no early exit on a match)."""
    if token is None:
        return False
    given = token.encode()
    found = False
    for candidate in candidates:
        found |= hmac.compare_digest(given, candidate.encode())
    return found


# --- hosts --------------------------------------------------------------------------------


def header_host(value: str) -> str:
    """The name of a `Host` header value, without its port."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def host_allowed(value: str | None, extra: Iterable[str]) -> bool:
    if not value:
        return False
    name = header_host(value)
    if not name:
        return False
    if is_loopback(name):
        return True
    return any(name == header_host(e) for e in extra if e and e not in ("0.0.0.0", "::"))


# --- JSON ---------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > 19:
        raise ValueError("integer out of range")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("integer out of range")
    return value


def _parse_float(text: str) -> float:
    if len(text) > 64:
        raise ValueError("number too long")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number out of range")
    return value


def _depth_ok(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > limit:
                return False
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            if depth > limit:
                return False
            stack.extend((v, depth + 1) for v in item)
    return True


def malformed(message: str) -> ApiError:
    # The platform's answer to a body it cannot parse (HTTP 400, MALFORMED_REQUEST).
    return ApiError(400, "MALFORMED_REQUEST", message)


def parse_json(raw: bytes) -> Any:
    """Strict JSON: no NaN/Infinity, integers within int64, floats finite, nesting at most
    MAX_JSON_DEPTH; anything else is a 400 MALFORMED_REQUEST, never a 500."""
    try:
        text = raw.decode("utf-8")
        body = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_parse_float,
        )
    except RecursionError:
        raise malformed("The request body is nested too deeply.") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise malformed(f"Invalid JSON given in the body of the request: {exc}") from None
    if not _depth_ok(body, MAX_JSON_DEPTH):
        raise malformed(f"The request body is nested deeper than {MAX_JSON_DEPTH} levels.")
    return body


def check_int64(value: int, name: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise ApiError(
            400, "INVALID_PARAMETER_VALUE", f"{name} is out of range (a 64-bit integer)."
        )
    return value


# --- the guard in front of everything -----------------------------------------------------


async def _answer(send: Send, status: int, error_code: str, message: str) -> None:
    data = json.dumps({"error_code": error_code, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _hung_up(data: bytes) -> Receive:
    messages: list[Message] = [
        {"type": "http.request", "body": data, "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Message:
        return messages.pop(0) if len(messages) > 1 else messages[0]

    return receive


class RequestGuard:
    """Outermost ASGI layer: refuses a `Host` header that is not allowed (DNS rebinding)
    and bodies over the size limits (413), before any handler sees the request. The body
    is read here, so a chunked upload without Content-Length is bounded too."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: Callable[[], Iterable[str]],
        max_request_bytes: int,
        max_upload_bytes: int,
    ) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.max_request_bytes = max_request_bytes
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not host_allowed(headers.get("host"), self.allowed_hosts()):
            await _answer(
                send,
                403,
                "PERMISSION_DENIED",
                "The Host header names a host this workspace does not serve.",
            )
            return
        path: str = scope["path"]
        upload = path.startswith(UPLOAD_PREFIXES)
        limit = self.max_upload_bytes if upload else self.max_request_bytes
        declared = headers.get("content-length")
        too_large = f"The request body exceeds the {limit} byte limit of this workspace."
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await _answer(send, 400, "MALFORMED_REQUEST", "Invalid Content-Length.")
                return
            if size > limit:
                await _answer(send, 413, "REQUEST_ENTITY_TOO_LARGE", too_large)
                return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                # The caller hung up before its body arrived: the app sees the same.
                await self.app(scope, _hung_up(b"".join(chunks)), send)
                return
            body = message.get("body", b"")
            total += len(body)
            if total > limit:
                await _answer(send, 413, "REQUEST_ENTITY_TOO_LARGE", too_large)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        data = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
