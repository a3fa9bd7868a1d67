"""Permissions of a run (`/api/2.0/permissions/jobs/{id}`) and of its MLflow experiment
(`/api/2.0/permissions/experiments/{id}`), kept by `Permissions`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._request_params import json_body, workspace_state
from air_runtime.workload import PRINCIPAL_FIELDS

router = APIRouter()


def _acl_json(
    object_id: int | str, acl: list[dict[str, Any]], kind: str, object_type: str
) -> dict[str, Any]:
    entries = []
    for entry in acl:
        principal = {p: entry[p] for p in PRINCIPAL_FIELDS if entry.get(p)}
        level = entry["permission_level"]
        entries.append(
            {**principal, "all_permissions": [{"permission_level": level, "inherited": False}]}
        )
    return {
        "object_id": f"/{kind}/{object_id}",
        "object_type": object_type,
        "access_control_list": entries,
    }


@router.patch("/api/2.0/permissions/jobs/{job_id}")
@router.put("/api/2.0/permissions/jobs/{job_id}")
async def permissions_update(request: Request, job_id: str) -> dict[str, Any]:
    permissions = workspace_state(request).permissions
    run_id = permissions.job(job_id)
    acl = permissions.update_job(run_id, await json_body(request))
    return _acl_json(run_id, acl, "jobs", "job")


@router.get("/api/2.0/permissions/jobs/{job_id}")
async def permissions_get(request: Request, job_id: str) -> dict[str, Any]:
    permissions = workspace_state(request).permissions
    run_id = permissions.job(job_id)
    return _acl_json(run_id, permissions.job_acl(run_id), "jobs", "job")


@router.patch("/api/2.0/permissions/experiments/{experiment_id}")
@router.put("/api/2.0/permissions/experiments/{experiment_id}")
async def experiment_permissions_update(request: Request, experiment_id: str) -> dict[str, Any]:
    permissions = workspace_state(request).permissions
    permissions.experiment_acl(experiment_id)  # 404 before the body is read
    acl = permissions.update_experiment(
        experiment_id, await json_body(request), replace=request.method == "PUT"
    )
    return _acl_json(experiment_id, acl, "experiments", "mlflow-experiment")


@router.get("/api/2.0/permissions/experiments/{experiment_id}")
async def experiment_permissions_get(request: Request, experiment_id: str) -> dict[str, Any]:
    acl = workspace_state(request).permissions.experiment_acl(experiment_id)
    return _acl_json(experiment_id, acl, "experiments", "mlflow-experiment")
