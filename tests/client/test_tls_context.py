"""The client's TLS verification: one verifying context per process, none for a plain-HTTP
host that no proxy carries."""

from __future__ import annotations

import ssl

import pytest

from air_runtime import AirClient
from air_runtime.client._client import verify_for


def test_an_https_host_verifies_with_one_context_per_process() -> None:
    first = verify_for("https://example.cloud.databricks.com")
    assert isinstance(first, ssl.SSLContext)
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    assert verify_for("https://other.cloud.databricks.com") is first


def test_a_plain_http_host_loads_no_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert verify_for("http://127.0.0.1:8765") is False


def test_a_proxy_from_the_environment_keeps_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "https://proxy.example:3128")
    context = verify_for("http://127.0.0.1:8765")
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_clients_of_an_https_host_share_the_context() -> None:
    with (
        AirClient("https://a.cloud.databricks.com", "dapi-x") as one,
        AirClient("https://b.cloud.databricks.com", "dapi-y") as two,
    ):
        pool_one = one._http._transport._pool  # type: ignore[attr-defined]
        pool_two = two._http._transport._pool  # type: ignore[attr-defined]
        assert pool_one._ssl_context is pool_two._ssl_context
