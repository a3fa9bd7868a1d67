"""Async twin, logs, code snapshots, images, secrets and the CLI against the local workspace."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path

import httpx
import pytest

from air_runtime import AirClient, AsyncAirClient, build_plan, load_workload
from air_runtime._errors import ConfigurationError
from air_runtime.cli import main as airo


def _workload(name: str, command: str, **extra):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": command,
            **extra,
        }
    )


async def test_async_twin_submits_waits_and_streams_logs(workspace_factory):
    ws = workspace_factory()
    async with AsyncAirClient(ws.host, ws.token) as client:
        run = await client.submit_workload(
            _workload("twin", "for i in 1 2 3; do echo line $i; sleep 0.2; done")
        )
        followed = [r.body async for r in client.iter_logs(run.run_id, follow=True)]
        state = await client.wait(run.run_id, poll_interval=0.2)
    assert state.is_success
    lines = [b for b in followed if b.startswith("line")]
    assert lines == ["line 1", "line 2", "line 3"]  # followed live, each record once


def _printed(client: AirClient, run_id: int, text: str) -> None:
    """Returns once the run has logged ``text`` (its logs followed until then)."""
    for record in client.iter_run_logs(run_id, follow=True):
        if text in record.body:
            return
    raise AssertionError(f"run {run_id} ended without logging {text!r}")


def _ended_by_cancel(client: AirClient, run_id: int) -> None:
    client.cancel(run_id)
    assert client.wait(run_id, poll_interval=0.1).is_terminal


def test_a_follower_reads_the_end_at_once_when_the_caller_saw_it(workspace_factory, monkeypatch):
    """``until`` ends the follower's pause: a task or step that has seen its run end gets
    the last lines without waiting out a pause between reads (here an hour)."""
    from air_runtime.client import _runs

    ws = workspace_factory()
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(_workload("wake", "echo first; sleep 600"))
        _printed(client, run.run_id, "first")
        monkeypatch.setattr(_runs, "FOLLOW_POLL_S", 3600.0)  # from now on a pause is an hour
        ended, read_once = threading.Event(), threading.Event()

        def follow() -> None:
            for _record in client.iter_run_logs(run.run_id, follow=True, until=ended):
                read_once.set()

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        assert read_once.wait(60)  # the first read is done: the follower is in its pause
        _ended_by_cancel(client, run.run_id)
        ended.set()
        follower.join(60)
        assert not follower.is_alive(), "the follower slept its whole pause"


def test_an_async_follower_reads_the_end_at_once_when_the_caller_saw_it(
    workspace_factory, monkeypatch
):
    import asyncio

    from air_runtime.client import _runs

    ws = workspace_factory()
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(_workload("wake", "echo first; sleep 600"))
        _printed(client, run.run_id, "first")
        monkeypatch.setattr(_runs, "FOLLOW_POLL_S", 3600.0)  # from now on a pause is an hour

        read: list[str] = []

        async def main() -> bool:
            ended, read_once = asyncio.Event(), asyncio.Event()
            async with AsyncAirClient(ws.host, ws.token) as aclient:

                async def follow() -> None:
                    async for record in aclient.iter_run_logs(run.run_id, follow=True, until=ended):
                        read.append(record.body)
                        read_once.set()

                follower = asyncio.create_task(follow())
                await asyncio.wait_for(read_once.wait(), 60)  # now in its hour-long pause
                await asyncio.to_thread(_ended_by_cancel, client, run.run_id)
                ended.set()
                done, _ = await asyncio.wait({follower}, timeout=60)
                if follower in done:
                    follower.result()  # its error, if it ended with one
                else:
                    follower.cancel()
                return follower in done

        assert asyncio.run(main()), "the follower slept its whole pause"
        assert "first" in read


def test_following_logs_until_the_caller_saw_the_end_asks_no_run_state(workspace_factory):
    ws = workspace_factory()
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(
            _workload("until", "for i in 1 2 3; do echo line $i; sleep 0.3; done")
        )
        ended = threading.Event()
        followed: list[str] = []

        def follow() -> None:
            for record in client.iter_logs(run.run_id, follow=True, until=ended):
                followed.append(record.body)

        before = ws.admin.counters()["requests"].get("jobs/runs/get", 0)
        follower = threading.Thread(target=follow)
        follower.start()
        state = client.wait(run.run_id, poll_interval=0.2)
        by_the_wait = ws.admin.counters()["requests"]["jobs/runs/get"] - before
        ended.set()
        follower.join(timeout=10)
    assert state.is_success and not follower.is_alive()
    assert [b for b in followed if b.startswith("line")] == ["line 1", "line 2", "line 3"]
    # Every runs/get came from the wait: the follower only read logs.
    assert ws.admin.counters()["requests"]["jobs/runs/get"] - before == by_the_wait


def test_code_snapshot_is_uploaded_and_unpacked(workspace_factory, tmp_path: Path):
    ws = workspace_factory()
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "train.py").write_text("print('trained from snapshot')\n")
    (project / "pkg" / "__pycache__").mkdir()
    (project / "pkg" / "__pycache__" / "junk.pyc").write_bytes(b"x")
    (project / "job.yaml").write_text(
        "experiment_name: snap\n"
        "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
        "code_source: {root_path: .}\n"
        'command: python3 "$CODE_SOURCE_PATH/pkg/train.py"\n'
    )
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(load_workload(str(project / "job.yaml")))
        state = client.wait(run.run_id, poll_interval=0.2)
        client.raise_for_failure(state)
        assert "trained from snapshot" in [r.body for r in client.iter_logs(run.run_id)]


def test_public_and_private_image_registration(workspace_factory, tmp_path, monkeypatch):
    ws = workspace_factory(
        private_images={"docker.io/acme/private": {"user": "bob", "password": "pw-42"}}
    )
    docker_dir = tmp_path / "docker"
    docker_dir.mkdir()
    auth = base64.b64encode(b"bob:pw-42").decode()
    (docker_dir / "config.json").write_text(
        json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": auth}}})
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_dir))
    with AirClient(ws.host, ws.token) as client:
        public = client.register_image("ubuntu")
        assert public.docker_image_url == "docker.io/library/ubuntu:latest"
        assert client.wait_for_image("ubuntu", poll_interval=0.1).is_available
        private = client.register_image("acme/private:1")
        ready = client.wait_for_image("acme/private:1", poll_interval=0.1)
        assert ready.is_available, ready
        # Already AVAILABLE: nothing registered again unless refreshed.
        assert client.register_image("acme/private:1").is_available
    assert private.docker_image_url == "docker.io/acme/private:1"
    scope = "docker-credentials-local-user@example.com"
    request_log = ws.admin.request_log(limit=10_000)
    assert any("secrets/put" in e.get("path", "") for e in request_log)
    assert "pw-42" not in json.dumps(request_log)
    stored = httpx.get(
        f"{ws.host}/api/2.0/secrets/list",
        params={"scope": scope},
        headers={"Authorization": f"Bearer {ws.token}"},
    ).json()
    assert [s["key"] for s in stored["secrets"]] == ["docker.io-bob-local"]  # image_credentials.go


def test_unregistered_image_fails_before_upload_naming_the_command(workspace_factory):
    ws = workspace_factory()
    workload = _workload(
        "img", "/app/run.sh", environment={"docker_image": {"url": "acme/never:2"}}
    )
    with AirClient(ws.host, ws.token) as client:
        plan = build_plan(workload, user_name=client.whoami().user_name)
        with pytest.raises(ConfigurationError) as caught:
            client.submit(plan)
    assert "airo images register docker.io/acme/never:2" in str(caught.value)
    assert "AirRegisterImageOperator" in str(caught.value)
    assert ws.admin.counters()["requests"].get("workspace-files/import-file", 0) == 0


def test_secret_scope_creation_is_idempotent(workspace_factory):
    ws = workspace_factory()
    with AirClient(ws.host, ws.token) as client:
        client.ensure_secret_scope("team")
        client.ensure_secret_scope("team")
        refs = client.materialize_secrets({"A B": "1", "x" * 200: "2"}, scope="team")
    assert refs["A B"] == "team/A_B"
    assert len(refs["x" * 200].split("/", 1)[1]) <= 128


@pytest.mark.slow
def test_cli_run_wait_logs_cancel(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory()
    job = tmp_path / "job.yaml"
    job.write_text(
        "experiment_name: cli\n"
        "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
        "command: echo from-cli $GREETING\n"
        "env_variables: {GREETING: hi}\n"
    )
    auth = ["--host", ws.host, "--token", ws.token]
    assert airo(["run", str(job), "--wait", "--override", "env_variables.GREETING=yo", *auth]) == 0
    out = capsys.readouterr().out
    run_id = int(out.split()[1].rstrip(":"))
    assert airo(["logs", str(run_id), *auth]) == 0
    assert "from-cli yo" in capsys.readouterr().out
    job.write_text(job.read_text().replace("echo from-cli $GREETING", "sleep 30"))
    assert airo(["run", str(job), *auth]) == 0
    long_id = int(capsys.readouterr().out.split()[1].rstrip(":"))
    assert airo(["cancel", str(long_id), *auth]) == 0
    with AirClient(ws.host, ws.token) as client:
        assert client.wait(long_id, poll_interval=0.2).result_state == "CANCELED"


def test_without_host_the_databricks_sdk_config_chain_is_used(workspace_factory, monkeypatch):
    ws = workspace_factory()
    monkeypatch.setenv("DATABRICKS_HOST", ws.host)
    monkeypatch.setenv("DATABRICKS_TOKEN", ws.token)
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", "/nonexistent/.databrickscfg")
    with AirClient() as client:
        assert client.host == ws.host
        assert "databricks-sdk config" in client.credentials.source
        assert client.whoami().user_name == "local-user@example.com"
