"""Why a run failed, first: the signatures the CLI flags (logdetect.go), the exit codes of a
kill and the platform's termination reason, named on the first line of the core's failure
message, `airo run --wait`, `airo get` and the run page."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from air_runtime import AirClient, RunState
from air_runtime._diagnosis import Termination, diagnose, match_signature
from air_runtime._submission import RunOutcome
from air_runtime.cli import main as airo

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a "
    "total capacity of 79.11 GiB of which 1.2 GiB is free."
)


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (OOM, "CUDA out of memory"),
        ("RuntimeError: CUDA error: out of memory", "CUDA out of memory"),
        ("Out of memory: Killed process 4242 (python)", "host out of memory"),
        ("Killed", "host out of memory"),
        (
            "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)",
            "NCCL collective operation timed out",
        ),
        ("host:12:34 [0] NCCL WARN NET/IB : Got completion with error 12", "NCCL network error"),
        ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus", "GPU hardware fault"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "illegal memory"),
        ("Fatal Python error: Segmentation fault", "segmentation fault"),
        ("torch.distributed.DistNetworkError: connection refused", "torch.distributed error"),
        ("RuntimeError: TCPStore( ... ) timed out after 900s", "distributed rendezvous"),
        ("command.sh: line 3: trainn: command not found", "command not found"),
        ("ERROR: Script failed with exit code 1 after 3s", None),  # says nothing of why
        ("epoch 3 loss 0.12", None),
    ],
)
def test_signatures(line: str, cause: str | None) -> None:
    found = match_signature(line)
    if cause is None:
        assert found is None
    else:
        assert found is not None and found.cause.startswith(cause), found


def test_the_headline_names_cause_node_task_retry_and_advice() -> None:
    found = diagnose(
        {0: ["step 1"], 1: ["loading", OOM, "ERROR: Script failed with exit code 1 after 4s"]},
        task_key="train",
        attempt_number=3,
        max_retries=3,
        failed_node=1,
    )
    assert found is not None
    assert found.headline() == (
        "CUDA out of memory on node 1 (deterministic, task train, retry 3 of 3): reduce the batch size or "
        "use more accelerators; retries will not help"
    )
    assert found.line == OOM


def test_a_signature_on_another_node_explains_the_failed_one() -> None:
    # Node 0 died of a collective timeout because node 1 ran out of host memory first.
    found = diagnose(
        {
            0: [
                "Watchdog caught collective operation timeout",
                "ERROR: Script failed with exit code 1 after 9s",
            ],
            1: ["Killed"],
        },
        failed_node=0,
    )
    assert found is not None and found.node == 1 and found.cause.startswith("host out of memory")


def test_exit_codes_and_termination_reasons() -> None:
    killed = diagnose({0: ["ERROR: Script failed with exit code 137 after 60s"]}, failed_node=0)
    assert killed is not None and killed.cause.startswith("killed (SIGKILL, exit code 137)")
    assert not killed.deterministic
    plain = diagnose({0: ["ERROR: Script failed with exit code 1 after 6s"]}, failed_node=0)
    assert plain is None  # exit 1 says nothing: no diagnosis rather than a guess
    body = {
        "status": {
            "termination_details": {
                "code": "INVALID_RUN_CONFIGURATION",
                "type": "CLIENT_ERROR",
                "message": "The image main.ml.trainer:2 does not exist.",
            }
        }
    }
    reason = diagnose({}, termination=Termination.from_api(body))
    assert reason is not None
    assert reason.headline() == (
        "invalid run configuration (CLIENT_ERROR) (deterministic): The image main.ml.trainer:2 does not exist.; "
        "retries will not help"
    )
    restated = {
        "status": {"termination_details": {"code": "RUN_EXECUTION_ERROR", "type": "CLIENT_ERROR"}}
    }
    assert diagnose({}, termination=Termination.from_api(restated)) is None
    task = RunState.from_api({"run_id": 1, "tasks": [{"task_key": "t", "run_id": 2, **body}]})
    assert task.tasks[0].termination == Termination.from_api(body)


# Two nodes; node 1 runs out of GPU memory, node 0 waits on it (and is stopped).
OOM_JOB = """experiment_name: {name}
compute: {{accelerator_type: GPU_8xH100, num_accelerators: 16}}
max_retries: 1
command: |
  if [ "$NODE_RANK" = 1 ]; then
    echo "loading shard 1"
    echo "{oom}"
    exit 1
  fi
  while true; do sleep 0.05; done
