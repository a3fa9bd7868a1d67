"""Unity Catalog images of a submitted run, looked up in the Artifact Registry the workspace
pairs with (option ``artifact_registry_host``): a run whose image was never pushed there is
refused at submit, naming the image and how to push it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from air_runtime.local._errors import invalid
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local.registry_tokens.backend import issue_token

_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    )
)


def task_images(ai_task: dict[str, Any]) -> list[str]:
    """The Unity Catalog images of one ai_runtime_task (the task's, each container's)."""
    found = [ai_task.get("unity_catalog_image_path")]
    for deployment in ai_task.get("deployments") or []:
        for container in (deployment or {}).get("containers") or []:
            found.append((container or {}).get("unity_catalog_image_path"))
    return [image for image in found if isinstance(image, str) and image]


def _push_command(image: str) -> str:
    repository, _, tag = image.rpartition(":")
    catalog, _, rest = repository.partition(".")
    schema, _, artifact = rest.partition(".")
    return (
        f"airo images push SOURCE --catalog {catalog} --schema {schema} --artifact {artifact}:{tag}"
    )


class CatalogImages:
    """The workspace's view of its paired Artifact Registry (none: every image passes)."""

    def __init__(self, options: WorkspaceOptions, data_dir: Path) -> None:
        self._options = options  # the registry host can be paired while the server runs
        self._data_dir = data_dir  # where the registry's token service keeps its key

    async def missing(self, ai_task: dict[str, Any]) -> list[str]:
        """Why each Unity Catalog image of one task cannot run (not in the paired Artifact
        Registry, or the registry cannot say); empty when unpaired or all are there."""
        host = self._options.artifact_registry_host
        if not host:
            return []
        reasons = []
        async with httpx.AsyncClient(timeout=30.0) as http:
            for image in task_images(ai_task):
                reason = await self._look_up(http, host, image)
                if reason:
                    reasons.append(reason)
        return reasons

    async def _look_up(self, http: httpx.AsyncClient, host: str, image: str) -> str | None:
        repository, _, tag = image.rpartition(":")
        token = issue_token(self._data_dir, "local-workspace", [f"repository:{repository}:pull"])
        try:
            response = await http.head(
                f"http://{host}/v2/{repository}/manifests/{tag}",
                headers={"Authorization": f"Bearer {token}", "Accept": _ACCEPT},
            )
        except httpx.TransportError as error:
            return (
                f"the Artifact Registry {host} does not answer "
                f"({type(error).__name__}), so {image} cannot be found."
            )
        if response.status_code == 404:
            return (
                f"Unity Catalog image {image} is not in the Artifact Registry {host}; "
                f"push it first (`{_push_command(image)}`)."
            )
        if response.status_code != 200:
            return f"the Artifact Registry {host} answered HTTP {response.status_code} for {image}."
        return None

    async def check_submit(self, body: dict[str, Any]) -> None:
        """Refuse a runs/submit body with an image that cannot run (the first one found)."""
        for i, task in enumerate(body.get("tasks") or []):
            for reason in await self.missing(task.get("ai_runtime_task") or {}):
                raise invalid(f"tasks[{i}]: {reason}")
