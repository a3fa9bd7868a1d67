"""Regenerate the documentation's screenshots in headless Chromium.

    .venv/bin/python scripts/screenshots.py                 # all three, into docs/
    .venv/bin/python scripts/screenshots.py --only pages    # the run page and the runs list
    .venv/bin/python scripts/screenshots.py --out /tmp/shots

- ``run-page.png``: the run page of the RL pipeline (the grpo stage's inference and trainer
  containers, each node's state, exit code and log, then the evaluate stage), run on a local
  workspace from ``examples/rl`` as one multi-task run.
- ``runs-page.png``: the runs list of that workspace.
- ``airflow-extra-link.png``: Airflow's task instance page (Details tab) of an
  ``AirRunOperator`` with its "AI Runtime run" and "MLflow run" links, from a real
  LocalExecutor deployment on PostgreSQL (the end-to-end tests' ``air_ui`` Dag).

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/services.sh`` installs them) and,
for the Airflow page, PostgreSQL on 127.0.0.1 (the deployment tests' server).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT, ROOT / "tests", ROOT / "tests" / "e2e"):
    sys.path.insert(0, str(folder))

WIDTH = 1280


def _shoot(driver: Any, path: Path, *, full_page: bool) -> None:
    height = 874
    if full_page:
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        height = min(max(height + 40, 600), 3000)
    driver.set_window_size(WIDTH, height)
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    # A palette of 256 colours, as the committed images: a third of the bytes, the same look.
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").quantize(256).save(path, optimize=True)
    print(f"wrote {path}")


def _log_in(driver: Any, host: str, path: str, token: str) -> None:
    from browser import wait_until
    from selenium.webdriver.common.by import By

    driver.get(host + path)
    wait_until(driver, lambda d: d.find_elements(By.ID, "token"), "the login form")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    wait_until(
        driver,
        lambda d: (
            d.current_url == host + path
            and d.execute_script("return document.readyState") == "complete"
        ),
        "the page after the login",
    )


def run_pages(out: Path, work: Path) -> None:
    """The RL pipeline as one run on a local workspace, then its page and the runs list."""
    from browser import chromium, wait_until

    from air_runtime import AirClient, Stage, load_workload
    from air_runtime.local import start_local_workspace
    from demo.pipeline import EVALUATE_YAML, TRAIN_YAML, store_placeholder_secrets

    output = {"env_variables.RL_OUTPUT_DIR": str(work / "rl-output")}
    with start_local_workspace(data_dir=work / "workspace") as workspace:
        with AirClient(workspace.host, workspace.token) as client:
            store_placeholder_secrets(client, (TRAIN_YAML, EVALUATE_YAML))
            stages = [
                Stage("grpo", load_workload(TRAIN_YAML, output)),
                Stage("evaluate", load_workload(EVALUATE_YAML, output), depends_on=("grpo",)),
            ]
            submitted = client.submit_workload(stages, run_name="rl_pipeline")
            state = client.wait(submitted.run_id, timeout=600, poll_interval=0.5)
            if not state.is_success:
                raise SystemExit(f"the RL pipeline did not succeed: {state.result_state}")
        page = f"/jobs/runs/{submitted.run_id}"
        with chromium() as driver:
            _log_in(driver, workspace.host, page, workspace.token)
            wait_until(
                driver,
                lambda d: "Container trainer" in d.execute_script("return document.body.innerText"),
                "the containers of the run page",
            )
            _shoot(driver, out / "run-page.png", full_page=True)
            driver.get(workspace.host + "/jobs/runs")
            wait_until(
                driver,
                lambda d: "rl_pipeline" in d.execute_script("return document.body.innerText"),
                "the run in the runs list",
            )
            _shoot(driver, out / "runs-page.png", full_page=False)


# A database of its own: the end-to-end tests' may be in use by a test run at the same time.
DATABASE = "airo_airflow_screenshots"


def airflow_task_page(out: Path, work: Path) -> None:
    """Airflow's task instance page with the two extra links of a finished AirRunOperator."""
    from urllib.parse import quote

    from airflow_deployment import E2E_DIR, AirflowDeployment, add_airflow_connections
    from browser import chromium, wait_until
    from deployment_services import POSTGRES_URL, POSTGRESQL, require_services
    from managed_process import own_database, wait_for

    from air_runtime.local import start_local_workspace

    require_services(POSTGRESQL)
    database_dsn = own_database(POSTGRES_URL, DATABASE)
    dag_id, task_id = "air_ui", "two_containers"
    with start_local_workspace(data_dir=work / "airflow-workspace") as workspace:
        deployment = AirflowDeployment(
            work / "airflow",
            executor="LocalExecutor",
            database_dsn=database_dsn,
            dag_folders={"e2e": E2E_DIR / "dags"},
        )
        flag = work / "flag"
        flag.touch()  # the Dag's run waits for this file: let it finish at once
        try:
            deployment.migrate()
            deployment.start()
            add_airflow_connections(deployment, workspace)
            deployment.wait_for_dags([dag_id])
            run_id = deployment.trigger(dag_id, {"flag": str(flag)})
            wait_for(
                lambda: deployment.task_instance(dag_id, run_id, task_id)["state"] == "success",
                timeout=600,
                what=f"{task_id} succeeded",
                processes=deployment.processes,
            )
            page = (
                f"{deployment.base_url}/dags/{dag_id}/runs/{quote(run_id, safe='')}"
                f"/tasks/{task_id}/details"
            )
            with chromium() as driver:
                driver.set_window_size(WIDTH, 874)
                driver.get(page)

                def both_links(d: Any) -> bool:
                    names = {a.text for a in d.find_elements("css selector", "a[href]")}
                    return {"AI Runtime run", "MLflow run"} <= names

                wait_until(driver, both_links, "the extra links on the task page")
                _shoot(driver, out / "airflow-extra-link.png", full_page=False)
        finally:
            deployment.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder (default docs/)")
    parser.add_argument(
        "--only",
        default="pages,airflow",
        help="comma-separated: pages (run page, runs list), airflow (the task page)",
    )
    args = parser.parse_args(argv)
    wanted = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = wanted - {"pages", "airflow"}
    if unknown:
        parser.error(f"unknown --only: {', '.join(sorted(unknown))}")
    with tempfile.TemporaryDirectory(prefix="airo-screenshots-") as folder:
        work = Path(folder)
        if "pages" in wanted:
            run_pages(args.out, work)
        if "airflow" in wanted:
            airflow_task_page(args.out, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
