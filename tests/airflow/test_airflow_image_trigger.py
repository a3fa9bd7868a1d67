"""AirImageTrigger waits with the client's own ``wait_for_image`` (one wait for the sync
operator, the trigger, Dagster and ``airo images register``): each way a wait ends is the
event the operator's ``execute_complete`` expects."""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import connection_json

from air_runtime import AirClient
from air_runtime.local import start_local_workspace

PRIVATE = "acme/private-trainer"


@pytest.fixture
def slow_images(tmp_path, airflow_db, monkeypatch):
    """A workspace whose registrations take ten seconds, as ``databricks_default``."""
    workspace = start_local_workspace(
        data_dir=tmp_path / "ws",
        image_delay_s=10.0,
        private_images={PRIVATE: {"user": "acme", "password": "pw-0123456789"}},
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_DATABRICKS_DEFAULT", connection_json(workspace.host, workspace.token)
    )
    try:
        yield workspace
    finally:
        workspace.stop()


def _event(image: str, deadline: float | None = None) -> dict:
    from airflow_air.triggers import AirImageTrigger

    async def first() -> dict:
        events = AirImageTrigger(image, poll_interval=0.05, deadline=deadline).run()
        event = await anext(events)
        await events.aclose()
        return dict(event.payload)

    return asyncio.run(first())


def test_each_end_of_the_wait_is_its_event(slow_images):
    missing = _event("acme/never-registered:1")
    assert missing["status"] == "failed" and "is not registered" in missing["message"]

    with AirClient(slow_images.host, slow_images.token) as client:
        client.register_image("acme/trainer:1")
        client.register_image(f"{PRIVATE}:1")  # no credentials: the import FAILS
    importing = _event("acme/trainer:1", deadline=time.time() + 0.3)
    assert importing["status"] == "timeout", importing
    assert importing["state"] in ("PENDING", "IMPORTING")
    assert "docker.io/acme/trainer:1 is still" in importing["message"]

    failed = _event(f"{PRIVATE}:1")
    assert failed["status"] == "failed", failed
    assert failed["state"] == "FAILED" and "FAILED" in failed["message"]


def test_an_available_image_is_a_success_with_its_digest(workspace):
    with AirClient(workspace.host, workspace.token) as client:
        client.register_image("acme/trainer:2")
        done = client.wait_for_image("acme/trainer:2", timeout=60, poll_interval=0.05)
    event = _event("acme/trainer:2")
    assert event == {
        "image": "acme/trainer:2",
        "status": "success",
        "state": "AVAILABLE",
        "digest": done.digest,
    }
