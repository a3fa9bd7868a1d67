"""Real execution: node ranks as process groups with the platform's environment."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import httpx

from air_runtime.local import start_local_workspace
from tests.local_workspace.conftest import Workloads

ASSERT_ENV = r"""
set -u
fail() { echo "wrong: $*"; exit 7; }
[ "$NUM_NODES" = 2 ] || fail NUM_NODES=$NUM_NODES
[ "$LOCAL_WORLD_SIZE" = 8 ] || fail LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE
[ "$WORLD_SIZE" = 16 ] || fail WORLD_SIZE=$WORLD_SIZE
[ "$POD_RANK" = "$NODE_RANK" ] || fail POD_RANK=$POD_RANK NODE_RANK=$NODE_RANK
case "$POD_RANK" in 0|1) ;; *) fail POD_RANK=$POD_RANK ;; esac
[ "$MASTER_ADDR" = 127.0.0.1 ] || fail MASTER_ADDR=$MASTER_ADDR
[ "$LOCAL_ADDR" = 127.0.0.1 ] || fail LOCAL_ADDR=$LOCAL_ADDR
[ "$MASTER_PORT" -gt 0 ] || fail MASTER_PORT=$MASTER_PORT
[ "$PLAIN" = "plain value" ] || fail PLAIN=$PLAIN
[ "$HF_TOKEN" = "s3cr3t" ] || fail HF_TOKEN
[ -f hyperparameters.yaml ] || fail no hyperparameters.yaml in $(pwd)
grep -q "learning_rate: 0.1" hyperparameters.yaml || fail hyperparameters content
[ -f "$CODE_SOURCE_PATH/pkg/model.py" ] || fail CODE_SOURCE_PATH=$CODE_SOURCE_PATH
[ "$(basename "$CODE_SOURCE_PATH")" = src ] || fail CODE_SOURCE_PATH=$CODE_SOURCE_PATH
python -c "import sys; assert sys.version_info >= (3, 11)" || fail python
echo "rank $POD_RANK ok port $MASTER_PORT"
"""


def _code_archive(prefix: str = "src/") -> bytes:
    """A code snapshot as the CLI packs it: every entry under the root folder `<dir>/`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = b"VALUE = 1\n"
        info = tarfile.TarInfo(f"{prefix}pkg/model.py")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_two_nodes_get_every_platform_variable(workloads: Workloads, api: httpx.Client) -> None:
    api.post("/api/2.0/secrets/scopes/create", json={"scope": "research"}).raise_for_status()
    api.post(
        "/api/2.0/secrets/put", json={"scope": "research", "key": "hf", "string_value": "s3cr3t"}
    ).raise_for_status()
    api.put(
        "/api/2.0/fs/files/Volumes/main/default/code/exp/code_source.tar.gz",
        params={"overwrite": "true"},
        content=_code_archive(),
    ).raise_for_status()
    task = workloads.command_task(
        ASSERT_ENV,
        nodes=2,
        accelerator="GPU_8xH100",
        env={"PLAIN": "plain value"},
        secrets={"HF_TOKEN": "research/hf"},
        parameters="learning_rate: 0.1\n",
        ai_runtime_task={"code_source_path": "/Volumes/main/default/code/exp/code_source.tar.gz"},
    )
    run = workloads.wait(workloads.submit(task))
    logs = [workloads.logs(run["run_id"], node) for node in (0, 1)]
    assert run["state"]["result_state"] == "SUCCESS", (run["state"], logs)
    assert logs[0][-1].startswith("rank 0 ok port ")
    assert logs[1][-1].startswith("rank 1 ok port ")
    assert logs[0][-1].split()[-1] == logs[1][-1].split()[-1]  # one MASTER_PORT
    assert not any("s3cr3t" in line for line in logs[0] + logs[1])


def test_single_node_has_no_master_address(workloads: Workloads) -> None:
    task = workloads.command_task(
        '[ -z "${MASTER_ADDR:-}" ] && [ "$NUM_NODES" = 1 ] && [ "$LOCAL_WORLD_SIZE" = 1 ] && echo fine'
    )
    run = workloads.wait(workloads.submit(task))
    assert run["state"]["result_state"] == "SUCCESS"
    assert workloads.logs(run["run_id"]) == ["fine"]


