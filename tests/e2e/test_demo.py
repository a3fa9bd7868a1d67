"""`make demo` (python -m demo) as a user runs it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

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
@pytest.mark.timeout(360)
def test_demo_runs_the_pipeline_directly_via_airflow_and_via_dagster(tmp_path: Path) -> None:
    # --serve: as on a terminal, the workspace keeps serving the printed run pages until
    # SIGTERM (or Enter / Ctrl-C), so the RL stage's link is opened in a browser meanwhile.
    with (tmp_path / "stderr").open("w+") as stderr:
        demo = subprocess.Popen(
            [sys.executable, *DEMO, "--serve"],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            assert demo.stdout is not None
            served = []
            for line in demo.stdout:
                served.append(line)
                if "Ctrl-C stops the local workspace" in line:
                    break
            out = "".join(served)
            assert "Ctrl-C stops the local workspace" in out, f"{out}\n{_tail(stderr)}"
            _open_the_rl_run_page(out)
            demo.send_signal(signal.SIGTERM)
            out += demo.stdout.read()
            assert demo.wait(timeout=120) == 0, f"{out}\n{_tail(stderr)}"
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
    assert "all stages succeeded" in out
    for stage in ("client", "airflow", "dagster"):
        assert f"  [ ok ] {stage}" in out
    # The summary read back from the workspace: both stages, both ranks, logs; one run each
    # for the client and Airflow, two for Dagster (grpo's blocking check splits the stages).
    runs = [
        line
        for line in out.splitlines()
        if line.startswith(("  client: run", "  airflow: run", "  dagster: run"))
    ]
    assert len(runs) == 4 and all(" SUCCESS in " in line for line in runs), runs
    assert sum(line.startswith("  dagster: run") for line in runs) == 2, runs
    assert out.count("container inference (rank 0)") == 3
    assert out.count("container trainer (rank 1)") == 3
    assert out.count("PASS: mean reward") == 3
    assert out.count("    run page: http://127.0.0.1:") == 4
    assert "local workspace stopped" in out
    # The images are copied into Unity Catalog first: the workspace refuses runs on others.
    assert "copied vllm/vllm-openai:v0.8.5 to main.rl.vllm:0.8.5" in out


def _tail(handle: Any) -> str:
    handle.seek(0)
    return str(handle.read())[-3000:]


def _open_the_rl_run_page(out: str) -> None:
    """The run page printed for the Airflow RL run, in a browser, after logging in with the
    token in the file the demo names: both containers, each node's log lines."""
    from browser import chromium, wait_until
    from selenium.webdriver.common.by import By

    lines = out.splitlines()
    airflow_run = next(i for i, line in enumerate(lines) if line.startswith("  airflow: run"))
    page = lines[airflow_run + 1].split("run page: ", 1)[1].strip()
    token_file = next(line for line in lines if line.startswith("  token in ")).split()[-1]
    with chromium() as browser:
        browser.get(page)
        wait_until(browser, lambda d: d.find_elements(By.ID, "token"), "the login form")
        browser.find_element(By.ID, "token").send_keys(Path(token_file).read_text().strip())
        browser.find_element(By.CSS_SELECTOR, "form.login button").click()
        wait_until(browser, lambda d: d.current_url == page, "the run page after login")
        text = browser.execute_script("return document.body.innerText")
        assert "Container inference" in text and "Container trainer" in text, text
        assert "[policy_server rank=0]" in text and "[trainer rank=1]" in text, text
        assert text.count("SUCCEEDED") >= 3, text  # nodes 0 and 1 of grpo, node 0 of evaluate


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
