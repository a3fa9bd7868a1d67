"""``airo run --follow-logs`` and ``airo logs`` never print the credentials airo holds, even
when a workload prints them (here a token put in a plain env var by mistake), plainly or
encoded, and fails: streamed lines and the failure message go through the client's
``Redactor``."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from air_runtime.cli import main as airo

TOKEN = "dapi-cli-token-0123456789abcdef"


@pytest.mark.slow
def test_airo_follow_logs_and_failure_hide_the_token(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory(token=TOKEN)
    job = tmp_path / "job.yaml"
    job.write_text(
        "experiment_name: cli-redaction\n"
        "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
        "max_retries: 0\n"
        f"env_variables: {{LEAK: {TOKEN}}}\n"
        "command: |\n"
        '  echo "plain $LEAK"\n'
        '  echo "base64 $(printf %s "$LEAK" | base64 -w0)"\n'
        "  exit 3\n"
    )
    encoded = base64.b64encode(TOKEN.encode()).decode()
    auth = ["--host", ws.host, "--token", TOKEN]
    assert airo(["run", str(job), "--follow-logs", *auth]) == 3  # the run failed
    out, err = capsys.readouterr()
    run_id = int(out.split()[1].rstrip(":"))
    assert "plain ***" in out + err and "base64 ***" in out + err
    assert "ended FAILED" in err
    assert airo(["logs", str(run_id), *auth]) == 0
    logs_out, logs_err = capsys.readouterr()
    assert "plain ***" in logs_out
    for text in (out, err, logs_out, logs_err):
        assert TOKEN not in text and encoded not in text


def test_airo_learns_the_docker_hub_login_it_would_register_with(
    workspace_factory, tmp_path: Path, monkeypatch
):
    from air_runtime import AirClient
    from air_runtime.cli._run_cmds import _learn_registry_credentials

    password = "dckr_pat_cli+secret/0123"
    docker = tmp_path / "docker"
    docker.mkdir()
    auth = base64.b64encode(f"acme:{password}".encode()).decode()
    config = {"auths": {"https://index.docker.io/v1/": {"auth": auth}}}
    (docker / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("DOCKER_CONFIG", str(docker))
    ws = workspace_factory()
    with AirClient(ws.host, ws.token) as client:
        _learn_registry_credentials(client)
        assert client.redactor(f"{password} {auth}") == "*** ***"
