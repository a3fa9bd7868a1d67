"""Outages of the local workspace (``admin.outage``): the API held or refused for a while, the
admin API and the runs going on."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from air_runtime import AirClient, load_workload

LIST = "/api/2.2/jobs/runs/list"


def _get(workspace, path: str = LIST, timeout: float = 30.0) -> httpx.Response:
    return httpx.get(
        f"{workspace.host}{path}",
        headers={"Authorization": f"Bearer {workspace.token}"},
        timeout=timeout,
    )


def test_hang_holds_requests_and_closes_them_unanswered(local_workspace) -> None:
    local_workspace.admin.reset_counters()
    local_workspace.admin.outage(60, mode="hang")
    failures: list[BaseException] = []

    def held_request() -> None:
        try:
            _get(local_workspace)
        except httpx.HTTPError as error:
            failures.append(error)

    caller = threading.Thread(target=held_request)
    caller.start()
    status = local_workspace.admin.outage_status()  # the admin API answers meanwhile
    assert status["active"] and status["mode"] == "hang"
    while local_workspace.admin.outage_status()["held"] < 1:
        assert caller.is_alive()
    assert local_workspace.admin.end_outage()["active"] is False
    caller.join(timeout=30)
    assert [type(f) for f in failures] == [httpx.RemoteProtocolError]  # closed, no answer
    assert _get(local_workspace).status_code == 200
    counters = local_workspace.admin.counters()
    assert counters["faults"]["jobs/runs/list"] == {"outage": 1}
    assert counters["responses"]["jobs/runs/list"] == {"outage": 1, "200": 1}
    status = local_workspace.admin.outage_status()
    assert not status["active"] and status["ended_at"] >= status["started_at"]


def test_refuse_closes_the_listening_socket_and_listens_again(local_workspace) -> None:
    assert _get(local_workspace).status_code == 200
    local_workspace.admin.outage(2.0, mode="refuse")
    with pytest.raises(httpx.ConnectError, match=r"(?i)refused"):
        _get(local_workspace)
    ended_at = local_workspace.admin.wait_outage_end(timeout=60)
    assert _get(local_workspace).status_code == 200  # the same address again
    assert local_workspace.admin.outage_status()["ended_at"] == ended_at


def test_runs_go_on_and_end_during_an_outage(local_workspace, tmp_path) -> None:
    go, finished = tmp_path / "go", tmp_path / "finished"
    workload = load_workload(
        {
            "experiment_name": "through_an_outage",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": f"while [ ! -e {go} ]; do sleep 0.2; done; touch {finished}",
        }
    )
    with AirClient(local_workspace.host, local_workspace.token) as client:
        run_id = client.submit_workload(workload).run_id
        local_workspace.admin.outage(120, mode="hang")
        go.touch()
        deadline = time.monotonic() + 60
        while not finished.exists():  # the rank ran to its end while nobody was answered
            assert time.monotonic() < deadline, "the rank did not finish"
            time.sleep(0.1)
        local_workspace.admin.end_outage()
        state = client.wait(run_id, timeout=60, poll_interval=0.1)
    assert state.result_state == "SUCCESS"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"seconds": 5, "mode": "sideways"}, "outage mode must be one of hang, refuse"),
        ({"seconds": "5"}, "outage seconds must be a number"),
        ({"seconds": 0}, "outage seconds must be > 0"),
    ],
)
def test_outage_arguments_are_checked(local_workspace, body, problem) -> None:
    response = httpx.post(
        f"{local_workspace.host}/api/2.0/airo-admin/outage",
        json=body,
        headers={"Authorization": f"Bearer {local_workspace.token}"},
    )
    assert response.status_code == 400
    assert problem in response.json()["message"]
    assert local_workspace.admin.outage_status()["active"] is False


def test_one_outage_at_a_time(local_workspace) -> None:
    local_workspace.admin.outage(60)
    with pytest.raises(httpx.HTTPStatusError):
        local_workspace.admin.outage(5)
    local_workspace.admin.end_outage()
    assert _get(local_workspace).status_code == 200
