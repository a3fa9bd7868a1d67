"""Shared fixtures: a local workspace served over real HTTP on a free 127.0.0.1 port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deployment_services import summary_line

from air_runtime.local import LocalWorkspace, start_local_workspace

# `make test-fast` leaves out what is `slow`; `make test` runs everything. Slow: the
# reliability campaigns, the wheel install, the runs of the toy RL scripts, and every test
# that runs a real orchestrator (an Airflow metadata database and `dag.test()`, a Dagster
# instance). The fast set keeps the orchestrators' definition-time checks, the client, the
# conformance transcripts and the local workspace's API.
_SLOW_FOLDERS = frozenset({"reliability", "packaging", "examples"})
_ORCHESTRATOR_FIXTURES = frozenset({"airflow_db", "dagster_home", "instance", "air_workspace"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if _SLOW_FOLDERS & set(item.path.parts) or _ORCHESTRATOR_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
        group = _xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def _xdist_group(item: pytest.Item) -> str | None:
    """Under ``pytest -n N --dist loadgroup`` (make test): the Airflow tests share one
    process's Airflow configuration and Dag runs, in their file order; the deployments (whole
    Airflow or Dagster installations with their daemons) run one at a time."""
    parts = set(item.path.parts)
    if "airflow" in parts and "tests" in parts and "e2e" not in parts:
        return "airflow"
    if "e2e" in parts or item.path.name in ("test_airflow_daemons.py", "test_deployments.py"):
        return "deployments"
    return None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One loud line when deployment tests were skipped for a missing PostgreSQL or Redis."""
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        if isinstance(report.longrepr, tuple):
            reasons.append(str(report.longrepr[2]))
    line = summary_line(reasons)
    if line:
        terminalreporter.write_line(line, red=True, bold=True)


@pytest.fixture
def local_workspace(tmp_path: Path) -> Iterator[LocalWorkspace]:
    """A fresh in-process local workspace (execute mode, its own random token as
    `workspace.token`, fast image registration) with its own data dir; stopped after the
    test."""
    workspace = start_local_workspace(
        data_dir=tmp_path / "workspace", image_delay_s=0.2, retry_interval_s=0.05
    )
    try:
        yield workspace
    finally:
        workspace.stop()


@pytest.fixture(scope="session")
def session_local_workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorkspace]:
    """One local workspace shared by a whole test session (state accumulates: use unique
    paths, scopes and idempotency tokens)."""
    workspace = start_local_workspace(
        data_dir=tmp_path_factory.mktemp("session-workspace"),
        image_delay_s=0.2,
        retry_interval_s=0.05,
    )
    try:
        yield workspace
    finally:
        workspace.stop()
