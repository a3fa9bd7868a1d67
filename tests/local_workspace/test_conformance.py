"""The local workspace follows what the `databricks air` CLI shows of the real service
(docs/cli-conformance.md): snapshot layout, usage policies, experiment permissions,
the MLflow experiment directory, the image access probe, log paging."""

from __future__ import annotations

import io
import tarfile
import time
from typing import Any

import httpx

from air_runtime.local import LocalWorkspace, start_local_workspace
from tests.local_workspace.conftest import Workloads

HOME = "/Workspace/Users/local-user@example.com"
ARCHIVE = "/Volumes/main/default/code/exp/snapshot.tar.gz"


def _archive(names: list[str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in names:
            if name.endswith("/"):
                info = tarfile.TarInfo(name.rstrip("/"))
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
                continue
            data = f"# {name}\n".encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _run_with_archive(workloads: Workloads, api: httpx.Client, names: list[str]) -> dict[str, Any]:
    api.put(
        f"/api/2.0/fs/files{ARCHIVE}", params={"overwrite": "true"}, content=_archive(names)
    ).raise_for_status()
    task = workloads.command_task(
        'echo "at $(basename "$CODE_SOURCE_PATH")"; ls "$CODE_SOURCE_PATH"',
        ai_runtime_task={"code_source_path": ARCHIVE},
    )
    return workloads.wait(workloads.submit(task))


# --- code snapshots ----------------------------------------------------------------------


def test_snapshot_unpacks_under_its_top_folder(workloads: Workloads, api: httpx.Client) -> None:
    run = _run_with_archive(workloads, api, ["myproj/", "myproj/train.py", "myproj/lib/a.py"])
    assert run["state"]["result_state"] == "SUCCESS", run["state"]
    assert workloads.logs(run["run_id"]) == ["at myproj", "lib", "train.py"]


def test_snapshot_made_with_tar_c_parent_dot_slash(workloads: Workloads, api: httpx.Client) -> None:
    run = _run_with_archive(workloads, api, ["./", "./proj/", "./proj/x.py"])
    assert run["state"]["result_state"] == "SUCCESS", run["state"]
    assert workloads.logs(run["run_id"]) == ["at proj", "x.py"]


def test_flat_or_multi_root_snapshot_fails_the_attempt(
    workloads: Workloads, api: httpx.Client
) -> None:
    for names, shown in (
        (["train.py", "lib/a.py"], "<files at the top level>"),
        (["a/x.py", "b/y.py"], "a, b"),
    ):
        run = _run_with_archive(workloads, api, names)
        assert run["state"]["result_state"] == "FAILED", run["state"]
        assert "exactly one top-level folder" in run["state"]["state_message"]
        assert shown in run["state"]["state_message"]


# --- usage policies ----------------------------------------------------------------------


def test_serverless_policies_filter_and_pages(tmp_path) -> None:
    with start_local_workspace(
        data_dir=tmp_path / "ws",
        usage_policies=[
            {"policy_name": "Research-GPU"},
            {"policy_name": "research-gpu-2", "policy_id": "11111111-2222-3333-4444-555555555555"},
        ],
    ) as ws:
        added = ws.admin.add_usage_policy("Prod")
        assert len(added["policy_id"]) == 36
        with httpx.Client(
            base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=30
        ) as api:
            url = "/api/2.0/serverless-policies"
            found = api.get(
                url, params={"filter_by.policy_name": "RESEARCH-gpu", "page_size": 1000}
            ).json()
            names = [p["policy_name"] for p in found["policies"]]
            assert names == ["Research-GPU", "research-gpu-2"]
            assert "next_page_token" not in found
            assert found["policies"][1]["policy_id"] == "11111111-2222-3333-4444-555555555555"
            assert set(found["policies"][0]) >= {"policy_id", "policy_name"}
            seen, token = [], None
            while True:
                params: dict[str, Any] = {"page_size": 1}
                if token:
                    params["page_token"] = token
                page = api.get(url, params=params).json()
                seen += [p["policy_name"] for p in page["policies"]]
                token = page.get("next_page_token")
                if not token:
                    break
            assert seen == ["Prod", "Research-GPU", "research-gpu-2"]
            big = api.get(url, params={"page_size": 50_000}).json()  # coerced down to 1000
            assert len(big["policies"]) == 3
            none = api.get(url, params={"filter_by.policy_name": "nothing"}).json()
            assert none == {"policies": []}
            bad = api.get(url, params={"page_token": "not-a-token"})
            assert bad.status_code == 400
            assert bad.json()["error_code"] == "INVALID_PARAMETER_VALUE"


# --- MLflow experiment: directory and permissions ----------------------------------------


def _experiment_id(api: httpx.Client, task_run_id: int) -> str:
    deadline = time.monotonic() + 60
    while True:
        output = api.get("/api/2.2/jobs/runs/get-output", params={"run_id": task_run_id}).json()
        ids = output.get("ai_runtime_task_output") or {}
        if ids.get("mlflow_experiment_id"):
            return str(ids["mlflow_experiment_id"])
        assert time.monotonic() < deadline, output
        time.sleep(0.05)


def test_experiment_id_appears_while_running_and_takes_permissions(
    workloads: Workloads, api: httpx.Client
) -> None:
    run_id = workloads.submit(workloads.command_task("sleep 30"))
    run = workloads.wait_for(run_id, "RUNNING")
    experiment = _experiment_id(api, run["tasks"][0]["run_id"])
    url = f"/api/2.0/permissions/experiments/{experiment}"
    acl = [
        {"user_name": "a@example.com", "permission_level": "CAN_READ"},
        {"group_name": "ml", "permission_level": "CAN_EDIT"},
    ]
    granted = api.patch(url, json={"access_control_list": acl})
    assert granted.status_code == 200, granted.text
    body = api.get(url).json()
    assert body["object_id"] == f"/experiments/{experiment}"
    assert body["object_type"] == "mlflow-experiment"
    levels = {
        (e.get("user_name") or e.get("group_name")): e["all_permissions"][0]["permission_level"]
        for e in body["access_control_list"]
    }
    assert levels == {"a@example.com": "CAN_READ", "ml": "CAN_EDIT"}
    job_level = api.patch(
        url, json={"access_control_list": [{"user_name": "b", "permission_level": "CAN_VIEW"}]}
    )
    assert job_level.status_code == 400  # a job level is not an experiment level
    missing = api.patch(
        "/api/2.0/permissions/experiments/424242", json={"access_control_list": acl}
    )
    assert missing.status_code == 404
    assert missing.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    api.post("/api/2.2/jobs/runs/cancel", json={"run_id": run_id}).raise_for_status()
    workloads.wait(run_id)


def test_get_status_of_a_missing_path_is_404(api: httpx.Client) -> None:
    url = "/api/2.0/workspace/get-status"
    missing = api.get(url, params={"path": f"{HOME}/experiments/none"})
    assert missing.status_code == 404
    assert missing.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    api.post("/api/2.0/workspace/mkdirs", json={"path": f"{HOME}/experiments/none"})
    assert api.get(url, params={"path": f"{HOME}/experiments/none"}).json()["object_type"] == (
        "DIRECTORY"
    )


def test_missing_experiment_directory_is_an_internal_error(
    workloads: Workloads, api: httpx.Client
) -> None:
    folder = f"{HOME}/mlflow/not-made-yet"
    task = workloads.command_task(
        "echo ran", ai_runtime_task={"mlflow_experiment_directory": folder}
    )
    task["max_retries"] = 2
    run = workloads.wait(workloads.submit(task))
    assert run["state"]["life_cycle_state"] == "INTERNAL_ERROR", run["state"]
    assert run["state"]["result_state"] == "FAILED"
    assert folder in run["state"]["state_message"]
    assert len(run["tasks"]) == 1  # not retried: waiting does not create the folder
    assert workloads.logs(run["run_id"]) == []  # no rank started
    api.post("/api/2.0/workspace/mkdirs", json={"path": folder}).raise_for_status()
    task = workloads.command_task(
        "echo ran", ai_runtime_task={"mlflow_experiment_directory": folder}
    )
    run = workloads.wait(workloads.submit(task))
    assert run["state"]["result_state"] == "SUCCESS", run["state"]


# --- images ------------------------------------------------------------------------------


def test_image_access_probe_can_be_unavailable(local_workspace: LocalWorkspace) -> None:
    url = f"{local_workspace.host}/api/2.0/ai-compute-manager/images:checkImageAccess"
    headers = {"Authorization": f"Bearer {local_workspace.token}"}
    params = {"docker_image_url": "docker.io/library/ubuntu:latest"}
    assert httpx.get(url, params=params, headers=headers).json() == {"publicly_accessible": True}
    local_workspace.admin.set_faults(
        {"ai-compute-manager/images:checkImageAccess": {"rate_404": 1}}
    )
    unavailable = httpx.get(url, params=params, headers=headers)
    assert unavailable.status_code == 404
    assert unavailable.json()["error_code"] == "ENDPOINT_NOT_FOUND"


# --- logs --------------------------------------------------------------------------------


def test_log_pages_both_ways_and_per_attempt(workloads: Workloads, api: httpx.Client) -> None:
    task = workloads.command_task(
        'for i in $(seq 1 250); do echo "line $i"; done; exit 3', max_retries=1
    )
    task["min_retry_interval_millis"] = 0
    run = workloads.wait(workloads.submit(task))
    url = f"/api/2.0/ai-training/workflows/by-run-id/{run['run_id']}/logs"

    def read_all(**params: Any) -> list[str]:
        bodies, token = [], None
        while True:
            query = {"page_size": 40, **params}
            if token:
                query["page_token"] = token
            page = api.get(url, params=query).json()
            bodies += [r["body"] for r in page["log_records"]]
            token = page.get("next_page_token")
            if not token:
                return bodies

    forward = read_all(ascending="true")
    failed = [b for b in forward if b.startswith("ERROR: Script failed with exit code 3")]
    assert len(failed) == 2 and failed[0] == failed[1], failed
    one_attempt = [f"line {i}" for i in range(1, 251)] + [failed[0]]
    assert forward == one_attempt * 2
    assert read_all(ascending="false") == list(reversed(forward))
    assert read_all(**{"ref.attempt_number": 1}) == one_attempt
    assert api.get(url, params={"page_token": "zzz"}).status_code == 400


def test_task_environment_key_must_be_declared(workloads: Workloads, api: httpx.Client) -> None:
    task = workloads.command_task("true", environment_key="default")
    body = {"run_name": "exp", "tasks": [task]}
    missing = api.post("/api/2.2/jobs/runs/submit", json=body)
    assert missing.status_code == 400
    assert "environment_key" in missing.json()["message"]
    body["environments"] = [{"environment_key": "default", "spec": {"environment_version": "6"}}]
    assert api.post("/api/2.2/jobs/runs/submit", json=body).status_code == 200
