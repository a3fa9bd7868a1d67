"""The SQLite state of a local workspace, and the only place its SQL is written: runs and
their task runs, secrets, tokens, access lists, images, usage policies and MLflow data.

Workspace and volume files live as plain files under the data dir (see `files/backend.py`); only
the state that needs queries or atomic updates is here. Reads come back as the records of
`_records` (JSON columns decoded there); the rules of what may be written are the
backend's (`_workspace_state`)."""

from __future__ import annotations

from pathlib import Path

from air_runtime.local._store._access import JobAclTable, SecretTables, TokenTables
from air_runtime.local._store._database import Database
from air_runtime.local._store._mlflow import MlflowTables, ParamConflict
from air_runtime.local._store._records import (
    ACTIVE_LIFE_CYCLES,
    AccessToken,
    ImageRecord,
    MetricPoint,
    MlflowStatus,
    Repair,
    Run,
    TaskRun,
    UsagePolicy,
    now_ms,
)
from air_runtime.local._store._registrations import ImageTable, UsagePolicyTable
from air_runtime.local._store._runs import RunTables

__all__ = [
    "ACTIVE_LIFE_CYCLES",
    "AccessToken",
    "ImageRecord",
    "ImageTable",
    "MetricPoint",
    "MlflowStatus",
    "ParamConflict",
    "Repair",
    "Run",
    "SecretTables",
    "Store",
    "TaskRun",
    "TokenTables",
    "UsagePolicy",
    "UsagePolicyTable",
    "now_ms",
]


class Store:
    """One database, its tables grouped by what they keep."""

    def __init__(self, path: Path) -> None:
        self._db = Database(path)
        self.runs = RunTables(self._db)
        self.mlflow = MlflowTables(self._db)
        self.secrets = SecretTables(self._db)
        self.tokens = TokenTables(self._db)
        self.job_acls = JobAclTable(self._db)
        self.images = ImageTable(self._db)
        self.usage_policies = UsagePolicyTable(self._db)

    def instance_id(self) -> str:
        return self._db.instance_id()

    def close(self) -> None:
        self._db.close()
