"""Unity Catalog image names (``<catalog>.<schema>.<artifact>:<tag>``) and source image
references, checked before anything is read or uploaded.

The rules are the CLI's (databricks/cli cmd/air/image.go: catalogSchemaPattern,
artifactNamePattern, imageTagPattern, maxArtifactNameLength, maxImageTagLength), and so is
the default of the artifact and tag (sourceImageDefaults: the last path component and the
tag of the source, ``latest`` when it has none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._docker_ref import ImageReferenceError, split_image_reference
from .._errors import ConfigurationError

# cmd/air/image.go
MAX_ARTIFACT_NAME_LENGTH = 255
MAX_IMAGE_TAG_LENGTH = 128
_CATALOG_SCHEMA = re.compile(r"^[a-z0-9_]+$")
_ARTIFACT = re.compile(r"^[a-z0-9]+((_|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

DOCKER_HUB = "docker.io"
# Where Docker Hub's registry API answers (docker.io is only its name).
DOCKER_HUB_API = "registry-1.docker.io"


@dataclass(frozen=True)
class UnityCatalogImage:
    """Where an image lives in Unity Catalog; ``reference`` is what
    ``environment.unity_catalog_image`` takes (cmd/air/image.go unityCatalogReference)."""

    catalog: str
    schema: str
    artifact: str
    tag: str

    @property
    def repository(self) -> str:
        # The repository path on the Artifact Registry host (image.go: target).
        return f"{self.catalog}.{self.schema}.{self.artifact}"

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"

    def __str__(self) -> str:
        return self.reference


@dataclass(frozen=True)
class SourceImage:
    """An image in a source registry. ``registry`` is ``docker.io`` for Docker Hub."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def reference(self) -> str:
        """The tag or digest asked for in ``GET /v2/<name>/manifests/<reference>``."""
        return self.digest or self.tag or "latest"

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    def __str__(self) -> str:
        at = f"@{self.digest}" if self.digest else f":{self.tag or 'latest'}"
        return f"{self.registry}/{self.repository}{at}"


def parse_source_image(text: str) -> SourceImage:
    """``[host[:port]/]path[:tag][@sha256:...]``; no host means Docker Hub (a one-part path
    is ``library/<name>``), as ``docker pull`` reads it."""
    try:
        parsed = split_image_reference(text, noun="source image")
    except ImageReferenceError as error:
        raise ConfigurationError(str(error)) from None
    registry = parsed.registry or DOCKER_HUB
    if registry in ("index.docker.io", DOCKER_HUB_API):
        registry = DOCKER_HUB
    parts = parsed.path
    if registry == DOCKER_HUB and len(parts) == 1:
        parts = ("library", *parts)
    return SourceImage(registry, "/".join(parts), tag=parsed.tag, digest=parsed.digest)


def unity_catalog_image(
    catalog: str, schema: str, artifact: str | None = None, *, source: SourceImage | None = None
) -> UnityCatalogImage:
    """The Unity Catalog target, checked as image.go checks it. ``artifact`` is
    ``NAME[:TAG]``; without it (or without its tag) the source's last path component and
    tag are used (sourceImageDefaults)."""
    for label, value in (("catalog", catalog), ("schema", schema)):
        if not isinstance(value, str) or not _CATALOG_SCHEMA.match(value):
            raise ConfigurationError(
                f"invalid {label} {value!r}: use only lowercase letters, digits, and underscores"
            )
    default_name = source.repository.rsplit("/", 1)[-1] if source else ""
    default_tag = (source.tag if source and source.tag else None) or "latest"
    name, tag = default_name, default_tag
    if artifact:
        name, found, given_tag = artifact.partition(":")
        if found:
            tag = given_tag
    if not name:
        raise ConfigurationError("the artifact name is required: pass NAME[:TAG]")
    if not artifact and not _ARTIFACT.match(name):
        # sourceImageDefaults drops a default that is no artifact name: ask for one.
        raise ConfigurationError(
            f"the source's name {name!r} is not a valid artifact name: give the artifact "
            "as NAME[:TAG] (lowercase letters and digits separated by '_', '__' or '-')"
        )
    if len(name) > MAX_ARTIFACT_NAME_LENGTH:
        raise ConfigurationError(
            f"invalid artifact name: must be {MAX_ARTIFACT_NAME_LENGTH} characters or less"
        )
    if not _ARTIFACT.match(name):
        raise ConfigurationError(
            f"invalid artifact name {name!r}: use lowercase letters and digits separated by "
            "one or two underscores or one or more hyphens"
        )
    tag = tag or "latest"
    if len(tag) > MAX_IMAGE_TAG_LENGTH:
        raise ConfigurationError(
            f"invalid image tag: must be {MAX_IMAGE_TAG_LENGTH} characters or less"
        )
    if not _TAG.match(tag):
        raise ConfigurationError(
            f"invalid image tag {tag!r}: up to 128 letters, digits, '_', '.' or '-', "
            "not starting with '.' or '-'"
        )
    return UnityCatalogImage(catalog, schema, name, tag)
