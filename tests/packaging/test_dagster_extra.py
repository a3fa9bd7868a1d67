"""`pip install "air-orchestration[dagster]"` holds what a user of dagster_air needs: dagster
and dagster-pipes, not the dg CLI, the web UI or the PostgreSQL storage (each of which pins
dagster to its own version exactly); those are in `[dagster-dev]` and the dev group."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_core_install import REPO, fresh_install, site_packages_mb

ONLY_FOR_TESTS_AND_EXAMPLES = ("dagster-dg-cli", "dagster-webserver", "dagster-postgres")


@pytest.mark.slow
def test_the_dagster_extra_installs_the_integration_and_nothing_of_the_tools(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "dagster"
    python, listed = fresh_install(venv, f"{REPO}[dagster]")
    names = {line.split()[0] for line in listed.strip().splitlines()[2:]}
    assert {"dagster", "dagster-pipes"} <= names, listed
    assert not names & set(ONLY_FOR_TESTS_AND_EXAMPLES), listed
    print(
        f'"[dagster]" install: {site_packages_mb(venv):.0f} MB in site-packages, {len(names)} packages'
    )
    imported = subprocess.run(
        [str(python), "-c", "import dagster_air; print(dagster_air.AirWorkloadComponent)"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr[-3000:]
