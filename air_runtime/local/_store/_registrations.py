"""What the workspace was told to know: Docker image registrations and usage policies."""

from __future__ import annotations

import time

from air_runtime.local._store._database import Database
from air_runtime.local._store._records import ImageRecord, UsagePolicy, now_ms


class ImageTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    def register(
        self, url: str, scope: str | None, key: str | None, outcome_state: str, message: str
    ) -> None:
        """Register the image (again: a new generation, registered now)."""
        with self._db.transaction() as db:
            row = db.execute("SELECT generation FROM images WHERE url = ?", (url,)).fetchone()
            generation = (row["generation"] + 1) if row else 1
            db.execute(
                "INSERT OR REPLACE INTO images (url, registered_at, generation, credentials_scope,"
                " credentials_key, outcome_state, outcome_message) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (url, time.time(), generation, scope, key, outcome_state, message),
            )

    def get(self, url: str) -> ImageRecord | None:
        rows = self._db.query("SELECT * FROM images WHERE url = ?", (url,))
        if not rows:
            return None
        return ImageRecord(**dict(rows[0]))


class UsagePolicyTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    def put(self, policy_id: str, name: str) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO usage_policies (policy_id, policy_name, created)"
            " VALUES (?, ?, ?)",
            (policy_id, name, now_ms()),
        )

    def all(self) -> list[UsagePolicy]:
        """Every policy, by name (case-insensitively), then id."""
        rows = self._db.query(
            "SELECT * FROM usage_policies ORDER BY policy_name COLLATE NOCASE, policy_id"
        )
        return [UsagePolicy(str(r["policy_id"]), str(r["policy_name"])) for r in rows]
