"""A real Dagster deployment for the end-to-end tests: webserver and daemon on PostgreSQL.

Runs are launched through the webserver's GraphQL API and queued (QueuedRunCoordinator), so
the daemon must pick them up and start a run worker process: the same path as a launch from
the UI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from managed_process import ManagedProcess, describe, free_port, reset_postgres_database, wait_for

BIN = Path(sys.executable).parent
TERMINAL_RUN_STATUSES = {"SUCCESS", "FAILURE", "CANCELED"}

LAUNCH_BACKFILL = """
mutation LaunchBackfill($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on Error { message }
  }
}
"""

BACKFILL = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status runs { runId status tags { key value } } }
    ... on PythonError { message }
  }
}
"""
REEXECUTE_BACKFILL = """
mutation ReexecuteBackfill($params: ReexecutionParams!) {
  reexecutePartitionBackfill(reexecutionParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on Error { message }
  }
}
"""
BACKFILL_ENDED = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}

LAUNCH_RUN = """
mutation LaunchRun($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on PythonError { message stack }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on Error { message }
  }
}
"""

RUN_STATUS = """
query RunStatus($runId: ID!) {
  runOrError(runId: $runId) {
    __typename
    ... on Run { runId status }
  }
}
"""

RUN_MATERIALIZATIONS = """
query RunMaterializations($runId: ID!) {
  runOrError(runId: $runId) {
    ... on Run {
      status
      assetMaterializations {
        assetKey { path }
        metadataEntries {
          label
          __typename
          ... on TextMetadataEntry { text }
          ... on IntMetadataEntry { intValue }
          ... on FloatMetadataEntry { floatValue }
          ... on UrlMetadataEntry { url }
          ... on JsonMetadataEntry { jsonString }
          ... on BoolMetadataEntry { boolValue }
          ... on MarkdownMetadataEntry { mdStr }
        }
      }
    }
  }
}
"""

RUN_EVENTS = """
query RunEvents($runId: ID!) {
  logsForRun(runId: $runId, limit: 300) {
    __typename
    ... on EventConnection { events { __typename ... on MessageEvent { message level } } }
  }
}
"""

CHILD_RUNS = """
query ChildRuns($filter: RunsFilter!) {
  runsOrError(filter: $filter) { __typename ... on Runs { results { runId status } } }
}
"""

WORKSPACE_STATUS = """
query Workspace {
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError {
          __typename
          ... on RepositoryLocation { repositories { name jobs { name } } }
          ... on PythonError { message stack }
        }
      }
    }
  }
}
"""

DAEMON_HEALTH = """
query DaemonHealth {
  instance { daemonHealth { allDaemonStatuses { daemonType healthy required } } }
}
"""


