"""A mistyped or unreachable workspace host fails within seconds, naming the host, the cause
and the fix: ``airo`` (with --host and with a profile), the client with a token, and the
databricks-sdk's configuration from async code, which never holds the event loop. A host that
answered before keeps the retry policy (an outage is waited out, not reported as a wrong host).

Every host here is on 127.0.0.1 or under ``.invalid`` (a DNS lookup only)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from unreachable_hosts import (
    KINDS,
    WITHIN_S,
    assert_names_host_and_cause,
    black_hole,
    write_profile,
    wrong_host,
)

from air_runtime import AirClient, AsyncAirClient, PlatformError, RunWatcher, WorkspaceUnreachable
from air_runtime._auth import SdkConfigCredentials, resolve_credentials
from air_runtime.cli._connection import EXIT_ERROR
from air_runtime.client import RetryPolicy

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sdk_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No workspace from the environment or the real home: each test says where it is."""
    for name in list(os.environ):
        if name.startswith(("DATABRICKS_", "AIRO_", "ARM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("kind", KINDS)
def test_the_client_with_a_token_names_a_wrong_host(kind: str, sdk_environment: Path) -> None:
    with wrong_host(kind) as host, AirClient(host, "dapi-token") as client:
        started = time.monotonic()
        with pytest.raises(WorkspaceUnreachable) as raised:
            client.list_runs()
        elapsed = time.monotonic() - started
    assert elapsed < WITHIN_S
    assert raised.value.host == host
    assert raised.value.cause == kind
    assert raised.value.retryable  # a workspace down when a process starts looks the same
    assert_names_host_and_cause(str(raised.value), host, kind)
    assert "dapi-token" not in str(raised.value)


@pytest.mark.parametrize("kind", KINDS)
def test_the_async_client_names_a_wrong_host(kind: str, sdk_environment: Path) -> None:
    async def read() -> WorkspaceUnreachable:
        async with AsyncAirClient(host, "dapi-token") as client:
            with pytest.raises(WorkspaceUnreachable) as raised:
                await client.get_run(1)
            return raised.value

    with wrong_host(kind) as host:
        started = time.monotonic()
        error = asyncio.run(read())
        assert time.monotonic() - started < WITHIN_S
    assert_names_host_and_cause(str(error), host, kind)


def _airo(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "air_runtime.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return done, time.monotonic() - started


@pytest.mark.parametrize("kind", KINDS)
def test_airo_with_host_and_token_names_a_wrong_host(kind: str, sdk_environment: Path) -> None:
    token_file = sdk_environment / "token"
    token_file.write_text("dapi-file-token\n", encoding="utf-8")
    with wrong_host(kind) as host:
        done, elapsed = _airo(
            "list", "--host", host, "--token-file", str(token_file), env=dict(os.environ)
        )
    assert elapsed < WITHIN_S, done.stderr
    assert done.returncode == EXIT_ERROR, done.stderr
    assert_names_host_and_cause(done.stderr, host, kind)
    assert "check --host" in done.stderr
    assert "dapi-file-token" not in done.stdout + done.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_airo_with_a_profile_names_a_wrong_host(kind: str, sdk_environment: Path) -> None:
    """Profile auth goes through the databricks-sdk's configuration, whose discovery probe of
    the host is bounded by ours (it used to hold ``Config()`` for five minutes)."""
    with wrong_host(kind) as host:
        config = write_profile(sdk_environment, host, profile="typo")
        env = {**os.environ, "DATABRICKS_CONFIG_FILE": str(config)}
        done, elapsed = _airo("list", "--profile", "typo", env=env)
    assert elapsed < WITHIN_S, done.stderr
    assert done.returncode == EXIT_ERROR, done.stderr
    assert_names_host_and_cause(done.stderr, host, kind)
    assert f"check the host of profile typo in {config}" in done.stderr
    assert "dapi-profile-token" not in done.stdout + done.stderr


def test_airo_with_databricks_host_names_the_variable(sdk_environment: Path) -> None:
    with black_hole() as host:
        env = {**os.environ, "DATABRICKS_HOST": host, "DATABRICKS_TOKEN": "dapi-env-token"}
        done, elapsed = _airo("list", env=env)
    assert elapsed < WITHIN_S, done.stderr
    assert done.returncode == EXIT_ERROR
    assert_names_host_and_cause(done.stderr, host, "no answer")
    assert "check $DATABRICKS_HOST" in done.stderr


def test_a_slow_first_answer_is_not_a_black_hole(workspace_factory) -> None:
    """A host whose first answer takes longer than the first contact's read wait, but that
    answers a request for its root page, is a host that answers: the request goes on under the
    retry policy and gets its answer."""
    ws = workspace_factory(faults={"jobs/runs/list": {"latency_ms": 3600}})
    with AirClient(ws.host, ws.token) as client:
        runs, _ = client.list_runs()
    assert runs == []


def test_a_host_that_answered_before_keeps_the_retry_policy(workspace_factory, recorder) -> None:
    """An outage of a workspace that answered this process is not a wrong host: every attempt
    of the retry policy is made, and the error is the usual one."""
    ws = workspace_factory()
    transport = recorder
    policy = RetryPolicy(max_attempts=4, initial_backoff_s=0.05, max_backoff_s=0.1)
    with AirClient(ws.host, ws.token, transport=transport, retry=policy) as client:
        client.list_runs()
        ws.stop()
        with pytest.raises(PlatformError) as raised:
            client.list_runs()
    assert not isinstance(raised.value, WorkspaceUnreachable)
    assert "could not reach" in str(raised.value)
    assert len(transport.to("runs/list")) == 1 + policy.max_attempts


def test_sdk_credentials_built_on_an_event_loop_never_hold_it(sdk_environment, monkeypatch):
    """Profile auth for a black-holed host, from async code (a trigger's watcher, an async
    client): the databricks-sdk's configuration (and its discovery probe of the host) is read in
    a thread, so a task ticking on the same loop keeps ticking until the request fails."""
    with black_hole() as host:
        monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(write_profile(sdk_environment, host)))

        async def resolve_and_request() -> tuple[float, WorkspaceUnreachable, object]:
            gaps: list[float] = []
            stop = asyncio.Event()

            async def tick() -> None:
                last = time.monotonic()
                while not stop.is_set():
                    await asyncio.sleep(0.02)
                    now = time.monotonic()
                    gaps.append(now - last)
                    last = now

            ticker = asyncio.create_task(tick())
            try:
                resolved = resolve_credentials(None, None, None)
                watcher = RunWatcher.shared()  # the watcher's own resolution, on the loop
                async with AsyncAirClient() as client:
                    with pytest.raises(WorkspaceUnreachable) as raised:
                        await client.get_run(1)
            finally:
                stop.set()
                await ticker
            await watcher.client.aclose()
            return max(gaps), raised.value, resolved

        started = time.monotonic()
        worst_gap, error, (resolved_host, credentials) = asyncio.run(resolve_and_request())
        elapsed = time.monotonic() - started
    assert elapsed < WITHIN_S
    # The SDK's probe of a black hole alone takes seconds; the loop never waited on it.
    assert worst_gap < 0.5, worst_gap
    assert isinstance(credentials, SdkConfigCredentials)
    assert resolved_host == host
    assert_names_host_and_cause(str(error), host, "no answer")
    assert "check the host of profile DEFAULT in" in str(error)


def test_the_sdk_discovery_probe_is_bounded(sdk_environment) -> None:
    """``Config()`` for a black-holed host returns within seconds (the SDK's default budget
    for its /.well-known/databricks-config probe is 300 s)."""
    with black_hole() as host:
        started = time.monotonic()
        credentials = SdkConfigCredentials.from_environment(host, token="dapi-token")
        elapsed = time.monotonic() - started
    assert elapsed < WITHIN_S
    assert credentials.headers() == {"Authorization": "Bearer dapi-token"}


@pytest.mark.parametrize("kind", KINDS)
def test_an_oauth_token_request_to_a_wrong_host_names_it(kind: str, sdk_environment) -> None:
    """OAuth credentials ask the host for a token before the first request: a host that
    cannot answer it is named the same way, within seconds."""
    from air_runtime import OAuthM2M

    with wrong_host(kind) as host:
        credentials = OAuthM2M(host, "client-id", "client-secret-value")
        started = time.monotonic()
        with (
            AirClient(host, credentials=credentials) as client,
            pytest.raises(WorkspaceUnreachable) as raised,
        ):
            client.list_runs()
        elapsed = time.monotonic() - started
    assert elapsed < WITHIN_S
    message = str(raised.value)
    assert raised.value.cause == kind
    if kind == "no answer":
        assert f"cannot reach the workspace {host}" in message
        assert "sent no answer to the token request" in message, message
    else:
        assert_names_host_and_cause(message, host, kind)
    assert "client-secret-value" not in message


def test_unreachable_cause_reads_the_socket_error() -> None:
    from air_runtime.client._core import unreachable_cause

    refused = httpx.ConnectError("x")
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert unreachable_cause(refused) == "refused"
    assert unreachable_cause(httpx.ReadTimeout("x")) == "no answer"
    assert unreachable_cause(httpx.ConnectTimeout("x")) == "connect timeout"
    # The host took the request and closed the connection: something listens there.
    assert unreachable_cause(httpx.RemoteProtocolError("x")) is None


@contextlib.contextmanager
def _self_signed_tls_server(directory: Path) -> Iterator[str]:
    """A 127.0.0.1 TLS server whose certificate no CA signed: the client's handshake fails."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    stopped = threading.Event()

    def serve() -> None:
        while not stopped.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(5)
            with contextlib.suppress(OSError), context.wrap_socket(connection, server_side=True):
                pass  # the client gives up in the handshake
            connection.close()

    server = threading.Thread(target=serve, name="tls-server", daemon=True)
    server.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stopped.set()
        server.join(timeout=10)
        listener.close()


def test_a_certificate_the_client_does_not_trust_is_named(tmp_path: Path) -> None:
    with _self_signed_tls_server(tmp_path) as host, AirClient(host, "dapi-token") as client:
        started = time.monotonic()
        with pytest.raises(WorkspaceUnreachable) as raised:
            client.list_runs()
        elapsed = time.monotonic() - started
    assert elapsed < WITHIN_S
    assert raised.value.cause == "tls"
    message = str(raised.value)
    assert f"cannot reach the workspace {host}: the TLS handshake failed" in message, message
    assert "certificate verify failed" in message, message
    assert "SSL_CERT_FILE" in message
