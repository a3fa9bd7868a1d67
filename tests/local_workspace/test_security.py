"""Safe by default: token, Host allow-list, rank environment, file modes, long output
lines, size limits, hostile JSON, orphan markers. Everything over HTTP to a real local
workspace on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from air_runtime.local import LocalWorkspace, start_local_workspace
from air_runtime.local._logs import LogBook
from air_runtime.local.runs.engine import _kill_orphans
from tests.local_workspace.conftest import Workloads

ME = "/api/2.0/preview/scim/v2/Me"


def _me(host: str, token: str, **headers: str) -> httpx.Response:
    return httpx.get(host + ME, headers={"Authorization": f"Bearer {token}", **headers})


def _modes(root: Path) -> dict[str, int]:
    """Path -> permission bits of everything below `root` (links skipped)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                found[path] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


# --- token ---------------------------------------------------------------------------------


def test_no_well_known_token(tmp_path: Path) -> None:
    with start_local_workspace(data_dir=tmp_path / "ws") as ws:
        token_file = tmp_path / "ws" / "token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert token_file.read_text().strip() == ws.token
        assert len(ws.token) >= 40 and ws.token != "local-token"
        assert _me(ws.host, ws.token).status_code == 200
        assert _me(ws.host, "local-token").status_code == 403
        assert httpx.get(ws.host + ME).status_code == 401
        ws.restart()  # the same data dir keeps its token
        assert _me(ws.host, token_file.read_text().strip()).status_code == 200


def test_revoked_token_loses_admin_too(tmp_path: Path) -> None:
    with start_local_workspace(data_dir=tmp_path / "ws", token=["first", "second"]) as ws:
        ws.admin.revoke_token("second")
        admin = httpx.get(
            f"{ws.host}/api/2.0/airo-admin/counters", headers={"Authorization": "Bearer second"}
        )
        assert admin.status_code == 403
        assert admin.json()["error_code"] == "PERMISSION_DENIED"
        assert ws.admin.counters()["runs_created"] == 0  # "first" still works


@pytest.mark.slow
def test_subprocess_workspace_keeps_tokens_off_the_command_line(tmp_path: Path) -> None:
    secret = "cmdline-secret-" + "x" * 20
    with start_local_workspace(data_dir=tmp_path / "ws", in_process=False, token=secret) as ws:
        assert ws.pid is not None
        cmdline = Path(f"/proc/{ws.pid}/cmdline").read_bytes()
        assert secret.encode() not in cmdline
        assert _me(ws.host, secret).status_code == 200
        options = tmp_path / "ws" / "options.json"
        assert stat.S_IMODE(options.stat().st_mode) == 0o600


