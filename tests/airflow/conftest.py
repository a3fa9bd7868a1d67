"""Airflow for the provider tests: a throw-away AIRFLOW_HOME with SQLite metadata, two local Dag
bundles (the repository's ``dags/`` and ``tests/airflow/dag_files/``), and the
``databricks_default`` connection pointing at the local workspace of each test.

Airflow reads its configuration when first imported, so the environment is set here, before
any test module imports it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

REPO = Path(__file__).resolve().parents[2]
TEST_DAGS = Path(__file__).resolve().parent / "dag_files"
_HOME = Path(tempfile.mkdtemp(prefix="airflow-air-tests-"))

AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
        [
            {
                "name": "repo-dags",
                "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {"path": str(REPO / "dags")},
            },
            {
                "name": "test-dags",
                "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {"path": str(TEST_DAGS)},
            },
        ]
    ),
    "AIRFLOW_DISABLE_GREENBACK_PORTAL": "true",
    # One key for this process and the ``airflow`` commands tests run: without it the first
    # command writes a random key to airflow.cfg and encrypts with it, unreadable here.
    "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
    "AIRFLOW__AIR__DEFAULT_POLL_INTERVAL": "0.2",
    # dag.test() runs triggers inline (no scheduler to race with): a token first-poll delay.
    "AIRFLOW__AIR__TRIGGER_FIRST_POLL_DELAY": "0.1",
}
os.environ.update(AIRFLOW_ENV)


@pytest.hookimpl(trylast=True)  # after -m / -k deselection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the ``dag_test_worker`` processes the selected tests need right away: they warm
    up while the other tests run. (Under xdist each test starts its own when it needs it.)"""
    if hasattr(config, "workerinput"):
        return
    from airflow_runs import prestart_dag_test_workers

    prestart_dag_test_workers(
        sum("dag_test_worker" in getattr(item, "fixturenames", ()) for item in items)
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    from airflow_runs import stop_spare_dag_test_workers

    stop_spare_dag_test_workers()


@pytest.fixture
def dag_test_worker(airflow_db) -> Iterator:
    """A separate process that runs one ``dag.test()`` when told (``airflow_runs.DagTestWorker``)."""
    from airflow_runs import take_dag_test_worker

    worker = take_dag_test_worker()
    try:
        yield worker
    finally:
        worker.stop()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The metadata database, migrated once per session."""
    from airflow.utils.db import initdb

    initdb()
    return _HOME


def connection_json(host: str, token: str) -> str:
    return json.dumps({"conn_type": "databricks", "host": host, "password": token})


@pytest.fixture
def workspace(local_workspace, airflow_db, monkeypatch) -> Iterator:
    """The local workspace of this test, as ``databricks_default`` (also for subprocesses)."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_DATABRICKS_DEFAULT",
        connection_json(local_workspace.host, local_workspace.token),
    )
    yield local_workspace


class TaskLog:
    """Structured log events of everything that ran during a test (tasks, triggers, Airflow)."""

    def __init__(self, events: list[dict]) -> None:
        self.events = events

    def text(self) -> str:
        import traceback

        lines = []
        for event in self.events:
            lines.append(" ".join(f"{key}={value}" for key, value in event.items()))
            error = event.get("exc_info") or event.get("exception")
            if isinstance(error, BaseException):
                lines.append("".join(traceback.format_exception(error)))
        return "\n".join(lines)


@pytest.fixture
def task_log() -> Iterator[TaskLog]:
    """Task logs as Airflow emits them (structlog), captured while the test runs."""
    import structlog

    capture = structlog.testing.LogCapture()
    previous = structlog.get_config()["processors"]
    # format_exc_info runs while the exception is being handled, so "Task failed with
    # exception" keeps its traceback and message.
    structlog.configure(processors=[structlog.processors.format_exc_info, capture])
    try:
        yield TaskLog(capture.entries)
    finally:
        structlog.configure(processors=previous)
