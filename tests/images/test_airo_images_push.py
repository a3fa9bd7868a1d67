"""As a new user: ``airo images push`` copies an image from the stand-in Docker Hub to the
stand-in Artifact Registry, then ``airo run`` of a workload with that
``environment.unity_catalog_image`` succeeds on the local workspace (which refuses the same
workload before the copy: the image is not in its Artifact Registry)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from image_registries import HUB_PASSWORD, Registries

from air_runtime.cli._connection import EXIT_INVALID_WORKLOAD, EXIT_USAGE
from air_runtime.local import LocalWorkspace
from image_fixtures.image_builder import push_generated_image

# The console script a user runs, beside the interpreter of this environment.
# airo as subprocesses, a cold start each: make test-fast leaves it out.
pytestmark = pytest.mark.slow

AIRO = [str(Path(sys.executable).parent / "airo")]


def _airo(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AIRO, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_airo_images_push_then_airo_run_on_the_copied_image(
    registries: Registries, image_workspace: LocalWorkspace, tmp_path: Path
):
    built = push_generated_image(
        registries.hub.host,
        "acme/trainer",
        "2.1",
        platforms=("linux/amd64", "linux/arm64"),
        login=registries.hub_login,
        workdir=tmp_path / "build",
    )
    env = {
        **os.environ,
        "DATABRICKS_HOST": image_workspace.host,
        "DATABRICKS_TOKEN": image_workspace.token,
        "DOCKER_CONFIG": str(registries.docker_config.parent),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    env.pop("DATABRICKS_CONFIG_PROFILE", None)
    workload = tmp_path / "train.yaml"
    workload.write_text(
        "experiment_name: uc-image-train\n"
        "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
        "environment:\n"
        "  unity_catalog_image: main.research.trainer:2.1\n"
        "command: |\n"
        "  echo trained on the copied image\n"
    )
    before = _airo(["run", str(workload), "--wait"], env, tmp_path)
    assert before.returncode == EXIT_INVALID_WORKLOAD  # the workspace's check, before submit
    assert (
        "Unity Catalog image main.research.trainer:2.1 is not in the Artifact Registry "
        f"{registries.artifact_registry.host}; push it first" in before.stderr
    )

    source = f"{registries.hub.host}/acme/trainer:2.1"
    push = [
        "images", "push", source, "--catalog", "main", "--schema", "research",
        "--registry-host", registries.artifact_registry.host,
    ]  # fmt: skip
    pushed = _airo(push, env, tmp_path)
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout == "main.research.trainer:2.1\n"
    assert "[4/4]" in pushed.stderr and "manifest pushed" in pushed.stderr
    assert "environment.unity_catalog_image = main.research.trainer:2.1" in pushed.stderr

    again = _airo([*push, "--json"], env, tmp_path)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["unity_catalog_image"] == "main.research.trainer:2.1"
    assert result["digest"] == built.manifests["linux/amd64"]
    assert result["bytes_sent"] == 0 and result["manifest_pushed"] is False

    ran = _airo(["run", str(workload), "--wait"], env, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert re.search(r"^run \d+ succeeded", ran.stdout, re.M), ran.stdout

    for output in (before, pushed, again, ran):
        for secret in (image_workspace.token, HUB_PASSWORD):
            assert secret not in output.stdout + output.stderr


def test_airo_images_push_refuses_a_bad_name_before_contacting_anything(tmp_path: Path):
    env = {**os.environ, "DATABRICKS_HOST": "http://127.0.0.1:9", "DATABRICKS_TOKEN": "x" * 20}
    done = _airo(
        ["images", "push", "team/trainer:1", "--catalog", "main", "--schema", "training",
         "--artifact", "invalid.name"],
        env,
        tmp_path,
    )  # fmt: skip
    assert done.returncode == EXIT_USAGE
    assert done.stderr.startswith("error: invalid artifact name 'invalid.name'")
    assert done.stdout == ""
