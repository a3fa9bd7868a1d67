"""runs/submit, get, get-output, cancel, list; multi-task graphs; idempotency; permissions."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.local_workspace.conftest import Workloads


def test_idempotency_token_returns_the_same_run_forever(
    workloads: Workloads, local_workspace
) -> None:
    token = "tok-" + uuid.uuid4().hex
    task = workloads.command_task("echo once")
    first = workloads.submit(task, token=token)
    assert workloads.submit(task, token=token) == first
    workloads.wait(first)
    assert workloads.submit(task, token=token) == first  # also after the run ended
    counters = local_workspace.admin.counters()
    assert counters["submits_per_token"][token] == 3
    assert counters["runs_created"] == 1
    assert workloads.logs(first) == ["once"]


def test_run_shape_and_page_url(workloads: Workloads, local_workspace) -> None:
    run = workloads.wait(workloads.submit(workloads.command_task("true")))
    assert run["run_page_url"] == f"{local_workspace.host}/jobs/runs/{run['run_id']}"
    assert run["run_name"] == "exp"
    assert run["start_time"] > 0 and run["end_time"] >= run["start_time"]
    task = run["tasks"][0]
    assert task["run_id"] != run["run_id"]
    assert task["attempt_number"] == 0
    assert task["state"] == {
        "life_cycle_state": "TERMINATED",
        "result_state": "SUCCESS",
        "state_message": "",
        "user_cancelled_or_timedout": False,
    }


def test_unknown_runs(api: httpx.Client) -> None:
    response = api.get("/api/2.2/jobs/runs/get", params={"run_id": 987654})
    assert response.status_code == 404
    assert response.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    response = api.post("/api/2.2/jobs/runs/cancel", json={"run_id": 987654})
    assert response.status_code == 400
    assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    response = api.get("/api/2.2/jobs/runs/get-output", params={"run_id": 987654})
    assert response.status_code == 404
    response = api.get("/api/2.0/ai-training/workflows/by-run-id/987654/logs")
    assert response.status_code == 404


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"tasks": []}, "at least one task"),
        ({"tasks": [{"task_key": "a", "notebook_task": {}}]}, "ai_runtime_task"),
        (
            {
                "tasks": [
                    {
                        "task_key": "a",
                        "ai_runtime_task": {
                            "deployments": [
                                {
                                    "compute": {
                                        "accelerator_type": "GPU_2xT4",
                                        "accelerator_count": 1,
                                    },
                                    "command_path": "/Workspace/x/command.sh",
                                }
                            ]
                        },
                    }
                ]
            },
            "accelerator_type",
        ),
        ({"idempotency_token": "x" * 65, "tasks": []}, "idempotency_token"),
    ],
)
def test_submit_rejects_bad_bodies(api: httpx.Client, body: dict, fragment: str) -> None:
    response = api.post("/api/2.2/jobs/runs/submit", json=body)
    assert response.status_code == 400
    assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert fragment in response.json()["message"]


def test_submit_rejects_malformed_json(api: httpx.Client) -> None:
    response = api.post("/api/2.2/jobs/runs/submit", content=b"{nope")
    assert response.status_code == 400
    assert response.json()["error_code"] == "MALFORMED_REQUEST"


def test_depends_on_and_run_if(workloads: Workloads) -> None:
    ok = workloads.command_task("echo gen", key="generate")
    fail = workloads.command_task("exit 2", key="train", depends_on=[{"task_key": "generate"}])
    skipped = workloads.command_task(
        "echo eval", key="evaluate", depends_on=[{"task_key": "train"}]
    )
    cleanup = workloads.command_task(
        "echo cleanup", key="cleanup", run_if="ALL_DONE", depends_on=[{"task_key": "train"}]
    )
    alert = workloads.command_task(
        "echo alert", key="alert", run_if="AT_LEAST_ONE_FAILED", depends_on=[{"task_key": "train"}]
    )
    not_needed = workloads.command_task(
        "echo no", key="all_failed", run_if="ALL_FAILED", depends_on=[{"task_key": "generate"}]
    )
    run = workloads.wait(workloads.submit(ok, fail, skipped, cleanup, alert, not_needed))
    results = {t["task_key"]: t["state"].get("result_state") for t in run["tasks"]}
    assert results == {
        "generate": "SUCCESS",
        "train": "FAILED",
        "evaluate": "UPSTREAM_FAILED",
        "cleanup": "SUCCESS",
        "alert": "SUCCESS",
        "all_failed": "EXCLUDED",
    }
    assert run["state"]["result_state"] == "FAILED"
    assert "train" in run["state"]["state_message"]
    times = {t["task_key"]: t for t in run["tasks"]}
    assert times["train"]["start_time"] >= times["generate"]["end_time"]
    # get-output of a multi-task run needs a task run id
    response = workloads.client.get(
        "/api/2.2/jobs/runs/get-output", params={"run_id": run["run_id"]}
    )
    assert response.status_code == 400
    output = workloads.client.get(
        "/api/2.2/jobs/runs/get-output", params={"run_id": times["train"]["run_id"]}
    ).json()
    assert "exit code 2" in output["error"]


def test_run_if_variants_on_success(workloads: Workloads) -> None:
    first = workloads.command_task("true", key="first")
    tasks = [first] + [
        workloads.command_task(
            "true", key=rule.lower(), run_if=rule, depends_on=[{"task_key": "first"}]
        )
        for rule in ("NONE_FAILED", "AT_LEAST_ONE_SUCCESS", "ALL_SUCCESS")
    ]
    run = workloads.wait(workloads.submit(*tasks))
    assert {t["state"]["result_state"] for t in run["tasks"]} == {"SUCCESS"}
    assert run["state"]["result_state"] == "SUCCESS"


def test_submit_rejects_bad_task_keys_cycles_and_unknown_dependencies(
    workloads: Workloads,
) -> None:
    # The Jobs API's task_key: ASCII letters, digits, '_' and '-' (runconfig.go taskKeyRe).
    for key in ("train.v2", "trainé"):
        bad = workloads.command_task("true", key=key)
        response = workloads.client.post("/api/2.2/jobs/runs/submit", json={"tasks": [bad]})
        assert response.status_code == 400 and "task_key" in response.json()["message"]
    a = workloads.command_task("true", key="a", depends_on=[{"task_key": "b"}])
    b = workloads.command_task("true", key="b", depends_on=[{"task_key": "a"}])
    response = workloads.client.post("/api/2.2/jobs/runs/submit", json={"tasks": [a, b]})
    assert response.status_code == 400 and "cycle" in response.json()["message"]
    c = workloads.command_task("true", key="c", depends_on=[{"task_key": "zzz"}])
    response = workloads.client.post("/api/2.2/jobs/runs/submit", json={"tasks": [c]})
    assert response.status_code == 400 and "zzz" in response.json()["message"]


def test_cancel_before_a_downstream_task_starts(workloads: Workloads) -> None:
    slow = workloads.command_task("sleep 30", key="slow")
    after = workloads.command_task("true", key="after", depends_on=[{"task_key": "slow"}])
    run_id = workloads.submit(slow, after)
    workloads.wait_for(run_id, "RUNNING")
    workloads.client.post("/api/2.2/jobs/runs/cancel", json={"run_id": run_id}).raise_for_status()
    run = workloads.wait(run_id)
    assert run["state"]["result_state"] == "CANCELED"
    assert {t["task_key"]: t["state"]["result_state"] for t in run["tasks"]} == {
        "slow": "CANCELED",
        "after": "CANCELED",
    }
    # cancelling a finished run is a no-op
    assert workloads.client.post("/api/2.2/jobs/runs/cancel", json={"run_id": run_id}).json() == {}


def test_list_pages_and_active_only(workloads: Workloads, api: httpx.Client) -> None:
    done = [workloads.submit(workloads.command_task("true", key=f"d{i}")) for i in range(3)]
    for run_id in done:
        workloads.wait(run_id)
    running = workloads.submit(workloads.command_task("sleep 30", key="live"))
    workloads.wait_for(running, "RUNNING")
    active = api.get("/api/2.2/jobs/runs/list", params={"active_only": "true"}).json()
    assert [r["run_id"] for r in active["runs"]] == [running]
    assert active["has_more"] is False
    seen, token = [], None
    while True:
        params = {"limit": 2, "run_type": "SUBMIT_RUN"}
        if token:
            params["page_token"] = token
        page = api.get("/api/2.2/jobs/runs/list", params=params).json()
        seen += [r["run_id"] for r in page["runs"]]
        if not page["has_more"]:
            break
        token = page["next_page_token"]
    assert seen == sorted([*done, running], reverse=True)
    completed = api.get("/api/2.2/jobs/runs/list", params={"completed_only": "true"}).json()
    assert {r["run_id"] for r in completed["runs"]} == set(done)
    assert api.get("/api/2.2/jobs/runs/list", params={"run_type": "JOB_RUN"}).json()["runs"] == []
    assert api.get("/api/2.2/jobs/runs/list", params={"limit": 500}).status_code == 400
    expanded = api.get(
        "/api/2.2/jobs/runs/list", params={"expand_tasks": "true", "limit": 1}
    ).json()
    assert expanded["runs"][0]["tasks"][0]["task_key"] == "live"
    api.post("/api/2.2/jobs/runs/cancel", json={"run_id": running}).raise_for_status()
    workloads.wait(running)


def test_logs_paging_and_time_window(workloads: Workloads, api: httpx.Client) -> None:
    run = workloads.wait(
        workloads.submit(
            workloads.command_task("for i in $(seq 1 25); do echo line $i; done; echo err >&2")
        )
    )
    url = f"/api/2.0/ai-training/workflows/by-run-id/{run['run_id']}/logs"
    records, token = [], None
    while True:
        params = {"page_size": 10, "filter.node_index": 0, "ascending": "true"}
        if token:
            params["page_token"] = token
        page = api.get(url, params=params).json()
        records += page["log_records"]
        token = page.get("next_page_token")
        if not token:
            break
    assert [r["body"] for r in records] == [f"line {i}" for i in range(1, 26)] + ["err"]
    stamps = [r["time_unix_nano"] for r in records]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert all(r["node_index"] == 0 for r in records)
    # `from` and `to` are Unix epoch seconds (the CLI: time_unix_nano / 1e9 of the last
    # record), whole seconds included.
    second = 10**9
    start = stamps[20] // second
    later = api.get(url, params={"from": start}).json()["log_records"]
    assert [r["body"] for r in later] == [
        r["body"] for r in records if r["time_unix_nano"] >= start * second
    ]
    assert [r["body"] for r in later][-6:] == [r["body"] for r in records[20:]]
    window = api.get(url, params={"from": start, "to": start}).json()["log_records"]
    assert window and all(r["time_unix_nano"] // second == start for r in window)
    future = api.get(url, params={"from": stamps[0]}).json()["log_records"]
    assert future == []  # nanoseconds read as seconds: the far future
    backwards = api.get(url, params={"ascending": "false", "page_size": 1}).json()["log_records"]
    assert backwards[0]["body"] == "err"
    task_logs = api.get(
        f"/api/2.0/ai-training/workflows/by-run-id/{run['tasks'][0]['run_id']}/logs"
    ).json()["log_records"]
    assert len(task_logs) == 26


def test_following_a_live_run_by_rereading(workloads: Workloads, api: httpx.Client) -> None:
    run_id = workloads.submit(
        workloads.command_task("for i in 1 2 3 4 5; do echo tick $i; sleep 0.2; done")
    )
    url = f"/api/2.0/ai-training/workflows/by-run-id/{run_id}/logs"
    seen: list[str] = []
    last = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        params = {"from": last // 10**9} if last else {}
        for record in api.get(url, params=params).json()["log_records"]:
            if last is not None and record["time_unix_nano"] <= last:
                continue
            seen.append(record["body"])
            last = record["time_unix_nano"]
        if workloads.get(run_id)["state"]["life_cycle_state"] == "TERMINATED" and len(seen) >= 5:
            break
        time.sleep(0.1)
    assert seen == [f"tick {i}" for i in range(1, 6)]


def test_permissions(workloads: Workloads, api: httpx.Client) -> None:
    run_id = workloads.submit(workloads.command_task("true"))
    acl = [
        {"user_name": "a@example.com", "permission_level": "CAN_VIEW"},
        {"group_name": "ml", "permission_level": "CAN_MANAGE_RUN"},
    ]
    response = api.patch(f"/api/2.0/permissions/jobs/{run_id}", json={"access_control_list": acl})
    assert response.status_code == 200
    body = response.json()
    assert body["object_id"] == f"/jobs/{run_id}"
    assert {e.get("user_name") or e.get("group_name") for e in body["access_control_list"]} == {
        "a@example.com",
        "ml",
    }
    bad = api.patch(
        f"/api/2.0/permissions/jobs/{run_id}",
        json={"access_control_list": [{"user_name": "x", "permission_level": "OWNER"}]},
    )
    assert bad.status_code == 400
    missing = api.patch("/api/2.0/permissions/jobs/424242", json={"access_control_list": []})
    assert missing.status_code == 404
    workloads.wait(run_id)


def test_config_validate(api: httpx.Client) -> None:
    good = {
        "task": {
            "experiment": "exp",
            "deployments": [
                {
                    "compute": {"accelerator_type": "GPU_8xH100", "accelerator_count": 16},
                    "command_path": "/Workspace/Users/u/launch/command.sh",
                }
            ],
        },
        "run_options": {"idempotency_token": "t", "max_retries": 0},
    }
    assert api.post("/api/2.0/ai-training/config:validate", json=good).json() == {"errors": []}
    bad = {
        "task": {
            "experiment": "exp",
            "deployments": [
                {
                    "compute": {"accelerator_type": "GPU_8xH100", "accelerator_count": 12},
                    "containers": [
                        {
                            "name": "a",
                            "ranks": [0, 5],
                            "command_path": "relative/command.sh",
                            "unity_catalog_image_path": "main.rl.a:1",
                        },
                    ],
                }
            ],
        },
        "run_options": {"idempotency_token": "t"},
    }
    errors = api.post("/api/2.0/ai-training/config:validate", json=bad).json()["errors"]
    paths = {e["path"] for e in errors}
    assert "task.deployments[0].compute.accelerator_count" in paths
    assert "task.deployments[0].containers[0].command_path" in paths
    assert all(set(e) == {"path", "message", "code"} for e in errors)
    ranks = {
        "task": {
            "deployments": [
                {
                    "compute": {"accelerator_type": "GPU_1xA10", "accelerator_count": 2},
                    "containers": [
                        {
                            "name": "a",
                            "ranks": [0, 2],
                            "command_path": "/W/a/command.sh",
                            "unity_catalog_image_path": "main.rl.a:1",
                        },
                    ],
                }
            ],
        }
    }
    errors = api.post("/api/2.0/ai-training/config:validate", json=ranks).json()["errors"]
    assert any("containers" in e["path"] and "2" in e["message"] for e in errors), errors
    assert any("1" in e["message"] for e in errors), errors
    missing = {
        "task": {
            "deployments": [{"compute": {"accelerator_type": "GPU_1xA10", "accelerator_count": 1}}]
        }
    }
    errors = api.post("/api/2.0/ai-training/config:validate", json=missing).json()["errors"]
    assert errors and errors[0]["path"] == "task.deployments[0]"
