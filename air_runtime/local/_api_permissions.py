"""Permissions of a run (`/api/2.0/permissions/jobs/{id}`) and of its MLflow experiment
(`/api/2.0/permissions/experiments/{id}`), as access control lists kept with the run."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._errors import invalid, not_found
from air_runtime.local._request_params import int_param, json_body
from air_runtime.local._workspace_state import WorkspaceState, workspace_state
from air_runtime.workload import PERMISSION_LEVELS, PRINCIPAL_FIELDS

router = APIRouter()

# MLflow experiments: the CLI grants the workload's principals on the run's experiment
# (CAN_VIEW -> CAN_READ, CAN_MANAGE_RUN -> CAN_EDIT, CAN_MANAGE/IS_OWNER -> CAN_MANAGE) with
# PATCH /api/2.0/permissions/experiments/{id}, the id read from runs/get-output
# (runpermissions.go). Experiments exist once a task of theirs started.
_EXPERIMENT_LEVELS = ("CAN_READ", "CAN_EDIT", "CAN_MANAGE")


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


def _checked_acl(body: dict[str, Any], levels: tuple[str, ...]) -> list[dict[str, Any]]:
    entries = body.get("access_control_list")
    if not isinstance(entries, list):
        raise invalid("access_control_list must be a list.")
    for i, entry in enumerate(entries):
        principals = [p for p in PRINCIPAL_FIELDS if isinstance(entry, dict) and entry.get(p)]
        if len(principals) != 1 or not all(isinstance(entry[p], str) for p in principals):
            raise invalid(
                f"access_control_list[{i}] needs exactly one of {', '.join(PRINCIPAL_FIELDS)}."
            )
        if entry.get("permission_level") not in levels:
            raise invalid(
                f"access_control_list[{i}].permission_level must be one of "
                f"{', '.join(levels)}, got {str(entry.get('permission_level'))[:40]!r}."
            )
    return entries


def _merge_acl(acl: list[dict[str, Any]], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`acl` with each entry of `entries` replacing the one of the same principal."""
    for entry in entries:
        principal = next(p for p in PRINCIPAL_FIELDS if entry.get(p))
        acl = [a for a in acl if a.get(principal) != entry[principal]]
        acl.append({principal: entry[principal], "permission_level": entry["permission_level"]})
    return acl


def _job_id(state: WorkspaceState, job_id: str) -> int:
    run_id = int_param(job_id, "job_id")
    if state.store.run_row(run_id) is None:
        raise not_found(f"Job {job_id} does not exist.")
    return run_id


@router.patch("/api/2.0/permissions/jobs/{job_id}")
@router.put("/api/2.0/permissions/jobs/{job_id}")
async def permissions_update(request: Request, job_id: str) -> dict[str, Any]:
    state = workspace_state(request)
    run_id = _job_id(state, job_id)
    entries = _checked_acl(await json_body(request), PERMISSION_LEVELS)
    with state.store.transaction() as db:
        row = db.execute("SELECT acl FROM permissions WHERE job_id = ?", (run_id,)).fetchone()
        acl = _merge_acl(json.loads(row["acl"]) if row else [], entries)
        db.execute(
            "INSERT OR REPLACE INTO permissions (job_id, acl) VALUES (?, ?)",
            (run_id, json.dumps(acl)),
        )
    return _acl_json(run_id, acl, "jobs", "job")


@router.get("/api/2.0/permissions/jobs/{job_id}")
async def permissions_get(request: Request, job_id: str) -> dict[str, Any]:
    state = workspace_state(request)
    run_id = _job_id(state, job_id)
    rows = state.store.query("SELECT acl FROM permissions WHERE job_id = ?", (run_id,))
    return _acl_json(run_id, json.loads(rows[0]["acl"]) if rows else [], "jobs", "job")


def _experiment_row(state: WorkspaceState, experiment_id: str) -> Any:
    rows = state.store.query(
        "SELECT * FROM experiments WHERE experiment_id = ?", (experiment_id[:64],)
    )
    if not rows:
        raise not_found(f"Node ID {experiment_id[:64]} does not exist.")
    return rows[0]


@router.patch("/api/2.0/permissions/experiments/{experiment_id}")
@router.put("/api/2.0/permissions/experiments/{experiment_id}")
async def experiment_permissions_update(request: Request, experiment_id: str) -> dict[str, Any]:
    state = workspace_state(request)
    _experiment_row(state, experiment_id)
    entries = _checked_acl(await json_body(request), _EXPERIMENT_LEVELS)
    with state.store.transaction() as db:
        row = db.execute(
            "SELECT acl FROM experiments WHERE experiment_id = ?", (experiment_id,)
        ).fetchone()
        # PUT replaces the list, PATCH adds to it.
        current = [] if request.method == "PUT" else json.loads(row["acl"])
        acl = _merge_acl(current, entries)
        db.execute(
            "UPDATE experiments SET acl = ? WHERE experiment_id = ?",
            (json.dumps(acl), experiment_id),
        )
    return _acl_json(experiment_id, acl, "experiments", "mlflow-experiment")


@router.get("/api/2.0/permissions/experiments/{experiment_id}")
async def experiment_permissions_get(request: Request, experiment_id: str) -> dict[str, Any]:
    row = _experiment_row(workspace_state(request), experiment_id)
    return _acl_json(experiment_id, json.loads(row["acl"]), "experiments", "mlflow-experiment")
