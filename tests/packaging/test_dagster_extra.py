"""`pip install "air-orchestration[dagster]"` holds what a user of dagster_air needs: dagster
and dagster-pipes, not the dg CLI, the web UI or the PostgreSQL storage (each of which pins
dagster to its own version exactly); those are in `[dagster-dev]` and the dev group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")
ONLY_FOR_TESTS_AND_EXAMPLES = ("dagster-dg-cli", "dagster-webserver", "dagster-postgres")


@pytest.mark.slow
def test_the_dagster_extra_installs_the_integration_and_nothing_of_the_tools(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "dagster"
    subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(UV), "pip", "install", "-q", "--python", str(python), f"{REPO}[dagster]"],
        check=True,
        timeout=900,
    )
    listed = subprocess.run(
        [str(UV), "pip", "list", "--python", str(python)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    names = {line.split()[0] for line in listed.strip().splitlines()[2:]}
    assert {"dagster", "dagster-pipes"} <= names, listed
    assert not names & set(ONLY_FOR_TESTS_AND_EXAMPLES), listed
    site_packages = next((venv / "lib").glob("python3*/site-packages"))
    size_mb = sum(f.stat().st_size for f in site_packages.rglob("*") if f.is_file()) / 2**20
    print(f'"[dagster]" install: {size_mb:.0f} MB in site-packages, {len(names)} packages')
    imported = subprocess.run(
        [str(python), "-c", "import dagster_air; print(dagster_air.AirWorkloadComponent)"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr[-3000:]