def _serve(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "air_runtime.cli", "workspace", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _wait_ready(ready: Path, process: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the workspace did not start"
        time.sleep(0.05)
    port = int(json.loads(ready.read_text())["port"])
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/2.0/airo-admin/health", timeout=2)
            return port
        except httpx.HTTPError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def _stop(process: subprocess.Popen[str]) -> tuple[str, str]:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()


@pytest.mark.slow
def test_airo_workspace_generates_a_token_file_and_says_where(tmp_path: Path) -> None:
    data, ready = tmp_path / "data", tmp_path / "ready.json"
    process = _serve(["--port", "0", "--data-dir", str(data), "--ready-file", str(ready)])
    try:
        port = _wait_ready(ready, process)
        token = (data / "token").read_text().strip()
        assert _me(f"http://127.0.0.1:{port}", token).status_code == 200
    finally:
        out, _ = _stop(process)
    assert str(data / "token") in out
    assert token not in out
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    # The Airflow connection to paste: the token read from its file by the shell, never shown.
    assert (
        "airflow connections add databricks_default --conn-type databricks "
        f'--conn-host http://127.0.0.1:{port} --conn-password "$(cat {data / "token"})"'
    ) in out


@pytest.mark.slow
def test_tokens_from_a_file_and_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "my-token"
    token_file.write_text("from-a-file-0123456789\n")
    data, ready = tmp_path / "data", tmp_path / "ready.json"
    args = ["--port", "0", "--data-dir", str(data), "--ready-file", str(ready)]
    process = _serve(
        [*args, "--token-file", str(token_file)],
        env={"AIRO_WORKSPACE_TOKEN": "from-the-env-0123456789"},
    )
    try:
        port = _wait_ready(ready, process)
        host = f"http://127.0.0.1:{port}"
        assert _me(host, "from-a-file-0123456789").status_code == 200
        assert _me(host, "from-the-env-0123456789").status_code == 200
        assert _me(host, "anything-else").status_code == 403
        assert not (data / "token").exists()  # an explicit token: none generated
    finally:
        out, _ = _stop(process)
    assert f'--conn-password "$(cat {token_file})"' in out  # the first token source named
    assert "from-a-file" not in out and "from-the-env" not in out


@pytest.mark.slow
def test_non_loopback_bind_needs_the_flag_and_a_token(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="allow-remote"):
        start_local_workspace(data_dir=tmp_path / "a", host="0.0.0.0")
    with pytest.raises(ValueError, match="explicit token"):
        start_local_workspace(data_dir=tmp_path / "b", host="0.0.0.0", allow_remote=True)
    process = _serve(["--host", "0.0.0.0", "--port", "0", "--data-dir", str(tmp_path / "c")])
    process.wait(timeout=30)
    _, err = process.communicate()
    assert process.returncode == 2
    assert "--allow-remote" in err


# --- Host header ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host_header",
    ["evil.example.com", "evil.example.com:8765", "127.0.0.1.nip.io", "localhost.evil", ""],
)
def test_hostile_host_headers_are_refused(
    session_local_workspace: LocalWorkspace, host_header
) -> None:
    ws = session_local_workspace
    response = _me(ws.host, ws.token, Host=host_header)
    assert response.status_code in (400, 403)
    if response.status_code == 403:
        assert response.json()["error_code"] == "PERMISSION_DENIED"


@pytest.mark.parametrize("host_header", ["localhost", "127.0.0.1:1", "[::1]:8765", "LOCALHOST"])
def test_loopback_host_headers_are_served(
    session_local_workspace: LocalWorkspace, host_header
) -> None:
    ws = session_local_workspace
    assert _me(ws.host, ws.token, Host=host_header).status_code == 200


def test_more_host_names_only_when_asked(tmp_path: Path) -> None:
    with start_local_workspace(data_dir=tmp_path / "ws", allowed_hosts=["ws.internal"]) as ws:
        assert _me(ws.host, ws.token, Host="ws.internal:80").status_code == 200
        assert _me(ws.host, ws.token, Host="other.internal").status_code == 403


# --- rank environment and files ------------------------------------------------------------


def test_ranks_see_no_server_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_TOKEN", "dapi-server-secret")
    monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", "databricks://:pw@host")
    monkeypatch.setenv("SOME_SERVER_SETTING", "x")
    with (
        start_local_workspace(data_dir=tmp_path / "ws") as ws,
        httpx.Client(
            base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=30
        ) as api,
    ):
        workloads = Workloads(ws, api)
        task = workloads.command_task(
            "env | cut -d= -f1 | sort; python -c 'import sys; print(\"py\", sys.executable)'",
            env={"MINE": "1"},
        )
        run = workloads.wait(workloads.submit(task))
        assert run["state"]["result_state"] == "SUCCESS", run["state"]
        lines = workloads.logs(run["run_id"])
    names = {line for line in lines if not line.startswith("py ")}
    assert not names & {
        "DATABRICKS_TOKEN",
        "AIRFLOW_CONN_DATABRICKS_DEFAULT",
        "SOME_SERVER_SETTING",
    }
    assert {"PATH", "HOME", "MINE", "NUM_NODES", "WORLD_SIZE", "POD_RANK"} <= names
    assert f"py {sys.executable}" in lines
    assert not any("dapi-server-secret" in line for line in lines)


def test_data_folder_is_private(tmp_path: Path) -> None:
    data = tmp_path / "ws"
    with (
        start_local_workspace(data_dir=data) as ws,
        httpx.Client(
            base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=30
        ) as api,
    ):
        api.post("/api/2.0/secrets/scopes/create", json={"scope": "s"}).raise_for_status()
        api.post(
            "/api/2.0/secrets/put", json={"scope": "s", "key": "k", "string_value": "v"}
        ).raise_for_status()
        workloads = Workloads(ws, api)
        run = workloads.wait(
            workloads.submit(workloads.command_task("echo hi > out.txt; mkdir d; echo log"))
        )
        assert run["state"]["result_state"] == "SUCCESS"
        modes = _modes(data)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for name in ("state.sqlite3", "token", "request_log.jsonl"):
        assert modes[str(data / name)] == 0o600, name
    exposed = {path: oct(mode) for path, mode in modes.items() if mode & 0o077}
    assert exposed == {}


# --- long lines and log reading ------------------------------------------------------------


def test_a_line_over_64_kib_is_drained(workloads: Workloads) -> None:
    command = (
        "python -c \"import sys; sys.stdout.write('x' * (1024 * 1024)); sys.stdout.flush()\"\n"
        "echo\n"
        "python -c \"print('y' * (200 * 1024))\" >&2\n"
        "echo done\n"
    )
    run = workloads.wait(workloads.submit(workloads.command_task(command)), timeout=60)
    assert run["state"]["result_state"] == "SUCCESS", run["state"]
    lines = workloads.logs(run["run_id"])
    assert lines[-1] == "done"
    assert "".join(line for line in lines if line.startswith("x")) == "x" * (1024 * 1024)
    assert max(len(line) for line in lines) == 64 * 1024


def test_log_bounds_found_without_reading_everything(tmp_path: Path) -> None:
    book = LogBook(tmp_path / "logs")
    path = book.path(7, 0)
    path.parent.mkdir(parents=True)
    second = 10**9
    with path.open("w") as handle:
        for i in range(20_000):  # 10 records a second over 2000 seconds
            stamp = 1_700_000_000 * second + i * second // 10
            handle.write(json.dumps({"time_unix_nano": stamp, "body": f"r{i}", "node_index": 0}))
            handle.write("\n")
        handle.write('{"time_unix_nano": 1')  # a partly written last line
    start = (1_700_000_000 + 1500) * second
    page, token = book.page([7], 0, start_ns=start, size=5)
    assert [r["body"] for r in page] == ["r15000", "r15001", "r15002", "r15003", "r15004"]
    assert token is not None
    page, _ = book.page([7], 0, start_ns=start, size=2, token=token)
    assert [r["body"] for r in page] == ["r15005", "r15006"]
    page, _ = book.page([7], 0, end_ns=start - 1, ascending=False, size=2)
    assert [r["body"] for r in page] == ["r14999", "r14998"]
    page, token = book.page([7], 0, start_ns=start + 10**15, size=5)
    assert page == [] and token is None
    assert book.tail(7, 0, 2) == ["r19998", "r19999"]


# --- size limits and hostile JSON ----------------------------------------------------------


def test_size_limits_answer_413(tmp_path: Path) -> None:
    with (
        start_local_workspace(
            data_dir=tmp_path / "ws", max_request_bytes=4096, max_upload_bytes=64 * 1024
        ) as ws,
        httpx.Client(
            base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=30
        ) as api,
    ):
        big = api.post("/api/2.0/workspace/mkdirs", json={"path": "/Users/x/" + "a" * 5000})
        assert big.status_code == 413
        assert big.json()["error_code"] == "REQUEST_ENTITY_TOO_LARGE"
        api.post("/api/2.0/workspace/mkdirs", json={"path": "/Users/x"}).raise_for_status()
        url = "/api/2.0/workspace-files/import-file/Users/x/f.bin"
        ok = api.post(url, params={"overwrite": "true"}, content=b"a" * 32 * 1024)
        assert ok.status_code == 200
        assert api.post(
            url, params={"overwrite": "true"}, content=b"a" * 65 * 1024
        ).status_code == (413)

        def chunks():  # no Content-Length: the limit still holds
            for _ in range(20):
                yield b"b" * 8192

        streamed = api.put(
            "/api/2.0/fs/files/Volumes/c/s/v/f.bin", params={"overwrite": "true"}, content=chunks()
        )
        assert streamed.status_code == 413
        assert not (tmp_path / "ws" / "volumes" / "c" / "s" / "v" / "f.bin").exists()


HOSTILE_BODIES = [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 5000 + b"1" + b"}" * 5000,
    b'{"run_id": 123456789012345678901234567890}',
    b'{"run_id": ' + b"9" * 5000 + b"}",
    b'{"run_id": NaN}',
    b'{"run_id": Infinity}',
    b'{"run_id": 1e999}',
    b'{"run_id": -1e400}',
    b"\xff\xfe{}",
    b'{"run_id": 1',
    b"[1, 2, 3]",
    b'"just a string"',
]


@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=range(len(HOSTILE_BODIES)))
def test_hostile_json_is_a_400(shared_api: httpx.Client, body: bytes) -> None:
    for path in ("/api/2.2/jobs/runs/cancel", "/api/2.2/jobs/runs/submit"):
        response = shared_api.post(path, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 400, (path, response.text[:200])
        assert set(response.json()) == {"error_code", "message"}


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/2.2/jobs/runs/get", {"run_id": "9" * 30}),
        ("/api/2.2/jobs/runs/get", {"run_id": "-99999999999999999999"}),
        ("/api/2.2/jobs/runs/get", {"run_id": "1e30"}),
        ("/api/2.2/jobs/runs/list", {"limit": "9" * 40}),
        ("/api/2.2/jobs/runs/list", {"page_token": "OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5"}),
        ("/api/2.0/ai-training/workflows/by-run-id/99999999999999999999999/logs", {}),
        ("/api/2.0/serverless-policies", {"page_size": "9" * 25}),
    ],
)
def test_out_of_range_numbers_are_a_400(shared_api: httpx.Client, path: str, params: dict) -> None:
    response = shared_api.get(path, params=params)
    assert response.status_code == 400, response.text[:200]
    assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE"


