"""The default failure policy against the local workspace: a deterministic failure runs once
(the platform's retry is cancelled before it starts), a lost node (infrastructure) is retried
by the platform, and each says so in the first line the wait shows of it. Executions are
counted by what the ranks write. ``airo run`` on the local workspace gives a checkpointing
trainer its folder with no configuration, and the lost node's retry resumes from it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from air_runtime import (
    AirClient,
    FailureClass,
    FailurePolicy,
    RetriesStopped,
    RetryAction,
    RetryDecision,
    load_workload,
)
from air_runtime.cli import main as airo
from air_runtime.local import LocalWorkspace

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB."

# Each execution appends to ``count``; the first runs out of GPU memory, a retry would wait.
OOM_JOB = """experiment_name: oom-once
compute: {{accelerator_type: GPU_1xA10, num_accelerators: 1}}
max_retries: 3
command: |
  echo run >> {dir}/count
  if [ -e {dir}/mark ]; then while true; do sleep 0.05; done; fi
  touch {dir}/mark
  echo "{oom}"
  exit 1
"""

# A trainer: the first execution stops at step 73 until its node is lost; a retry finishes.
TRAINER = """experiment_name: node-loss
compute: {{accelerator_type: GPU_1xA10, num_accelerators: 1}}
max_retries: 3
command: |
  echo run >> {dir}/count
  if [ -e {dir}/at73 ]; then echo "step 100"; exit 0; fi
  for step in $(seq 1 100); do
    echo "step $step"
    if [ "$step" = 73 ]; then touch {dir}/at73; while true; do sleep 0.05; done; fi
  done
"""


# The same trainer checkpointing every 10 steps (a file ``step-<n>``) into
# AIRO_CHECKPOINT_DIR and resuming from the newest; each execution appends where it started
# and its resume variables to ``starts``.
CHECKPOINTING_TRAINER = """experiment_name: node-loss
compute: {{accelerator_type: GPU_1xA10, num_accelerators: 1}}
max_retries: 3
command: |
  start=$(ls "$AIRO_CHECKPOINT_DIR" | sed -n 's/^step-//p' | sort -n | tail -1)
  start=${{start:-0}}
  echo "$start resuming=$AIRO_RESUMING step=${{AIRO_RESUME_STEP:-}} run=${{AIRO_RESUME_RUN:-}}" >> {dir}/starts
  step=$start
  while [ "$step" -lt 100 ]; do
    step=$((step + 1))
    if [ $((step % 10)) = 0 ]; then
      echo "$step" > "$AIRO_CHECKPOINT_DIR/step-$step.tmp" && mv "$AIRO_CHECKPOINT_DIR/step-$step.tmp" "$AIRO_CHECKPOINT_DIR/step-$step"
    fi
    if [ "$step" = 73 ] && [ ! -e {dir}/at73 ]; then touch {dir}/at73; while true; do sleep 0.05; done; fi
  done
