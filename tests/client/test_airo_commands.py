"""`airo pools/get/list/logs/cancel/run` against the local workspace: the text and `--json`
they print (today's CLI's, pools.go, cancel.go, logs.go), how they find credentials, their
exit codes, and `run --wait` under Ctrl-C/SIGTERM (run.go, run_signal_test.go)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from run_states import wait_for_state

from air_runtime import AirClient
from air_runtime.cli import main as airo

POOLS = [
    {"pool_id": "pool-8xh100-alpha", "accelerator_type": "GPU_8xH100", "accelerator_count": 64},
    {"pool_id": "pool-1xh100-beta", "accelerator_type": "GPU_1xH100", "accelerator_count": 8},
]
JOB = (
    "experiment_name: cli-{name}\n"
    "compute: {{accelerator_type: GPU_1xA10, num_accelerators: 1}}\n"
    "max_retries: 0\n"
    "command: {command}\n"
)


def _auth(ws, tmp_path: Path) -> list[str]:
    token_file = tmp_path / "token"
    token_file.write_text(ws.token)
    token_file.chmod(0o600)
    return ["--host", ws.host, "--token-file", str(token_file)]


def _job(tmp_path: Path, name: str, command: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(JOB.format(name=name, command=command))
    return path


def test_pools_print_what_the_cli_prints(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory(gpu_pools=POOLS)
    auth = _auth(ws, tmp_path)
    assert airo(["pools", "list", *auth]) == 0
    assert capsys.readouterr().out == (  # acceptance/air/pools/output.txt
        "ID                                       ACCELERATOR    RESERVED\n"
        "pool-8xh100-alpha                        GPU_8xH100     64\n"
        "pool-1xh100-beta                         GPU_1xH100     8\n"
    )
    assert airo(["pools", "list", "--json", *auth]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "pools": [
            {
                "pool_id": "pool-8xh100-alpha",
                "accelerator_type": "GPU_8xH100",
                "reserved_accelerators": 64,
            },
            {
                "pool_id": "pool-1xh100-beta",
                "accelerator_type": "GPU_1xH100",
                "reserved_accelerators": 8,
            },
        ]
    }
    assert airo(["pools", "get", "pool-8xh100-alpha", *auth]) == 0
    assert capsys.readouterr().out == (
        "Pool ID:                 pool-8xh100-alpha\n"
        "Accelerator Type:        GPU_8xH100\n"
        "Reserved Accelerators:   64\n"
        "Used Accelerators:       0\n"
        "Idle Accelerators:       64\n"
    )
    assert airo(["pools", "get", *auth]) == 4  # two pools: which one?
    assert "specify one of: pool-8xh100-alpha, pool-1xh100-beta" in capsys.readouterr().err
    off = workspace_factory(gpu_pools=POOLS, disabled_features=["gpu-pools"])
    assert airo(["pools", "list", *_auth(off, tmp_path)]) == 4
    assert "GPU pools API is not enabled" in capsys.readouterr().err


def test_credentials_token_file_variable_and_what_was_looked_for(
    workspace_factory, tmp_path: Path, capsys, monkeypatch
):
    ws = workspace_factory()
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "nothing.cfg"))
    for name in ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CLIENT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AIRO_WORKSPACE_TOKEN", raising=False)
    assert airo(["list", "--host", ws.host]) == 4
    err = capsys.readouterr().err
    for looked_for in (
        "--token-file",
        str(tmp_path / "xdg" / "airo" / "workspace" / "token"),
        "$DATABRICKS_TOKEN",
        f"profile DEFAULT in {tmp_path / 'nothing.cfg'}",
        "pass --token-file DIR/token",
    ):
        assert looked_for in err, looked_for
    assert airo(["list"]) == 4
    assert "--host, $DATABRICKS_HOST" in capsys.readouterr().err
    monkeypatch.setenv("DATABRICKS_TOKEN", ws.token)
    assert airo(["list", "--host", ws.host]) == 0
    monkeypatch.delenv("DATABRICKS_TOKEN")
    assert airo(["list", *_auth(ws, tmp_path)]) == 0
    assert airo(["list", "--host", ws.host, "--token-file", str(tmp_path / "none")]) == 4
    assert "cannot read the token file" in capsys.readouterr().err


def test_no_credentials_fails_before_the_sdk_chain(tmp_path: Path):
    """Nothing to go on: the error comes before databricks-sdk is even imported (so no
    cloud login of its chain is tried)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DATABRICKS_", "AIRO_", "ARM_"))
    }
    env.update(HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "xdg"))
    probe = (
        "import sys; from air_runtime.cli import main; code = main(['get', '1']); "
        "print(code, 'databricks.sdk' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["4", "False"], done.stderr
    assert "no workspace credentials: looked for" in done.stderr


def _seconds(text: str) -> int:
    """``1h02m03s``, ``2m05s`` or ``7s`` in seconds."""
    parts = re.findall(r"(\d+)([hms])", text)
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[unit] for n, unit in parts)


