"""A whole run's logs against the local workspace: every node of every task and attempt,
each line once and labelled; ``airo logs --task/--node``; GPU-hours of every attempt."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from pathlib import Path

from air_runtime import AirClient, AsyncAirClient, load_workload
from air_runtime.plan import Stage

# The first attempt fails (node 1 exits after both nodes printed; node 0 is stopped), the
# retry succeeds: node 1 leaves a marker file before failing.
RETRIED = (
    'if [ -f "$MARK_DIR/failed" ]; then echo "second try on $POD_RANK"; exit 0; fi; '
    'echo "first try on $POD_RANK"; sleep 0.5; '
    'if [ "$POD_RANK" = 1 ]; then touch "$MARK_DIR/failed"; exit 1; fi; sleep 30'
)


def _workload(name: str, command: str, nodes: int = 1, **extra):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": nodes},
            "command": command,
            **extra,
        }
    )


def test_every_node_and_attempt_of_a_retried_run(workspace_factory, tmp_path: Path) -> None:
    ws = workspace_factory()
    marks = tmp_path / "marks"
    marks.mkdir()
    workload = _workload(
        "retried", RETRIED, nodes=2, max_retries=1, env_variables={"MARK_DIR": str(marks)}
    )
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(workload)
        followed = list(client.iter_run_logs(run.run_id, follow=True))
        state = client.get_run(run.run_id)
        assert state.is_success, state.describe()
        lines = {(r.label, r.body) for r in followed}
        assert len(followed) == len(lines), Counter((r.label, r.body) for r in followed)
        for node in (0, 1):
            assert (f"retried node {node} attempt 0", f"first try on {node}") in lines
            assert (f"retried node {node} attempt 1", f"second try on {node}") in lines
        # Read again once the run has ended: the same lines, without following.
        again = {(r.label, r.body) for r in client.iter_run_logs(run.run_id)}
        assert again == lines
        only_one = {r.body for r in client.iter_run_logs(run.run_id, node=1)}
        assert {"first try on 1", "second try on 1"} <= only_one
        assert not any("on 0" in body for body in only_one)

        # Two attempts on two 1-GPU nodes: accelerator-hours add up across attempts.
        assert [a.attempt_number for a in state.attempts] == [0, 1]
        assert all(a.node_count == 2 for a in state.attempts)
        expected = sum(2 * (a.end_time - a.start_time) / 3_600_000 for a in state.attempts)
        assert abs(state.gpu_hours() - expected) < 1e-9 and expected > 0
        result = client.run_result(state)
        assert abs(result.gpu_hours - expected) < 1e-6


def test_tasks_of_a_multi_task_run_and_airo_logs(workspace_factory) -> None:
    ws = workspace_factory()
    stages = [
        Stage("prepare", _workload("prepare", "echo prepared on $POD_RANK", nodes=2)),
        Stage("train", _workload("train", "echo trained on $POD_RANK"), depends_on=("prepare",)),
    ]

    async def follow() -> list[tuple[str, str]]:
        async with AsyncAirClient(ws.host, ws.token) as client:
            run = await client.submit_workload(stages)
            return [(r.label, r.body) async for r in client.iter_run_logs(run.run_id, follow=True)]

    lines = asyncio.run(follow())
    assert sorted(lines) == [
        ("prepare node 0 attempt 0", "prepared on 0"),
        ("prepare node 1 attempt 0", "prepared on 1"),
        ("train node 0 attempt 0", "trained on 0"),
    ]

    with AirClient(ws.host, ws.token) as client:
        run_id = client.list_runs(active_only=False)[0][0].run_id
    base = [sys.executable, "-m", "air_runtime.cli", "logs", str(run_id), "--host", ws.host]
    base += ["--token", ws.token]
    env = {"PATH": "/usr/bin:/bin"}
    one = subprocess.run(
        [*base, "--task", "prepare", "--node", "1"], capture_output=True, text=True, env=env
    )
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == ["[prepare node 1 attempt 0] prepared on 1"]
    missing = subprocess.run([*base, "--task", "evaluate"], capture_output=True, text=True, env=env)
    assert missing.returncode == 2
    assert "has no task 'evaluate' (its tasks: prepare, train)" in missing.stderr
