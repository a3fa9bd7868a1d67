"""S1-S6 security of the local workspace: hostile Host headers and tokens, environment
leaks into ranks, file modes of the data dir, long output lines, size limits, hostile JSON.

Every scenario talks HTTP to a real local workspace on 127.0.0.1 and counts what got
through: accepted hostile requests, leaked variables, exposed files, hung ranks, 500s.
Small trial counts by default, full size with ``AIRO_RELIABILITY_FULL=1``.
"""

from __future__ import annotations

import json
import os
import random
import socket
import stat
import string
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from air_runtime.local import LocalWorkspace, start_local_workspace
from tests.local_workspace.conftest import Workloads

pytestmark = pytest.mark.timeout(1200)

# As this folder's conftest (not imported by name: this file also runs beside other test
# folders, whose conftest modules share that name).
FULL = os.environ.get("AIRO_RELIABILITY_FULL") == "1"
SEED = int(os.environ.get("AIRO_RELIABILITY_SEED", "20261129"))


def trials(small: int, full: int) -> int:
    return full if FULL else small


def rng_for(name: str) -> random.Random:
    return random.Random(f"{SEED}:{name}")


ME = "/api/2.0/preview/scim/v2/Me"
MIB = 1024 * 1024


def _api(ws: LocalWorkspace) -> httpx.Client:
    return httpx.Client(
        base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=60
    )


def _raw(ws: LocalWorkspace, request: bytes) -> int:
    """Status of a hand-written HTTP/1.1 request (0 when the server closed without one)."""
    host, port = ws.host.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                return 0
            answer += chunk
    return int(answer.split(b" ", 2)[1])


# --- S1: hostile Host headers and tokens --------------------------------------------------


def _hostile_hosts(rng: random.Random, count: int) -> list[str]:
    fixed = [
        "evil.example.com",
        "evil.example.com:8765",
        "127.0.0.1.nip.io",
        "localhost.evil.com",
        "169.254.169.254",
        "10.0.0.1",
        "0.0.0.0",
        "[::ffff:8.8.8.8]",
        "attacker.localhost.example",
        "xn--lcalhost-9za",
        "127.0.0.1@evil.com",
        "localhost evil",
    ]
    letters = string.ascii_lowercase + string.digits + "-."
    generated = [
        "".join(rng.choice(letters) for _ in range(rng.randint(3, 30)))
        + rng.choice(["", ".com", ".internal", f":{rng.randint(1, 65535)}"])
        for _ in range(max(0, count - len(fixed)))
    ]
    return [h for h in fixed + generated if h.strip("-.") and not h.startswith("127.")][:count]


def _hostile_tokens(rng: random.Random, real: str, revoked: str, count: int) -> list[str]:
    fixed = [
        "local-token",
        real[:-1],
        real + "x",
        real.upper() if real.upper() != real else real.lower(),
        real[1:],
        "a b",
        revoked,
        "x" * 10_000,
        real[: len(real) // 2],
    ]
    alphabet = string.ascii_letters + string.digits + "-_"
    generated = [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80)))
        for _ in range(max(0, count - len(fixed)))
    ]
    return [t for t in fixed + generated if t != real][:count]


@pytest.mark.row("S1")
def test_hostile_hosts_and_tokens(tmp_path: Path, tally) -> None:
    rng = rng_for("S1")
    revoked = "revoked-" + uuid.uuid4().hex
    with start_local_workspace(data_dir=tmp_path / "ws", token=None) as ws:
        ws.admin.add_token(revoked)
        ws.admin.revoke_token(revoked)
        accepted = Counter()
        statuses: Counter[str] = Counter()
        with httpx.Client(base_url=ws.host, timeout=30) as client:
            for host in _hostile_hosts(rng, trials(40, 400)):
                tally.trials += 1
                status = _raw(
                    ws,
                    f"GET {ME} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {ws.token}\r\n"
                    "Connection: close\r\n\r\n".encode(),
                )
                statuses[f"host:{status}"] += 1
                if status == 200:
                    accepted["hosts"] += 1
                    tally.fail(f"Host {host!r} was served")
            for token in _hostile_tokens(rng, ws.token, revoked, trials(40, 400)):
                for path in (ME, "/api/2.0/airo-admin/counters"):
                    tally.trials += 1
                    response = client.get(path, headers={"Authorization": f"Bearer {token}"})
                    statuses[f"token:{response.status_code}"] += 1
                    if response.status_code < 400:
                        accepted["tokens"] += 1
                        tally.fail(f"token {token[:20]!r}... was accepted on {path}")
            missing = client.get(ME)  # no token at all
            tally.trials += 1
            if missing.status_code != 401:
                tally.fail(f"no token: {missing.status_code}")
        tally.leaks = sum(accepted.values())
        tally.notes.update(
            hosts_accepted=accepted["hosts"],
            tokens_accepted=accepted["tokens"],
            statuses=dict(statuses),
        )