# --- orphans -------------------------------------------------------------------------------


def test_orphan_clean_up_never_touches_another_workspace(tmp_path: Path) -> None:
    def spawn(workspace_id: str) -> subprocess.Popen[bytes]:
        env = {
            "PATH": os.environ["PATH"],
            "AIRO_LOCAL_TASK_RUN_ID": "1001",
            "AIRO_LOCAL_WORKSPACE_ID": workspace_id,
        }
        return subprocess.Popen(["sleep", "60"], env=env)

    mine, other = spawn("mine"), spawn("someone-else")
    try:
        _kill_orphans({"1001"}, "mine")
        assert mine.wait(timeout=10) == -signal.SIGKILL
        # Still alive after the clean-up returned: a SIGKILL sent by it would have ended the
        # process before the SIGTERM sent now.
        other.terminate()
        assert other.wait(timeout=10) == -signal.SIGTERM
    finally:
        for process in (mine, other):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_raw_socket_with_no_host_header_is_refused(local_workspace: LocalWorkspace) -> None:
    host, port = local_workspace.host.removeprefix("http://").split(":")
    request = (
        f"GET {ME} HTTP/1.0\r\nAuthorization: Bearer {local_workspace.token}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.split(b"\r\n", 1)[0].split()[1] in (b"400", b"403")


def test_a_page_of_long_lines_stays_bounded(tmp_path: Path) -> None:
    book = LogBook(tmp_path / "logs")
    log = book.open(3, 0)
    for _ in range(200):
        log.write("z" * 64 * 1024)
    log.close()
    page, token = book.page([3], 0, size=1000)
    assert len(page) == 128 and token is not None  # 8 MiB of bodies
    rest, token = book.page([3], 0, size=1000, token=token)
    assert len(rest) == 72 and token is None


@pytest.mark.slow
def test_airo_commands_read_the_local_token_file(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    with start_local_workspace(data_dir=xdg / "airo" / "workspace") as ws:
        env = {**os.environ, "XDG_DATA_HOME": str(xdg)}
        env.pop("DATABRICKS_TOKEN", None)
        command = [sys.executable, "-m", "air_runtime.cli", "cancel", "999", "--host", ws.host]
        found = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert "Run 999 does not exist" in found.stderr  # authenticated: the run is unknown
        wrong = subprocess.run(
            [*command, "--token", "wrong"], env=env, capture_output=True, text=True, timeout=60
        )
        assert "403" in wrong.stderr
