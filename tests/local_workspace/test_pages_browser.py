"""The run pages in a real headless Chromium: log in with the token, read a 2-container
run, follow a running one, and nothing a workload prints becomes markup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from browser import chromium, screenshot, wait_until

from air_runtime.local import LocalWorkspace
from tests.local_workspace.conftest import Workloads

POLICY_SERVER = """
echo "policy server: loading toy-policy on rank $POD_RANK of $NUM_NODES"
echo "policy server: serving on 127.0.0.1:8000"
"""
TRAINER = """
echo "trainer: rank $POD_RANK connecting to the policy server"
for step in 1 2 3; do echo "trainer: step $step mean reward 0.$((step * 3))"; done
"""


@pytest.fixture
def browser() -> Any:
    with chromium() as driver:
        yield driver


def _log_in(driver: Any, workspace: LocalWorkspace, path: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(workspace.host + path)
    wait_until(driver, lambda d: d.find_elements(By.ID, "token"), "the login form")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    # The address changes when the next page starts loading; read it once it has loaded.
    wait_until(
        driver,
        lambda d: (
            (
                "/login" not in d.current_url.removeprefix(workspace.host)
                and d.execute_script("return document.readyState") == "complete"
            )
            or bool(d.find_elements(By.CSS_SELECTOR, "p.error"))
        ),
        "the page the login leads to",
    )


# Read in one script, not element by element: the live page replaces the nodes it updates,
# and an element found by one WebDriver call can be gone by the next.
def _text(driver: Any, selector: str) -> str:
    return str(
        driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]),"
            " e => e.innerText).join('\\n');",
            selector,
        )
    )


def _node_log(driver: Any, task_run_id: int, node: int) -> str:
    return str(
        driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';",
            f'pre[data-node="{task_run_id}.{node}"]',
        )
    )


def test_log_in_and_read_a_two_container_run(
    browser: Any, local_workspace: LocalWorkspace, workloads: Workloads
) -> None:
    task = workloads.containers_task(
        [
            {"name": "inference", "ranks": [0], "command": POLICY_SERVER},
            {"name": "trainer", "ranks": [1], "command": TRAINER},
        ],
        key="grpo",
    )
    run = workloads.wait(workloads.submit(task, run_name="rl_pipeline"))
    assert run["state"]["result_state"] == "SUCCESS", run["state"]
    task_run_id = run["tasks"][0]["run_id"]
    page = f"/jobs/runs/{run['run_id']}"

    _log_in(browser, local_workspace, page, local_workspace.token)
    wait_until(browser, lambda d: d.current_url.endswith(page), "the run page after login")
    headings = _text(browser, "section.container h3")
    assert "Container inference" in headings and "Container trainer" in headings
    containers = _text(browser, "section.container")
    assert "Ranks\n0" in containers and "Ranks\n1" in containers
    assert "main.rl.image:1" in containers
    assert "policy server: serving on 127.0.0.1:8000" in _node_log(browser, task_run_id, 0)
    assert "trainer: step 3 mean reward 0.9" in _node_log(browser, task_run_id, 1)
    nodes = _text(browser, ".node-head")
    assert nodes.count("SUCCEEDED") == 2 and nodes.count("exit code 0") == 2
    facts = _text(browser, "dl.facts")
    assert "GPU-hours" in facts and "MLflow run" in facts and "Launch folder" in facts

    # The session: a cookie for this host only, HttpOnly and SameSite=Strict, holding no
    # token; the token is in no URL and nowhere in the page.
    cookies = browser.get_cookies()
    assert [c["name"] for c in cookies] == [f"airo_session_{local_workspace.port}"]
    cookie = cookies[0]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["domain"] == "127.0.0.1" and local_workspace.token not in cookie["value"]
    assert local_workspace.token not in browser.current_url
    assert local_workspace.token not in browser.page_source
    screenshot(browser, "run-page.png")

    # The task run page and the whole log of a node, from the page's own links.
    browser.get(f"{local_workspace.host}/jobs/runs/{task_run_id}")
    assert "Task grpo · attempt 0" in _text(browser, "h1")
    assert _text(browser, "section.container h3").count("Container") == 2
    browser.get(f"{local_workspace.host}/jobs/runs/{task_run_id}/logs/1")
    assert "trainer: step 1 mean reward 0.3" in _text(browser, "body")
    browser.get(f"{local_workspace.host}/jobs/runs")
    assert str(run["run_id"]) in _text(browser, "table") and "rl_pipeline" in _text(
        browser, "table"
    )


def test_a_running_runs_log_tail_grows(
    browser: Any, local_workspace: LocalWorkspace, workloads: Workloads, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    waits = f'echo "rank $POD_RANK waiting"\nwhile [ ! -e "{flag}" ]; do sleep 0.05; done\n'
    task = workloads.containers_task(
        [
            {
                "name": "inference",
                "ranks": [0],
                "command": waits + 'echo "inference after the flag"',
            },
            {"name": "trainer", "ranks": [1], "command": waits + 'echo "trainer after the flag"'},
        ]
    )
    run_id = workloads.submit(task)
    task_run_id = workloads.wait_for(run_id, "RUNNING")["tasks"][0]["run_id"]

    _log_in(browser, local_workspace, f"/jobs/runs/{run_id}", local_workspace.token)
    for node in (0, 1):
        wait_until(
            browser,
            lambda d, n=node: f"rank {n} waiting" in _node_log(d, task_run_id, n),
            f"node {node}'s first line",
        )
    assert "RUNNING" in _text(browser, ".node-head")
    assert "after the flag" not in _node_log(browser, task_run_id, 1)
    flag.touch()  # the ranks print their next line only now
    wait_until(
        browser,
        lambda d: "trainer after the flag" in _node_log(d, task_run_id, 1),
        "the trainer's line printed after the flag, in the page's live tail",
    )
    # The run ends: the page shows the nodes' final states without a manual reload.
    wait_until(
        browser,
        lambda d: _text(d, ".node-head").count("SUCCEEDED") == 2,
        "both nodes SUCCEEDED once the run ended",
    )
    assert "inference after the flag" in _node_log(browser, task_run_id, 0)


def test_a_bad_token_is_refused(browser: Any, local_workspace: LocalWorkspace) -> None:
    from selenium.webdriver.common.by import By

    _log_in(browser, local_workspace, "/jobs/runs", "airo-not-the-token")
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.error"), "an error")
    assert "That token is not valid for this workspace." in _text(browser, "p.error")
    assert not [c for c in browser.get_cookies() if c["name"].startswith("airo_session")]
    browser.get(f"{local_workspace.host}/jobs/runs")
    assert browser.find_elements(By.ID, "token"), "still asked to log in"
    assert "/login?next=/jobs/runs" in browser.current_url


def test_markup_from_a_workload_shows_as_text(
    browser: Any, local_workspace: LocalWorkspace, workloads: Workloads
) -> None:
    from selenium.webdriver.common.by import By

    line = "<script>document.title='owned'</script><b id=injected>bold</b>"
    task = workloads.command_task(f'echo "{line}"', key="markup")
    run = workloads.wait(workloads.submit(task, run_name="<img src=x id=injected-name>"))
    task_run_id = run["tasks"][0]["run_id"]

    _log_in(browser, local_workspace, f"/jobs/runs/{run['run_id']}", local_workspace.token)
    wait_until(browser, lambda d: _node_log(d, task_run_id, 0), "the node's log")
    assert line in _node_log(browser, task_run_id, 0)
    assert "<img src=x id=injected-name>" in _text(browser, "h1")
    assert not browser.find_elements(By.ID, "injected")
    assert not browser.find_elements(By.ID, "injected-name")
    assert "owned" not in browser.title
    # A single-command workload shows its node the same way, as container "command".
    assert "Container command" in _text(browser, "section.container h3")
