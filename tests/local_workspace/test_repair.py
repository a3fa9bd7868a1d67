"""runs/repair (Jobs API "Repair a job run"): tasks of an ended run re-run as new task runs of
the same run, the repair history, and the repairs a workspace refuses.

Each stage's command appends a line to a file of its own: the count of executions is the ranks'
side effect, not the API's view."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from air_runtime.local import start_local_workspace
from tests.local_workspace.conftest import Workloads, _api_client

OOM = "torch.OutOfMemoryError: CUDA out of memory"


def counting(path: Path, *, fail_first: bool = False) -> str:
    """A command that records each execution in ``path``; with ``fail_first`` its first
    execution fails the way training runs out of memory, the next ones succeed."""
    command = f'n=$(cat "{path}" 2>/dev/null | wc -l); echo run >> "{path}"'
    if fail_first:
        command += f'; if [ "$n" -eq 0 ]; then echo "{OOM}" >&2; exit 1; fi'
    return command + "; echo done"


def executions(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def pipeline(workloads: Workloads, tmp_path: Path) -> list[dict[str, Any]]:
    """prep >> train >> evaluate, train failing once."""
    return [
        workloads.command_task(counting(tmp_path / "prep"), key="prep"),
        workloads.command_task(
            counting(tmp_path / "train", fail_first=True),
            key="train",
            depends_on=[{"task_key": "prep"}],
        ),
        workloads.command_task(
            counting(tmp_path / "evaluate"), key="evaluate", depends_on=[{"task_key": "train"}]
        ),
    ]


def repair(api: httpx.Client, run_id: int, **body: Any) -> httpx.Response:
    return api.post("/api/2.2/jobs/runs/repair", json={"run_id": run_id, **body})


def with_history(api: httpx.Client, run_id: int) -> dict[str, Any]:
    response = api.get(
        "/api/2.2/jobs/runs/get", params={"run_id": run_id, "include_history": "true"}
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def newest(run: dict[str, Any], key: str) -> dict[str, Any]:
    return [t for t in run["tasks"] if t["task_key"] == key][-1]


def test_a_repair_reruns_the_failed_task_and_its_dependents_in_the_same_run(
    workloads: Workloads, api: httpx.Client, tmp_path: Path
) -> None:
    run_id = workloads.submit(*pipeline(workloads, tmp_path))
    failed = workloads.wait(run_id)
    assert failed["state"]["result_state"] == "FAILED"
    assert newest(failed, "evaluate")["state"]["result_state"] == "UPSTREAM_FAILED"
    before = {t["task_key"]: t["run_id"] for t in failed["tasks"]}

    response = repair(api, run_id, rerun_tasks=["train", "evaluate"])
    assert response.status_code == 200, response.text
    repair_id = response.json()["repair_id"]
    repaired = workloads.wait(run_id)

    assert repaired["run_id"] == run_id
    assert repaired["state"]["result_state"] == "SUCCESS"
    assert (executions(tmp_path / "prep"), executions(tmp_path / "train")) == (1, 2)
    assert executions(tmp_path / "evaluate") == 1
    # Every task run stays in the run; the repaired tasks have new ones.
    assert [t["task_key"] for t in repaired["tasks"]] == [
        "prep",
        "train",
        "train",
        "evaluate",
        "evaluate",
    ]
    assert newest(repaired, "prep")["run_id"] == before["prep"]
    new_train, new_evaluate = newest(repaired, "train"), newest(repaired, "evaluate")
    assert new_train["run_id"] not in before.values()
    assert new_evaluate["run_id"] not in before.values()
    assert new_train["state"]["result_state"] == "SUCCESS"
    assert "repair_history" not in repaired  # only with include_history, as runs/get does

    history = with_history(api, run_id)["repair_history"]
    assert [item["type"] for item in history] == ["ORIGINAL", "REPAIR"]
    assert "id" not in history[0] and history[1]["id"] == repair_id
    assert history[0]["state"]["result_state"] == "FAILED"
    assert history[1]["state"]["result_state"] == "SUCCESS"
    assert history[0]["task_run_ids"] == sorted(before.values())
    assert history[1]["task_run_ids"] == sorted([new_train["run_id"], new_evaluate["run_id"]])
    assert history[1]["start_time"] >= history[0]["end_time"] > 0

    # A task run of the repair is a run of its own, with its output and its logs.
    output = api.get("/api/2.2/jobs/runs/get-output", params={"run_id": new_train["run_id"]})
    assert output.json()["metadata"]["state"]["result_state"] == "SUCCESS"
    logs = api.get(f"/api/2.0/ai-training/workflows/by-run-id/{new_train['run_id']}/logs")
    assert [r["body"] for r in logs.json()["log_records"]] == ["done"]


def test_a_dependent_left_out_of_the_repair_keeps_its_result(
    workloads: Workloads, api: httpx.Client, tmp_path: Path
) -> None:
    run_id = workloads.submit(*pipeline(workloads, tmp_path))
    workloads.wait(run_id)
    assert repair(api, run_id, rerun_tasks=["train"]).status_code == 200
    repaired = workloads.wait(run_id)
    assert newest(repaired, "train")["state"]["result_state"] == "SUCCESS"
    assert newest(repaired, "evaluate")["state"]["result_state"] == "UPSTREAM_FAILED"
    assert repaired["state"]["result_state"] == "FAILED"  # the leaf decides, as on the platform
    assert executions(tmp_path / "evaluate") == 0


def test_rerun_all_failed_tasks_with_their_dependents(
    workloads: Workloads, api: httpx.Client, tmp_path: Path
) -> None:
    run_id = workloads.submit(*pipeline(workloads, tmp_path))
    workloads.wait(run_id)
    response = repair(api, run_id, rerun_all_failed_tasks=True, rerun_dependent_tasks=True)
    assert response.status_code == 200, response.text
    repaired = workloads.wait(run_id)
    assert repaired["state"]["result_state"] == "SUCCESS"
    assert [executions(tmp_path / k) for k in ("prep", "train", "evaluate")] == [1, 2, 1]
    refused = repair(api, run_id, rerun_tasks=["train"], rerun_all_failed_tasks=True)
    assert refused.status_code == 400


def test_each_repair_names_the_latest_one(
    workloads: Workloads, api: httpx.Client, tmp_path: Path
) -> None:
    run_id = workloads.submit(workloads.command_task("exit 3", key="broken"))
    workloads.wait(run_id)
    first = repair(api, run_id, rerun_tasks=["broken"])
    assert first.status_code == 200
    workloads.wait(run_id)
    # A second repair that does not know the first (two callers reading the run at once).
    for stale in ({}, {"latest_repair_id": first.json()["repair_id"] - 1}):
        refused = repair(api, run_id, rerun_tasks=["broken"], **stale)
        assert refused.status_code == 400
        assert refused.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    second = repair(api, run_id, rerun_tasks=["broken"], latest_repair_id=first.json()["repair_id"])
    assert second.status_code == 200, second.text
    workloads.wait(run_id)
    history = with_history(api, run_id)["repair_history"]
    assert [item.get("id") for item in history] == [
        None,
        first.json()["repair_id"],
        second.json()["repair_id"],
    ]
    assert len(workloads.get(run_id)["tasks"]) == 3


def test_a_run_still_going_is_not_repaired(
    workloads: Workloads, api: httpx.Client, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    run_id = workloads.submit(
        workloads.command_task(f'while [ ! -f "{go}" ]; do sleep 0.05; done', key="slow")
    )
    workloads.wait_for(run_id, "RUNNING")
    refused = repair(api, run_id, rerun_tasks=["slow"])
    assert refused.status_code == 400
    assert "still in progress" in refused.json()["message"]
    go.touch()
    assert workloads.wait(run_id)["state"]["result_state"] == "SUCCESS"
    assert len(workloads.get(run_id)["tasks"]) == 1


def test_unknown_runs_and_tasks(workloads: Workloads, api: httpx.Client) -> None:
    assert repair(api, 987654, rerun_tasks=["x"]).status_code == 404
    run_id = workloads.submit(workloads.command_task("exit 1", key="only"))
    workloads.wait(run_id)
    unknown = repair(api, run_id, rerun_tasks=["nope"])
    assert unknown.status_code == 400 and "nope" in unknown.json()["message"]


def test_a_workspace_can_refuse_every_repair(tmp_path: Path) -> None:
    workspace = start_local_workspace(data_dir=tmp_path / "ws", refuse_repair=True)
    try:
        with _api_client(workspace) as api:
            workloads = Workloads(workspace, api)
            run_id = workloads.submit(workloads.command_task("exit 1", key="only"))
            workloads.wait(run_id)
            refused = repair(api, run_id, rerun_tasks=["only"])
            assert refused.status_code == 400
            assert refused.json()["error_code"] == "INVALID_PARAMETER_VALUE"
            assert len(workloads.get(run_id)["tasks"]) == 1
            history = with_history(api, run_id)["repair_history"]
            assert [item["type"] for item in history] == ["ORIGINAL"]
    finally:
        workspace.stop()


def test_repairs_survive_a_restart_and_one_under_way_ends_with_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "ws"
    go = tmp_path / "go"
    workspace = start_local_workspace(data_dir=data_dir, token="t")
    with _api_client(workspace) as api:
        workloads = Workloads(workspace, api)
        # Fails at once the first time; the second time waits for a file that never comes.
        command = (
            f'if [ -f "{tmp_path}/once" ]; then while [ ! -f "{go}" ]; do sleep 0.05; done; '
            f'else touch "{tmp_path}/once"; exit 1; fi'
        )
        run_id = workloads.submit(workloads.command_task(command, key="only"))
        workloads.wait(run_id)
        first = repair(api, run_id, rerun_tasks=["only"]).json()["repair_id"]
        workloads.wait_for(run_id, "RUNNING")
    workspace.stop()
    workspace = start_local_workspace(data_dir=data_dir, token="t")
    try:
        with _api_client(workspace) as api:
            run = with_history(api, run_id)
            assert run["state"]["life_cycle_state"] == "INTERNAL_ERROR"
            history = run["repair_history"]
            assert [item.get("id") for item in history] == [None, first]
            assert history[1]["state"]["life_cycle_state"] == "INTERNAL_ERROR"
            assert history[1]["end_time"] > 0
            # An ended run can be repaired again, naming the repair it knows.
            again = repair(api, run_id, rerun_tasks=["only"], latest_repair_id=first)
            assert again.status_code == 200, again.text
            go.touch()
            assert Workloads(workspace, api).wait(run_id)["state"]["result_state"] == "SUCCESS"
    finally:
        workspace.stop()


def test_the_client_repairs_and_reads_each_task_by_its_newest_task_run(
    workloads: Workloads, local_workspace, tmp_path: Path
) -> None:
    from air_runtime import AirClient, PlatformError, RunOutcome

    run_id = workloads.submit(*pipeline(workloads, tmp_path))
    workloads.wait(run_id)
    with AirClient(local_workspace.host, local_workspace.token) as client:
        failed = client.get_run(run_id, include_history=True)
        assert failed.latest_repair_id is None
        assert RunOutcome.read(client, failed, "train").status == "failed"
        repair_id = client.repair_run(run_id, ["train", "evaluate"])
        with pytest.raises(PlatformError):  # a second caller that read the run before it
            client.repair_run(run_id, ["train", "evaluate"])
        repaired = client.wait(run_id, timeout=60)
        assert repaired.is_success
        history = client.get_run(run_id, include_history=True)
        assert history.latest_repair_id == repair_id
        train = RunOutcome.read(client, repaired, "train")
        # The newest task run decides; the GPU-hours count the failed one too.
        assert train.status == "success"
        assert train.task_run_id == history.repairs[-1].task_run_ids[0]
        attempts = repaired.task_attempts("train")
        assert len(attempts) == 2
        assert train.gpu_hours == round(sum(a.gpu_hours() for a in attempts), 6)
        assert train.gpu_hours > round(attempts[-1].gpu_hours(), 6) > 0
    assert [executions(tmp_path / k) for k in ("prep", "train", "evaluate")] == [1, 2, 1]


def test_the_databricks_sdk_repairs_a_run(
    workloads: Workloads, local_workspace, tmp_path: Path, monkeypatch
) -> None:
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.service import jobs

    for name in ("DATABRICKS_CONFIG_PROFILE", "DATABRICKS_CLIENT_ID", "DATABRICKS_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    sdk = WorkspaceClient(host=local_workspace.host, token=local_workspace.token)
    run_id = workloads.submit(*pipeline(workloads, tmp_path))
    workloads.wait(run_id)
    waiter = sdk.jobs.repair_run(run_id, rerun_tasks=["train"], rerun_dependent_tasks=True)
    assert waiter.response.repair_id is not None
    repaired = waiter.result(timeout=datetime.timedelta(seconds=60))
    assert repaired.state is not None
    assert repaired.state.result_state == jobs.RunResultState.SUCCESS
    history = sdk.jobs.get_run(run_id, include_history=True).repair_history or []
    assert [item.type for item in history] == [
        jobs.RepairHistoryItemType.ORIGINAL,
        jobs.RepairHistoryItemType.REPAIR,
    ]
    assert history[1].id == waiter.response.repair_id
    assert [executions(tmp_path / k) for k in ("prep", "train", "evaluate")] == [1, 2, 1]


def test_the_async_client_repairs_too(
    workloads: Workloads, local_workspace, tmp_path: Path
) -> None:
    import asyncio

    from air_runtime import AsyncAirClient

    run_id = workloads.submit(*pipeline(workloads, tmp_path))
    workloads.wait(run_id)

    async def repair_and_wait() -> tuple[int, int | None, bool]:
        async with AsyncAirClient(local_workspace.host, local_workspace.token) as client:
            repair_id = await client.repair_run(run_id, ["train", "evaluate"])
            ended = await client.wait(run_id, timeout=60)
            history = await client.get_run(run_id, include_history=True)
            return repair_id, history.latest_repair_id, ended.is_success

    repair_id, latest, succeeded = asyncio.run(repair_and_wait())
    assert latest == repair_id and succeeded
    assert [executions(tmp_path / k) for k in ("prep", "train", "evaluate")] == [1, 2, 1]


def _task(run_id: int, attempt: int, life_cycle: str, result: str | None = None) -> dict[str, Any]:
    state = {"life_cycle_state": life_cycle, **({"result_state": result} if result else {})}
    return {"task_key": "train", "run_id": run_id, "attempt_number": attempt, "state": state}


def test_a_task_is_read_by_its_newest_task_run_with_or_without_the_history() -> None:
    """A retried task appears once per attempt and a repaired one once per task run; the
    repair's first attempt (attempt 0) is newer than the original's retry (attempt 1)."""
    from air_runtime import RunState

    tasks = [
        _task(11, 0, "TERMINATED", "FAILED"),
        _task(12, 1, "TERMINATED", "FAILED"),
        _task(21, 0, "RUNNING"),
    ]
    body: dict[str, Any] = {"run_id": 1, "state": {"life_cycle_state": "RUNNING"}, "tasks": tasks}
    without = RunState.from_api(body)
    assert without.task("train").run_id == 21 and without.latest_repair_id is None
    history = [
        {"type": "ORIGINAL", "task_run_ids": [11, 12]},
        {"type": "REPAIR", "id": 5, "task_run_ids": [21]},
    ]
    # The history decides even when the API lists the task runs in another order.
    listed = RunState.from_api({**body, "tasks": tasks[::-1], "repair_history": history})
    assert listed.task("train").run_id == 21
    assert listed.latest_repair_id == 5
    assert [a.run_id for a in listed.task_attempts("train")] == [21, 12, 11]
