"""`environment.docker_image.tag_policy` at submit, over real HTTP against the local workspace:
`latest` images are registered again before each submit and waited for; `auto` ones must
already be registered."""

from __future__ import annotations

import base64
import json

import pytest

from air_runtime import AirClient, AsyncAirClient, FailurePolicy, build_plan, load_workload
from air_runtime._errors import ConfigurationError
from air_runtime.client import _images as images_module

IMAGES = "ai-compute-manager/images"
IMAGE_GET = "ai-compute-manager/images:get"
URL = "docker.io/acme/trainer:nightly"


@pytest.fixture(autouse=True)
def _fast_image_polls(monkeypatch):
    monkeypatch.setattr(images_module, "IMAGE_POLL_INTERVAL_S", 0.05)


def _workload(name: str, image: dict | None = None, **extra):
    environment = {"docker_image": image} if image else {}
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": "/app/run.sh",
            "environment": environment,
            **extra,
        }
    )


PRIVATE_IMAGES = {"docker.io/acme/private": {"user": "bob", "password": "pw"}}


def _private_image(credentials_key: str) -> dict:
    """The private image with tag_policy latest, its credentials in docker-creds/<key>."""
    return {
        "url": "acme/private:main",
        "tag_policy": "latest",
        "credentials_scope": "docker-creds",
        "credentials_key": credentials_key,
    }


def test_latest_image_is_registered_again_before_each_submit(local_workspace):
    ws = local_workspace
    workload = _workload("nightly", {"url": "acme/trainer:nightly", "tag_policy": "latest"})
    with AirClient(ws.host, ws.token) as client:
        client.register_image(URL)
        first = client.wait_for_image(URL, poll_interval=0.05)
        ws.admin.reset_counters()

        client.submit_workload(workload, idempotency_token="nightly-1")
        counters = ws.admin.counters()
        assert counters["requests"][IMAGES] == 1
        assert counters["runs_created"] == 1
        second = client.get_image(URL)

        client.submit_workload(workload, idempotency_token="nightly-2")
        counters = ws.admin.counters()
        assert counters["requests"][IMAGES] == 2
        assert counters["runs_created"] == 2
        third = client.get_image(URL)

    assert second is not None and third is not None
    assert first.is_available and second.is_available and third.is_available
    digests = [first.manifest_sha256, second.manifest_sha256, third.manifest_sha256]
    assert all(digests) and len(set(digests)) == 3  # a new digest per submit


def test_latest_registration_is_available_before_the_submit(local_workspace, recorder):
    ws = local_workspace
    workload = _workload("order", {"url": "acme/trainer:nightly", "tag_policy": "latest"})
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        run = client.submit_workload(workload)  # never registered before: latest registers it
        # The order of requests is the point: the platform's retries run as they come.
        policy = FailurePolicy.platform_only()
        state = client.wait(run.run_id, poll_interval=0.1, failure_policy=policy)
    assert state.life_cycle_state == "TERMINATED"
    (register,) = [
        e for e in recorder.exchanges if e.method == "POST" and e.path.endswith("/images")
    ]
    assert json.loads(register.body) == {"docker_image_url": URL}
    polls = recorder.to("images:get")
    (submit,) = recorder.to("jobs/runs/submit")
    uploads = recorder.to("import-file")
    assert polls and register.ended <= polls[0].started
    assert polls[-1].ended <= min(u.started for u in uploads)  # waited before uploading
    assert max(u.ended for u in uploads) <= submit.started


def test_latest_image_uses_the_given_credentials_secret(workspace_factory, recorder):
    ws = workspace_factory(private_images=PRIVATE_IMAGES)
    image = _private_image("hub")
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        client.ensure_secret_scope("docker-creds")
        client.put_secret("docker-creds", "hub", base64.b64encode(b"bob:pw").decode())
        client.submit_workload(_workload("private", image))
        registration = client.get_image("acme/private:main")
    assert registration is not None and registration.is_available
    (register,) = [
        e for e in recorder.exchanges if e.method == "POST" and e.path.endswith("/images")
    ]
    assert json.loads(register.body) == {
        "docker_image_url": "docker.io/acme/private:main",
        "credentials_scope": "docker-creds",
        "credentials_key": "hub",
    }
    assert not recorder.to("images:checkImageAccess")  # the given secret is used as is


def test_failed_latest_registration_stops_before_any_upload(workspace_factory):
    ws = workspace_factory(private_images=PRIVATE_IMAGES)
    image = _private_image("missing")
    with AirClient(ws.host, ws.token) as client, pytest.raises(ConfigurationError) as caught:
        client.submit_workload(_workload("private", image))
    assert "docker.io/acme/private:main" in str(caught.value)
    assert "FAILED" in str(caught.value)
    requests = ws.admin.counters()["requests"]
    assert requests.get("workspace-files/import-file", 0) == 0
    assert requests.get("jobs/runs/submit", 0) == 0


def test_auto_unregistered_image_fails_before_anything_is_uploaded(local_workspace):
    ws = local_workspace
    workload = _workload("never", {"url": "acme/never:2", "tag_policy": "auto"})
    with AirClient(ws.host, ws.token) as client:
        plan = build_plan(workload, user_name=client.whoami().user_name)
        with pytest.raises(ConfigurationError) as caught:
            client.submit(plan)
    assert "not registered" in str(caught.value)
    assert "airo images register docker.io/acme/never:2" in str(caught.value)
    requests = ws.admin.counters()["requests"]
    assert requests.get(IMAGES, 0) == 0  # auto never registers on its own
    assert requests.get("workspace-files/import-file", 0) == 0
    assert requests.get("jobs/runs/submit", 0) == 0


def test_auto_image_registered_earlier_is_only_checked_in_four_round_trips(
    workspace_factory, recorder
):
    ws = workspace_factory(faults={"*": {"latency_ms": 50}})
    with AirClient(ws.host, ws.token) as client:
        client.register_image("acme/trainer:2")
        before = client.wait_for_image("acme/trainer:2", poll_interval=0.05)
    ws.admin.reset_counters()
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        client.submit_workload(_workload("auto", {"url": "acme/trainer:2"}))
        after = client.get_image("acme/trainer:2")
        recorder.exchanges.pop()  # the look-up above is not part of the submit
    assert ws.admin.counters()["requests"].get(IMAGES, 0) == 0
    assert after is not None and after.manifest_sha256 == before.manifest_sha256
    assert recorder.round_trips() <= 4


def test_workflow_mixing_latest_and_unregistered_auto_fails_before_upload(local_workspace):
    from air_runtime.plan import Stage

    ws = local_workspace
    stages = [
        Stage("fresh", _workload("fresh", {"url": "acme/trainer:nightly", "tag_policy": "latest"})),
        Stage("stale", _workload("stale", {"url": "acme/never:2"}), depends_on=("fresh",)),
    ]
    with AirClient(ws.host, ws.token) as client, pytest.raises(ConfigurationError) as caught:
        client.submit_workload(stages, run_name="mixed")
    assert "acme/never:2" in str(caught.value)
    requests = ws.admin.counters()["requests"]
    assert requests.get("workspace-files/import-file", 0) == 0
    assert requests.get("jobs/runs/submit", 0) == 0


async def test_async_client_registers_latest_images_too(local_workspace):
    ws = local_workspace
    workload = _workload("async", {"url": "acme/trainer:nightly", "tag_policy": "latest"})
    async with AsyncAirClient(ws.host, ws.token) as client:
        await client.submit_workload(workload)
        registration = await client.get_image(URL)
    assert registration is not None and registration.is_available
    assert ws.admin.counters()["requests"][IMAGES] == 1
