"""Following one submission through each orchestrator package (``benchmarks.walks``): the walk
sees the run's whole life and moves on more often than it goes back. A collaborator called at
several moments (a Pipes session, a translator, the step's lineage) is a return, and good
design; a walk that returns more often than it moves on is a tangle, and fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"^(airflow|dagster): (\d+) stops, (\d+) returns, (\d+) files", re.M)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["airflow", "dagster"])
def test_a_submission_walks_forward_more_than_it_returns(which: str) -> None:
    # Its own interpreter, with none of this session's Airflow settings: the Airflow walk
    # configures Airflow through the environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.walks", which, "--show"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = SUMMARY.search(done.stdout)
    assert found is not None and found.group(1) == which, done.stdout[-3000:]
    stops, returns = int(found.group(2)), int(found.group(3))
    assert returns < stops, done.stdout[found.start() :]  # a loose bound
    assert stops >= 8, done.stdout[found.start() :]  # the walk saw the run's whole life
