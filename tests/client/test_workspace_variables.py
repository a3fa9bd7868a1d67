"""One set of variables finds a workspace from every entry point: DATABRICKS_HOST /
DATABRICKS_TOKEN (what the databricks-sdk chain reads) for ``airo``, the clients and the
Dagster resource; the older AIRO_HOST / AIRO_TOKEN / AIRO_WORKSPACE_TOKEN still work, each
with one warning line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from air_runtime import AirClient
from air_runtime.local import LocalWorkspace, start_local_workspace

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_README = REPO / "examples" / "dagster" / "README.md"
BIN = Path(sys.executable).parent


@pytest.fixture
def home_workspace(tmp_path: Path) -> Iterator[LocalWorkspace]:
    """A local workspace in the default data dir of a fresh HOME (where the README's
    commands find its token file)."""
    data_dir = tmp_path / "home" / ".local" / "share" / "airo" / "workspace"
    workspace = start_local_workspace(data_dir=data_dir)
    try:
        yield workspace
    finally:
        workspace.stop()


def _env(tmp_path: Path, **variables: str) -> dict[str, str]:
    """This process's environment without any workspace variable, HOME the fresh one."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRO_", "DATABRICKS_", "XDG_"))
    }
    env.update(
        HOME=str(tmp_path / "home"),
        DATABRICKS_CONFIG_FILE=str(tmp_path / "no.databrickscfg"),
        PATH=f"{BIN}{os.pathsep}{os.defpath}",
        **variables,
    )
    return env


def _bash(script: str, env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{script}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_dagster_example_exports_then_airo_list_work(
    home_workspace: LocalWorkspace, tmp_path: Path
) -> None:
    (block,) = re.findall(r"```sh\n(.*?)```", EXAMPLE_README.read_text(), flags=re.S)
    port = home_workspace.host.rsplit(":", 1)[1]
    exports = [line for line in block.splitlines() if line.startswith("export ")]
    airo_list = [line for line in block.splitlines() if line.startswith("airo list")]
    assert exports and airo_list, block
    script = "\n".join([*exports, *airo_list]).replace("8765", port)
    out = _bash(script, _env(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warning" not in out.stderr, out.stderr
    assert "no workspace credentials" not in out.stderr


def test_airo_reads_the_older_names_with_a_warning_line(
    home_workspace: LocalWorkspace, tmp_path: Path
) -> None:
    host, token = home_workspace.host, home_workspace.token
    out = _bash("airo list", _env(tmp_path, AIRO_HOST=host, AIRO_TOKEN=token))
    assert out.returncode == 0, out.stderr
    warned = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [
        "warning: $AIRO_HOST is deprecated and will be ignored in a later release: "
        "set $DATABRICKS_HOST instead",
        "warning: $AIRO_TOKEN is deprecated and will be ignored in a later release: "
        "set $DATABRICKS_TOKEN instead",
    ], out.stderr
    assert token not in out.stderr + out.stdout

    out = _bash(f"airo list --host {host}", _env(tmp_path, AIRO_WORKSPACE_TOKEN=token))
    assert out.returncode == 0, out.stderr
    assert "warning: $AIRO_WORKSPACE_TOKEN is deprecated" in out.stderr
    assert "set $DATABRICKS_TOKEN instead" in out.stderr


def test_a_new_name_wins_over_an_older_one_without_a_warning(
    home_workspace: LocalWorkspace, tmp_path: Path
) -> None:
    env = _env(
        tmp_path,
        DATABRICKS_HOST=home_workspace.host,
        DATABRICKS_TOKEN=home_workspace.token,
        AIRO_HOST="http://127.0.0.1:9",
        AIRO_TOKEN="not-the-token-0123456789",
    )
    out = _bash("airo list", env)
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stderr


def test_the_client_and_the_dagster_resource_read_the_same_names(
    local_workspace: LocalWorkspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in [n for n in os.environ if n.startswith(("AIRO_", "DATABRICKS_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "no.databrickscfg"))
    monkeypatch.setenv("DATABRICKS_HOST", local_workspace.host)
    monkeypatch.setenv("DATABRICKS_TOKEN", local_workspace.token)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names: no warning
        client = AirClient()
    with client:
        assert client.host == local_workspace.host
        client.list_runs()

    monkeypatch.delenv("DATABRICKS_HOST")
    monkeypatch.delenv("DATABRICKS_TOKEN")
    monkeypatch.setenv("AIRO_HOST", local_workspace.host)
    monkeypatch.setenv("AIRO_TOKEN", local_workspace.token)
    with pytest.warns(FutureWarning, match=r"\$AIRO_HOST is deprecated"), AirClient() as client:
        assert client.host == local_workspace.host
        client.list_runs()

    dagster_air = pytest.importorskip("dagster_air")
    resource = dagster_air.AirWorkspace()
    with pytest.warns(FutureWarning, match=r"\$AIRO_TOKEN is deprecated"):
        client = resource.get_client()
    with client:
        assert client.host == local_workspace.host
        client.list_runs()
