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
import math
import random
import socket
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
    WorkspaceUnreachable,
    retryable_status,
)
from .._loopback import is_loopback_name
from .._redaction import Redactor, credential_secrets
from .._request_budget import request_extensions

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


def stream_name(task_key: str, attempt: int, node: int) -> str:
    """A node stream's name (``LogRecord.stream``)."""
    return f"{task_key}/{attempt}/{node}"


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One log line of one node; ``task_key``, ``attempt`` (the task's task runs counted
    from 0, platform retries and repairs alike: ``_runs.task_tries``), ``repair`` (0: the
    original run, N: its Nth repair) and ``task_run_id`` are set when it was read from a
    whole run."""

    time_unix_nano: int
    body: str
    node_index: int
    task_key: str = ""
    attempt: int = 0
    repair: int = 0
    task_run_id: int | None = None

    @property
    def stream(self) -> str:
        """The node stream it belongs to, ``<task>/<attempt>/<node>``: what a log that shows
        lines live remembers per stream (the newest time shown), so that it resumes after."""
        return stream_name(self.task_key, self.attempt, self.node_index)

    @property
    def label(self) -> str:
        """Where the line came from, for a log that interleaves streams:
        ``train node 1 attempt 1``: attempts counted from 0, as the platform and the CLI count
        them (``databricks air logs --retry N``, ``logs/attempt_N/``); a repair's task run
        counts on and says so: ``train node 0 attempt 2 (repair 1)``."""
        where = f"node {self.node_index} attempt {self.attempt}"
        if self.repair:
            where += f" (repair {self.repair})"
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


# --- a host never heard from --------------------------------------------------------------

# The hosts that gave this process any HTTP answer, whatever its status. A connection failure
# to one of them is an outage, waited out under the retry policy; to any other host it is most
# likely a wrong host, and is told within seconds (``FirstContact``). Per process, not per
# client: every client, watcher and credential of a process shares what it learnt.
_answered_hosts: set[str] = set()


def has_answered(host: str) -> bool:
    return host in _answered_hosts


def mark_answered(host: str) -> None:
    _answered_hosts.add(host)


@dataclass(frozen=True)
class FirstContact:
    """How long a request to a host that has not answered this process yet may take before
    the client says it cannot reach it (``WorkspaceUnreachable``).

    A TCP connect and TLS handshake to a workspace take well under a second: ``connect_s``
    bounds each, and a refused, unresolvable or unconnectable host is tried
    ``connect_attempts`` times, ``retry_delay_s`` apart (a resolver hiccup, a workspace a few
    seconds from listening). The first request of a process is a small read (the identity,
    a run's state, a page of runs) that a workspace answers in well under a second, so
    ``read_s`` without a byte of answer is several times what a slow one takes; a server that is
    only slow on that request is told from one that never answers (a black hole: it accepts
    the connection and says nothing) by a request for the host's root page, without
    credentials, within ``probe_s``: any answer there makes it a host that answers, and the
    request goes on under the retry policy. Together with the databricks-sdk's bounded
    discovery probe (``air_runtime._auth``), every entry point names a wrong host within about
    ten seconds.
    """

    connect_s: float = 3.0
    read_s: float = 3.0
    probe_s: float = 1.5
    connect_attempts: int = 2
    retry_delay_s: float = 0.5

    def bound(self, timeout: httpx.Timeout) -> httpx.Timeout:
        """``timeout`` with its connect and read waits cut to this first contact's."""
        return httpx.Timeout(
            connect=_at_most(timeout.connect, self.connect_s),
            read=_at_most(timeout.read, self.read_s),
            write=timeout.write,
            pool=timeout.pool,
        )


FIRST_CONTACT = FirstContact()


def _at_most(seconds: float | None, limit: float) -> float:
    return min(math.inf if seconds is None else seconds, limit)


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from (httpx -> httpcore -> the socket's error)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 8 and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def unreachable_cause(exc: httpx.TransportError) -> str | None:
    """Why a request never reached a host, as ``WorkspaceUnreachable.cause``; None when the
    host took the request (it closed the connection, or answered garbage): something
    listens there, and the retry policy decides."""
    if isinstance(exc, httpx.ConnectTimeout):
        return "connect timeout"
    if isinstance(exc, httpx.ReadTimeout):
        return "no answer"
    if not isinstance(exc, httpx.ConnectError):
        return None
    chain = _causes(exc)
    if any(isinstance(e, ssl.SSLError) for e in chain):
        return "tls"
    if any(isinstance(e, socket.gaierror) for e in chain):
        return "dns"
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "refused"
    text = str(exc).lower()
    if "name or service not known" in text or "nodename nor servname" in text:
        return "dns"
    if "connection refused" in text:
        return "refused"
    return "connection"


# Where a host comes from, for the fix when none is known: every place a user can set it.
_HOST_SETTINGS = (
    "the workspace host (--host, $DATABRICKS_HOST, the ~/.databrickscfg profile, the Airflow "
    "connection's host field or the AirWorkspace resource's host)"
)


def unreachable_error(
    host: str,
    cause: str,
    exc: BaseException,
    *,
    host_source: str | None,
    contact: FirstContact = FIRST_CONTACT,
    during: str | None = None,
) -> WorkspaceUnreachable:
    """The one message every entry point shows for a host it cannot reach: the host, the
    cause, and the fix (where the host was set). ``during``: what was being asked when it
    was not the first request itself (credentials fetching a token)."""
    parts = urlsplit(host)
    name = parts.hostname or host
    port = parts.port or (443 if parts.scheme == "https" else 80)
    check = f"check {host_source or _HOST_SETTINGS}"
    if cause == "dns":
        why = f"the name {name} is not found (DNS)"
        fix = f"{check}: it is the workspace URL, such as https://<workspace>.cloud.databricks.com"
    elif cause == "refused":
        why = f"connection refused: nothing listens on {name} port {port}"
        fix = f"{check}, and its port"
        if is_loopback_name(name):
            fix += " (a local workspace must be running there: airo workspace --port N)"
    elif cause == "tls":
        reason = next((str(e) for e in _causes(exc) if isinstance(e, ssl.SSLError)), str(exc))
        why = f"the TLS handshake failed ({_snippet(reason, 160)})"
        fix = f"{check}; behind a proxy that inspects TLS, point SSL_CERT_FILE at its CA bundle"
    elif cause == "connect timeout":
        handshake = " and TLS handshake" if parts.scheme == "https" else ""
        why = f"no connection{handshake} to {name} port {port} within {contact.connect_s:g} s"
        fix = f"{check}; a firewall or a proxy may also stop the connection"
    elif cause == "no answer" and during:
        why = f"{name} port {port} accepted the connection but sent no answer to {during}"
        fix = f"{check}: it must be the workspace URL, not another service"
    elif cause == "no answer":
        why = (
            f"{name} port {port} accepted the connection but sent no answer within "
            f"{contact.read_s:g} s, nor to a request for its root page"
        )
        fix = f"{check}: it must be the workspace URL, not another service"
    else:
        why = f"{type(exc).__name__}: {_snippet(str(exc), 160)}"
        fix = check
    return WorkspaceUnreachable(
        f"cannot reach the workspace {host}: {why}. Fix: {fix}.", host=host, cause=cause
    )


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
        host_source: str | None = None,
        first_contact: FirstContact = FIRST_CONTACT,
    ) -> None:
        self.host = host
        # Where the host was set (``--host``, a connection's host field, ...), for the fix
        # of a host that cannot be reached; None: every place it can be set is named.
        self.host_source = host_source
        self.first_contact = first_contact
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
        # A plain-HTTP server answers at once; a host that took the TLS connection and then
        # fell silent must not hold the error for the client's whole timeout.
        probe.extensions["timeout"] = httpx.Timeout(self.first_contact.probe_s).as_dict()
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

    def answers_at_all(self) -> Flow[bool]:
        """Whether the host answers a request for its root page (without credentials)
        within ``FirstContact.probe_s``: after a first request got no answer in time, this
        tells a slow answer (the host answers; the request goes on under the retry policy)
        from a black hole."""
        probe = httpx.Request("GET", self.url("/"), headers={"User-Agent": self.user_agent})
        probe.extensions["timeout"] = httpx.Timeout(self.first_contact.probe_s).as_dict()
        try:
            yield Transmit(probe)
        except httpx.TransportError:
            return False
        mark_answered(self.host)
        return True

    def unreachable(
        self, cause: str, exc: BaseException, *, during: str | None = None
    ) -> WorkspaceUnreachable:
        error = unreachable_error(
            self.host,
            cause,
            exc,
            host_source=self.host_source,
            contact=self.first_contact,
            during=during,
        )
        return WorkspaceUnreachable(self.redactor(str(error)), host=error.host, cause=cause)

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
        # A watcher's read carries its budget and lane to the transport that admits it.
        extensions = request_extensions()
        if content is not None:
            headers["Content-Type"] = "application/octet-stream"
            return httpx.Request(
                method,
                self.url(path),
                params=params,
                content=content,
                headers=headers,
                extensions=extensions,
            )
        return httpx.Request(
            method, self.url(path), params=params, json=json, headers=headers, extensions=extensions
        )

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
        unreached = 0  # connection attempts that failed while the host never answered
        refreshed = False
        what = f"{method} {path} on {self.host}"
        while True:
            first_contact = not has_answered(self.host)
            try:
                auth = yield AUTH_HEADERS
            except httpx.TransportError as exc:
                # Credentials that ask the workspace for a token (OAuth) before the first
                # request: a host they cannot reach is told the same way.
                cause = unreachable_cause(exc)
                if first_contact and not has_answered(self.host) and cause is not None:
                    raise self.unreachable(cause, exc, during="the token request") from None
                raise
            self.note_auth(auth)
            request = self.build_request(
                method, path, auth, params=params, json=json, content=content
            )
            timeout = self.timeout if timeout_s is None else httpx.Timeout(timeout_s)
            if first_contact:
                timeout = self.first_contact.bound(timeout)
            if first_contact or timeout_s is not None:
                request.extensions["timeout"] = timeout.as_dict()
            attempts += 1
            retry_after: float | None = None
            try:
                response: httpx.Response = yield Transmit(request)
            except httpx.TransportError as exc:
                if _is_tls_failure(exc) and (yield from self.answers_plain_http()):
                    raise ConfigurationError(self.plain_http_message()) from None
                cause = unreachable_cause(exc) if first_contact else None
                # Another request of this process may have heard from the host meanwhile.
                if cause is not None and not has_answered(self.host):
                    unreached += 1
                    if cause in ("tls", "no answer") or unreached >= (
                        self.first_contact.connect_attempts
                    ):
                        # A certificate does not change in a second; a silent host gets one
                        # more chance, a request for its root page.
                        if cause != "no answer" or not (yield from self.answers_at_all()):
                            raise self.unreachable(cause, exc) from None
                    else:
                        logger.info(
                            "%s %s: %s not reached (%s); one more try in %.1fs",
                            method,
                            path,
                            self.host,
                            cause,
                            self.first_contact.retry_delay_s,
                        )
                        yield Sleep(self.first_contact.retry_delay_s)
                        continue
                error: Exception = PlatformError(
                    self.redactor(
                        f"{method} {path}: could not reach {self.host} "
                        f"({type(exc).__name__}: {exc})"
                    )
                )
                may_retry = retry or isinstance(exc, httpx.ConnectError)
            else:
                mark_answered(self.host)
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


def consume(flow: Flow[Any], take: Callable[[Any], bool]) -> Flow[None]:
    """Run an iterating ``flow`` (one that ``Emit``s, as a log read) inside another flow,
    each item it emits handed to ``take``; ``take`` answering False stops the reading (the
    iterating flow is closed). Both clients drive the outer flow as any other."""
    answer: Any = None
    error: Exception | None = None
    while True:
        try:
            step = flow.throw(error) if error is not None else flow.send(answer)
        except StopIteration:
            return
        answer, error = None, None
        if isinstance(step, Emit):
            if not take(step.item):
                flow.close()
                return
            continue
        try:
            answer = yield step
        except Exception as exc:  # the iterating flow sees its own step's failure
            error = exc
