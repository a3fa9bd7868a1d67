"""Following one submission through each orchestrator package enters each file once, in
order (``benchmarks.walks``): a change that sends the walk back to a file it had left fails
here, not only in the benchmark's table."""

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
def test_a_submission_enters_each_file_once(which: str) -> None:
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
    assert returns == 0, done.stdout[found.start() :]
    assert stops >= 8, done.stdout[found.start() :]  # the walk saw the run's whole life
