"""Current user, bearer tokens (several, revocable) and OAuth M2M client credentials."""

from __future__ import annotations

import time

import httpx
import pytest

from air_runtime.local import start_local_workspace

ME = "/api/2.0/preview/scim/v2/Me"


TOKEN_LIFETIME_S = 3


@pytest.fixture
def workspace(tmp_path):
    ws = start_local_workspace(
        data_dir=tmp_path / "ws",
        token=["first-token", "second-token"],
        oauth_clients={"sp-client": "sp-secret"},
        # Long enough that the first use after the grant is always within it, even on a
        # loaded machine; the expiry test then waits it out.
        oauth_token_lifetime_s=TOKEN_LIFETIME_S,
    )
    yield ws
    ws.stop()


def _me(host: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(host + ME, headers=headers)


def test_current_user_and_org_header(workspace) -> None:
    response = _me(workspace.host, "first-token")
    assert response.status_code == 200
    assert response.json()["userName"] == "local-user@example.com"
    assert response.json()["id"]
    assert response.headers["X-Databricks-Org-Id"] == "1234567890123456"
    assert _me(workspace.host, "second-token").status_code == 200


def test_missing_and_unknown_tokens(workspace) -> None:
    missing = _me(workspace.host, None)
    assert missing.status_code == 401
    assert missing.json()["error_code"] == "UNAUTHENTICATED"
    unknown = _me(workspace.host, "nope")
    assert unknown.status_code == 403
    assert unknown.json()["error_code"] == "PERMISSION_DENIED"
    assert "nope" not in unknown.text


def test_revoked_token_is_refused_at_once(workspace) -> None:
    workspace.admin.revoke_token("second-token")
    assert _me(workspace.host, "second-token").status_code == 403
    assert _me(workspace.host, "first-token").status_code == 200
    workspace.admin.add_token("second-token")
    assert _me(workspace.host, "second-token").status_code == 200


def test_oauth_client_credentials_and_expiry(workspace) -> None:
    metadata = httpx.get(workspace.host + "/oidc/.well-known/oauth-authorization-server").json()
    assert metadata["token_endpoint"] == workspace.host + "/oidc/v1/token"
    refused = httpx.post(
        metadata["token_endpoint"],
        data={"grant_type": "client_credentials", "scope": "all-apis"},
        auth=("sp-client", "wrong"),
    )
    assert refused.status_code == 401
    granted = httpx.post(
        metadata["token_endpoint"],
        data={"grant_type": "client_credentials", "scope": "all-apis"},
        auth=("sp-client", "sp-secret"),
    )
    assert granted.status_code == 200
    body = granted.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] == TOKEN_LIFETIME_S
    me = _me(workspace.host, body["access_token"])
    assert me.status_code == 200 and me.json()["userName"] == "sp-client"
    # The event is the workspace refusing the token once its life is over.
    deadline = time.monotonic() + TOKEN_LIFETIME_S + 60
    while (expired := _me(workspace.host, body["access_token"])).status_code == 200:
        assert time.monotonic() < deadline, "the token never expired"
        time.sleep(0.1)
    assert expired.status_code == 401
    assert "expired" in expired.json()["message"]


def test_admin_needs_a_configured_token(workspace) -> None:
    response = httpx.get(workspace.host + "/api/2.0/airo-admin/counters")
    assert response.status_code == 403
    assert httpx.get(workspace.host + "/api/2.0/airo-admin/health").status_code == 200


def test_unknown_endpoint_answers_in_the_api_error_shape(workspace) -> None:
    response = httpx.get(
        workspace.host + "/api/2.0/nothing/here", headers={"Authorization": "Bearer first-token"}
    )
    assert response.status_code == 404
    assert set(response.json()) == {"error_code", "message"}