class DagsterDeployment:
    def __init__(
        self,
        root: Path,
        *,
        database_dsn: str,
        code_location: Mapping[str, Any],
        extra_env: Mapping[str, str],
        instance_settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.root = root
        self.home = root / "dagster_home"
        self.log_dir = root / "service_logs"
        self.home.mkdir(parents=True, exist_ok=True)
        self.database_dsn = database_dsn
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.processes: list[ManagedProcess] = []
        instance = {
            # psycopg2 named explicitly: SQLAlchemy 2.1 defaults to psycopg 3, with which
            # dagster-postgres' NOTIFY statement fails to bind and no event is stored.
            "storage": {
                "postgres": {
                    "postgres_url": database_dsn.replace("postgresql://", "postgresql+psycopg2://")
                }
            },
            # Launches wait in the queue until the daemon dequeues them.
            "run_coordinator": {
                "module": "dagster._core.run_coordinator",
                "class": "QueuedRunCoordinator",
                "config": {"max_concurrent_runs": 2},
            },
            "telemetry": {"enabled": False},
            # e.g. run_monitoring and run_retries, for the daemons that recover runs
            **dict(instance_settings or {}),
        }
        (self.home / "dagster.yaml").write_text(yaml.safe_dump(instance))
        self.workspace_file = root / "workspace.yaml"
        self.workspace_file.write_text(yaml.safe_dump({"load_from": [dict(code_location)]}))
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("DAGSTER")},
            "DAGSTER_HOME": str(self.home),
            **dict(extra_env),
        }

    def start(self) -> None:
        reset_postgres_database(self.database_dsn)
        # The schema is created once before the services start: a webserver and a daemon
        # creating it at the same time collide ("type instigators already exists").
        subprocess.run(
            [str(BIN / "dagster"), "instance", "migrate"],
            env=self.env,
            cwd=self.root,
            check=True,
            capture_output=True,
            timeout=300,
        )
        workspace = ["-w", str(self.workspace_file)]
        self.processes = [
            ManagedProcess(
                "dagster-webserver",
                [
                    str(BIN / "dagster-webserver"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    *workspace,
                ],
                env=self.env,
                log_dir=self.log_dir,
                cwd=self.root,
            ),
            ManagedProcess(
                "dagster-daemon",
                [str(BIN / "dagster-daemon"), "run", *workspace],
                env=self.env,
                log_dir=self.log_dir,
                cwd=self.root,
            ),
        ]
        wait_for(
            self._location_loaded,
            timeout=150,
            what="Dagster code location loaded",
            processes=self.processes,
            interval=1,
        )
        wait_for(
            self._daemons_healthy,
            timeout=120,
            what="Dagster daemons healthy",
            processes=self.processes,
            interval=1,
        )

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()
        self.processes = []

    def logs(self) -> str:
        return describe(self.processes)

    def graphql(self, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
        response = httpx.post(
            f"{self.base_url}/graphql",
            json={"query": query, "variables": dict(variables or {})},
            timeout=60,
        )
        response.raise_for_status()
        body = response.json()
        if body.get("errors"):
            raise AssertionError(f"GraphQL errors: {body['errors']}")
        return dict(body["data"])

    def _location_loaded(self) -> list[dict[str, Any]] | None:
        data = self.graphql(WORKSPACE_STATUS)["workspaceOrError"]
        entries = data.get("locationEntries") or []
        for entry in entries:
            location = entry.get("locationOrLoadError") or {}
            if location.get("__typename") == "PythonError":
                pytest.fail(f"code location {entry['name']} failed to load: {location['message']}")
        loaded = [e for e in entries if (e.get("locationOrLoadError") or {}).get("repositories")]
        return loaded or None

    def _daemons_healthy(self) -> bool:
        statuses = self.graphql(DAEMON_HEALTH)["instance"]["daemonHealth"]["allDaemonStatuses"]
        required = [s for s in statuses if s["required"]]
        return bool(required) and all(s["healthy"] for s in required)

    def jobs(self) -> dict[str, list[str]]:
        """Location name -> job names."""
        loaded = self._location_loaded() or []
        return {
            e["name"]: [
                j["name"] for r in e["locationOrLoadError"]["repositories"] for j in r["jobs"]
            ]
            for e in loaded
        }

    def backfill(self, asset: str, partitions: Sequence[str], *, timeout: float) -> dict[str, Any]:
        """Launch a backfill of ``partitions`` of ``asset`` (as from the UI: the daemon starts
        its runs) and wait until it ended: its id, status and runs (id, status, tags)."""
        return self.wait_for_backfill(self.launch_backfill(asset, partitions), timeout)

    def launch_backfill(self, asset: str, partitions: Sequence[str]) -> str:
        """Launch a backfill of ``partitions`` of ``asset``; its id."""
        launched = self.graphql(
            LAUNCH_BACKFILL,
            {"params": {"partitionNames": list(partitions), "assetSelection": [{"path": [asset]}]}},
        )["launchPartitionBackfill"]
        if launched["__typename"] != "LaunchBackfillSuccess":
            pytest.fail(f"launchPartitionBackfill returned {launched}")
        return str(launched["backfillId"])

    def backfill_runs(self, backfill_id: str) -> list[dict[str, Any]]:
        """The runs a backfill has launched so far (id, status, tags)."""
        backfill = self.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]
        return list(backfill.get("runs") or [])

    def reexecute_backfill(
        self, backfill_id: str, strategy: str, *, timeout: float
    ) -> dict[str, Any]:
        """Re-execute an ended backfill (the backfill page's buttons: ``FROM_FAILURE`` or
        ``ALL_STEPS``) and wait until the new backfill ended: its id, status and runs."""
        launched = self.graphql(
            REEXECUTE_BACKFILL, {"params": {"parentRunId": backfill_id, "strategy": strategy}}
        )["reexecutePartitionBackfill"]
        if launched["__typename"] != "LaunchBackfillSuccess":
            pytest.fail(f"reexecutePartitionBackfill returned {launched}")
        return self.wait_for_backfill(launched["backfillId"], timeout)

    def wait_for_backfill(self, backfill_id: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            backfill = self.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]
            if backfill["__typename"] != "PartitionBackfill":
                pytest.fail(f"the backfill could not be read: {backfill}")
            if backfill["status"] in BACKFILL_ENDED:
                return {**backfill, "id": backfill_id}
            if not all(p.alive for p in self.processes) or time.monotonic() > deadline:
                pytest.fail(f"the backfill did not end: {backfill}\n{self.logs()}")
            time.sleep(1)

    def launch(
        self,
        *,
        location: str,
        job: str,
        asset_selection: Sequence[Sequence[str]] | None = None,
        run_config: Mapping[str, Any] | None = None,
    ) -> str:
        selector: dict[str, Any] = {
            "repositoryLocationName": location,
            "repositoryName": "__repository__",
            "jobName": job,
        }
        if asset_selection is not None:
            selector["assetSelection"] = [{"path": list(path)} for path in asset_selection]
        params = {"selector": selector, "runConfigData": dict(run_config or {})}
        result = self.graphql(LAUNCH_RUN, {"executionParams": params})["launchRun"]
        if result["__typename"] != "LaunchRunSuccess":
            pytest.fail(f"launchRun returned {result}")
        return str(result["run"]["runId"])

    def wait_for_run(self, run_id: str, *, timeout: float) -> tuple[str, list[str]]:
        """The run's final status and every status seen on the way (QUEUED, STARTING, ...)."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            status = self.graphql(RUN_STATUS, {"runId": run_id})["runOrError"]["status"]
            if not seen or seen[-1] != status:
                seen.append(status)
            if status in TERMINAL_RUN_STATUSES:
                return status, seen
            dead = [p for p in self.processes if not p.alive]
            if dead or time.monotonic() > deadline:
                pytest.fail(
                    f"run {run_id} {'lost a service' if dead else 'timed out'} in {status}; "
                    f"statuses {seen}\n{self.run_messages(run_id)}\n{self.logs()}"
                )
            time.sleep(0.5)

    def child_runs(self, run_id: str) -> list[str]:
        """The runs made from ``run_id`` (a run retry, a re-execution)."""
        variables = {"filter": {"tags": [{"key": "dagster/parent_run_id", "value": run_id}]}}
        found = self.graphql(CHILD_RUNS, variables)["runsOrError"]
        return [str(r["runId"]) for r in found.get("results") or []]

    def run_messages(self, run_id: str, last: int = 40) -> str:
        events = self.graphql(RUN_EVENTS, {"runId": run_id})["logsForRun"].get("events") or []
        lines = [f"{e['__typename']}: {e.get('message', '')}" for e in events]
        return "\n".join(lines[-last:])

    def materializations(self, run_id: str) -> dict[tuple[str, ...], dict[str, Any]]:
        """Asset key -> {metadata label: value} of each materialization of the run."""
        run = self.graphql(RUN_MATERIALIZATIONS, {"runId": run_id})["runOrError"]
        result = {}
        for event in run["assetMaterializations"]:
            values = {}
            for entry in event["metadataEntries"]:
                value = next(
                    (v for k, v in entry.items() if k not in ("label", "__typename")), None
                )
                values[entry["label"]] = value
            result[tuple(event["assetKey"]["path"])] = values
        return result
