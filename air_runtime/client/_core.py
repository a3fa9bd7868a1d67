"""The request/response core shared by ``AirClient`` and ``AsyncAirClient``.

Every operation is written once, as a generator ("flow") that yields the I/O it needs as
small step objects (send this request, sleep, fetch auth headers, run these sub-flows
concurrently, run this blocking function) and receives the results. The sync and async
clients are two drivers of the same flows, so building requests, classifying answers,
retrying and every multi-step operation exist in exactly one place (like httpx's auth flows).
"""

from __future__ import annotations

import email.utils
import logging
import random
import ssl
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import httpx

from .._auth import Credentials
from .._errors import (
    AuthError,
    CapacityError,
    ConfigurationError,
    InvalidResponse,
    NotFound,
    PlatformError,
    RateLimited,
    retryable_status,
)
from .._loopback import is_loopback_name
from .._redaction import Redactor, credential_secrets

logger = logging.getLogger("air_runtime.client")

T = TypeVar("T")


# --- steps a flow yields; the drivers in _client.py (AirClient, AsyncAirClient) perform them -----------------


@dataclass(slots=True)
class Transmit:
    """Send ``request`` once; the driver answers with the read ``httpx.Response``."""

    request: httpx.Request


@dataclass(slots=True)
class Sleep:
    """Pause for ``seconds``, or until ``wake`` is set (``EndSignal``: a ``threading.Event``
    for the sync driver, an ``asyncio.Event`` for the async one)."""

    seconds: float
    wake: EndSignal | None = None


class EndSignal(Protocol):
    """What a caller that already watches a run sets once it has seen the run end."""

    def is_set(self) -> bool: ...


class AuthHeaders:
    """Ask the credentials for their current headers."""


class RefreshAuth:
    """Ask the credentials for a new token (after a 401)."""


@dataclass(slots=True)
class Gather:
    """Run sub-flows concurrently (at most ``limit`` at once); answer their results in order.
    The first error is raised after all have finished, so no upload is left half-done."""

    flows: Sequence[Flow[Any]]
    limit: int


@dataclass(slots=True)
class Offload:
    """Run a blocking function (tar building, a credential helper) off the event loop."""

    function: Callable[[], Any]


@dataclass(slots=True)
class Emit:
    """Hand an item to the caller of an iterating operation (log records)."""

    item: Any


IMAGE_STATES = ("PENDING", "IMPORTING", "AVAILABLE", "FAILED")
AUTH_HEADERS = AuthHeaders()
REFRESH_AUTH = RefreshAuth()

Step = Transmit | Sleep | AuthHeaders | RefreshAuth | Gather | Offload | Emit
Flow = Generator[Step, Any, T]


# --- results ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Identity:
    user_name: str
    user_id: str
    org_id: str | None = None


@dataclass(frozen=True, slots=True)
class SubmittedRun:
    run_id: int
    run_page_url: str
    idempotency_token: str


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One log line of one node; ``task_key`` and ``attempt`` (the platform's 0-based
    ``attempt_number``) are set when it was read from a whole run."""

    time_unix_nano: int
    body: str
    node_index: int
    task_key: str = ""
    attempt: int = 0

    @property
    def label(self) -> str:
        """Where the line came from, for a log that interleaves streams:
        ``train node 1 attempt 1``: attempts counted from 0, as the platform and the CLI count
        them (``databricks air logs --retry N``, ``logs/attempt_N/``)."""
        where = f"node {self.node_index} attempt {self.attempt}"
        return f"{self.task_key} {where}" if self.task_key else where


@dataclass(frozen=True, slots=True)
class ImageRegistration:
    docker_image_url: str
    state: str
    status_message: str = ""
    manifest_sha256: str | None = None

    @classmethod
    def from_api(cls, body: dict[str, Any], url: str) -> ImageRegistration:
        if isinstance(body.get("image"), dict):
            body = body["image"]
        state = str(body.get("state") or "PENDING").upper()
        return cls(
            docker_image_url=str(body.get("docker_image_url") or url),
            state=state if state in IMAGE_STATES else "PENDING",
            status_message=str(body.get("status_message") or ""),
            manifest_sha256=body.get("manifest_sha256") or None,
        )

    @property
    def is_available(self) -> bool:
        return self.state == "AVAILABLE"

    @property
    def digest(self) -> str | None:
        """The manifest digest in Docker's form, ``sha256:<hex>`` (``image@<digest>`` pins
        it); the API's ``manifest_sha256`` is the bare hex (register_image.go reports it as
        is). None until the platform knows it."""
        sha = self.manifest_sha256
        if not sha:
            return None
        return sha if sha.startswith("sha256:") else f"sha256:{sha}"


# --- retries ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, bounded in attempts and in total time.

    ``Retry-After`` on 429/503 is a floor for the wait; when it would push the total past
    ``max_total_s`` the request fails at once with ``RateLimited`` instead of waiting.
    """

    max_attempts: int = 10
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    max_total_s: float = 300.0
    # Retry-After values above this are treated as "give up now".
    max_retry_after_s: float = 120.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        cap = min(self.max_backoff_s, self.initial_backoff_s * (2**attempt))
        return rng.uniform(0, cap)

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        jittered = self.backoff(attempt, rng)
        return jittered if retry_after is None else max(retry_after, jittered)

    def allows(self, attempts_made: int, elapsed_s: float, next_delay_s: float) -> bool:
        return attempts_made < self.max_attempts and elapsed_s + next_delay_s <= self.max_total_s


