"""The Dagster guide's commands for the example project (docs/guides/dagster.md, the block
marked for this file), run as written (a fresh HOME, so the local workspace starts from
nothing; a free port instead of 8765, which may be taken)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

# dg check defs and dg launch as subprocesses: a minute (make test-fast leaves it out).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guides" / "dagster.md"
MARKER = "<!-- docs-test: script tests/dagster/test_readme_commands.py -->"


def _marked_block(text: str) -> str:
    (block,) = re.findall(re.escape(MARKER) + r"\n```sh\n(.*?)```", text, flags=re.S)
    return block


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_dagster_guide_s_example_commands_work_as_written(tmp_path):
    if Path(sys.executable).parent != REPO / ".venv" / "bin":
        pytest.skip("the guide activates the repository's .venv (make venv)")
    block = _marked_block(GUIDE.read_text())
    port = str(_free_port())
    script = block.replace("8765", port)
    home = tmp_path / "home"
    home.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRO_", "DATABRICKS_", "DAGSTER_", "VIRTUAL_ENV"))
    }
    env.update(HOME=str(home), NO_COLOR="1", PATH=os.defpath)
    # Stop the backgrounded workspace when the block ends, however it ends.
    wrapped = f"set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\n{script}"
    out = subprocess.run(
        ["bash", "-c", wrapped],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "All definitions loaded successfully" in text
    assert 'RUN_SUCCESS - Finished execution of run for "__ASSET_JOB"' in text, text[-3000:]
    materialized = [line for line in text.splitlines() if "ASSET_MATERIALIZATION" in line]
    for asset in ("grpo", "evaluate"):
        assert any(asset in line for line in materialized), asset
