"""The core installs and works without any extra: `pip install air-orchestration` gives
`air_runtime` and `airo validate`, and `airo workspace` says which extra it needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")


def fresh_install(venv: Path, requirement: str) -> tuple[Path, str]:
    """A new virtual environment with ``requirement`` installed: its python and what
    ``uv pip list`` says it holds (lower case)."""
    subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(UV), "pip", "install", "-q", "--python", str(python), requirement],
        check=True,
        timeout=900,
    )
    listed = subprocess.run(
        [str(UV), "pip", "list", "--python", str(python)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    return python, listed


def site_packages_mb(venv: Path) -> float:
    site_packages = next((venv / "lib").glob("python3*/site-packages"))
    return sum(f.stat().st_size for f in site_packages.rglob("*") if f.is_file()) / 2**20


@pytest.mark.slow
def test_core_without_extras(tmp_path: Path) -> None:
    venv = tmp_path / "core"
    python, listed = fresh_install(venv, str(REPO))
    for heavy in ("fastapi", "uvicorn", "apache-airflow", "dagster", "tenacity"):
        assert f"\n{heavy} " not in listed, listed
    # What `pip install air-orchestration` costs (40 MB and 24 packages on Linux x86_64 with
    # Python 3.11; databricks-sdk and the cryptography it pulls in are most of it).
    size_mb = site_packages_mb(venv)
    packages = len(listed.strip().splitlines()) - 2  # less the header and its rule
    print(f"core install: {size_mb:.0f} MB in site-packages, {packages} packages")
    assert size_mb < 64 and packages < 32, listed

    airo = venv / "bin" / "airo"
    valid = subprocess.run(
        [str(airo), "validate", str(REPO / "examples" / "single_node.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert valid.returncode == 0, valid.stdout + valid.stderr
    # A Jinja-templated workload needs jinja2, an optional extra: the message says which.
    templated = subprocess.run(
        [str(airo), "validate", str(REPO / "dags" / "workloads" / "nightly_torchrun.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert templated.returncode == 1
    assert 'pip install "air-orchestration[templates]"' in templated.stdout
    imported = subprocess.run(
        [str(python), "-c", "import air_runtime, air_runtime.client; print(air_runtime.AirClient)"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr
    workspace = subprocess.run(
        [str(airo), "workspace"], capture_output=True, text=True, check=False
    )
    assert workspace.returncode == 2
    assert 'pip install "air-orchestration[local]"' in workspace.stderr
    # A loopback host without --token: no [local] extra to find a token file with, no crash.
    token = subprocess.run(
        [
            str(python),
            "-c",
            "from air_runtime.cli._run_cmds import _local_token as t; print(t('http://127.0.0.1:9'))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (token.returncode, token.stdout.strip()) == (0, "None"), token.stderr