# --- S2: environment leaks into ranks ----------------------------------------------------

SERVER_SECRETS = {
    "DATABRICKS_TOKEN": "dapi-server-secret",
    "DATABRICKS_HOST": "https://server.example.com",
    "AIRFLOW_CONN_DATABRICKS_DEFAULT": "databricks://:pw@host",
    "AIRFLOW__CORE__FERNET_KEY": "fernet-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "DAGSTER_HOME": "/srv/dagster",
    "AIRO_WORKSPACE_TOKEN": "workspace-token-secret",
}


# What the platform gives a rank to log to its MLflow run: the workspace and a config file
# holding the attempt's own token (no server secret).
MLFLOW_VARIABLES = {
    "DATABRICKS_HOST",
    "DATABRICKS_CONFIG_FILE",
    "DATABRICKS_CONFIG_PROFILE",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_ID",
    "MLFLOW_RUN_ID",
}


@pytest.mark.row("S2")
def test_environment_leaks_into_ranks(
    tmp_path: Path, tally, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SERVER_SECRETS.items():
        monkeypatch.setenv(name, value)
    allowed_base = {"PATH", "HOME", "LANG", "PWD", "SHLVL", "_", "OLDPWD"}
    with start_local_workspace(data_dir=tmp_path / "ws") as ws, _api(ws) as api:
        workloads = Workloads(ws, api)
        for trial in range(trials(2, 10)):
            nodes = 1 + trial % 2
            task = workloads.command_task(
                "env -0 | tr '\\0' '\\n' | cut -d= -f1 | sort -u | sed 's/^/VAR /'; "
                "env | grep -c -e dapi-server-secret -e fernet-secret -e aws-secret "
                "-e workspace-token-secret -e server.example.com | sed 's/^/HITS /'",
                nodes=nodes,
                env={"WORKLOAD_VAR": str(trial)},
                key=f"s2_{trial}",
            )
            run = workloads.wait(workloads.submit(task), timeout=120)
            for node in range(nodes):
                tally.trials += 1
                lines = workloads.logs(run["run_id"], node)
                names = {line[4:] for line in lines if line.startswith("VAR ")}
                hits = [int(line[5:]) for line in lines if line.startswith("HITS ")]
                # DATABRICKS_HOST is the platform's own (this workspace), never the server's
                # value: that one is among the hits.
                leaked = names & (set(SERVER_SECRETS) - MLFLOW_VARIABLES)
                platform = {
                    n for n in names if n.startswith(("AIRO_LOCAL_", "NUM_", "LOCAL_", "WORLD_"))
                }
                unexpected = (
                    names
                    - allowed_base
                    - platform
                    - {"WORKLOAD_VAR", "POD_RANK", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"}
                    - MLFLOW_VARIABLES
                )
                if leaked or (hits and hits[0]) or unexpected:
                    tally.leaks += len(leaked | unexpected) or 1
                    tally.fail(f"node {node}: leaked {sorted(leaked | unexpected)}, hits {hits}")
                if "WORKLOAD_VAR" not in names or "PATH" not in names:
                    tally.fail(f"node {node}: missing the workload's or base variables: {names}")
        tally.notes["server_variables_planted"] = len(SERVER_SECRETS)


# --- S3: file modes ----------------------------------------------------------------------


@pytest.mark.row("S3")
def test_file_modes(tmp_path: Path, tally) -> None:
    data = tmp_path / "ws"
    with start_local_workspace(data_dir=data, in_process=False) as ws, _api(ws) as api:
        api.post("/api/2.0/secrets/scopes/create", json={"scope": "s3"}).raise_for_status()
        workloads = Workloads(ws, api)
        for trial in range(trials(2, 8)):
            api.post(
                "/api/2.0/secrets/put",
                json={"scope": "s3", "key": f"k{trial}", "string_value": f"secret-{trial}"},
            ).raise_for_status()
            api.put(
                f"/api/2.0/fs/files/Volumes/c/s/v/blob{trial}.bin",
                params={"overwrite": "true"},
                content=b"z" * 1000,
            ).raise_for_status()
            task = workloads.command_task(
                "echo out > result.txt; mkdir -p sub; echo x > sub/f; echo logged",
                secrets={"TOKEN": f"s3/k{trial}"},
                key=f"s3_{trial}",
            )
            workloads.wait(workloads.submit(task), timeout=120)
    # Stopped: the request log and every SQLite file are closed and complete.
    exposed, scanned = [], 0
    for folder, dirs, files in os.walk(data):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            scanned += 1
            if stat.S_IMODE(os.lstat(path).st_mode) & 0o077:
                exposed.append(path)
    tally.trials = scanned
    tally.leaks = len(exposed) + int(stat.S_IMODE(data.stat().st_mode) != 0o700)
    for path in exposed[:20]:
        tally.fail(f"{path} is readable by group or others")
    tally.notes.update(entries_scanned=scanned, group_or_world_accessible=len(exposed))


# --- S4: long output lines ---------------------------------------------------------------


@pytest.mark.row("S4")
def test_long_lines_are_drained(tmp_path: Path, tally) -> None:
    sizes = [MIB] if not trials(0, 1) else [MIB, 4 * MIB, 16 * MIB]
    with start_local_workspace(data_dir=tmp_path / "ws") as ws, _api(ws) as api:
        workloads = Workloads(ws, api)
        seconds = []
        for size in sizes * trials(1, 2):
            tally.trials += 1
            command = (
                f"python -c \"import sys; sys.stdout.write('L' * {size}); sys.stdout.flush()\"\n"
                "echo\necho after-the-long-line\n"
            )
            started = time.monotonic()
            run_id = workloads.submit(workloads.command_task(command, key="s4"))
            try:
                run = workloads.wait(run_id, timeout=120)
            except AssertionError:
                tally.orphans += 1
                tally.fail(f"a {size} byte line hung the rank")
                api.post("/api/2.2/jobs/runs/cancel", json={"run_id": run_id})
                continue
            seconds.append(round(time.monotonic() - started, 2))
            drained = 0
            token = None
            url = f"/api/2.0/ai-training/workflows/by-run-id/{run_id}/logs"
            bodies = []
            while True:
                params: dict[str, Any] = {"page_size": 1000}
                if token:
                    params["page_token"] = token
                page = api.get(url, params=params).json()
                bodies += [r["body"] for r in page["log_records"]]
                token = page.get("next_page_token")
                if not token:
                    break
            drained = sum(len(b) for b in bodies if b.startswith("L"))
            if run["state"]["result_state"] != "SUCCESS" or drained != size:
                tally.fail(f"{size}: {run['state']} drained {drained}")
            if not bodies or bodies[-1] != "after-the-long-line":
                tally.fail(f"{size}: the rank's later output is missing")
        tally.notes.update(line_bytes=sizes, seconds=seconds)


# --- S5: size limits ---------------------------------------------------------------------


@pytest.mark.row("S5")
def test_size_limits(tmp_path: Path, tally) -> None:
    limit, upload_limit = 64 * 1024, MIB
    with (
        start_local_workspace(
            data_dir=tmp_path / "ws", max_request_bytes=limit, max_upload_bytes=upload_limit
        ) as ws,
        _api(ws) as api,
    ):
        api.post("/api/2.0/workspace/mkdirs", json={"path": "/Users/s5"}).raise_for_status()
        answers: Counter[int] = Counter()
        rng = rng_for("S5")
        for _ in range(trials(5, 40)):
            over = rng.randint(1, 4 * limit)
            cases = [
                (
                    "POST",
                    "/api/2.0/workspace/mkdirs",
                    b'{"path": "' + b"a" * (limit + over) + b'"}',
                ),
                ("POST", "/api/2.2/jobs/runs/submit", b" " * (limit + over) + b"{}"),
                (
                    "POST",
                    "/api/2.0/workspace-files/import-file/Users/s5/f.bin?overwrite=true",
                    b"x" * (upload_limit + over),
                ),
                ("PUT", "/api/2.0/fs/files/Volumes/c/s/v/f.bin?overwrite=true", None),
            ]
            for method, path, body in cases:
                tally.trials += 1
                if body is None:  # chunked, no Content-Length

                    def stream(total: int = upload_limit + over) -> Any:
                        sent = 0
                        while sent < total:
                            yield b"y" * min(65536, total - sent)
                            sent += 65536

                    response = api.request(method, path, content=stream())
                else:
                    response = api.request(method, path, content=body)
                answers[response.status_code] += 1
                if response.status_code != 413:
                    tally.fail(f"{method} {path[:50]} over the limit: {response.status_code}")
                elif set(response.json()) != {"error_code", "message"}:
                    tally.fail(f"{path[:50]}: 413 without the platform's error shape")
            tally.trials += 1
            fine = api.post(
                "/api/2.0/workspace-files/import-file/Users/s5/ok.bin?overwrite=true",
                content=b"x" * (upload_limit - 1),
            )
            if fine.status_code != 200:
                tally.fail(f"an upload under the limit: {fine.status_code}")
        tally.crashes = sum(n for status, n in answers.items() if status >= 500)
        tally.notes.update(
            answers={str(k): v for k, v in answers.items()},
            max_request_bytes=limit,
            max_upload_bytes=upload_limit,
        )


# --- S6: hostile JSON --------------------------------------------------------------------

POST_ENDPOINTS = (
    "/api/2.2/jobs/runs/submit",
    "/api/2.2/jobs/runs/cancel",
    "/api/2.0/workspace/mkdirs",
    "/api/2.0/workspace/delete",
    "/api/2.0/secrets/put",
    "/api/2.0/secrets/scopes/create",
    "/api/2.0/ai-training/config:validate",
    "/api/2.0/ai-compute-manager/images",
)


def _malformed(rng: random.Random) -> bytes:
    depth = rng.choice([65, 100, 1000, 100_000])
    choices = [
        lambda: b"[" * depth + b"]" * depth,
        lambda: b'{"a":' * depth + b"0" + b"}" * depth,
        lambda: b'{"run_id": ' + str(rng.randint(10**19, 10**40)).encode() + b"}",
        lambda: b'{"run_id": -' + b"9" * rng.randint(20, 5000) + b"}",
        lambda: b'{"x": ' + rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e999"]) + b"}",
        lambda: bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))) + b"\xff",
        lambda: b'{"path": "' + b"\xc3\x28" * rng.randint(1, 50) + b'"}',
        lambda: b'{"run_id": 1' + b" " * rng.randint(0, 10),
        lambda: rng.choice([b"[]", b"1", b'"s"', b"null", b"true"]),
    ]
    return rng.choice(choices)()


