"""GET parameters sent as a JSON body, as the real API accepts them and the Databricks
provider's async hook sends them (``runs/get`` with ``{"run_id": ...}``); the query string wins."""

from __future__ import annotations

import httpx

from tests.local_workspace.conftest import Workloads


def _get(api: httpx.Client, path: str, body: dict[str, object], **params: object) -> httpx.Response:
    return api.request("GET", path, json=body, params=params or None)


def test_jobs_get_endpoints_read_a_json_body(workloads: Workloads, api: httpx.Client) -> None:
    run_id = workloads.submit(workloads.command_task("echo body"))
    run = workloads.wait(run_id)
    task_run_id = run["tasks"][0]["run_id"]

    got = _get(api, "/api/2.2/jobs/runs/get", {"run_id": run_id})
    assert got.status_code == 200, got.text
    assert got.json()["run_id"] == run_id
    assert got.json() == workloads.get(run_id)
    assert _get(api, "/api/2.1/jobs/runs/get", {"run_id": task_run_id}).json()["run_id"] == (
        task_run_id
    )

    output = _get(api, "/api/2.2/jobs/runs/get-output", {"run_id": task_run_id})
    assert output.status_code == 200, output.text
    assert output.json()["metadata"]["run_id"] == task_run_id

    listed = _get(api, "/api/2.2/jobs/runs/list", {"limit": 1, "completed_only": True})
    assert listed.status_code == 200, listed.text
    assert [r["run_id"] for r in listed.json()["runs"]] == [run_id]
    both = _get(api, "/api/2.2/jobs/runs/list", {"active_only": True, "completed_only": True})
    assert both.status_code == 400  # booleans of the body read as the query string's


def test_the_query_string_wins_over_the_body(workloads: Workloads, api: httpx.Client) -> None:
    first = workloads.submit(workloads.command_task("true"))
    second = workloads.submit(workloads.command_task("true"))
    got = _get(api, "/api/2.2/jobs/runs/get", {"run_id": first}, run_id=second)
    assert got.status_code == 200, got.text
    assert got.json()["run_id"] == second
    unknown = _get(api, "/api/2.2/jobs/runs/get", {"run_id": second}, run_id=999_999_999)
    assert unknown.status_code == 404
    assert unknown.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"


def test_missing_and_malformed_parameters(api: httpx.Client) -> None:
    missing = _get(api, "/api/2.2/jobs/runs/get", {})
    assert missing.status_code == 400
    assert "run_id is required" in missing.json()["message"]
    wrong = _get(api, "/api/2.2/jobs/runs/get", {"run_id": "abc"})
    assert wrong.status_code == 400
    assert wrong.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    malformed = api.request(
        "GET", "/api/2.2/jobs/runs/get", content=b"{not json", params={"run_id": 1}
    )
    assert malformed.status_code == 400
    assert malformed.json()["error_code"] == "MALFORMED_REQUEST"


def test_workspace_and_secret_listings_read_a_json_body(
    workloads: Workloads, api: httpx.Client
) -> None:
    folder = workloads.upload({"command.sh": "echo hi\n"}, "bodyparams")
    status = _get(api, "/api/2.0/workspace/get-status", {"path": f"{folder}/command.sh"})
    assert status.status_code == 200, status.text
    assert status.json()["object_type"] == "FILE"
    listing = _get(api, "/api/2.0/workspace/list", {"path": folder})
    assert [o["path"] for o in listing.json()["objects"]] == [f"{folder}/command.sh"]
    exported = _get(
        api, "/api/2.0/workspace/export", {"path": f"{folder}/command.sh", "direct_download": True}
    )
    assert exported.content == b"echo hi\n"

    api.post("/api/2.0/secrets/scopes/create", json={"scope": "body-scope"}).raise_for_status()
    api.post(
        "/api/2.0/secrets/put", json={"scope": "body-scope", "key": "k", "string_value": "v"}
    ).raise_for_status()
    secrets = _get(api, "/api/2.0/secrets/list", {"scope": "body-scope"})
    assert [s["key"] for s in secrets.json()["secrets"]] == ["k"]
