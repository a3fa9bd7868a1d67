"""`airo` on the read side, as complete as `databricks air`: list filters (list_filter.go)
and --all-users, cancel of several ids, logs --download-to (logdownload.go), tasks named by
stage or partition, --version; run ids as strings in every --json."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from run_states import wait_for_state

from air_runtime import AirClient
from air_runtime.cli import main as airo
from tests.local_workspace.conftest import Workloads

JOB = (
    "experiment_name: {name}\n"
    "compute: {{accelerator_type: {accelerator}, num_accelerators: {count}}}\n"
    "max_retries: {retries}\n"
    "command: |\n{command}"
)


def _auth(ws, tmp_path: Path) -> list[str]:
    token_file = tmp_path / "token"
    token_file.write_text(ws.token)
    token_file.chmod(0o600)
    return ["--host", ws.host, "--token-file", str(token_file)]


def _submit(tmp_path: Path, auth: list[str], capsys, name: str, command: str, **job) -> int:
    path = tmp_path / f"{name}.yaml"
    body = "".join(f"  {line}\n" for line in command.strip().splitlines())
    path.write_text(
        JOB.format(
            name=name,
            command=body,
            accelerator=job.get("accelerator", "GPU_1xA10"),
            count=job.get("count", 1),
            retries=job.get("retries", 0),
        )
    )
    assert airo(["run", str(path), "--json", *auth]) == 0
    submitted = json.loads(capsys.readouterr().out)
    assert isinstance(submitted["run_id"], str)  # one JSON type for run ids, the CLI's
    return int(submitted["run_id"])


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        airo(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("airo 0.")


def test_cancel_takes_several_ids(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    release = tmp_path / "never"
    wait = f"while [ ! -e {release} ]; do sleep 0.05; done"
    ids = [_submit(tmp_path, auth, capsys, f"hold-{i}", wait) for i in range(3)]
    done = _submit(tmp_path, auth, capsys, "done", "echo done")
    for run_id in ids:
        wait_for_state(ws.host, ws.token, run_id, "RUNNING")
    with AirClient(ws.host, ws.token) as client:
        assert client.wait(done, poll_interval=0.1).is_success

    assert airo(["cancel", *map(str, ids), str(done), "--json", *auth]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer == {"cancelled": [str(i) for i in ids], "ended": {str(done): "SUCCESS"}}
    with AirClient(ws.host, ws.token) as client:
        for run_id in ids:
            assert client.wait(run_id, poll_interval=0.1).result_state == "CANCELED"

    assert airo(["cancel", *auth]) == 2  # neither ids nor --all


def test_cancel_cancels_every_good_id_and_names_each_bad_one(
    workspace_factory, tmp_path: Path, capsys
):
    """Best effort, as cancel.go: a bad id among good ones cancels the good ones, names the
    bad ones, and exits non-zero (a script cancelling a sweep leaves nothing burning)."""
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    release = tmp_path / "never"
    wait = f"while [ ! -e {release} ]; do sleep 0.05; done"
    good = [_submit(tmp_path, auth, capsys, f"hold-{i}", wait) for i in range(2)]
    done = _submit(tmp_path, auth, capsys, "done", "echo done")
    for run_id in good:
        wait_for_state(ws.host, ws.token, run_id, "RUNNING")
    with AirClient(ws.host, ws.token) as client:
        assert client.wait(done, poll_interval=0.1).is_success
        task_run = client.get_run(done).tasks[0].run_id
    missing = 987654321

    args = [str(good[0]), str(missing), str(task_run), str(good[1])]
    assert airo(["cancel", *args, *auth]) == 4  # a missing run is not a usage error
    out, err = capsys.readouterr()
    for run_id in good:
        assert f"cancellation of run {run_id} requested" in out
    assert f"run {missing} could not be cancelled: Run {missing} does not exist" in err
    assert f"{task_run} is task `done` of run {done}" in err
    assert f"airo cancel {done}" in err
    assert "2 run(s) could not be cancelled" in err
    with AirClient(ws.host, ws.token) as client:
        for run_id in good:
            assert client.wait(run_id, poll_interval=0.1).result_state == "CANCELED"

    assert airo(["cancel", str(missing), "--json", *auth]) == 4
    answer = json.loads(capsys.readouterr().out)
    assert answer["cancelled"] == [] and answer["failed"][0]["run_id"] == str(missing)


# Two nodes, two tries: the first try fails on node 1, the retry succeeds.
FLAKY = """
if [ "$NODE_RANK" = 1 ] && [ ! -e {marker} ]; then
  touch {marker}
  echo "node 1 first try fails"
  exit 2
