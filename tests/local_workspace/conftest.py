"""Fixtures that upload launch directories and submit bodies by hand (docs/spec/workload.md §4-§5)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from air_runtime.local import LocalWorkspace

TERMINAL = ("TERMINATED", "SKIPPED", "INTERNAL_ERROR")


class Workloads:
    """Builds launch directories and submit bodies the way the client does."""

    def __init__(self, workspace: LocalWorkspace, client: httpx.Client) -> None:
        self.workspace = workspace
        self.client = client

    def upload(self, files: dict[str, str | bytes], name: str = "exp") -> str:
        folder = f"/Workspace/Users/local-user@example.com/.air/cli_launch/{name}/{name}_{uuid.uuid4().hex[:16]}"
        for relative, content in files.items():
            path = f"{folder}/{relative}"
            parent = path.rsplit("/", 1)[0]
            self.client.post("/api/2.0/workspace/mkdirs", json={"path": parent}).raise_for_status()
            data = content.encode() if isinstance(content, str) else content
            self.client.post(
                f"/api/2.0/workspace-files/import-file{path}",
                params={"overwrite": "true"},
                content=data,
            ).raise_for_status()
        return folder

    def command_task(
        self,
        command: str,
        *,
        key: str = "exp",
        nodes: int = 1,
        accelerator: str = "GPU_1xA10",
        env: dict[str, str] | None = None,
        secrets: dict[str, str] | None = None,
        parameters: str | None = None,
        extra_files: dict[str, str | bytes] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        files: dict[str, str | bytes] = {"command.sh": command, "training_config.yaml": "x: 1\n"}
        if env:
            files["env_vars.json"] = json.dumps(
                [{"name": k, "value": v} for k, v in sorted(env.items())]
            )
        if secrets:
            files["secret_env_vars.json"] = json.dumps(
                [
                    {"name": k, "secret_scope": v.split("/")[0], "secret_key": v.split("/")[1]}
                    for k, v in sorted(secrets.items())
                ]
            )
        if parameters:
            files["hyperparameters.yaml"] = parameters
        files.update(extra_files or {})
        folder = self.upload(files, key)
        per_node = 8 if accelerator.startswith("GPU_8x") else 1
        ai_task: dict[str, Any] = {
            "experiment": key,
            "deployments": [
                {
                    "compute": {
                        "accelerator_type": accelerator,
                        "accelerator_count": nodes * per_node,
                    },
                    "command_path": f"{folder}/command.sh",
                }
            ],
        }
        ai_task.update(fields.pop("ai_runtime_task", {}))
        return {
            "task_key": key,
            "run_if": "ALL_SUCCESS",
            "max_retries": 0,
            "ai_runtime_task": ai_task,
            **fields,
        }

    def containers_task(
        self, containers: list[dict[str, Any]], *, key: str = "exp", nodes: int = 2, **fields: Any
    ) -> dict[str, Any]:
        files: dict[str, str | bytes] = {"training_config.yaml": "x: 1\n"}
        for container in containers:
            files[f"containers/{container['name']}/command.sh"] = container["command"]
            if container.get("env"):
                files[f"containers/{container['name']}/env_vars.json"] = json.dumps(
                    [{"name": k, "value": v} for k, v in sorted(container["env"].items())]
                )
        folder = self.upload(files, key)
        return {
            "task_key": key,
            "max_retries": 0,
            "ai_runtime_task": {
                "experiment": key,
                "deployments": [
                    {
                        "compute": {"accelerator_type": "GPU_1xA10", "accelerator_count": nodes},
                        "containers": [
                            {
                                "name": c["name"],
                                "ranks": c["ranks"],
                                "command_path": f"{folder}/containers/{c['name']}/command.sh",
                                "unity_catalog_image_path": "main.rl.image:1",
                            }
                            for c in containers
                        ],
                    }
                ],
            },
            **fields,
        }

    def submit(self, *tasks: dict[str, Any], token: str | None = None, **fields: Any) -> int:
        body = {
            "run_name": tasks[0]["task_key"],
            "idempotency_token": token or uuid.uuid4().hex,
            "tasks": list(tasks),
            **fields,
        }
        response = self.client.post("/api/2.2/jobs/runs/submit", json=body)
        assert response.status_code == 200, response.text
        return int(response.json()["run_id"])

    def get(self, run_id: int) -> dict[str, Any]:
        response = self.client.get("/api/2.2/jobs/runs/get", params={"run_id": run_id})
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def wait(self, run_id: int, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(run_id)
            if run["state"]["life_cycle_state"] in TERMINAL:
                return run
            assert time.monotonic() < deadline, f"run {run_id} still {run['state']}"
            time.sleep(0.05)

    def wait_for(self, run_id: int, life_cycle_state: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(run_id)
            if run["state"]["life_cycle_state"] == life_cycle_state:
                return run
            assert time.monotonic() < deadline, (
                f"run {run_id} never {life_cycle_state}: {run['state']}"
            )
            time.sleep(0.05)

    def logs(self, run_id: int, node: int = 0) -> list[str]:
        response = self.client.get(
            f"/api/2.0/ai-training/workflows/by-run-id/{run_id}/logs",
            params={"filter.node_index": node},
        )
        response.raise_for_status()
        return [r["body"] for r in response.json()["log_records"]]


def _api_client(workspace: LocalWorkspace) -> httpx.Client:
    return httpx.Client(
        base_url=workspace.host,
        headers={"Authorization": f"Bearer {workspace.token}"},
        timeout=30,
    )


@pytest.fixture
def api(local_workspace: LocalWorkspace) -> Iterator[httpx.Client]:
    with _api_client(local_workspace) as client:
        yield client


@pytest.fixture
def shared_api(session_local_workspace: LocalWorkspace) -> Iterator[httpx.Client]:
    """A client of the session's workspace, for requests that change nothing in it."""
    with _api_client(session_local_workspace) as client:
        yield client


@pytest.fixture
def workloads(local_workspace: LocalWorkspace, api: httpx.Client) -> Workloads:
    return Workloads(local_workspace, api)
