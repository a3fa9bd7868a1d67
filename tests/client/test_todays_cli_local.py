"""A workload written for today's `databricks air run` (its `-h config` schema; databricks/cli
cmd/air/runconfig.go, compute.go) validates and runs on the local workspace unchanged."""

from __future__ import annotations

from pathlib import Path

from air_runtime import AirClient, load_workload

TODAYS_CLI_WORKLOAD = """\
# written for `databricks air run`
experiment_name: todays-cli
command: python "$CODE_SOURCE_PATH/train.py"
compute:
  accelerator_type: GPU_1xA10
  num_accelerators: 2
  pool_id: " pool-a "
  priority_class: normal
environment:
  version: databricks_ai_v5
code_source:
  type: snapshot
  root_path: .
  include_paths: [train.py]
  git:
    remote: false
    commit: {commit}
permissions:
  - group_name: users
    level: CAN_VIEW
"""


def test_todays_cli_workload_runs_unchanged(workspace_factory, tmp_path: Path) -> None:
    import subprocess

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text('import os\nprint("trained on", os.environ["POD_RANK"])\n')
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": "/usr/bin:/bin"}  # fmt: skip
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-C", str(project), *args], check=True, env=env)
    commit = subprocess.run(
        ["git", "-C", str(project), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    (project / "run.yaml").write_text(TODAYS_CLI_WORKLOAD.format(commit=commit))

    workload = load_workload(project / "run.yaml")
    assert (workload.compute.pool_id, workload.compute.priority_class) == ("pool-a", "NORMAL")
    assert workload.environment.is_base_environment
    # The pool the workload names is one of the workspace's (its check refuses others).
    pool = {"pool_id": "pool-a", "accelerator_type": "GPU_1xA10", "accelerator_count": 2}
    ws = workspace_factory(gpu_pools=[pool])
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(workload)
        state = client.wait(run.run_id, poll_interval=0.2)
        assert state.is_success, state.state_message
        assert [r.body for r in client.iter_logs(run.run_id, node=1)] == ["trained on 1"]