NO_RETRY = RetryPolicy(max_attempts=1)


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _error_body(response: httpx.Response) -> tuple[str | None, str]:
    try:
        body = response.json()
    except ValueError:
        return None, (response.text or "")[:300]
    if not isinstance(body, dict):
        return None, ""
    code = body.get("error_code")
    message = body.get("message") or body.get("error") or ""
    return (code if isinstance(code, str) else None), str(message)[:1000]


def _is_tls_failure(exc: BaseException) -> bool:
    """Whether a transport error came from the TLS handshake (an ``ssl.SSLError`` among its
    causes), not from the connection itself."""
    seen: BaseException | None = exc
    for _ in range(8):  # httpx -> httpcore -> ssl, a few levels at most
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _snippet(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def decode_answer(response: httpx.Response, what: str) -> Any:
    """The JSON body of a successful answer (``{}`` when empty), or ``InvalidResponse``:
    a body shorter than its ``Content-Length`` or cut off mid-document is ``truncated``
    (retryable, like a dropped connection); any other non-JSON body is not."""
    status = response.status_code
    content = response.content
    declared = response.headers.get("Content-Length", "")
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if (
        declared.isdigit()
        and encoding in ("", "identity")
        and response.request.method != "HEAD"
        and len(content) < int(declared)
    ):
        raise InvalidResponse(
            f"{what}: HTTP {status} answer cut short ({len(content)} of {declared} bytes)",
            status_code=status,
            truncated=True,
        )
    if not content:
        return {}
    try:
        return response.json()
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        content_type = response.headers.get("Content-Type") or "no content type"
        text = content.decode("utf-8", "replace")
        position = getattr(exc, "pos", None)
        # Cut off mid-document: the parser ran out of input (inside a string, or at the end).
        cut = position is not None and (
            str(getattr(exc, "msg", "")).startswith("Unterminated string")
            or position >= len(text.rstrip())
        )
        if "json" in content_type.lower() and cut:
            raise InvalidResponse(
                f"{what}: HTTP {status} answer ends in the middle of its JSON "
                f"({len(content)} bytes): the connection was cut",
                status_code=status,
                truncated=True,
            ) from None
        raise InvalidResponse(
            f"{what}: HTTP {status} answer is not JSON ({content_type}, {len(content)} bytes, "
            f"starting {_snippet(text)!r}); is the host the workspace URL, and no proxy or "
            "login page in between?",
            status_code=status,
        ) from None


_CAPACITY_CODES = frozenset({"INSUFFICIENT_CAPACITY", "CAPACITY_UNAVAILABLE", "NO_CAPACITY"})


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("air-orchestration")
    except PackageNotFoundError:
        return "0.0.0"


class ClientCore:
    """Host, credentials, retries and the one ``call`` flow every request goes through."""

    def __init__(
        self,
        host: str,
        credentials: Credentials,
        *,
        timeout: float,
        retry: RetryPolicy | None,
        user_agent_extra: str | None,
        max_concurrent_uploads: int,
    ) -> None:
        self.host = host
        self.credentials = credentials
        self.retry = retry or RetryPolicy()
        self.timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        agent = f"air-orchestration/{_package_version()}"
        self.user_agent = f"{agent} {user_agent_extra}" if user_agent_extra else agent
        self.max_concurrent_uploads = max(1, max_concurrent_uploads)
        self.rng = random.Random()
        self.identity: Identity | None = None
        # What asking for the identity ahead (``prefetch_identity``) ended with, raised by the
        # next ``whoami`` instead of asking again: a refused credential costs one request.
        self.identity_error: Exception | None = None
        # Every credential value this client holds or sends, for error messages and for
        # orchestrators that build their own redactor on top (``Redactor.with_values``).
        self.redactor = Redactor(credential_secrets(credentials))
        self._last_authorization: str | None = None
        self._plain_http_checked = False

    def note_auth(self, auth: dict[str, str]) -> None:
        """Remember the token being sent (redacted from now on) and warn, once per client,
        when a token is about to travel over plain http to a host that is not this machine."""
        authorization = auth.get("Authorization")
        if not authorization or authorization == self._last_authorization:
            return
        self._last_authorization = authorization
        self.redactor.add(authorization.partition(" ")[2] or authorization)
        if self._plain_http_checked:
            return
        self._plain_http_checked = True
        parts = urlsplit(self.host)
        if parts.scheme == "http" and not is_loopback_name(parts.hostname):
            logger.warning(
                "sending a token over plain http to %s: anyone on the network path can read "
                "it; use https:// (plain http is only safe for a workspace on this machine)",
                parts.hostname,
            )

    def url(self, path: str) -> str:
        return f"{self.host}{path}"

    def answers_plain_http(self) -> Flow[bool]:
        """Whether the https host's port answers plain HTTP (after a failed TLS handshake):
        a host given without scheme (``https://`` assumed) pointing at a plain-HTTP server,
        such as the local workspace. Retrying cannot help, so the caller fails at once.
        The probe carries no credentials."""
        parts = urlsplit(self.host)
        if parts.scheme != "https":
            return False
        netloc = parts.netloc.rpartition("@")[2]
        probe = httpx.Request("GET", f"http://{netloc}/", headers={"User-Agent": self.user_agent})
        try:
            yield Transmit(probe)
        except httpx.TransportError:
            return False
        return True

    def plain_http_message(self) -> str:
        parts = urlsplit(self.host)
        netloc = parts.netloc.rpartition("@")[2]  # never a user:password@ part
        plain = f"http://{netloc}"
        message = (
            f"host {netloc} answered plain HTTP to the TLS handshake (the client used "
            "https://, the default for a host without scheme): "
        )
        if is_loopback_name(parts.hostname):
            return message + f"use {plain} as the host"
        return message + (
            f"use {plain} as the host only if this server is meant to be reached without TLS "
            "(the token then travels in clear text), else the workspace's https:// address"
        )

    def build_request(
        self,
        method: str,
        path: str,
        auth: dict[str, str],
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
    ) -> httpx.Request:
        headers = {"User-Agent": self.user_agent, "Accept": "application/json", **auth}
        if content is not None:
            headers["Content-Type"] = "application/octet-stream"
            return httpx.Request(
                method, self.url(path), params=params, content=content, headers=headers
            )
        return httpx.Request(method, self.url(path), params=params, json=json, headers=headers)

    def error_for(self, response: httpx.Response, method: str, path: str) -> Exception:
        """The typed error for an error answer. Messages carry the server's error code and
        message (never request bodies or headers)."""
        status = response.status_code
        code, message = _error_body(response)
        what = f"{method} {path} on {self.host}: HTTP {status}"
        if code:
            what += f" {code}"
        if message:
            what += f": {message}"
        if code == "FEATURE_DISABLED":
            # A service not rolled out to this workspace, whatever status it comes with (a
            # 403 among them): callers name the feature (pools.go poolAPIError).
            return PlatformError(what, status_code=status, error_code=code)
        if status == 401:
            return AuthError(
                f"{self.host} refused the credentials from {self.credentials.source} "
                f"(HTTP 401{' ' + code if code else ''}). The token is missing, expired or "
                "revoked: renew it or fix the connection."
            )
        if status == 403:
            return AuthError(
                f"{self.host} denied access for the credentials from "
                f"{self.credentials.source} (HTTP 403{' ' + code if code else ''}"
                f"{': ' + message if message else ''})."
            )
        if status == 404 or code in ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND"):
            return NotFound(what)
        if status == 429 or (status == 503 and response.headers.get("Retry-After")):
            return RateLimited(what, status_code=status, error_code=code)
        if code in _CAPACITY_CODES or (status != 429 and "capacity" in message.lower()):
            return CapacityError(what, status_code=status, error_code=code)
        return PlatformError(what, status_code=status, error_code=code)

    def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        retry: bool = True,
        raw: bool = False,
        policy: RetryPolicy | None = None,
        binary: bool = False,
        timeout_s: float | None = None,
    ) -> Flow[Any]:
        """One API call with auth, retries and typed errors; returns the decoded JSON body
        (``{}`` when empty) or the ``httpx.Response`` when ``raw``.

        ``timeout_s`` bounds this call's connect, write and read waits instead of the
        client's timeout.

        ``retry=False`` is for requests that must not be repeated (a submit without an
        idempotency token); connection failures before sending are retried either way.
        ``binary``: the answer is a file's content, not JSON; the response is returned.
        """
        policy = policy or self.retry
        started = time.monotonic()
        attempts = 0
        refreshed = False
        what = f"{method} {path} on {self.host}"
        while True:
            auth = yield AUTH_HEADERS
            self.note_auth(auth)
            request = self.build_request(
                method, path, auth, params=params, json=json, content=content
            )
            if timeout_s is not None:
                request.extensions["timeout"] = httpx.Timeout(timeout_s).as_dict()
            attempts += 1
            retry_after: float | None = None
            try:
                response: httpx.Response = yield Transmit(request)
            except httpx.TransportError as exc:
                if _is_tls_failure(exc) and (yield from self.answers_plain_http()):
                    raise ConfigurationError(self.plain_http_message()) from None
                error: Exception = PlatformError(
                    self.redactor(
                        f"{method} {path}: could not reach {self.host} "
                        f"({type(exc).__name__}: {exc})"
                    )
                )
                may_retry = retry or isinstance(exc, httpx.ConnectError)
            else:
                status = response.status_code
                if 300 <= status < 400:
                    # Never followed: a redirect would carry the token to another URL, and
                    # the API does not redirect (a login page, a proxy or http->https does).
                    raise InvalidResponse(
                        self.redactor(
                            f"{what}: HTTP {status} redirect to "
                            f"{_location(response.headers.get('Location'))}; the client does not "
                            "follow redirects: configure the workspace URL itself (https://...)"
                        ),
                        status_code=status,
                    )
                if status < 400:
                    logger.debug("%s %s -> %d", method, path, status)
                    if binary:
                        return response
                    try:
                        body = decode_answer(response, what)
                    except InvalidResponse as invalid:
                        if not invalid.truncated:
                            raise InvalidResponse(
                                self.redactor(str(invalid)), status_code=status
                            ) from None
                        # Cut short in transit: retried like a dropped connection.
                        error, may_retry = invalid, retry
                    else:
                        return response if raw else body
                else:
                    if status == 401 and self.credentials.refreshable and not refreshed:
                        # An OAuth token can expire between our expiry check and the server's.
                        refreshed = True
                        logger.info(
                            "%s: 401 from %s, renewing the OAuth token once", path, self.host
                        )
                        yield REFRESH_AUTH
                        continue
                    error = self.error_for(response, method, path)
                    # Retried here by its status only: a 4xx capacity refusal is retryable
                    # for the task (minutes later), not within this call's few seconds.
                    if not retryable_status(status):
                        logger.debug("%s %s -> %d (not retried)", method, path, status)
                        raise error
                    may_retry = retry
                    retry_after = parse_retry_after(response.headers.get("Retry-After"))
            elapsed = time.monotonic() - started
            if retry_after is not None and retry_after > policy.max_retry_after_s:
                raise error
            delay = policy.delay(attempts - 1, retry_after, self.rng)
            if not may_retry or not policy.allows(attempts, elapsed, delay):
                raise error
            logger.info(
                "%s %s failed (%s); retry %d in %.2fs%s",
                method,
                path,
                type(error).__name__ if retry_after is None else "rate limited",
                attempts,
                delay,
                f" (Retry-After {retry_after:g}s)" if retry_after is not None else "",
            )
            yield Sleep(delay)


def _location(value: str | None) -> str:
    """Where a redirect points, without its query (which may carry codes or tokens)."""
    if not value:
        return "(no Location)"
    parts = urlsplit(value)
    host = parts.netloc.rpartition("@")[2]  # never a user:password@ part
    return f"{parts.scheme}://{host}{parts.path}" if host else parts.path


def gather(flows: Sequence[Flow[Any]], limit: int) -> Flow[list[Any]]:
    """``results = yield from gather(...)``: run flows concurrently, answer results in order."""
    if not flows:
        return []
    if len(flows) == 1:
        return [(yield from flows[0])]
    results: list[Any] = yield Gather(flows, limit)
    return results


def offload(function: Callable[[], T]) -> Flow[T]:
    result: T = yield Offload(function)
    return result
