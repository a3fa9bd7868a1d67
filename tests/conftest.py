"""Shared fixtures: a local workspace served over real HTTP on a free 127.0.0.1 port."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under ``pytest -n N`` (make test) each worker takes whole scopes: a test file, or all
    the Airflow tests (they share one process's Airflow configuration and Dag runs, in file
    order), or one of two halves of the deployments (whole Airflow or Dagster installations
    with their daemons: one at a time per half). The longest scopes go first, so that no
    worker starts one when the others are done."""
    from xdist.scheduler import LoadScopeScheduling

    class ScopeScheduling(LoadScopeScheduling):
        _longest_first = False

        def _split_scope(self, nodeid: str) -> str:
            return scheduling_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self._longest_first:
                for scope in reversed(LONGEST_SCOPES):
                    if scope in self.workqueue:
                        self.workqueue.move_to_end(scope, last=False)
                self._longest_first = True
            super()._assign_work_unit(node)

    return ScopeScheduling(config, log)


# The deployments in two halves of about the same length (about 14 minutes each on two
# shared cores): the Airflow deployments with several schedulers, executors or repairs, and
# the rest. Each half runs its deployments one after another.
_FIRST_HALF = frozenset(
    f"tests/e2e/test_airflow_{name}.py"
    for name in (
        "ha",
        "trigger_ends",
        "log_routing",
        "repair_logs",
        "local_executor",
        "celery_executor",
        "repair",
    )
)
LONGEST_SCOPES = ("deployments 1", "deployments 2", "airflow")


def scheduling_scope(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/airflow/"):
        return "airflow"
    if path in _FIRST_HALF:
        return "deployments 1"
    if path.startswith("tests/e2e/") or path in (
        "tests/reliability/test_airflow_daemons.py",
        "tests/dagster/test_deployments.py",
    ):
        return "deployments 2"
    return path


# `pytest.importorskip` of an optional dependency skips on a developer machine without it;
# under CI (which installs every one) the test fails instead, as a missing deployment
# service does (tests/deployment_services.py): a green CI never hides an untested feature.
_IMPORT_SKIP = "could not import "


def _missing_in_ci(reason: str) -> str | None:
    if os.environ.get("CI") and reason.removeprefix("Skipped: ").startswith(_IMPORT_SKIP):
        return f"{reason} (CI is set: every optional dependency must be installed)"
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and call.excinfo and call.excinfo.errisinstance(pytest.skip.Exception):
        failure = _missing_in_ci(str(call.excinfo.value))
        if failure:
            report.outcome = "failed"
            report.longrepr = failure
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """The same for a module that calls ``pytest.importorskip`` at its top."""
    report = yield
    if report.skipped and isinstance(report.longrepr, tuple):
        failure = _missing_in_ci(str(report.longrepr[2]))
        if failure:
            report.outcome = "failed"
            report.longrepr = failure
    return report


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
