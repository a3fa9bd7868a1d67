"""The run pages over HTTP: who may read them (bearer header, login session), the login
form's CSRF and redirect checks, the Host check, escaping, node states and exit codes, and
the links the workspace hands out leading to them. The browser tests are in
test_pages_browser.py."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from air_runtime.local import LocalWorkspace
from tests.local_workspace.conftest import Workloads


def _login_form(client: httpx.Client, next_path: str = "/jobs/runs") -> str:
    page = client.get("/login", params={"next": next_path})
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def _browser(workspace: LocalWorkspace) -> httpx.Client:
    """A client without the bearer header that keeps cookies, as a browser does."""
    return httpx.Client(base_url=workspace.host, timeout=30, follow_redirects=False)


def _log_in(client: httpx.Client, token: str, next_path: str = "/jobs/runs") -> httpx.Response:
    csrf = _login_form(client, next_path)
    return client.post(
        "/login",
        data={"token": token, "csrf": csrf, "next": next_path},
        headers={"Origin": str(client.base_url).rstrip("/"), "Sec-Fetch-Site": "same-origin"},
    )


def test_pages_need_credentials(local_workspace: LocalWorkspace, api: httpx.Client) -> None:
    with _browser(local_workspace) as anonymous:
        answer = anonymous.get("/jobs/runs/1000", params={"o": "1234"})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/login?next=/jobs/runs/1000%3Fo%3D1234"
        assert anonymous.get("/jobs/runs/1000/tail").status_code == 401
        # A script's bad bearer token gets the API's answer, not a login form.
        bad = anonymous.get("/jobs/runs", headers={"Authorization": "Bearer airo-wrong"})
        assert bad.status_code == 403 and bad.json()["error_code"] == "PERMISSION_DENIED"
    page = api.get("/jobs/runs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "No runs yet" in page.text
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert local_workspace.token not in page.text


def test_login_session_cookie(local_workspace: LocalWorkspace) -> None:
    with _browser(local_workspace) as browser:
        answer = _log_in(browser, local_workspace.token, "/jobs/runs?before=2000")
        assert answer.status_code == 303 and answer.headers["location"] == "/jobs/runs?before=2000"
        cookies = [v for k, v in answer.headers.multi_items() if k == "set-cookie"]
        session = next(c for c in cookies if c.startswith(f"airo_session_{local_workspace.port}="))
        attributes = [a.strip().lower() for a in session.split(";")]
        assert (
            "httponly" in attributes and "samesite=strict" in attributes and "path=/" in attributes
        )
        assert not any(a.startswith(("domain=", "max-age=", "expires=")) for a in attributes)
        assert "secure" not in attributes  # plain HTTP on loopback; Secure behind HTTPS
        assert local_workspace.token not in session
        assert browser.get("/jobs/runs").status_code == 200
        # Logging out ends it.
        out = browser.post("/logout", headers={"Sec-Fetch-Site": "same-origin"})
        assert out.status_code == 303
        assert browser.get("/jobs/runs").status_code == 303


def test_login_refuses_forged_and_bad_requests(local_workspace: LocalWorkspace) -> None:
    token = local_workspace.token
    with _browser(local_workspace) as browser:
        assert _log_in(browser, "airo-" + "x" * 43).status_code == 403
        # A form posted from another site: refused by its Origin or Sec-Fetch-Site, and
        # without the SameSite=Strict login cookie its CSRF value cannot be echoed.
        csrf = _login_form(browser)
        for headers in (
            {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
            {"Origin": "http://evil.example"},
        ):
            forged = browser.post(
                "/login", data={"token": token, "csrf": csrf, "next": "/"}, headers=headers
            )
            assert forged.status_code == 403, headers
            assert "not sent from this workspace" in forged.text
    with _browser(local_workspace) as fresh:  # no login cookie at all
        forged = fresh.post("/login", data={"token": token, "csrf": csrf, "next": "/"})
        assert forged.status_code == 403
        assert not [c for c in fresh.cookies if c.startswith("airo_session")]
    # After login, only a path of this workspace: never another site.
    for target in ("//evil.example/x", "http://evil.example/", "/\\evil.example"):
        with _browser(local_workspace) as browser:
            assert _log_in(browser, token, target).headers["location"] == "/jobs/runs"


def test_revoking_the_token_ends_its_sessions(local_workspace: LocalWorkspace) -> None:
    with _browser(local_workspace) as browser:
        assert _log_in(browser, local_workspace.token).status_code == 303
        assert browser.get("/jobs/runs").status_code == 200
        local_workspace.admin.revoke_token(local_workspace.token)
        assert browser.get("/jobs/runs").status_code == 303
        assert _log_in(browser, local_workspace.token).status_code == 403


def test_host_check_applies_to_pages(local_workspace: LocalWorkspace, api: httpx.Client) -> None:
    answer = api.get("/jobs/runs", headers={"Host": "attacker.example"})
    assert answer.status_code == 403
    assert api.get("/login", headers={"Host": "attacker.example"}).status_code == 403


def test_run_page_of_two_containers(
    local_workspace: LocalWorkspace, api: httpx.Client, workloads: Workloads, tmp_path: Path
) -> None:
    # The trainer fails only once the server has printed (on a loaded machine rank 0 could
    # otherwise be stopped before its first line).
    served = tmp_path / "served"
    task = workloads.containers_task(
        [
            {
                "name": "inference",
                "ranks": [0],
                "command": f'echo "served </pre><b>x</b>"; touch {served}; sleep 30',
            },
            {
                "name": "trainer",
                "ranks": [1],
                "command": f"while [ ! -e {served} ]; do sleep 0.05; done; echo trained; exit 3",
            },
        ],
        key="grpo",
    )
    run = workloads.wait(workloads.submit(task, run_name="<i>rl</i>"))
    task_run_id = run["tasks"][0]["run_id"]
    # The URL runs/get hands out is the page.
    assert run["run_page_url"] == f"{local_workspace.host}/jobs/runs/{run['run_id']}"
    page = api.get(run["run_page_url"]).text
    assert "Container inference" in page and "Container trainer" in page
    assert "served &lt;/pre&gt;&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert "&lt;i&gt;rl&lt;/i&gt;" in page and "<i>rl</i>" not in page
    # The trainer failed on its own; the workspace stopped the inference node (SIGTERM).
    nodes = re.findall(
        r"<strong>Node (\d)</strong> <span[^>]*>([A-Z ]+)</span>\s*<span>exit code (\S+)</span>",
        page,
    )
    assert nodes == [("0", "STOPPED", "143"), ("1", "FAILED", "3")], nodes
    task_page = api.get(run["tasks"][0]["run_page_url"]).text
    assert "Task grpo · attempt 0" in task_page and "Container trainer" in task_page
    whole = api.get(f"/jobs/runs/{task_run_id}/logs/0")
    assert whole.headers["content-type"] == "text/plain; charset=utf-8"
    assert "served </pre><b>x</b>\n" in whole.text
    assert api.get(f"/jobs/runs/{task_run_id}/logs/7").text == ""
    assert api.get("/jobs/runs/99999999").status_code == 404


def test_nodes_that_never_started_and_retries(api: httpx.Client, workloads: Workloads) -> None:
    task = workloads.command_task("exit 1", key="flaky", nodes=2, max_retries=1)
    run = workloads.wait(workloads.submit(task))
    attempts = [t["run_id"] for t in run["tasks"]]
    assert len(attempts) == 2
    page = api.get(f"/jobs/runs/{run['run_id']}").text
    assert "attempt 0" in page and "attempt 1" in page and "Container command" in page
    first = api.get(f"/jobs/runs/{attempts[0]}").text
    assert "Task flaky · attempt 0" in first and "FAILED" in first
    # A set-up failure (the command file is missing): no node ever started.
    missing = workloads.command_task("true", key="missing")
    missing["ai_runtime_task"]["deployments"][0]["command_path"] += ".gone"
    failed = workloads.wait(workloads.submit(missing))
    assert "NOT STARTED" in api.get(f"/jobs/runs/{failed['run_id']}").text


def test_live_tail_answers_new_lines_and_changes(
    api: httpx.Client, workloads: Workloads, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    command = f'echo first\nwhile [ ! -e "{flag}" ]; do sleep 0.05; done\necho second'
    run_id = workloads.submit(workloads.command_task(command, key="tail"))
    task_run_id = workloads.wait_for(run_id, "RUNNING")["tasks"][0]["run_id"]
    tail = f"/jobs/runs/{run_id}/tail"

    def poll(after: int, signature: str) -> dict[str, object]:
        answer = api.get(tail, params={"n": f"{task_run_id}.0.{after}", "signature": signature})
        assert answer.status_code == 200
        result: dict[str, object] = answer.json()
        return result

    page = api.get(f"/jobs/runs/{run_id}").text
    signature = re.search(r'data-signature="([0-9a-f]+)"', page)
    assert signature
    first = poll(0, signature.group(1))
    while "first" not in first["logs"][0]["lines"]:  # type: ignore[index]
        first = poll(0, signature.group(1))
    assert first["active"] is True
    after = first["logs"][0]["after"]  # type: ignore[index]
    assert poll(after, signature.group(1))["logs"][0]["lines"] == []  # type: ignore[index]
    flag.touch()
    workloads.wait(run_id)
    last = poll(after, signature.group(1))
    assert last["logs"][0]["lines"] == ["second"]  # type: ignore[index]
    assert last["active"] is False and last["changed"] is True
    # Another run's nodes are not read through this run's tail.
    other = api.get(tail.replace(str(run_id), str(task_run_id)), params={"n": "1.0.0"})
    assert other.json()["logs"] == []


def test_mlflow_link_leads_to_the_task_run(api: httpx.Client, workloads: Workloads) -> None:
    run = workloads.wait(workloads.submit(workloads.command_task("true", key="ml")))
    task_run_id = run["tasks"][0]["run_id"]
    output = api.get("/api/2.2/jobs/runs/get-output", params={"run_id": task_run_id}).json()
    ids = output["ai_runtime_task_output"]
    answer = api.get(f"/ml/experiments/{ids['mlflow_experiment_id']}/runs/{ids['mlflow_run_id']}")
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/jobs/runs/{task_run_id}#mlflow-{task_run_id}"
    assert api.get("/ml/experiments/1/runs/" + "0" * 32).status_code == 404


@pytest.mark.parametrize("path", ["/api/2.2/jobs/runs/nothing", "/jobs/nothing"])
def test_other_paths_keep_the_api_answer(api: httpx.Client, path: str) -> None:
    answer = api.get(path)
    assert answer.status_code == 404 and answer.json()["error_code"] == "ENDPOINT_NOT_FOUND"


def test_the_links_the_client_hands_out_are_pages(
    local_workspace: LocalWorkspace, api: httpx.Client
) -> None:
    # What the Airflow links and XComs and the Dagster metadata are built from.
    from air_runtime import AirClient, load_workload, mlflow_run_url

    workload = load_workload(
        {
            "experiment_name": "links",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": "echo linked",
        }
    )
    with AirClient(local_workspace.host, local_workspace.token) as client:
        submitted = client.submit_workload(workload)
        state = client.wait(submitted.run_id, timeout=120, poll_interval=0.2)
    assert state.is_success
    page = api.get(submitted.run_page_url)
    assert page.status_code == 200 and "linked" in page.text
    task_run_id = state.tasks[0].run_id
    output = api.get("/api/2.2/jobs/runs/get-output", params={"run_id": task_run_id}).json()
    ids = output["ai_runtime_task_output"]
    url = mlflow_run_url(local_workspace.host, ids["mlflow_experiment_id"], ids["mlflow_run_id"])
    assert url is not None
    assert api.get(url).headers["location"] == f"/jobs/runs/{task_run_id}#mlflow-{task_run_id}"


def test_pages_are_not_the_api_for_faults_and_counters(
    local_workspace: LocalWorkspace, api: httpx.Client
) -> None:
    local_workspace.admin.set_faults({"*": {"rate_5xx": 1.0}, "seed": 1})
    assert api.get("/jobs/runs").status_code == 200
    assert api.get("/api/2.2/jobs/runs/list").status_code >= 500
    local_workspace.admin.set_faults({})
    paths = [entry["path"] for entry in local_workspace.admin.request_log()]
    assert "/api/2.2/jobs/runs/list" in paths and "/jobs/runs" not in paths
