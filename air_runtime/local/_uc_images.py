"""Unity Catalog images of a submitted run, looked up in the Artifact Registry the workspace
pairs with (option ``artifact_registry_host``): a run whose image was never pushed there is
refused at submit, naming the image and how to push it."""

from __future__ import annotations

from typing import Any

import httpx

from air_runtime.local._errors import invalid
from air_runtime.local._registry_tokens import issue_token
from air_runtime.local._workspace_state import WorkspaceState

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


async def missing_images(state: WorkspaceState, ai_task: dict[str, Any]) -> list[str]:
    """Why each Unity Catalog image of one task cannot run (not in the paired Artifact
    Registry, or the registry cannot say); empty when unpaired or all are there."""
    host = state.options.artifact_registry_host
    if not host:
        return []
    reasons = []
    async with httpx.AsyncClient(timeout=30.0) as http:
        for image in task_images(ai_task):
            repository, _, tag = image.rpartition(":")
            token = issue_token(
                state.data_dir, "local-workspace", [f"repository:{repository}:pull"]
            )
            try:
                response = await http.head(
                    f"http://{host}/v2/{repository}/manifests/{tag}",
                    headers={"Authorization": f"Bearer {token}", "Accept": _ACCEPT},
                )
            except httpx.TransportError as error:
                reasons.append(
                    f"the Artifact Registry {host} does not answer "
                    f"({type(error).__name__}), so {image} cannot be found."
                )
                continue
            if response.status_code == 404:
                reasons.append(
                    f"Unity Catalog image {image} is not in the Artifact Registry {host}; "
                    f"push it first (`{_push_command(image)}`)."
                )
            elif response.status_code != 200:
                reasons.append(
                    f"the Artifact Registry {host} answered HTTP {response.status_code} "
                    f"for {image}."
                )
    return reasons


async def check_unity_catalog_images(state: WorkspaceState, body: dict[str, Any]) -> None:
    """Refuse a runs/submit body with an image that cannot run (the first one found)."""
    for i, task in enumerate(body.get("tasks") or []):
        for reason in await missing_images(state, task.get("ai_runtime_task") or {}):
            raise invalid(f"tasks[{i}]: {reason}")
