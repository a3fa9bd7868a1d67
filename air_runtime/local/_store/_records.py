"""What the store reads back: one typed record per row, its JSON columns decoded here and
nowhere else (a run's submitted body, a task run's output and process groups)."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

ACTIVE_LIFE_CYCLES = ("QUEUED", "PENDING", "RUNNING", "TERMINATING", "BLOCKED", "WAITING_FOR_RETRY")


def now_ms() -> int:
    return int(time.time() * 1000)


def acl_of(row: sqlite3.Row | None) -> list[dict[str, Any]]:
    """The access control list a row of `permissions` or `experiments` keeps ([]: none)."""
    return json.loads(row["acl"]) if row is not None else []


@dataclass(frozen=True)
class Run:
    """A submitted run: its body as submitted, and how it stands."""

    run_id: int
    idempotency_token: str | None
    run_name: str
    body: dict[str, Any]
    life_cycle_state: str
    result_state: str | None
    state_message: str
    start_time: int
    end_time: int
    active: bool
    cancel_requested: bool
    mode: str  # "execute" or "simulate": how the workspace ran it

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Run:
        flags = {"active": bool(row["active"]), "cancel_requested": bool(row["cancel_requested"])}
        return cls(**{**dict(row), **flags, "body": json.loads(row["body"])})

    @property
    def task_specs(self) -> list[dict[str, Any]]:
        """The submitted tasks, in their order."""
        tasks: list[dict[str, Any]] = self.body.get("tasks") or []
        return tasks

    @cached_property
    def _specs_by_key(self) -> dict[str, dict[str, Any]]:
        return {str(t.get("task_key")): t for t in self.task_specs}

    def spec(self, task_key: str) -> dict[str, Any]:
        """The submitted task of that key ({} for none)."""
        return self._specs_by_key.get(task_key, {})


@dataclass(frozen=True)
class TaskRun:
    """One attempt of a task: the first, a retry, or one a repair started."""

    task_run_id: int
    run_id: int
    task_key: str
    position: int  # the task's index in the submitted body
    attempt_number: int
    life_cycle_state: str
    result_state: str | None
    state_message: str
    start_time: int
    end_time: int
    output: dict[str, Any]  # what runs/get-output answers, without the metadata
    pgids: list[int]  # the process groups of its ranks, once started
    repair_id: int  # 0 for the original run's task runs

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> TaskRun:
        decoded = {
            "output": json.loads(row["output"] or "{}"),
            "pgids": json.loads(row["pgids"] or "[]"),
        }
        return cls(**{**dict(row), **decoded})

    @property
    def mlflow_ids(self) -> dict[str, Any]:
        """`ai_runtime_task_output`: the MLflow experiment and run ids, once published."""
        ids: dict[str, Any] = self.output.get("ai_runtime_task_output") or {}
        return ids


@dataclass(frozen=True)
class Repair:
    """The original run (kind ORIGINAL, kept once a run is first repaired) or a repair."""

    repair_id: int
    run_id: int
    kind: str
    life_cycle_state: str
    result_state: str | None
    state_message: str
    start_time: int
    end_time: int

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Repair:
        return cls(**dict(row))


@dataclass(frozen=True)
class ImageRecord:
    """A Docker image registration and the outcome its import will have."""

    url: str
    registered_at: float
    generation: int  # registrations of this image so far: a new one is a new manifest
    credentials_scope: str | None
    credentials_key: str | None
    outcome_state: str
    outcome_message: str


@dataclass(frozen=True)
class AccessToken:
    """A token this workspace issued (OAuth, or a rank's MLflow token)."""

    token: str
    principal: str
    expires_at: float


@dataclass(frozen=True)
class UsagePolicy:
    policy_id: str
    policy_name: str


@dataclass(frozen=True)
class MlflowStatus:
    """What `mlflow/runs/update` set on a run (None: not set)."""

    status: str
    end_time: int | None
    run_name: str | None


@dataclass(frozen=True)
class MetricPoint:
    key: str
    value: float
    timestamp: int
    step: int

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "value": self.value,
            "timestamp": self.timestamp,
            "step": self.step,
        }
