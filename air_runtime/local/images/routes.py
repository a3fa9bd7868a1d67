"""Docker image registrations (`/api/2.0/ai-compute-manager/images*`), kept by the
`ImageRegistry`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._errors import not_found
from air_runtime.local._request_params import get_params, json_body, workspace_state

router = APIRouter()


@router.post("/api/2.0/ai-compute-manager/images")
async def images_register(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    return workspace_state(request).images.register(
        body.get("docker_image_url"), body.get("credentials_scope"), body.get("credentials_key")
    )


@router.get("/api/2.0/ai-compute-manager/images:get")
async def images_get(request: Request) -> dict[str, Any]:
    url = (await get_params(request)).get("docker_image_url")
    registration = workspace_state(request).images.get(url)
    if registration is None:
        raise not_found(f"Image {url} is not registered.")
    return registration


@router.get("/api/2.0/ai-compute-manager/images:checkImageAccess")
async def images_check_access(request: Request) -> dict[str, Any]:
    url = (await get_params(request)).get("docker_image_url")
    return {"publicly_accessible": workspace_state(request).images.is_public(url)}
