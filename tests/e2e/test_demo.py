"""`make demo` (python -m demo) as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from demo.pipeline import REPO_ROOT

DEMO = ("-m", "demo")  # what `make demo` runs


def run_demo(
    *args: str, timeout: float, entry: tuple[str, ...] = DEMO
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *entry, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_demo_runs_the_pipeline_directly_via_airflow_and_via_dagster() -> None:
    result = run_demo(timeout=280)
    out = result.stdout
    assert result.returncode == 0, f"{out}\n{result.stderr[-3000:]}"
    assert "all stages succeeded" in out
    for stage in ("client", "airflow", "dagster"):
        assert f"  [ ok ] {stage}" in out
    # The summary read back from the workspace: three runs, both stages, both ranks, logs.
    runs = [
        line
        for line in out.splitlines()
        if line.startswith(("  client: run", "  airflow: run", "  dagster: run"))
    ]
    assert len(runs) == 3 and all(" SUCCESS in " in line for line in runs), runs
    assert out.count("container inference (rank 0)") == 3
    assert out.count("container trainer (rank 1)") == 3
    assert out.count("PASS: mean reward") == 3
    assert "local workspace stopped" in out


@pytest.mark.slow
def test_demo_exits_non_zero_when_a_stage_fails() -> None:
    # Simulate mode holds every run RUNNING for an hour: the stage's 5 s budget runs out
    # first however fast or slow the machine is, and the stage fails with RunTimeout.
    result = run_demo("--stages", "client", "--simulate", "3600", "--timeout", "5", timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[FAIL] RunTimeout" in result.stdout
    assert "some stages FAILED" in result.stdout
    # The summary still shows what the workspace knows about the unfinished run.
    assert "client: run" in result.stdout


@pytest.mark.slow
def test_demo_rejects_an_unknown_stage() -> None:
    result = run_demo("--stages", "client,spark", timeout=60)
    assert result.returncode == 2
    assert "unknown stage(s) ['spark']" in result.stderr
