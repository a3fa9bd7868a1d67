"""A repaired run's logs against the local workspace: each repair's re-run is a task run of its
own (its own id; attempt 0 of its task again on the platform) and is read as itself. A stage's
try reads only its repair's task runs; ``airo logs`` reads every task run, counting a repair's
on after the tries before it (``--retry``, ``--download-to``), and the run page lists them.

The train stage prints numbered lines and a ``done`` line on every try and fails while its
counter file says so: the counter, not the API, says which try printed what."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import httpx
import pytest

from air_runtime import AirClient, load_workload
from air_runtime.cli import main as airo
from air_runtime.plan import Stage

LINES = 6
FAILING_TRIES = 2


def _workload(name: str, command: str, nodes: int = 1):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": nodes},
            "command": command,
            "max_retries": 0,  # a failed try is recovered by a repair, not the platform
        }
    )


def train_command(counter: Path) -> str:
    """Try k (1 first; each rank counts its own) prints ``train try k line i`` for i in
    1..LINES and ``train try k done``; tries 1 and 2 then fail on node 0, once node 1 has
    printed all of its lines and left (so that no line is cut by the other rank's stop)."""
    return (
        f'k=$(( $(cat "{counter}_$POD_RANK" 2>/dev/null || echo 0) + 1 )); '
        f'echo "$k" > "{counter}_$POD_RANK"; '
        f'for i in $(seq 1 {LINES}); do echo "train try $k line $i on $POD_RANK"; done; '
        f'echo "train try $k done on $POD_RANK"; '
        f'if [ "$k" -le {FAILING_TRIES} ]; then '
        f'  if [ "$POD_RANK" = 1 ]; then touch "{counter}_left_$k"; exit 0; fi; '
        f'  while [ ! -f "{counter}_left_$k" ]; do sleep 0.05; done; exit 1; '
        f"fi"
    )


def expected(tries: int, node: int = 0) -> list[str]:
    return [f"train try {tries} line {i} on {node}" for i in range(1, LINES + 1)] + [
        f"train try {tries} done on {node}"
    ]


def printed(lines: list[str]) -> list[str]:
    """What the rank printed: without the launcher's line on the node that failed."""
    return [line for line in lines if not line.startswith("ERROR: Script failed")]


@pytest.fixture
def repaired(workspace_factory, tmp_path: Path):
    """prep >> train (2 nodes, fails twice) >> evaluate, repaired twice: the run id and the
    workspace."""
    ws = workspace_factory()
    stages = [
        Stage("prep", _workload("prep", "echo prepared")),
        Stage("train", _workload("train", train_command(tmp_path / "count"), nodes=2), ("prep",)),
        Stage("evaluate", _workload("evaluate", "echo evaluated; echo done"), ("train",)),
    ]
    with AirClient(ws.host, ws.token) as client:
        run_id = client.submit_workload(stages).run_id
        state = client.wait(run_id)
        assert state.result_state == "FAILED", state.describe()
        for _ in range(FAILING_TRIES):
            history = client.get_run(run_id, include_history=True)
            client.repair_run(
                run_id, ["train", "evaluate"], latest_repair_id=history.latest_repair_id
            )
            state = client.wait(run_id)
        assert state.is_success, state.describe()
        assert (tmp_path / "count_0").read_text().strip() == str(FAILING_TRIES + 1)
    return ws, run_id


def test_a_stage_reads_its_newest_repair_only_and_airo_reads_every_task_run(repaired) -> None:
    ws, run_id = repaired
    with AirClient(ws.host, ws.token) as client:
        # A stage's try (what the Airflow stage copies): its repair's lines, complete, once.
        stage = [(r.label, r.body) for r in client.iter_run_logs(run_id, task_key="train")]
        assert len(stage) == len(set(stage)), Counter(stage)
        for node in (0, 1):
            mine = [b for label, b in stage if label == f"train node {node} attempt 2 (repair 2)"]
            assert printed(mine) == expected(3, node)
        assert {label for label, _ in stage} == {
            "train node 0 attempt 2 (repair 2)",
            "train node 1 attempt 2 (repair 2)",
        }
        evaluate = [r.body for r in client.iter_run_logs(run_id, task_key="evaluate")]
        assert evaluate == ["evaluated", "done"]

        # Every task run, each its own stream: the original's, then each repair's.
        every = list(client.read_logs(run_id, task_key="train"))
        by_try = {
            (r.attempt, r.repair, r.node_index): [x.body for x in every if x.label == r.label]
            for r in every
        }
        for number in range(FAILING_TRIES + 1):
            for node in (0, 1):
                assert printed(by_try[(number, number, node)]) == expected(number + 1, node)
        ids = {r.attempt: r.task_run_id for r in every}
        assert len(set(ids.values())) == FAILING_TRIES + 1 and None not in ids.values()

        # --retry N: the Nth task run of the task, a repair's too.
        first_repair = {r.body for r in client.read_logs(run_id, task_key="train", attempt=1)}
        assert set(printed(list(first_repair))) == set(expected(2, 0)) | set(expected(2, 1))


def test_airo_logs_retry_and_download_name_every_repair(repaired, tmp_path, capsys) -> None:
    ws, run_id = repaired
    workspace = ["--host", ws.host, "--token", ws.token]
    capsys.readouterr()
    assert (
        airo(["logs", str(run_id), "--task", "train", "--retry", "1", "--node", "0", *workspace])
        == 0
    )
    shown = capsys.readouterr().out.splitlines()
    assert printed([line.split("] ", 1)[1] for line in shown]) == expected(2, 0)
    assert all("[train node 0 attempt 1 (repair 1)]" in line for line in shown)

    assert airo(["logs", str(run_id), "--task", "train", "--retry", "3", *workspace]) != 0
    refused = capsys.readouterr().err
    assert "attempts 0 to 2" in refused and "1 (repair 1), 2 (repair 2)" in refused

    target = tmp_path / "downloaded"
    assert airo(["logs", str(run_id), "--download-to", str(target), "--json", *workspace]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    written = {(f["task"], f["attempt_number"], f["node"]): Path(f["path"]) for f in files}
    for number in range(FAILING_TRIES + 1):
        for node in (0, 1):
            path = written[("train", number, node)]
            assert printed(path.read_text().splitlines()) == expected(number + 1, node)
    # evaluate ran only in the second repair (skipped in the original and the first): its
    # third task run, the only one with lines.
    assert {k for k in written if k[0] == "evaluate"} == {("evaluate", 2, 0)}
    assert written[("evaluate", 2, 0)].read_text().splitlines() == ["evaluated", "done"]


def test_the_run_page_lists_every_task_run_with_its_repair(repaired) -> None:
    ws, run_id = repaired
    with httpx.Client(base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}) as web:
        page = web.get(f"/jobs/runs/{run_id}")
        assert page.status_code == 200
        for label in ("attempt 0", "attempt 1 (repair 1)", "attempt 2 (repair 2)"):
            assert label in page.text, label


def test_task_runs_are_counted_in_the_order_they_ran_with_or_without_the_history() -> None:
    from air_runtime._states import RunState
    from air_runtime.client._runs import task_tries

    def task(key: str, run_id: int, attempt: int) -> dict:
        return {"task_key": key, "run_id": run_id, "attempt_number": attempt, "state": {}}

    # train retried once by the platform, then repaired twice; prep never re-run.
    tasks = [
        task("prep", 10, 0),
        task("train", 11, 0),
        task("train", 12, 1),
        task("train", 21, 0),
        task("train", 31, 0),
    ]
    history = [
        {"type": "ORIGINAL", "task_run_ids": [10, 11, 12]},
        {"type": "REPAIR", "id": 2, "task_run_ids": [21]},
        {"type": "REPAIR", "id": 3, "task_run_ids": [31]},
    ]
    for body in (
        {"run_id": 1, "tasks": tasks},
        {"run_id": 1, "tasks": tasks, "repair_history": history},
    ):
        state = RunState.from_api(body)
        tries = [(t.attempt.run_id, t.number, t.repair) for t in task_tries(state, "train")]
        assert tries == [(11, 0, 0), (12, 1, 0), (21, 2, 1), (31, 3, 2)]
        assert [(t.attempt.run_id, t.number) for t in task_tries(state, "prep")] == [(10, 0)]
