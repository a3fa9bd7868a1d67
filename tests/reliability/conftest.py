"""Reliability campaigns (docs/spec/targets.md R1-R7): seeded, bounded, each reporting counts.

Small trial counts by default (``make test``); full size with ``AIRO_RELIABILITY_FULL=1``
(``make reliability``). Counts are printed, and merged into
``benchmarks/results/reliability.json`` under the row id only in full mode or with
``AIRO_WRITE_RESULTS=1``, so an ordinary test run leaves the tree clean.

Airflow reads its home folder when first imported, so its environment is set here (unless
another conftest of the same session already did), and this folder's Dags are added as one
more local Dag bundle.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from air_runtime.local import LocalWorkspace, start_local_workspace

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DAGS = HERE / "dags"
RESULTS = REPO / "benchmarks" / "results" / "reliability.json"

FULL = os.environ.get("AIRO_RELIABILITY_FULL") == "1"
WRITE = FULL or os.environ.get("AIRO_WRITE_RESULTS") == "1"
MODE = "full" if FULL else "small"
SEED = int(os.environ.get("AIRO_RELIABILITY_SEED", "20261129"))

# --- Airflow environment ----------------------------------------------------------------

_BUNDLE = {
    "name": "reliability-dags",
    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
    "kwargs": {"path": str(DAGS)},
}


def _airflow_environment() -> None:
    if "AIRFLOW_HOME" not in os.environ:
        home = Path(tempfile.mkdtemp(prefix="airflow-air-reliability-"))
        os.environ.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
                "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                "AIRFLOW_DISABLE_GREENBACK_PORTAL": "true",
            }
        )
    bundles = json.loads(os.environ.get("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST") or "[]")
    if not any(b.get("name") == _BUNDLE["name"] for b in bundles):
        bundles.append(_BUNDLE)
    os.environ["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(bundles)
    os.environ.setdefault("AIRFLOW__AIR__DEFAULT_POLL_INTERVAL", "0.2")


_airflow_environment()


def trials(small: int, full: int) -> int:
    """The trial count of a campaign in this mode."""
    return full if FULL else small


def rng_for(name: str) -> random.Random:
    """A generator seeded from the campaign seed and the scenario name (reproducible)."""
    return random.Random(f"{SEED}:{name}")


# --- counts -----------------------------------------------------------------------------

COUNT_FIELDS = ("trials", "duplicates", "orphans", "leaks", "crashes", "unexpected_retries")


@dataclass
class Tally:
    """Counts of one scenario of one row; ``notes`` holds scenario-specific numbers."""

    row: str
    scenario: str
    trials: int = 0
    duplicates: int = 0
    orphans: int = 0
    leaks: int = 0
    crashes: int = 0
    unexpected_retries: int = 0
    notes: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def fail(self, what: str) -> None:
        """Remember a broken trial (asserted at the end, after the counts are reported)."""
        self.failures.append(what)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in COUNT_FIELDS}
        out.update(seed=SEED, mode=MODE, seconds=round(time.monotonic() - self.started, 1))
        if self.notes:
            out["notes"] = self.notes
        if self.failures:
            out["failures"] = self.failures[:20]
        return out

    def report(self) -> None:
        data = self.as_json()
        shown = " ".join(f"{k}={data[k]}" for k in COUNT_FIELDS)
        print(f"\n[{self.row}/{self.scenario}] {shown} seed={SEED} mode={MODE} {self.notes}")
        if WRITE:
            merge_results(self.row, self.scenario, data)


def merge_results(row: str, scenario: str, data: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    lock = RESULTS.with_suffix(".lock")
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            current = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        except ValueError:
            current = {}
        entry = current.setdefault(row, {})
        scenarios = entry.setdefault("scenarios", {})
        scenarios[scenario] = data
        for name in COUNT_FIELDS:
            entry[name] = sum(int(s.get(name, 0)) for s in scenarios.values())
        entry.update(seed=SEED, mode=MODE)
        RESULTS.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    with contextlib.suppress(OSError):
        lock.unlink()


_CALL_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_CALL_PASSED] = report.passed
    return report


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Iterator[Tally]:
    """``tally`` for the test's row (``row`` marker) and scenario (the test's name). A
    campaign that passed must have run trials: zero trials and zero failures proves nothing."""
    marker = request.node.get_closest_marker("row")
    assert marker is not None, "mark reliability tests with @pytest.mark.row('R<n>')"
    scenario = request.node.name.removeprefix("test_")
    result = Tally(row=marker.args[0], scenario=scenario)
    yield result
    result.report()
    assert not result.failures, "\n".join(result.failures[:10])
    if request.node.stash.get(_CALL_PASSED, False):
        assert result.trials > 0, f"{result.row}/{result.scenario}: no trial ran"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "row(id): the docs/spec/targets.md row a reliability test measures"
    )


# --- workspaces ---------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[LocalWorkspace]:
    """A fresh in-process local workspace, fast retries and image registration."""
    ws = start_local_workspace(
        data_dir=tmp_path / "workspace", image_delay_s=0.2, retry_interval_s=0.05, kill_grace_s=1.0
    )
    try:
        yield ws
    finally:
        ws.stop()


def connection_json(host: str, token: str) -> str:
    return json.dumps({"conn_type": "databricks", "host": host, "password": token})


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The Airflow metadata database of this session, migrated once."""
    from airflow.utils.db import initdb

    initdb()
    return Path(os.environ["AIRFLOW_HOME"])


@pytest.fixture
def airflow_workspace(
    workspace: LocalWorkspace, airflow_db: Path, monkeypatch: pytest.MonkeyPatch
) -> LocalWorkspace:
    """The test's local workspace as Airflow's ``databricks_default`` connection."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_DATABRICKS_DEFAULT", connection_json(workspace.host, workspace.token)
    )
    return workspace


def wait_until(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