SERVER = r"""
python - <<'PY'
import http.server, os
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello from rank " + os.environ["POD_RANK"] + " " + os.environ["ROLE"]).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
        self.server.served = True
    def log_message(self, *args): pass
server = http.server.HTTPServer(("127.0.0.1", int(os.environ["MASTER_PORT"])), Handler)
server.served = False
server.timeout = 30
while not server.served:
    server.handle_request()
print("served one request")
PY
"""

CLIENT = r"""
python - <<'PY'
import os, time, urllib.request
url = "http://%s:%s/" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
for _ in range(300):
    try:
        print(urllib.request.urlopen(url, timeout=2).read().decode(), "as", os.environ["ROLE"])
        break
    except OSError:
        time.sleep(0.1)
else:
    raise SystemExit("rank 0 never answered")
PY
"""


def test_two_containers_talk_over_master_address(workloads: Workloads) -> None:
    task = workloads.containers_task(
        [
            {"name": "inference", "ranks": [0], "command": SERVER, "env": {"ROLE": "server"}},
            {"name": "trainer", "ranks": [1], "command": CLIENT, "env": {"ROLE": "trainer"}},
        ]
    )
    run = workloads.wait(workloads.submit(task))
    assert run["state"]["result_state"] == "SUCCESS", (
        workloads.logs(run["run_id"], 0),
        workloads.logs(run["run_id"], 1),
    )
    assert "served one request" in workloads.logs(run["run_id"], 0)
    assert "hello from rank 0 server as trainer" in workloads.logs(run["run_id"], 1)
    assert any("does not pull images" in line for line in workloads.logs(run["run_id"], 0))


def test_failing_rank_fails_the_run_and_stops_the_others(workloads: Workloads, tmp_path) -> None:
    pid_file = tmp_path / "sleeper.pid"
    command = (
        f'if [ "$POD_RANK" = 1 ]; then sleep 0.5; echo boom >&2; exit 3; fi\n'
        f"echo $$ > {pid_file}; exec sleep 60\n"
    )
    run = workloads.wait(workloads.submit(workloads.command_task(command, nodes=2)), timeout=30)
    assert run["state"]["result_state"] == "FAILED"
    assert "exit code 3" in run["state"]["state_message"]
    node1 = workloads.logs(run["run_id"], 1)
    assert "boom" in node1
    assert node1[-1].startswith("ERROR: Script failed with exit code 3 after ")
    pid = int(pid_file.read_text())
    assert not _alive(pid)
    output = workloads.client.get(
        "/api/2.2/jobs/runs/get-output", params={"run_id": run["tasks"][0]["run_id"]}
    ).json()
    assert "exit code 3" in output["error"]
    assert "boom" in output["error_trace"]
    assert output["ai_runtime_task_output"]["mlflow_run_id"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_cancel_kills_every_process_group(workloads: Workloads, tmp_path) -> None:
    command = f"sleep 300 & echo $! > {tmp_path}/child-$POD_RANK.pid; echo $$ > {tmp_path}/rank-$POD_RANK.pid; wait\n"
    run_id = workloads.submit(workloads.command_task(command, nodes=2))
    workloads.wait_for(run_id, "RUNNING")
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("*.pid"))) < 4:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert all(_alive(pid) for pid in pids)
    response = workloads.client.post("/api/2.2/jobs/runs/cancel", json={"run_id": run_id})
    assert response.status_code == 200 and response.json() == {}
    assert workloads.get(run_id)["state"]["life_cycle_state"] in ("TERMINATING", "TERMINATED")
    run = workloads.wait(run_id)
    assert run["state"]["life_cycle_state"] == "TERMINATED"
    assert run["state"]["result_state"] == "CANCELED"
    assert run["tasks"][0]["state"]["result_state"] == "CANCELED"
    assert not any(_alive(pid) for pid in pids)


def test_timeout_stops_the_task(workloads: Workloads) -> None:
    task = workloads.command_task("sleep 30")
    run = workloads.wait(workloads.submit(task, timeout_seconds=1), timeout=60)
    assert run["state"]["result_state"] == "TIMEDOUT"
    assert run["tasks"][0]["state"]["result_state"] == "TIMEDOUT"
    assert any("timed out" in line for line in workloads.logs(run["run_id"]))


def test_retries_create_new_attempts(workloads: Workloads, tmp_path) -> None:
    counter = tmp_path / "count"
    command = (
        f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}\n"
        'echo "attempt $n"; [ "$n" -ge 3 ] || exit 1\n'
    )
    task = workloads.command_task(command, max_retries=3, min_retry_interval_millis=50)
    run = workloads.wait(workloads.submit(task))
    assert run["state"]["result_state"] == "SUCCESS"
    attempts = run["tasks"]
    assert [t["attempt_number"] for t in attempts] == [0, 1, 2]
    assert len({t["run_id"] for t in attempts}) == 3
    assert [t["state"]["result_state"] for t in attempts] == ["FAILED", "FAILED", "SUCCESS"]
    assert workloads.logs(attempts[1]["run_id"])[0] == "attempt 2"


