"""Docker Hub image references: parsing and the one normal form used everywhere.

The platform registers images by their normal form (``docker.io/<org>/<repo>:<tag>``), so the
workload model, the submit body and image registration must all agree on it byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOCKER_HUB_HOSTS = ("docker.io", "index.docker.io")

# The OCI distribution spec's grammar: a path component, a tag, and a digest of a registered
# algorithm (image-spec descriptor.md: sha256 with 64, sha512 with 128 lower-case hex digits).
_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^(?:sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$")

# Hosts people often try, to give a precise reason in the error.
_KNOWN_OTHER_REGISTRIES = {
    ".amazonaws.com": "Amazon ECR",
    "gcr.io": "Google Container Registry",
    "pkg.dev": "Google Artifact Registry",
    "ghcr.io": "GitHub Container Registry",
    "azurecr.io": "Azure Container Registry",
    "quay.io": "Quay",
}

DOCKER_HUB_HINT = (
    "push the image to Docker Hub and reference it as docker.io/<org>/<repo>:<tag> "
    "(or publish it to Unity Catalog and use environment.unity_catalog_image)"
)


class DockerRefError(ValueError):
    """A reference that is malformed or not on Docker Hub; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ImageReferenceError(ValueError):
    """A reference that breaks the grammar; ``hint`` says how to write it."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(f"{message}: {hint}")
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class ImageReference:
    """``[host[:port]/]path[:tag][@digest]`` split as ``docker pull`` reads it: ``registry`` is
    the host when the first part names one (a ``.``, a ``:`` or ``localhost``), else None."""

    registry: str | None
    path: tuple[str, ...]
    tag: str | None
    digest: str | None


def split_image_reference(text: str, noun: str = "image reference") -> ImageReference:
    """The one parser of image references (the workload's Docker Hub images and ``airo images
    push`` sources alike); raise ``ImageReferenceError`` naming ``noun`` and the part at fault."""
    value = text.strip() if isinstance(text, str) else ""
    example = "give e.g. docker.io/myorg/trainer:1.0"
    if not value:
        raise ImageReferenceError(f"the {noun} is empty", example)
    if "://" in value:
        raise ImageReferenceError(
            f"{noun} {text!r} must not contain a URL scheme",
            f"drop the scheme: {value.split('://', 1)[1]}",
        )
    if any(ch.isspace() for ch in value):
        raise ImageReferenceError(f"{noun} {text!r} contains whitespace", "remove the spaces")
    name, digest = value, None
    if "@" in name:
        name, digest = name.split("@", 1)
        if not _DIGEST.match(digest):
            raise ImageReferenceError(
                f"{noun} {text!r} has a malformed digest {digest!r}", "use @sha256:<64 hex digits>"
            )
    tag = None
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.match(tag):
            raise ImageReferenceError(
                f"{noun} {text!r} has an invalid tag {tag!r}",
                "tags are up to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'",
            )
    parts = name.split("/")
    registry = None
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry = parts[0].lower()
        parts = parts[1:]
    for part in parts:
        if not _COMPONENT.match(part):
            raise ImageReferenceError(
                f"{noun} {text!r} has an invalid name component {part!r}",
                "names are lower case letters and digits separated by '.', '_', '__' or '-'",
            )
    return ImageReference(registry, tuple(parts), None if digest else tag, digest)


@dataclass(frozen=True)
class DockerRef:
    """A parsed Docker Hub reference (``repository`` always has the ``<org>/`` part)."""

    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def normal_form(self) -> str:
        # A digest pins the content, so the tag next to it carries no information.
        if self.digest:
            return f"docker.io/{self.repository}@{self.digest}"
        return f"docker.io/{self.repository}:{self.tag or 'latest'}"

    def __str__(self) -> str:
        return self.normal_form


def _registry_name(host: str) -> str:
    for suffix, name in _KNOWN_OTHER_REGISTRIES.items():
        if host == suffix or host.endswith(suffix if suffix.startswith(".") else "." + suffix):
            return name
    return host


def parse_docker_ref(reference: str) -> DockerRef:
    """Parse ``reference``; raise ``DockerRefError`` unless it is a valid Docker Hub image."""
    try:
        parsed = split_image_reference(reference)
    except ImageReferenceError as error:
        raise DockerRefError(error.message, error.hint) from None
    if parsed.registry is not None and parsed.registry not in DOCKER_HUB_HOSTS:
        raise DockerRefError(
            f"image {reference!r} is on {_registry_name(parsed.registry)}, but Docker Hub is "
            "required for environment.docker_image",
            DOCKER_HUB_HINT,
        )
    parts = parsed.path if len(parsed.path) > 1 else ("library", *parsed.path)
    return DockerRef(repository="/".join(parts), tag=parsed.tag, digest=parsed.digest)


def normalize_docker_ref(reference: str) -> str:
    """The URL the platform registers and looks images up by, written as the CLI writes it
    (image_client.go normalizeDockerImageURL), so a registration made by either tool is
    found by the other: ``docker.io/`` (and ``library/`` for a bare name) only when the
    reference names no registry, a tag dropped next to a digest, ``:latest`` when neither is
    given. ``reference`` must be a valid Docker Hub reference (``parse_docker_ref``)."""
    parse_docker_ref(reference)
    url = reference.strip()
    parts = url.split("/")
    if "." not in parts[0].split(":")[0]:
        url = f"docker.io/library/{url}" if len(parts) == 1 else f"docker.io/{url}"
    if "@" in url:
        repository, digest = url.split("@", 1)
        slash = repository.rfind("/")
        colon = repository.find(":", slash + 1)
        if colon != -1:
            repository = repository[:colon]
        return f"{repository}@{digest}"
    if ":" not in url[url.rfind("/") + 1 :]:
        url += ":latest"
    return url
