"""Whether the Unity Catalog images a workload names are in the workspace's Artifact Registry:
the dry run's check, so a missing image is a problem with the push command before anything
is submitted (the workspace refuses it at submit).

The registry is the one ``airo images push`` copies to: a host given by the caller, or the
host derived from the workspace (``artifact_registry``). Where neither is known, or the
registry cannot be asked (it refuses the login, it does not answer), the images are left
unchecked and the reason is returned: only an image the registry says it lacks is a problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from .._errors import AirError, Problem
from ._artifact_registry import artifact_registry
from ._registry import Registry

if TYPE_CHECKING:
    from ..client import AirClient
    from ..workload import Workload

_TIMEOUT = httpx.Timeout(30.0, connect=10.0)


@dataclass(frozen=True)
class ImageCheck:
    """``problems``: one per image the registry lacks; ``unchecked``: why the images were
    not looked up (None when they were, or when the workload names none)."""

    problems: tuple[Problem, ...] = ()
    unchecked: str | None = None
    registry_host: str | None = None


def unity_catalog_images(workload: Workload) -> list[tuple[str, str]]:
    """(field path, image) of each Unity Catalog image of the workload."""
    found: list[tuple[str, str]] = []
    if workload.environment.unity_catalog_image:
        found.append(("environment.unity_catalog_image", workload.environment.unity_catalog_image))
    for i, container in enumerate(workload.containers or ()):
        found.append((f"containers[{i}].unity_catalog_image", container.unity_catalog_image))
    return found


def push_command(image: str, registry_host: str | None = None) -> str:
    """The ``airo images push`` that puts ``<catalog>.<schema>.<artifact>:<tag>`` in place."""
    repository, _, tag = image.rpartition(":")
    catalog, schema, artifact = repository.split(".", 2)
    host = f" --registry-host {registry_host}" if registry_host else ""
    return (
        f"airo images push SOURCE --catalog {catalog} --schema {schema} "
        f"--artifact {artifact}:{tag}{host}"
    )


def check_unity_catalog_images(
    client: AirClient, workload: Workload, *, registry_host: str | None = None
) -> ImageCheck:
    """Look each Unity Catalog image of ``workload`` up in the Artifact Registry (a manifest
    ``HEAD``, as ``docker manifest inspect`` does; distribution-spec "Checking if content
    exists in the registry")."""
    images = unity_catalog_images(workload)
    if not images:
        return ImageCheck()
    try:
        registry = artifact_registry(client, registry_host)
    except AirError as error:
        return ImageCheck(unchecked=f"the Artifact Registry is not known ({error})")
    client.redactor.add(registry.login.password)
    problems: list[Problem] = []
    with httpx.Client(timeout=_TIMEOUT) as http:
        target = Registry(
            registry.host,
            registry.login,
            role="the Artifact Registry",
            login_fix="the registry takes the workspace's OAuth access token",
            http=http,
            attempts=2,
        )
        for path, image in dict.fromkeys(images):
            repository, _, tag = image.rpartition(":")
            try:
                digest = target.manifest_digest(repository, tag, (f"repository:{repository}:pull",))
            except (AirError, httpx.HTTPError) as error:
                return ImageCheck(
                    tuple(problems),
                    unchecked=f"{target.label} could not be asked ({error})",
                    registry_host=registry.host,
                )
            if digest is None:
                problems.append(
                    Problem(
                        path,
                        f"Unity Catalog image {image} is not in the Artifact Registry "
                        f"{registry.host}; the workspace would refuse the run.",
                        hint=f"push it first: {push_command(image, registry_host)}",
                    )
                )
    return ImageCheck(tuple(problems), registry_host=registry.host)
