"""A new user of today's `databricks air` tries airo: a local workspace with a GPU pool
(`airo workspace --data-dir ... --gpu-pool ...`), reached with `--token-file`; a workload
written for today's CLI (compute.pool_id) validates, dry-runs (and fails listing both
fields when the service refuses two, with nothing submitted), runs, and `airo pools get`
shows the pool's idle accelerators drop while the run is going and come back after."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # airo and the workspace as subprocesses

WORKLOAD = """\
experiment_name: new-user
compute:
  accelerator_type: GPU_1xA10
  num_accelerators: {count}
  pool_id: {pool}
env_variables:
  RELEASE: {release}
command: |
  echo started
  while [ ! -e "$RELEASE" ]; do sleep 0.05; done
  echo released
"""


def _airo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "air_runtime.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _json(*args: str) -> dict:
    done = _airo(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_workload_for_todays_cli_from_validation_to_pool_usage(tmp_path: Path):
    data = tmp_path / "my-workspace"
    server = subprocess.Popen(
        [
            sys.executable, "-m", "air_runtime.cli", "workspace", "--port", "0",
            "--data-dir", str(data), "--gpu-pool", "pool-a10=GPU_1xA10:4",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        announced = server.stdout.readline()
        host = announced.split(" on ", 1)[1].split()[0]
        auth = ["--host", host, "--token-file", str(data / "token")]
        # The server answers once it has announced itself and bound its socket.
        while _airo("pools", "list", *auth).returncode != 0:
            assert server.poll() is None
            time.sleep(0.05)

        release = tmp_path / "release"
        job = tmp_path / "train.yaml"
        job.write_text(WORKLOAD.format(count=2, pool="pool-a10", release=release))
        assert _airo("validate", str(job)).returncode == 0

        dry = _airo("run", str(job), "--dry-run", *auth)
        assert dry.returncode == 0 and "valid" in dry.stdout, dry.stderr

        refused = tmp_path / "refused.yaml"
        refused.write_text(WORKLOAD.format(count=1032, pool="pool-h100", release=release))
        assert _airo("validate", str(refused)).returncode == 0  # nothing wrong here...
        dry = _airo("run", str(refused), "--dry-run", *auth)
        assert dry.returncode == 1  # ...but the workspace refuses two fields: both listed
        assert "config validation failed:" in dry.stderr
        # In the workload's names, at their lines, each with a fix (the service's answer
        # names its wire: deployments[0].compute.accelerator_count, provisioned_capacity_id).
        assert (
            "compute.num_accelerators (line 4:21): compute.num_accelerators must be at most "
            "1024, but was 1032. Fix: choose a value within the range the message gives"
        ) in dry.stderr, dry.stderr
        assert (
            "compute.pool_id (line 5:12): compute.pool_id 'pool-h100' is not a GPU pool of "
            "this workspace. Fix: name one of this workspace's GPU pools (`airo pools list`)"
        ) in dry.stderr, dry.stderr
        assert "provisioned_capacity_id" not in dry.stderr and "validation code" not in dry.stderr
        assert _json("list", "--all-status", *auth) == {"runs": []}  # nothing submitted

        assert _json("pools", "get", "pool-a10", *auth)["idle_accelerators"] == 4
        started = _airo("run", str(job), *auth)
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.split()[1].rstrip(":")
        assert f"airo logs {run_id} --follow" in started.stdout
        while (summary := _json("get", run_id, *auth))["status"] != "RUNNING":
            assert summary["status"] in ("PENDING", "QUEUED"), summary
            time.sleep(0.05)
        during = _json("pools", "get", *auth)  # the only pool: no id needed
        assert (during["used_accelerators"], during["idle_accelerators"]) == (2, 2)

        release.touch()
        follow = _airo("logs", run_id, "--follow", *auth)
        assert "started" in follow.stdout and "released" in follow.stdout
        summary = _json("get", run_id, *auth)
        assert summary["status"] == "SUCCESS" and summary["gpu_hours"] > 0
        after = _json("pools", "get", "pool-a10", *auth)
        assert (after["used_accelerators"], after["idle_accelerators"]) == (0, 4)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
