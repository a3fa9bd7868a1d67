"""Permissions of a run (a one-time run is its own job) and of its MLflow experiment: access
control lists whose entries name one principal each, checked against the levels each kind
of object has, and merged principal by principal."""

from __future__ import annotations

from typing import Any

from air_runtime.local._errors import invalid, not_found
from air_runtime.local._request_params import int_param
from air_runtime.local._store import Store
from air_runtime.workload import PERMISSION_LEVELS, PRINCIPAL_FIELDS

# MLflow experiments: the CLI grants the workload's principals on the run's experiment
# (CAN_VIEW -> CAN_READ, CAN_MANAGE_RUN -> CAN_EDIT, CAN_MANAGE/IS_OWNER -> CAN_MANAGE) with
# PATCH /api/2.0/permissions/experiments/{id}, the id read from runs/get-output
# (runpermissions.go). Experiments exist once a task of theirs started.
EXPERIMENT_LEVELS = ("CAN_READ", "CAN_EDIT", "CAN_MANAGE")


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


class Permissions:
    def __init__(self, store: Store) -> None:
        self._store = store

    def job(self, job_id: str) -> int:
        """The run a permissions path names (404 when there is none)."""
        run_id = int_param(job_id, "job_id")
        if self._store.runs.get(run_id) is None:
            raise not_found(f"Job {job_id} does not exist.")
        return run_id

    def job_acl(self, job_id: int) -> list[dict[str, Any]]:
        return self._store.job_acls.get(job_id)

    def update_job(self, job_id: int, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Add the request's entries to the run's list (PUT and PATCH alike)."""
        entries = _checked_acl(body, PERMISSION_LEVELS)
        return self._store.job_acls.update(job_id, lambda acl: _merge_acl(acl, entries))

    def experiment_acl(self, experiment_id: str) -> list[dict[str, Any]]:
        acl = self._store.mlflow.experiment_acl(experiment_id[:64])
        if acl is None:
            raise not_found(f"Node ID {experiment_id[:64]} does not exist.")
        return acl

    def update_experiment(
        self, experiment_id: str, body: dict[str, Any], *, replace: bool
    ) -> list[dict[str, Any]]:
        """The request's entries replacing the experiment's list (PUT) or added to it."""
        entries = _checked_acl(body, EXPERIMENT_LEVELS)
        return self._store.mlflow.update_experiment_acl(
            experiment_id, lambda acl: _merge_acl([] if replace else acl, entries)
        )