def test_retries_are_bounded_and_timeouts_retried_only_when_asked(workloads: Workloads) -> None:
    failing = workloads.command_task("exit 1", max_retries=1, min_retry_interval_millis=10)
    run = workloads.wait(workloads.submit(failing))
    assert [t["attempt_number"] for t in run["tasks"]] == [0, 1]
    assert run["state"]["result_state"] == "FAILED"
    timing_out = workloads.command_task("sleep 10", max_retries=2, timeout_seconds=1)
    run = workloads.wait(workloads.submit(timing_out), timeout=20)
    assert len(run["tasks"]) == 1 and run["state"]["result_state"] == "TIMEDOUT"
    retried = workloads.command_task(
        "sleep 10",
        max_retries=1,
        timeout_seconds=1,
        retry_on_timeout=True,
        min_retry_interval_millis=10,
    )
    run = workloads.wait(workloads.submit(retried), timeout=20)
    assert [t["attempt_number"] for t in run["tasks"]] == [0, 1]


def test_missing_secret_fails_the_task_with_a_clear_error(workloads: Workloads) -> None:
    task = workloads.command_task("echo never", secrets={"TOKEN": "nowhere/nothing"})
    run = workloads.wait(workloads.submit(task))
    assert run["state"]["result_state"] == "FAILED"
    message = run["tasks"][0]["state"]["state_message"]
    assert "nowhere/nothing" in message and "TOKEN" in message


def test_missing_command_file_fails_the_task(workloads: Workloads) -> None:
    task = workloads.command_task("echo hi")
    task["ai_runtime_task"]["deployments"][0]["command_path"] = (
        "/Workspace/Users/x/missing/command.sh"
    )
    run = workloads.wait(workloads.submit(task))
    assert run["state"]["result_state"] == "FAILED"
    assert "does not exist" in run["tasks"][0]["state"]["state_message"]


def test_too_many_ranks_is_refused(workloads: Workloads) -> None:
    task = workloads.command_task("true", nodes=17)
    response = workloads.client.post(
        "/api/2.2/jobs/runs/submit", json={"run_name": "big", "tasks": [task]}
    )
    assert response.status_code == 400
    assert "max_local_ranks" in response.json()["message"]


def test_states_pass_through_pending_running_terminated(tmp_path: Path) -> None:
    """Each state held until the test lets the run go on, so each is seen for sure: PENDING
    while another run holds the GPU pool's only accelerator, RUNNING until its command is
    told to finish, then TERMINATED."""
    pool = {"pool_id": "pool-one", "accelerator_type": "GPU_1xA10", "accelerator_count": 1}
    wait_for = 'while [ ! -e "{}" ]; do sleep 0.05; done'
    with (
        start_local_workspace(data_dir=tmp_path / "ws", gpu_pools=[pool]) as ws,
        httpx.Client(
            base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=30
        ) as api,
    ):
        workloads = Workloads(ws, api)

        def pooled(command: str, key: str) -> dict:
            task = workloads.command_task(command, key=key)
            compute = task["ai_runtime_task"]["deployments"][0]["compute"]
            compute["provisioned_capacity_id"] = "pool-one"  # the pool's wire name
            return task

        holder = workloads.submit(pooled(wait_for.format(tmp_path / "holder_go"), "holder"))
        workloads.wait_for(holder, "RUNNING")
        waiter = workloads.submit(pooled(wait_for.format(tmp_path / "waiter_go"), "waiter"))
        seen = [workloads.get(waiter)["state"]]
        assert seen[0]["life_cycle_state"] == "PENDING", seen
        assert "capacity" in seen[0]["state_message"].lower(), seen

        (tmp_path / "holder_go").touch()  # the pool frees up: the waiter starts
        seen.append(workloads.wait_for(waiter, "RUNNING")["state"])
        (tmp_path / "waiter_go").touch()
        seen.append(workloads.wait(waiter)["state"])
    assert [s["life_cycle_state"] for s in seen] == ["PENDING", "RUNNING", "TERMINATED"]
    assert seen[-1]["result_state"] == "SUCCESS"
