"""The Databricks Artifact Registry of a workspace: its host and the login it takes.

As ``databricks auth docker configure`` finds them (databricks/cli cmd/auth/docker/
docker_configure.go, docker_host.go; libs/dockercredentials/registry.go):

- host: ``<workspace id>.container.<region><dns zone>`` (RegistryHost), the workspace id
  from the ``X-Databricks-Org-Id`` header of ``GET /api/2.0/preview/scim/v2/Me``
  (libs/auth/workspace_id.go ResolveWorkspaceID), the region from
  ``GET /api/2.1/unity-catalog/metastore_summary`` (resolveWorkspaceRegion), the DNS zone
  the workspace's own (matchingDatabricksDNSZone: the longest known zone that ends the
  workspace host);
- login: user ``oauthtoken`` (OAuthTokenUsername) with the workspace's OAuth access token as
  the password (cmd/auth/docker/docker_token.go).

Which credentials qualify: the CLI's credential helper takes only profiles made by
``databricks auth login`` (auth_type ``databricks-cli``, i.e. user OAuth) that target a
workspace; it refuses OAuth client credentials and personal access tokens
(docker_profile.go validateDockerCredentialProfile). airo sends the access token its
credentials carry: a user OAuth token (databricks-sdk's ``databricks-cli`` auth) or a
service principal's OAuth token (M2M). A personal access token is sent as it is; where the
registry refuses it, the error says to log in with OAuth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .._errors import ConfigurationError, PlatformError
from ._registry import Login

if TYPE_CHECKING:
    from ..client import AirClient

OAUTH_TOKEN_USERNAME = "oauthtoken"  # libs/dockercredentials/registry.go
_REGISTRY_INFIX = ".container."


def _dns_zones() -> list[str]:
    # The zones of the environments databricks-sdk knows, as the CLI takes them from the Go SDK.
    from databricks.sdk.environments import ALL_ENVS

    return sorted({env.dns_zone.lower() for env in ALL_ENVS if env.dns_zone}, key=len)


def _is_dns_label(label: str) -> bool:
    return (
        0 < len(label) <= 63
        and all(c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in label)
        and not label.startswith("-")
        and not label.endswith("-")
    )


def registry_host(workspace_id: str, region: str, workspace_host: str) -> str:
    """``<workspace id>.container.<region><dns zone>`` (registry.go RegistryHost)."""
    workspace_id, region = workspace_id.strip(), region.strip()
    if not _is_dns_label(workspace_id):
        raise ConfigurationError(f"invalid workspace ID {workspace_id!r}")
    if not _is_dns_label(region):
        raise ConfigurationError(f"invalid region {region!r}")
    name = (urlsplit(workspace_host).hostname or "").lower().rstrip(".")
    zones = [zone for zone in _dns_zones() if name.endswith(zone)]
    if not zones:
        raise ConfigurationError(
            f"{name or workspace_host!r} is not a Databricks workspace host, so its Artifact "
            "Registry host cannot be derived: pass the registry host (--registry-host)"
        )
    return f"{workspace_id}{_REGISTRY_INFIX}{region}{zones[-1]}"


@dataclass(frozen=True)
class ArtifactRegistry:
    host: str
    login: Login


def workspace_login(client: AirClient) -> Login:
    """``oauthtoken`` and the bearer token of the client's credentials."""
    header = client.credentials.headers().get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ConfigurationError(
            "the workspace credentials carry no bearer token for the Artifact Registry: "
            "log in with `databricks auth login --host <workspace-url>` (OAuth)"
        )
    return Login(OAUTH_TOKEN_USERNAME, token, origin="the workspace credentials")


def metastore_region(client: AirClient) -> str:
    body = client.metastore_summary()
    region = str(body.get("region") or "").strip()
    if not region:
        raise PlatformError(
            f"{client.host} answered the metastore summary without a region: attach a "
            "Unity Catalog metastore to the workspace, or pass the registry host"
        )
    return region


def artifact_registry(client: AirClient, host: str | None = None) -> ArtifactRegistry:
    """The workspace's Artifact Registry. ``host`` (a registry the workspace names, or a
    stand-in) skips the derivation."""
    login = workspace_login(client)
    if host:
        return ArtifactRegistry(host.strip().lower(), login)
    identity = client.whoami()
    if not identity.org_id:
        raise PlatformError(
            f"{client.host} did not say its workspace ID (X-Databricks-Org-Id on SCIM Me): "
            "pass the registry host"
        )
    region = metastore_region(client)
    return ArtifactRegistry(registry_host(identity.org_id, region, client.host), login)