def _mutated(rng: random.Random) -> bytes:
    """A plausible body with values of the wrong types or out of range."""
    values: list[Any] = [
        None,
        True,
        -1,
        2**63,
        -(2**63) - 1,
        1.5,
        "",
        "x" * 5000,
        [],
        {},
        [1, [2, [3]]],
        {"nested": {"deep": [None]}},
        "\u0000",
        "../../etc/passwd",
    ]
    body: dict[str, Any] = {
        "run_id": rng.choice(values),
        "path": rng.choice(values),
        "scope": rng.choice(values),
        "key": rng.choice(values),
        "string_value": rng.choice(values),
        "recursive": rng.choice(values),
        "docker_image_url": rng.choice(values),
        "run_name": rng.choice(values),
        "idempotency_token": rng.choice(values),
        "timeout_seconds": rng.choice(values),
        "tasks": rng.choice(
            [
                values[0],
                [rng.choice(values)],
                [{"task_key": rng.choice(values), "ai_runtime_task": rng.choice(values)}],
                [
                    {
                        "task_key": "t",
                        "max_retries": rng.choice(values),
                        "timeout_seconds": rng.choice(values),
                        "depends_on": rng.choice(values),
                        "ai_runtime_task": {
                            "experiment": rng.choice(values),
                            "deployments": [
                                {
                                    "compute": {
                                        "accelerator_type": rng.choice([*values, "GPU_1xA10"]),
                                        "accelerator_count": rng.choice(values),
                                    },
                                    "command_path": rng.choice(values),
                                }
                            ],
                        },
                    }
                ],
            ]
        ),
        "task": rng.choice(values),
    }
    keep = rng.sample(sorted(body), rng.randint(1, len(body)))
    return json.dumps({k: body[k] for k in keep}, allow_nan=False).encode()


