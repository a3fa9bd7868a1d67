"""`airo run --dry-run` looks up the workload's secret references in their scopes (keys only),
against the local workspace: a missing key is named at the variable that references it, with
its line and a fix, before anything is uploaded or submitted."""

from __future__ import annotations

import json
from pathlib import Path

from air_runtime import AirClient
from air_runtime.cli import main as airo

WORKLOAD = """\
experiment_name: dry-secrets
compute: {accelerator_type: GPU_1xA10, num_accelerators: 2}
secrets:
  HF_TOKEN: research/hf_token
  WANDB_KEY: research/wandb_key
containers:
  - name: trainer
    ranks: [0, 1]
    unity_catalog_image: main.rl.trl:0.24.0
    environment_variables:
      variables:
        EVAL_KEY: "{{secrets/eval-team/api_key}}"
    command: echo hi
"""


def _auth(ws, tmp_path: Path) -> list[str]:
    token_file = tmp_path / "token"
    token_file.write_text(ws.token)
    token_file.chmod(0o600)
    return ["--host", ws.host, "--token-file", str(token_file)]


def test_dry_run_names_each_secret_its_scope_lacks(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    with AirClient(ws.host, ws.token) as client:
        client.ensure_secret_scope("research")
        client.put_secret("research", "hf_token", "hf-value-never-shown")
    job = tmp_path / "job.yaml"
    job.write_text(WORKLOAD)

    assert airo(["run", str(job), "--dry-run", "--registry-host", "", *auth]) == 1
    err = capsys.readouterr().err
    assert (
        "secrets.WANDB_KEY (line 5:14): secret scope 'research' has no key 'wandb_key' (the "
        "run would fail at its start) Fix: store it with `databricks secrets put-secret "
        "research wandb_key`"
    ) in err, err
    # A scope that does not exist lacks every key; the key that is there is not named.
    assert (
        "containers[0].environment_variables.variables.EVAL_KEY (line 12:19): secret scope "
        "'eval-team' has no key 'api_key'"
    ) in err, err
    assert "HF_TOKEN" not in err and "hf-value-never-shown" not in err
    assert airo(["run", str(job), "--dry-run", "--json", *auth]) == 1
    errors = json.loads(capsys.readouterr().out)["errors"]
    assert [e["path"] for e in errors] == [
        "secrets.WANDB_KEY",
        "containers[0].environment_variables.variables.EVAL_KEY",
    ]
    assert ws.admin.counters()["runs_created"] == 0  # nothing submitted

    with AirClient(ws.host, ws.token) as client:
        client.put_secret("research", "wandb_key", "w")
        client.ensure_secret_scope("eval-team")
        client.put_secret("eval-team", "api_key", "e")
        assert client.check_secrets(_load(job)).problems == ()


def _load(path: Path):
    from air_runtime import load_workload

    return load_workload(path)