def test_get_list_cancel_and_task_run_ids(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    release = tmp_path / "release"
    assert airo(["run", str(_job(tmp_path, "done", "echo done")), "--wait", *auth]) == 0
    captured = capsys.readouterr()
    out = captured.out
    done_id = int(out.split()[1].rstrip(":"))
    assert f"run {done_id} succeeded in " in out and " GPU-hours" in out
    # The end counts on the clock of the state lines ("(2s)"), and says how long it ran.
    waited = [
        _seconds(line.rsplit("(", 1)[1].rstrip(")"))
        for line in captured.err.splitlines()
        if line.startswith(f"run {done_id}: ")
    ]
    ended = re.search(rf"run {done_id} succeeded in (\S+) \(ran (\d+\.\d)s\)", out)
    assert waited and ended, (captured.err, out)
    assert _seconds(ended[1]) >= max(waited), (captured.err, out)
    assert (
        airo(
            [
                "run",
                str(_job(tmp_path, "going", f"while [ ! -e {release} ]; do sleep 0.05; done")),
                *auth,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    going_id = int(out.split()[1].rstrip(":"))
    options = f" --host {ws.host} --token-file {tmp_path / 'token'}"
    assert f"airo logs {going_id} --follow{options}" in out  # the commands to follow it
    assert f"airo cancel {going_id}{options}" in out
    wait_for_state(ws.host, ws.token, going_id, "RUNNING")

    assert airo(["get", str(done_id), "--json", *auth]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["status"] == "SUCCESS" and got["experiment_name"] == "cli-done"
    assert got["attempt_number"] == 0 and got["gpu_hours"] > 0 and got["mlflow_url"]
    assert airo(["list", "--json", *auth]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]] == [str(going_id)]
    assert airo(["list", "--all-status", "--limit", "1", "--json", *auth]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]] == [str(going_id)]
    assert airo(["list", "--all-status", *auth]) == 0
    table = capsys.readouterr().out
    assert "cli-going" in table and "cli-done" in table

    with AirClient(ws.host, ws.token) as client:
        task_run = client.get_run(going_id).tasks[0].run_id
    for command in ("logs", "cancel"):
        assert airo([command, str(task_run), *auth]) == 2
        assert f"{task_run} is task `cli-going` of run {going_id}" in capsys.readouterr().err
    assert airo(["cancel", str(done_id), *auth]) == 0
    assert f"run {done_id} has already ended: TERMINATED/SUCCESS" in capsys.readouterr().out
    assert airo(["cancel", "--all", *auth]) == 4  # no terminal to confirm on: refused
    assert "pass -y" in capsys.readouterr().err
    assert airo(["cancel", "--all", "-y", "--json", *auth]) == 0
    assert json.loads(capsys.readouterr().out) == {"cancelled": [str(going_id)], "all": True}
    with AirClient(ws.host, ws.token) as client:
        assert client.wait(going_id, poll_interval=0.1).result_state == "CANCELED"


def test_exit_codes_tell_an_invalid_workload_from_a_failed_run(
    workspace_factory, tmp_path: Path, capsys
):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("experiment_name: x\ncompute: {accelerator_type: GPU_1xA10}\ncommand: x\n")
    assert airo(["run", str(invalid), "--wait", *auth]) == 1
    assert airo(["run", str(_job(tmp_path, "fails", "exit 3")), "--wait", *auth]) == 3
    assert "ended FAILED" in capsys.readouterr().err
    assert airo(["logs", "1", "--tail", "0", *auth]) == 2


def test_logs_tail_and_no_logs(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    assert (
        airo(
            [
                "run",
                str(_job(tmp_path, "lines", "for i in 1 2 3; do echo n$i; done")),
                "--wait",
                *auth,
            ]
        )
        == 0
    )
    run_id = int(capsys.readouterr().out.split()[1].rstrip(":"))
    assert airo(["logs", str(run_id), "--tail", "1", "--json", *auth]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["line"], r["node"], r["attempt_number"]) for r in lines] == [("n3", 0, 0)]
    quiet = workspace_factory()
    (tmp_path / "q").mkdir()
    quiet_auth = _auth(quiet, tmp_path / "q")
    assert airo(["run", str(_job(tmp_path, "silent", "exit 0")), "--wait", *quiet_auth]) == 0
    silent = int(capsys.readouterr().out.split()[1].rstrip(":"))
    assert airo(["logs", str(silent), *quiet_auth]) == 0
    assert (
        f"No logs available for run {silent}. Run terminated in state SUCCESS"
        in capsys.readouterr().err
    )


def _start_waiting(ws, tmp_path: Path, name: str, *extra: str) -> tuple[subprocess.Popen[str], int]:
    release = tmp_path / f"release-{name}"
    job = _job(tmp_path, name, f"while [ ! -e {release} ]; do sleep 0.05; done")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "air_runtime.cli",
            "run",
            str(job),
            "--wait",
            *_auth(ws, tmp_path),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    run_id = int(process.stdout.readline().split()[1].rstrip(":"))
    # Non-interactive progress: one plain line per state change; RUNNING is the event.
    for line in process.stderr:
        if "RUNNING" in line:
            break
    return process, run_id


@pytest.mark.slow
def test_interrupting_the_wait_leaves_the_run_going(workspace_factory, tmp_path: Path):
    ws = workspace_factory()
    process, run_id = _start_waiting(ws, tmp_path, "interrupted")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert f"Run {run_id} is still going" in err and f"airo cancel {run_id}" in err
    with AirClient(ws.host, ws.token) as client:
        assert client.get_run(run_id).life_cycle_state == "RUNNING"
        client.cancel(run_id)

    process, run_id = _start_waiting(ws, tmp_path, "cancelled", "--cancel-on-interrupt")
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143 and f"cancelling run {run_id}" in err
    with AirClient(ws.host, ws.token) as client:
        assert client.wait(run_id, poll_interval=0.1).result_state == "CANCELED"


def test_a_second_interrupt_ends_the_process_at_once():
    """As run_signal_test.go: after the first signal is handled, the next one is not
    caught; the child, blocked for good, dies by it."""
    child = (
        "import sys, threading\n"
        "from air_runtime.cli._run_cmds import _InterruptGuard, _Interrupted\n"
        "try:\n"
        "    with _InterruptGuard():\n"
        "        print('READY', flush=True)\n"
        "        threading.Event().wait()\n"
        "except _Interrupted:\n"
        "    print('STOPPED', flush=True)\n"
        "    threading.Event().wait()\n"
    )
    process = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "READY"
    process.send_signal(signal.SIGINT)
    assert process.stdout.readline().strip() == "STOPPED"
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == -signal.SIGINT


@pytest.mark.slow
def test_waiting_on_a_terminal_shows_a_spinner_and_ends_with_the_totals(
    workspace_factory, tmp_path: Path
):
    import pty

    ws = workspace_factory()
    release = tmp_path / "release"
    job = _job(tmp_path, "spinner", f"while [ ! -e {release} ]; do sleep 0.05; done")
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "air_runtime.cli", "run", str(job), "--wait", *_auth(ws, tmp_path)],
        stdout=subprocess.PIPE,
        stderr=secondary,
        text=True,
    )
    os.close(secondary)
    seen = ""
    while not ("\r" in seen and "RUNNING (" in seen):  # a spinner frame of the running run
        seen += os.read(primary, 4096).decode(errors="replace")
    release.touch()
    out, _ = process.communicate(timeout=120)
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the other side closed: the process has exited
            break
        if not chunk:
            break
        seen += chunk.decode(errors="replace")
    os.close(primary)
    assert process.returncode == 0
    assert any(frame in seen for frame in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
    assert "TERMINATED/SUCCESS" in seen
    assert "succeeded in " in out and "GPU-hours" in out
