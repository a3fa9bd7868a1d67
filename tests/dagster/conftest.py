"""Dagster tests: a temporary DAGSTER_HOME and an AirWorkspace pointed at the local workspace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from air_runtime.local import LocalWorkspace
from dagster_air import AirWorkspace


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.fixture
def instance(dagster_home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.get() as instance:
        yield instance


@pytest.fixture
def air_workspace(local_workspace: LocalWorkspace, monkeypatch: pytest.MonkeyPatch) -> AirWorkspace:
    monkeypatch.setenv("AIRO_HOST", local_workspace.host)
    monkeypatch.setenv("AIRO_TOKEN", local_workspace.token)
    return AirWorkspace(
        host=dg.EnvVar("AIRO_HOST"),
        token=dg.EnvVar("AIRO_TOKEN"),
        poll_interval=0.2,
        request_budget=50,
        cancel_wait=20,
    )
