"""Who the credentials belong to: the user whose workspace folder holds the launch files."""

from __future__ import annotations

from typing import Any

from .._errors import PlatformError
from ._core import ClientCore, Flow, Identity


def whoami(core: ClientCore) -> Flow[Identity]:
    if core.identity is not None:
        return core.identity
    if core.identity_error is not None:  # the answer to the request made ahead
        error, core.identity_error = core.identity_error, None
        raise error
    response = yield from core.call("GET", "/api/2.0/preview/scim/v2/Me", raw=True)
    body = response.json()
    user_name = body.get("userName")
    if not user_name:
        raise PlatformError(f"{core.host} answered the current-user request without a userName")
    core.identity = Identity(
        user_name=str(user_name),
        user_id=str(body.get("id") or ""),
        org_id=response.headers.get("X-Databricks-Org-Id"),
    )
    return core.identity


METASTORE_SUMMARY = "/api/2.1/unity-catalog/metastore_summary"


def metastore_summary(core: ClientCore) -> Flow[dict[str, Any]]:
    """The workspace's Unity Catalog metastore (its ``region`` names the Artifact Registry
    host: databricks/cli cmd/auth/docker/docker_profile.go resolveWorkspaceRegion)."""
    body = yield from core.call("GET", METASTORE_SUMMARY)
    return body if isinstance(body, dict) else {}
