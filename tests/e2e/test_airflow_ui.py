"""Airflow's own UI in a real headless Chromium, against a LocalExecutor deployment on
PostgreSQL and a local workspace: the extra links of each AI Runtime operator appear on the
task instance page (a task still deferred, a mapped one, a workflow group's submit task),
following "AI Runtime run" opens the workspace's run page with both containers and their
nodes' logs, and the task log in the UI has the node lines the README promises."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from airflow_deployment import E2E_DIR, AirflowDeployment, add_airflow_connections
from browser import chromium, require_browser, screenshot, wait_until
from managed_process import own_database, wait_for

from air_runtime.client import AirClient
from air_runtime.local import LocalWorkspace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DAG_ID = "air_ui"


def _links(driver: Any) -> dict[str, str]:
    """The task instance page's extra links: name -> href."""
    from selenium.webdriver.common.by import By

    return {
        a.text: str(a.get_attribute("href"))
        for a in driver.find_elements(By.CSS_SELECTOR, "a[href]")
        if a.text in ("AI Runtime run", "MLflow run")
    }


def _click(driver: Any, name: str) -> bool:
    from selenium.webdriver.common.by import By

    for link in driver.find_elements(By.CSS_SELECTOR, "a[href]"):
        if link.text == name:
            link.click()
            return True
    return False


def _ti_page(
    deployment: AirflowDeployment, run_id: str, task_id: str, index: int = -1, tab: str = ""
) -> str:
    """A task instance page of the UI; its "Details" tab lists the extra links, the first
    tab is the task log."""
    page = f"{deployment.base_url}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/tasks/{task_id}"
    page = page if index < 0 else f"{page}/mapped/{index}"
    return f"{page}/{tab}" if tab else page


def _open_links(driver: Any, url: str, names: set[str]) -> dict[str, str]:
    driver.get(url)
    return dict(
        wait_until(
            driver,
            lambda d: (found := _links(d)) and names <= set(found) and found,
            f"extra links {sorted(names)} on {url}",
        )
    )


def _log_in(driver: Any, workspace: LocalWorkspace) -> None:
    from selenium.webdriver.common.by import By

    wait_until(driver, lambda d: d.find_elements(By.ID, "token"), "the workspace's login form")
    driver.find_element(By.ID, "token").send_keys(workspace.token)
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()


def _page_text(driver: Any) -> str:
    return str(driver.execute_script("return document.body.innerText"))


def test_airflow_ui_links_lead_to_the_run_pages(
    tmp_path: Path, postgres: str, local_workspace: LocalWorkspace, workspace_client: AirClient
) -> None:
    require_browser()
    deployment = AirflowDeployment(
        tmp_path,
        executor="LocalExecutor",
        database_dsn=own_database(postgres, "airo_airflow_ui"),
        dag_folders={"e2e": E2E_DIR / "dags"},
    )
    flag = tmp_path / "flag"
    try:
        deployment.migrate()
        deployment.start()
        add_airflow_connections(deployment, local_workspace)
        deployment.wait_for_dags([DAG_ID])
        run_id = deployment.trigger(DAG_ID, {"flag": str(flag)})
        wait_for(
            lambda: (
                deployment.task_instance(DAG_ID, run_id, "two_containers")["state"] == "deferred"
            ),
            timeout=240,
            what="two_containers deferred",
            processes=deployment.processes,
        )
        run_page = deployment.xcom(DAG_ID, run_id, "two_containers", "run_page_url")
        assert run_page.startswith(f"{local_workspace.host}/jobs/runs/"), run_page

        with chromium() as browser:
            # The deferred task: its run link is there while the run is going.
            links = _open_links(
                browser,
                _ti_page(deployment, run_id, "two_containers", tab="details"),
                {"AI Runtime run"},
            )
            assert links["AI Runtime run"] == run_page
            assert deployment.task_instance(DAG_ID, run_id, "two_containers")["state"] == (
                "deferred"
            )
            screenshot(browser, "airflow-task-instance.png")

            airflow_window = browser.current_window_handle
            wait_until(browser, lambda d: _click(d, "AI Runtime run"), "the link clicked")
            wait_until(
                browser,
                lambda d: (
                    len(d.window_handles) == 2 or d.current_url.startswith(local_workspace.host)
                ),
                "the link followed",
            )
            if len(browser.window_handles) == 2:  # the UI opens other sites in a new tab
                browser.switch_to.window(
                    next(h for h in browser.window_handles if h != airflow_window)
                )
            _log_in(browser, local_workspace)
            wait_until(browser, lambda d: d.current_url == run_page, "the run page after login")
            wait_until(
                browser,
                lambda d: (
                    "policy server ready on rank 0" in _page_text(d)
                    and "trainer started on rank 1" in _page_text(d)
                ),
                "both containers' first lines on the run page",
            )
            text = _page_text(browser)
            assert "Container inference" in text and "Container trainer" in text
            flag.touch()
            wait_until(
                browser,
                lambda d: "trainer step 1 mean reward 0.42" in _page_text(d),
                "the trainer's last line, in the page's live tail",
            )
            if len(browser.window_handles) == 2:
                browser.close()
                browser.switch_to.window(airflow_window)

            states = deployment.wait_for_runs([(DAG_ID, run_id)], timeout=300)
            assert states[(DAG_ID, run_id)]["state"] == "success", deployment.diagnose(
                [(DAG_ID, run_id)]
            )

            # Finished: both links of AirRunOperator; the MLflow one leads to the task run.
            links = _open_links(
                browser,
                _ti_page(deployment, run_id, "two_containers", tab="details"),
                {"AI Runtime run", "MLflow run"},
            )
            assert links["AI Runtime run"] == run_page
            assert links["MLflow run"].startswith(f"{local_workspace.host}/ml/experiments/")
            browser.get(_ti_page(deployment, run_id, "two_containers"))  # the task log
            wait_until(
                browser,
                lambda d: (
                    "node 1 attempt 0] trainer step 1 mean reward 0.42" in _page_text(d)
                    and "node 0 attempt 0] policy server done" in _page_text(d)
                ),
                "the node lines in the task log of the UI",
            )
            browser.get(links["MLflow run"])
            wait_until(
                browser,
                lambda d: "Task air_ui_two_containers · attempt 0" in _page_text(d),
                "the task run page of the MLflow run",
            )

            # A mapped task: each map index has its own run and link.
            mapped = set()
            for index in (0, 1):
                link = _open_links(
                    browser,
                    _ti_page(deployment, run_id, "mapped", index, tab="details"),
                    {"AI Runtime run"},
                )["AI Runtime run"]
                assert link.startswith(f"{local_workspace.host}/jobs/runs/"), link
                mapped.add(link)
                browser.get(link)
                wait_until(
                    browser,
                    lambda d, i=index: f"quick run {i} done" in _page_text(d),
                    f"map index {index}'s run page",
                )
            assert len(mapped) == 2

            # A workflow group: its submit task links the multi-task run.
            link = _open_links(
                browser,
                _ti_page(deployment, run_id, "stages.submit", tab="details"),
                {"AI Runtime run"},
            )["AI Runtime run"]
            browser.get(link)
            wait_until(
                browser,
                lambda d: "air_ui_stages" in _page_text(d) and "Task train" in _page_text(d),
                "the workflow run's page",
            )
    finally:
        deployment.stop()
