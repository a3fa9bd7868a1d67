"""Fault injection, counters and the request log."""

from __future__ import annotations

import json
import logging
import socket
import time
import uuid

import httpx
import pytest

from air_runtime.local import start_local_workspace
from tests.local_workspace.conftest import Workloads

ME = "/api/2.0/preview/scim/v2/Me"


def test_faults_are_off_by_default_and_set_through_admin(
    local_workspace, api: httpx.Client
) -> None:
    assert local_workspace.admin.faults() == {}
    local_workspace.admin.set_faults(
        {"seed": 3, "preview/scim/v2/Me": {"rate_429": 1.0, "retry_after_s": 2}}
    )
    limited = api.get(ME)
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "2"
    assert limited.json()["error_code"] == "REQUEST_LIMIT_EXCEEDED"
    assert api.get("/api/2.0/secrets/scopes/list").status_code == 200  # other endpoints unaffected
    local_workspace.admin.set_faults({"*": {"rate_5xx": 1.0, "status_5xx": 502}})
    assert api.get(ME).status_code == 502
    local_workspace.admin.set_faults({})
    assert api.get(ME).status_code == 200
    counters = local_workspace.admin.counters()
    assert counters["faults"]["preview/scim/v2/Me"] == {"429": 1, "502": 1}
    assert counters["responses"]["preview/scim/v2/Me"] == {"429": 1, "502": 1, "200": 1}


def test_bad_fault_settings_are_refused(local_workspace) -> None:
    with pytest.raises(httpx.HTTPStatusError):
        local_workspace.admin.set_faults({"jobs/runs/get": {"rate_429": 2}})
    with pytest.raises(httpx.HTTPStatusError):
        local_workspace.admin.set_faults({"jobs/runs/get": {"typo": 1}})
    with pytest.raises(ValueError):
        start_local_workspace(faults={"x": {"rate_drop": "lots"}})


def test_dropped_connection_has_no_answer(local_workspace, api: httpx.Client) -> None:
    local_workspace.admin.set_faults({"preview/scim/v2/Me": {"rate_drop": 1.0}})
    with pytest.raises(httpx.TransportError):
        api.get(ME)
    local_workspace.admin.set_faults({})
    assert api.get(ME).status_code == 200


def test_caller_hanging_up_mid_request_is_no_server_error(
    local_workspace, api: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    # A worker killed while its request waits (here: in injected latency) never sends the
    # rest of its body; the server records it and goes on, without an error traceback.
    local_workspace.admin.set_faults({"jobs/runs/get": {"latency_ms": 300}})
    host, port = local_workspace.host.removeprefix("http://").split(":")
    head = (
        "GET /api/2.2/jobs/runs/get HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {local_workspace.token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    with caplog.at_level(logging.ERROR), socket.create_connection((host, int(port))) as sock:
        # The head and part of the body, then the hang-up: the server reads them in that
        # order (TCP), waiting for the rest of the body when the caller goes.
        sock.sendall(head.encode() + b'{"run_id": 1')
    deadline = time.monotonic() + 60
    while "499" not in local_workspace.admin.counters()["responses"].get("jobs/runs/get", {}):
        assert time.monotonic() < deadline, local_workspace.admin.counters()["responses"]
        time.sleep(0.05)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    local_workspace.admin.set_faults({})
    assert api.get(ME).status_code == 200


def test_submit_response_lost_still_creates_the_run(
    local_workspace, workloads: Workloads, api: httpx.Client
) -> None:
    task = workloads.command_task("echo created")
    token = "lost-" + uuid.uuid4().hex
    body = {"run_name": "lost", "idempotency_token": token, "tasks": [task]}
    local_workspace.admin.set_faults({"jobs/runs/submit": {"submit_response_lost": 1.0}})
    with pytest.raises(httpx.TransportError):
        api.post("/api/2.2/jobs/runs/submit", json=body)
    local_workspace.admin.set_faults({})
    run_id = api.post("/api/2.2/jobs/runs/submit", json=body).json()["run_id"]
    counters = local_workspace.admin.counters()
    assert counters["runs_created"] == 1
    assert counters["submits_per_token"][token] == 2
    assert workloads.wait(run_id)["state"]["result_state"] == "SUCCESS"


def test_latency_and_seeded_shares(tmp_path) -> None:
    faults = {
        "seed": 11,
        "secrets/scopes/list": {"rate_429": 0.3, "rate_5xx": 0.2, "latency_ms": 20},
    }
    outcomes = []
    for run in range(2):
        ws = start_local_workspace(data_dir=tmp_path / f"w{run}", faults=faults)
        with httpx.Client(
            base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}
        ) as client:
            started = time.monotonic()
            codes = [client.get("/api/2.0/secrets/scopes/list").status_code for _ in range(40)]
            elapsed = time.monotonic() - started
        ws.stop()
        outcomes.append(codes)
        assert elapsed >= 40 * 0.02
    assert outcomes[0] == outcomes[1]  # the same seed gives the same faults
    assert 5 <= outcomes[0].count(429) <= 20 and 2 <= outcomes[0].count(503) <= 15


def test_request_log_never_holds_tokens_or_bodies(local_workspace, api: httpx.Client) -> None:
    api.post("/api/2.0/secrets/scopes/create", json={"scope": "log-test"})
    api.post(
        "/api/2.0/secrets/put",
        json={"scope": "log-test", "key": "k", "string_value": "TOPSECRETVALUE"},
    )
    api.get("/api/2.0/secrets/list", params={"scope": "log-test", "access_token": "abc123"})
    entries = local_workspace.admin.request_log()
    assert {"method": "POST", "path": "/api/2.0/secrets/put", "status": 200}.items() <= entries[
        -2
    ].items()
    assert "access_token=REDACTED" in entries[-1]["query"]
    on_disk = (local_workspace.data_dir / "request_log.jsonl").read_text()
    for text in (json.dumps(entries), on_disk):
        assert "TOPSECRETVALUE" not in text
        assert local_workspace.token not in text
        assert "abc123" not in text


def test_counters_reset(local_workspace, api: httpx.Client) -> None:
    api.get(ME)
    assert local_workspace.admin.counters()["requests"]["preview/scim/v2/Me"] == 1
    local_workspace.admin.reset_counters()
    assert local_workspace.admin.counters()["requests"] == {}
