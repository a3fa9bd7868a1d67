"""Who the credentials belong to: the user whose workspace folder holds the launch files."""

from __future__ import annotations

from .._errors import PlatformError
from ._core import ClientCore, Flow, Identity


def whoami(core: ClientCore) -> Flow[Identity]:
    if core.identity is not None:
        return core.identity
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