"""


def _executions(folder: Path) -> int:
    return len((folder / "count").read_text().splitlines())


def _lose_node_at_step_73(ws: LocalWorkspace, folder: Path, run_id: int) -> None:
    deadline = time.monotonic() + 120
    while not (folder / "at73").exists():
        assert time.monotonic() < deadline, "the trainer never reached step 73"
        time.sleep(0.05)
    ws.admin.lose_node(run_id, 0)


def test_a_deterministic_failure_runs_once_by_default(workspace_factory, tmp_path: Path):
    # The platform provisions a retry's nodes before it starts (here: 60 s); the wait's
    # cancel lands before then, so the retry never runs.
    ws = workspace_factory(retry_interval_s=60)
    decisions: list[RetryDecision] = []
    with AirClient(ws.host, ws.token) as client:
        run_id = client.submit_workload(load_workload(OOM_JOB.format(dir=tmp_path, oom=OOM))).run_id
        with pytest.raises(RetriesStopped) as stopped:
            client.wait(run_id, timeout=120, poll_interval=0.2, on_retry=decisions.append)
        assert stopped.value.failure_class == "deterministic" and not stopped.value.retryable
        assert str(stopped.value).startswith(
            "CUDA out of memory on node 0 (deterministic, task oom-once, retry 0 of 3): "
        )
        client.cancel(run_id)
        state = client.wait(run_id, timeout=120, poll_interval=0.2)
    assert state.result_state == "CANCELED", state.describe()
    assert decisions == []  # a stop is said by the error, not twice
    assert _executions(tmp_path) == 1
    attempts = [(a.attempt_number, a.result_state) for a in state.task_attempts()]
    assert attempts[0] == (0, "FAILED") and all(r == "CANCELED" for _, r in attempts[1:])


def test_a_lost_node_is_retried_by_the_platform(workspace_factory, tmp_path: Path):
    ws = workspace_factory()
    decisions: list[RetryDecision] = []
    with AirClient(ws.host, ws.token) as client:
        run_id = client.submit_workload(load_workload(TRAINER.format(dir=tmp_path))).run_id
        _lose_node_at_step_73(ws, tmp_path, run_id)
        state = client.wait(run_id, timeout=120, poll_interval=0.2, on_retry=decisions.append)
    assert state.result_state == "SUCCESS", state.describe()
    assert [(a.attempt_number, a.result_state) for a in state.task_attempts()] == [
        (0, "FAILED"),
        (1, "SUCCESS"),
    ]
    assert state.task_attempts()[0].state_message.startswith("Node 0 was lost")
    assert _executions(tmp_path) == 2
    assert len(decisions) == 1
    decision = decisions[0]
    assert decision.failure_class is FailureClass.INFRASTRUCTURE
    assert decision.action is RetryAction.PLATFORM
    assert decision.line().startswith("node lost on node 0 (infrastructure): retry 1 of 3 follows")


def test_airo_run_resumes_from_its_checkpoint_and_says_so_first(
    workspace_factory, tmp_path: Path, capsys
):
    """``airo run --wait`` against the local workspace, no configuration: the experiment's
    checkpoint folder is given to the ranks, the platform's retry after a lost node resumes
    at step 70 and the first line about the failure says so; a later run of the experiment
    learns it resumes, from which step and run; airo get and the run page show the newest."""
    ws = workspace_factory()
    token = tmp_path / "token"
    token.write_text(ws.token)
    token.chmod(0o600)
    job = tmp_path / "train.yaml"
    job.write_text(CHECKPOINTING_TRAINER.format(dir=tmp_path))
    ids: list[int] = []

    def lose() -> None:
        deadline = time.monotonic() + 120
        while not ids and time.monotonic() < deadline:
            time.sleep(0.05)
        _lose_node_at_step_73(ws, tmp_path, ids[0])

    command = ["run", str(job), "--wait", "--host", ws.host, "--token-file", str(token)]
    with AirClient(ws.host, ws.token) as client:
        # The run id is the workspace's first: 1001 (read back below).
        ids.append(1001)
        killer = threading.Thread(target=lose, daemon=True)
        killer.start()
        code = airo(command)
        killer.join(timeout=30)
        assert client.get_run(1001).run_name.startswith("node-loss")
    _, err = capsys.readouterr()
    assert code == 0, err
    # After the run's own state lines, the first line about the failure names its class and
    # where the retry resumes.
    failure_lines = [
        line for line in err.splitlines() if not line.startswith(("run 1001:", "checkpoints:"))
    ]
    assert failure_lines[0].startswith(
        "node lost on node 0 (infrastructure): retry 1 of 3 resumes from checkpoint step 70 ("
    ), err
    # The platform's retry runs with the variables the run was submitted with.
    starts = (tmp_path / "starts").read_text().splitlines()
    assert starts == ["0 resuming=0 step= run=", "70 resuming=0 step= run="]
    assert "checkpoints: /Volumes/local/airo/checkpoints/airo-checkpoints/airo/node-loss/" in err
    # A later run of the experiment: resuming, from step 100 of run 1001.
    assert airo(command) == 0
    starts = (tmp_path / "starts").read_text().splitlines()
    assert starts[2] == "100 resuming=1 step=100 run=1001"
    # The newest checkpoint is shown where the run is: airo get and the run page.
    capsys.readouterr()
    assert airo(["get", "1001", "--host", ws.host, "--token-file", str(token)]) == 0
    out, _ = capsys.readouterr()
    folder = "/Volumes/local/airo/checkpoints/airo-checkpoints/airo/node-loss/"
    assert f"Checkpoint:    step 100 ({folder}" in out, out
    headers = {"Authorization": f"Bearer {ws.token}"}
    page = httpx.get(f"{ws.host}/jobs/runs/1001", headers=headers, timeout=30).text
    assert "<dt>Checkpoint</dt>" in page and f"step 100 ({folder}" in page


def test_the_policy_names_a_bad_setting():
    with pytest.raises(ValueError, match=r"failure_policy.unknown: 'again' is not an action"):
        FailurePolicy.of({"unknown": "again"})
    with pytest.raises(ValueError, match="unknown failure class 'oom'"):
        FailurePolicy.of({"oom": "stop"})
    assert FailurePolicy.of(None, stop_deterministic_retries=False) == FailurePolicy.platform_only()
    policy = FailurePolicy(unknown=RetryAction.ORCHESTRATOR)
    assert FailurePolicy.from_json(policy.to_json()) == policy