fi
echo "node $NODE_RANK line one"
echo "node $NODE_RANK line two"
"""


def test_logs_download_to_writes_every_task_node_and_retry(
    workspace_factory, tmp_path: Path, capsys
):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    command = FLAKY.format(marker=tmp_path / "tried")
    run_id = _submit(
        tmp_path, auth, capsys, "flaky", command, accelerator="GPU_8xH100", count=16, retries=1
    )
    with AirClient(ws.host, ws.token) as client:
        assert client.wait(run_id, poll_interval=0.1).is_success
    target = tmp_path / "download"
    assert airo(["logs", str(run_id), "--download-to", str(target), *auth]) == 0
    out = capsys.readouterr().out
    assert f"Downloaded 4 log file(s) of run {run_id} to {target}" in out
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*.log"))
    assert files == [
        "logs/flaky/attempt_0/node_0.log",
        "logs/flaky/attempt_0/node_1.log",
        "logs/flaky/attempt_1/node_0.log",
        "logs/flaky/attempt_1/node_1.log",
    ]
    first_try = (target / "logs/flaky/attempt_0/node_1.log").read_text().splitlines()
    assert first_try[0] == "node 1 first try fails"
    assert first_try[-1].startswith("ERROR: Script failed with exit code 2")
    retry = (target / "logs/flaky/attempt_1/node_1.log").read_text().splitlines()
    assert retry == ["node 1 line one", "node 1 line two"]

    # --retry (0 is the first try, the CLI's count) and --node narrow it to one file.
    narrow = tmp_path / "narrow"
    args = ["logs", str(run_id), "--retry", "0", "--node", "1", "--download-to", str(narrow)]
    assert airo([*args, "--json", *auth]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows["run_id"] == str(run_id)
    assert [(r["task"], r["attempt_number"], r["node"]) for r in rows["files"]] == [("flaky", 0, 1)]


def test_list_filters_and_all_users(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    ok_a = _submit(tmp_path, auth, capsys, "sweep-a", "echo a")
    ok_b = _submit(tmp_path, auth, capsys, "sweep-b", "echo b", accelerator="GPU_8xH100", count=8)
    bad = _submit(tmp_path, auth, capsys, "eval", "exit 4")
    with AirClient(ws.host, ws.token) as client:
        for run_id in (ok_a, ok_b, bad):
            client.wait(run_id, poll_interval=0.1)

    def listed(*filters: str) -> list[str]:
        assert airo(["list", "--all-status", "--json", *filters, *auth]) == 0
        return [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]]

    assert listed() == [str(bad), str(ok_b), str(ok_a)]
    assert listed("--filter", "experiment=SWEEP-*") == [str(ok_b), str(ok_a)]
    assert listed("--filter", "state=failed") == [str(bad)]
    assert listed("--filter", "name=eval") == [str(bad)]
    assert listed("--filter", "accelerator_type=h100") == [str(ok_b)]
    assert listed("--filter", "num_accelerators=1", "--filter", "experiment=sweep*") == [str(ok_a)]
    assert listed("--filter", "user=someone-else@example.com") == []
    assert listed("--all-users", "--filter", "state=SUCCESS") == [str(ok_b), str(ok_a)]
    # state= looks among ended runs too, without --all-status.
    assert airo(["list", "--json", "--filter", "state=FAILED", *auth]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]] == [str(bad)]

    assert airo(["list", "--filter", "colour=red", *auth]) == 2
    assert 'unsupported --filter key "colour"' in capsys.readouterr().err
    assert airo(["list", "--filter", "num_accelerators=many", *auth]) == 2
    assert "must be a positive integer" in capsys.readouterr().err


def test_a_task_is_found_by_its_stage_name_or_partition(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    with httpx.Client(
        base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=30
    ) as api:
        workloads = Workloads(ws, api)
        # Range tasks as the orchestrators key them: <stage>__<partition>_<hash>.
        tasks = [
            workloads.command_task(f"echo trial {lr}\n", key=f"sweep__lr_{lr}_{digest}")
            for lr, digest in (("0_1", "1a2b3c4d"), ("0_3", "762c457c"))
        ]
        tasks.append(workloads.command_task("echo prepared\n", key="prepare"))
        run_id = workloads.submit(*tasks)
        workloads.wait(run_id)

    def lines(task: str) -> list[str]:
        assert airo(["logs", str(run_id), "--task", task, *auth]) == 0
        return capsys.readouterr().out.splitlines()

    assert lines("sweep") == [
        "[sweep__lr_0_1_1a2b3c4d node 0 attempt 0] trial 0_1",
        "[sweep__lr_0_3_762c457c node 0 attempt 0] trial 0_3",
    ]
    assert lines("lr=0.3") == ["[sweep__lr_0_3_762c457c node 0 attempt 0] trial 0_3"]
    assert lines("sweep__lr_0_1_1a2b3c4d") == [
        "[sweep__lr_0_1_1a2b3c4d node 0 attempt 0] trial 0_1"
    ]
    assert lines("prepare") == ["[prepare node 0 attempt 0] prepared"]
    assert airo(["logs", str(run_id), "--task", "evaluate", *auth]) == 2
    assert "has no task 'evaluate'" in capsys.readouterr().err


def test_followed_lines_never_share_the_spinners_line(workspace_factory, tmp_path: Path):
    """On a terminal the spinner (stderr) and the followed lines (stdout) share one screen:
    a log line starts on a cleared line, never after a spinner frame."""
    import os
    import pty
    import subprocess
    import sys

    ws = workspace_factory()
    go, release = tmp_path / "go", tmp_path / "release"
    command = (
        f"while [ ! -e {go} ]; do sleep 0.05; done\n"
        "echo followed-line-one\n"
        f"while [ ! -e {release} ]; do sleep 0.05; done\n"
        "echo followed-line-two\n"
    )
    job = tmp_path / "spin.yaml"
    body = "".join(f"  {line}\n" for line in command.splitlines())
    job.write_text(
        JOB.format(name="spin", command=body, accelerator="GPU_1xA10", count=1, retries=0)
    )
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "air_runtime.cli", "run", str(job), "--wait", "--follow-logs",
         *_auth(ws, tmp_path)],
        stdout=secondary,
        stderr=secondary,
    )  # fmt: skip
    os.close(secondary)
    seen = ""

    def read_until(text: str) -> None:
        nonlocal seen
        while text not in seen:
            seen += os.read(primary, 4096).decode(errors="replace")

    read_until("RUNNING (")  # a spinner frame of the running run is on the line
    go.touch()
    read_until("followed-line-one")
    seen_after = len(seen)
    while "RUNNING (" not in seen[seen_after:]:  # ... and drawn again after it
        seen += os.read(primary, 4096).decode(errors="replace")
    release.touch()
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the process has exited and closed its side
            break
        if not chunk:
            break
        seen += chunk.decode(errors="replace")
    os.close(primary)
    assert process.wait(timeout=60) == 0
    for line in ("followed-line-one", "followed-line-two"):
        label = seen.index(f"[spin node 0 attempt 0] {line}")
        before = seen[:label]
        assert before.endswith(("\n", "\r\x1b[K")), repr(before[-80:])
