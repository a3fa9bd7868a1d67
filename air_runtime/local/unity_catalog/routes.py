"""Unity Catalog: the metastore summary, whose region names the workspace's Artifact
Registry host (databricks/cli cmd/auth/docker/docker_profile.go resolveWorkspaceRegion:
``w.Metastores.Summary`` = ``GET /api/2.1/unity-catalog/metastore_summary``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._request_params import workspace_state

router = APIRouter()


@router.get("/api/2.1/unity-catalog/metastore_summary")
async def metastore_summary(request: Request) -> dict[str, Any]:
    options = workspace_state(request).options
    return {
        "metastore_id": "00000000-0000-0000-0000-00000000a1b0",
        "name": "local-metastore",
        "region": options.region,
        "cloud": "aws",
        "default_data_access_config_id": "",
        "global_metastore_id": f"aws:{options.region}:00000000-0000-0000-0000-00000000a1b0",
        "owner": options.user_name,
    }
