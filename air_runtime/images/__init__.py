"""Images on today's platform: copy an image from any registry into Unity Catalog (the
Databricks Artifact Registry), registry to registry, with no Docker daemon.

``push_image`` is what ``airo images push``, ``AirRegisterImageOperator`` (Unity Catalog
target) and the Dagster image asset call; ``copy_image`` copies between any two registries.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from .._docker_credentials import find_registry_credentials
from ._artifact_registry import (
    OAUTH_TOKEN_USERNAME,
    ArtifactRegistry,
    artifact_registry,
    registry_host,
    workspace_login,
)
from ._copy import (
    DEFAULT_SEGMENT_BYTES,
    CopyProgress,
    CopyResult,
    ImageCopier,
    default_state_dir,
)
from ._names import SourceImage, UnityCatalogImage, parse_source_image, unity_catalog_image
from ._registry import Login, Registry, RegistryAuthError, RegistryError

if TYPE_CHECKING:
    from ..client import AirClient

__all__ = [
    "OAUTH_TOKEN_USERNAME",
    "ArtifactRegistry",
    "CopyProgress",
    "CopyResult",
    "ImagePush",
    "Login",
    "RegistryAuthError",
    "RegistryError",
    "SourceImage",
    "UnityCatalogImage",
    "artifact_registry",
    "copy_image",
    "default_state_dir",
    "parse_source_image",
    "push_image",
    "registry_host",
    "source_login",
    "unity_catalog_image",
    "workspace_login",
]

_TIMEOUT = httpx.Timeout(120.0, connect=15.0)


@dataclass(frozen=True)
class ImagePush:
    """A copy into Unity Catalog: ``unity_catalog_image`` goes into
    ``environment.unity_catalog_image`` (or a container's ``unity_catalog_image``)."""

    image: UnityCatalogImage
    copy: CopyResult

    @property
    def unity_catalog_image(self) -> str:
        return self.image.reference

    @property
    def digest(self) -> str:
        return self.copy.digest

    def as_dict(self) -> dict[str, object]:
        return {
            "unity_catalog_image": self.unity_catalog_image,
            "digest": self.digest,
            "source": self.copy.source,
            "target": self.copy.target,
            "layers": self.copy.layers,
            "bytes_total": self.copy.bytes_total,
            "bytes_sent": self.copy.bytes_sent,
            "blobs_uploaded": self.copy.blobs_uploaded,
            "blobs_present": self.copy.blobs_present,
            "blobs_mounted": self.copy.blobs_mounted,
            "manifest_pushed": self.copy.manifest_pushed,
        }


def source_login(
    image: SourceImage, docker_config: str | os.PathLike[str] | None = None
) -> Login | None:
    """The login ``docker login`` left for the image's registry (config.json, its credential
    helpers), or None (anonymous)."""
    found = find_registry_credentials(image.registry, docker_config)
    if found is None:
        return None
    return Login(found.username, found.password, origin=f"docker config ({found.origin})")


def _source_fix(image: SourceImage) -> str:
    name = "" if image.registry == "docker.io" else f" {image.registry}"
    return (
        f"run `docker login{name}` (airo reads ~/.docker/config.json, $DOCKER_CONFIG and "
        "their credential helpers) or pass the source login explicitly"
    )


def copy_image(
    source: str | SourceImage,
    target_host: str,
    repository: str,
    tag: str,
    *,
    source_credentials: Login | None = None,
    target_credentials: Login | None = None,
    docker_config: str | os.PathLike[str] | None = None,
    target_role: str = "the target registry",
    target_fix: str = "check the login for it",
    progress: Callable[[CopyProgress], None] | None = None,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    state_dir: str | os.PathLike[str] | None = None,
    parallel_blobs: int = 3,
) -> CopyResult:
    """Copy the linux/amd64 image ``source`` to ``<target_host>/<repository>:<tag>``."""
    image = parse_source_image(source) if isinstance(source, str) else source
    login = source_credentials or source_login(image, docker_config)
    with httpx.Client(timeout=_TIMEOUT, follow_redirects=True) as http:
        copier = ImageCopier(
            Registry(
                image.api_host,
                login,
                role="the source registry",
                login_fix=_source_fix(image),
                http=http,
            ),
            Registry(
                target_host, target_credentials, role=target_role, login_fix=target_fix, http=http
            ),
            progress=progress,
            segment_bytes=segment_bytes,
            state_dir=state_dir,
            parallel_blobs=parallel_blobs,
        )
        return copier.copy(image, repository, tag)


def push_image(
    client: AirClient,
    source: str,
    *,
    catalog: str,
    schema: str,
    artifact: str | None = None,
    registry_host: str | None = None,
    source_credentials: Login | None = None,
    docker_config: str | os.PathLike[str] | None = None,
    progress: Callable[[CopyProgress], None] | None = None,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    state_dir: str | os.PathLike[str] | None = None,
) -> ImagePush:
    """Copy ``source`` to the workspace's Artifact Registry as
    ``<catalog>.<schema>.<artifact>:<tag>`` (``artifact`` is ``NAME[:TAG]``, by default the
    source's name and tag): the Unity Catalog image a workload runs. Names are checked
    before anything is read or sent."""
    image = parse_source_image(source)
    target = unity_catalog_image(catalog, schema, artifact, source=image)
    registry = artifact_registry(client, registry_host)
    client.redactor.add(registry.login.password)
    fix = (
        f"the registry takes the workspace's OAuth access token as user {OAUTH_TOKEN_USERNAME}: "
        "log in again (`databricks auth login --host <workspace-url>`, or use a service "
        "principal's OAuth credentials); a personal access token is not accepted by "
        "`databricks auth docker configure`; writing needs the privileges to create and "
        f"modify images in {catalog}.{schema}"
    )
    copied = copy_image(
        image,
        registry.host,
        target.repository,
        target.tag,
        source_credentials=source_credentials,
        target_credentials=registry.login,
        docker_config=docker_config,
        target_role="the Artifact Registry",
        target_fix=fix,
        progress=progress,
        segment_bytes=segment_bytes,
        state_dir=state_dir,
    )
    return ImagePush(target, copied)
