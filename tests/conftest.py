"""Shared fixtures: a local workspace served over real HTTP on a free 127.0.0.1 port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deployment_services import summary_line

from air_runtime.local import LocalWorkspace, start_local_workspace


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The reliability campaigns are slow (`make test-fast` leaves them out)."""
    for item in items:
        if "reliability" in item.path.parts or "packaging" in item.path.parts:
            item.add_marker(pytest.mark.slow)


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