"""


def _auth(ws, tmp_path: Path) -> list[str]:
    token_file = tmp_path / "token"
    token_file.write_text(ws.token)
    token_file.chmod(0o600)
    return ["--host", ws.host, "--token-file", str(token_file)]


EXPECTED = (
    "CUDA out of memory on node 1 (deterministic, task oom-train, retry 1 of 1): reduce the batch size or use "
    "more accelerators; retries will not help"
)


def test_an_oom_rank_is_named_first_everywhere(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    job = tmp_path / "oom.yaml"
    job.write_text(OOM_JOB.format(name="oom-train", oom=OOM))

    assert airo(["run", str(job), "--wait", *auth]) == 3
    captured = capsys.readouterr()
    run_id = int(captured.out.split()[1].rstrip(":"))
    # The progress lines, then the failure: its first line is the diagnosis.
    first = next(line for line in captured.err.splitlines() if line.startswith("error: "))
    assert first.startswith(f"error: Run {run_id} (oom-train) failed, task run ")
    assert first.endswith(EXPECTED)

    with AirClient(ws.host, ws.token) as client:
        state = client.get_run(run_id)
        task_run = state.tasks[0].run_id
        result = client.run_result(state)
        assert result.failure is not None
        headline = str(result.failure).splitlines()[0]
        assert headline == f"Run {run_id} (oom-train) failed, task run {task_run}: {EXPECTED}"
        # A stage's view (what a workflow step reads) still names the run, the task run beside.
        outcome = RunOutcome.read(client, state, "oom-train")
        assert outcome.message.splitlines()[0] == headline

    assert airo(["get", str(run_id), *auth]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == f"Run {run_id} failed: {EXPECTED}"
    assert "Retries:       1 of 1" in text
    assert "oom-train" in text and f"{task_run}" in text and "FAILED" in text
    assert "Last lines of node 1:" in text and f"  | {OOM}" in text

    assert airo(["get", str(run_id), "--json", *auth]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["diagnosis"] == EXPECTED and got["failed_node"] == 1
    assert got["run_id"] == str(run_id) and got["attempt_number"] == 1
    assert got["tasks"] == [
        {
            "task_key": "oom-train",
            "task_run_id": str(task_run),
            "experiment_name": "oom-train",
            "status": "FAILED",
            "attempt_number": 1,
            "max_retries": 1,
            "gpu_hours": got["tasks"][0]["gpu_hours"],
            "est_remaining_seconds": None,
            "est_percent_complete": None,
        }
    ]
    assert got["tasks"][0]["gpu_hours"] > 0
    assert OOM in got["last_lines"]

    # A task-run id is read as its run.
    assert airo(["get", str(task_run), *auth]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == f"{task_run} is a task run of run {run_id}; showing the run."
    assert f"Run ID:        {run_id}" in text and "GPU-hours:     0.0000" not in text

    page = httpx.get(
        f"{ws.host}/jobs/runs/{run_id}", headers={"Authorization": f"Bearer {ws.token}"}
    ).text
    assert f"Run {run_id} failed: {EXPECTED}" in page


@pytest.mark.parametrize(
    ("lines", "state_message", "cause", "failure_class"),
    [
        ([OOM], "", "CUDA out of memory", "deterministic"),
        (
            ["ModuleNotFoundError: No module named 'transformerz'"],
            "",
            "Python import",
            "deterministic",
        ),
        (["  SyntaxError: invalid syntax"], "", "Python syntax error", "deterministic"),
        (
            ["train.py: error: unrecognized arguments: --lr"],
            "",
            "bad command-line",
            "deterministic",
        ),
        (["Watchdog caught collective operation timeout"], "", "NCCL collective", "infrastructure"),
        (
            ["NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off"],
            "",
            "GPU hardware",
            "infrastructure",
        ),
        (["Fatal Python error: Segmentation fault"], "", "segmentation fault", "unknown"),
        # The platform's word that a node was lost is the cause, whatever the others logged.
        (
            ["Watchdog caught collective operation timeout"],
            "Node 3 was lost: its host stopped answering",
            "node lost",
            "infrastructure",
        ),
        (
            [],
            "The instance was preempted by the cloud provider",
            "node preempted",
            "infrastructure",
        ),
    ],
)
def test_every_diagnosis_has_a_failure_class(
    lines: list[str], state_message: str, cause: str, failure_class: str
) -> None:
    found = diagnose({0: lines}, failed_node=0, state_message=state_message)
    assert found is not None and found.cause.startswith(cause), found
    assert found.failure_class.value == failure_class
    assert found.to_dict()["failure_class"] == failure_class
    assert found.headline().split(": ")[0].endswith(f"({failure_class})") or (
        f"({failure_class}" in found.headline()
    )


def test_a_lost_node_is_named_from_the_platform_message() -> None:
    found = diagnose({0: ["step 73"]}, failed_node=0, state_message="Node 1 was lost")
    assert found is not None and found.node == 1
    assert found.headline().startswith("node lost on node 1 (infrastructure): ")
