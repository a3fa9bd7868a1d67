"""Docker Hub image registration: states, private repositories, re-registration."""

from __future__ import annotations

import base64
import time

import httpx
import pytest

from air_runtime.local import start_local_workspace

REGISTER = "/api/2.0/ai-compute-manager/images"
GET = "/api/2.0/ai-compute-manager/images:get"
ACCESS = "/api/2.0/ai-compute-manager/images:checkImageAccess"


@pytest.fixture
def api(tmp_path):
    ws = start_local_workspace(
        data_dir=tmp_path / "ws",
        # IMPORTING lasts a second: polls every 50 ms see it on a loaded machine too.
        image_delay_s=2.0,
        private_images={"docker.io/acme/private": {"user": "acme", "password": "pw"}},
    )
    with httpx.Client(base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}) as client:
        yield client
    ws.stop()


def _wait_final(api: httpx.Client, url: str) -> dict:
    states = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        body = api.get(GET, params={"docker_image_url": url}).json()
        states.append(body["state"])
        if body["state"] in ("AVAILABLE", "FAILED"):
            body["seen"] = states
            return body
        time.sleep(0.05)
    raise AssertionError(states)


def test_public_image_becomes_available(api: httpx.Client) -> None:
    assert api.get(GET, params={"docker_image_url": "docker.io/acme/public:1"}).status_code == 404
    registered = api.post(REGISTER, json={"docker_image_url": "acme/public:1"}).json()
    assert registered["docker_image_url"] == "docker.io/acme/public:1"
    assert registered["state"] == "PENDING"
    final = _wait_final(api, "docker.io/acme/public:1")
    assert final["state"] == "AVAILABLE" and "IMPORTING" in final["seen"]
    assert len(final["manifest_sha256"]) == 64
    api.post(REGISTER, json={"docker_image_url": "docker.io/acme/public:1"}).raise_for_status()
    again = _wait_final(api, "docker.io/acme/public:1")
    assert again["manifest_sha256"] != final["manifest_sha256"]
    assert api.get(ACCESS, params={"docker_image_url": "acme/public:1"}).json() == {
        "publicly_accessible": True
    }


def test_only_docker_hub(api: httpx.Client) -> None:
    response = api.post(
        REGISTER, json={"docker_image_url": "123.dkr.ecr.us-east-1.amazonaws.com/x:1"}
    )
    assert response.status_code == 400
    assert "Docker Hub" in response.json()["message"]
    half = api.post(REGISTER, json={"docker_image_url": "acme/x:1", "credentials_scope": "s"})
    assert half.status_code == 400


def test_private_image_needs_the_right_credentials(api: httpx.Client) -> None:
    url = "docker.io/acme/private:2"
    assert api.get(ACCESS, params={"docker_image_url": url}).json() == {
        "publicly_accessible": False
    }
    api.post(REGISTER, json={"docker_image_url": url}).raise_for_status()
    failed = _wait_final(api, url)
    assert failed["state"] == "FAILED" and "private" in failed["status_message"]
    assert "manifest_sha256" not in failed
    api.post("/api/2.0/secrets/scopes/create", json={"scope": "docker-credentials-u"})
    wrong = base64.b64encode(b"acme:nope").decode()
    api.post(
        "/api/2.0/secrets/put",
        json={"scope": "docker-credentials-u", "key": "k", "string_value": wrong},
    )
    api.post(
        REGISTER,
        json={
            "docker_image_url": url,
            "credentials_scope": "docker-credentials-u",
            "credentials_key": "k",
        },
    )
    refused = _wait_final(api, url)
    assert refused["state"] == "FAILED" and "docker-credentials-u/k" in refused["status_message"]
    assert "nope" not in refused["status_message"]
    right = base64.b64encode(b"acme:pw").decode()
    api.post(
        "/api/2.0/secrets/put",
        json={"scope": "docker-credentials-u", "key": "k", "string_value": right},
    )
    api.post(
        REGISTER,
        json={
            "docker_image_url": url,
            "credentials_scope": "docker-credentials-u",
            "credentials_key": "k",
        },
    )
    assert _wait_final(api, url)["state"] == "AVAILABLE"


def test_submit_needs_an_available_image(api: httpx.Client) -> None:
    task = {
        "task_key": "img",
        "ai_runtime_task": {
            "experiment": "img",
            "docker_image_url": "docker.io/acme/unregistered:1",
            "deployments": [
                {
                    "compute": {"accelerator_type": "GPU_1xA10", "accelerator_count": 1},
                    "command_path": "/Workspace/Users/u/x/command.sh",
                }
            ],
        },
    }
    response = api.post("/api/2.2/jobs/runs/submit", json={"run_name": "img", "tasks": [task]})
    assert response.status_code == 400
    assert "docker.io/acme/unregistered:1" in response.json()["message"]
    assert "register" in response.json()["message"]