@pytest.mark.row("S6")
def test_hostile_json(tmp_path: Path, tally) -> None:
    rng = rng_for("S6")
    answers: Counter[str] = Counter()
    with start_local_workspace(data_dir=tmp_path / "ws", mode="simulate") as ws, _api(ws) as api:
        for _ in range(trials(150, 2000)):
            path = rng.choice(POST_ENDPOINTS)
            hostile = rng.random() < 0.6
            body = _malformed(rng) if hostile else _mutated(rng)
            tally.trials += 1
            response = api.post(path, content=body, headers={"Content-Type": "application/json"})
            kind = "malformed" if hostile else "mutated"
            answers[f"{kind}:{response.status_code}"] += 1
            if response.status_code >= 500:
                tally.crashes += 1
                tally.fail(f"{path}: {response.status_code} for {body[:120]!r}")
                continue
            try:
                shape = set(response.json())
            except ValueError:
                shape = set()
            if hostile and response.status_code != 400:
                tally.fail(f"{path}: malformed body answered {response.status_code}")
            if response.status_code >= 400 and shape != {"error_code", "message"}:
                tally.fail(f"{path}: {response.status_code} without the error shape")
        for query in (
            {"run_id": "9" * 30},
            {"run_id": "-9" + "9" * 25},
            {"run_id": "1e30"},
            {"run_id": "NaN"},
        ):
            tally.trials += 1
            response = api.get("/api/2.2/jobs/runs/get", params=query)
            answers[f"query:{response.status_code}"] += 1
            if response.status_code != 400:
                tally.crashes += int(response.status_code >= 500)
                tally.fail(f"runs/get {query}: {response.status_code}")
        health = api.get("/api/2.0/airo-admin/health")
        if health.status_code != 200:
            tally.fail("the workspace stopped answering")
    tally.notes["answers"] = dict(sorted(answers.items()))
