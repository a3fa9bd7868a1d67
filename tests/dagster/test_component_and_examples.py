"""The `dg` component (scaffolded and loaded in a sandbox, materialized for real), its
registration for `dg list components`, and the example project."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox
from dagster_checks import counters, node_log

from dagster_air import AirWorkloadComponent, AirWorkspace

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_PROJECT = REPO / "examples" / "dagster"
DG = Path(sys.executable).with_name("dg")


def _dg_env() -> dict[str, str]:
    venv = Path(sys.executable).parent.parent
    return {
        **os.environ,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "NO_COLOR": "1",
    }


def test_scaffolded_component_materializes_against_the_workspace(
    local_workspace, instance, monkeypatch
):
    monkeypatch.setenv("DATABRICKS_HOST", local_workspace.host)
    monkeypatch.setenv("DATABRICKS_TOKEN", local_workspace.token)
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(
            component_cls=AirWorkloadComponent,
            defs_path="starter",
            scaffold_params={"experiment_name": "starter_run"},
        )
        defs_yaml = yaml.safe_load((defs_path / "defs.yaml").read_text())
        assert defs_yaml["attributes"] == {"workload": "workload.yaml"}
        assert "experiment_name: starter_run" in (defs_path / "workload.yaml").read_text()

        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (component, defs):
            assert isinstance(component, AirWorkloadComponent)
            # The scaffolded component uses the project's air_workspace: no clash with it.
            project = dg.Definitions(
                resources={
                    "air_workspace": AirWorkspace(
                        host=dg.EnvVar("DATABRICKS_HOST"), token=dg.EnvVar("DATABRICKS_TOKEN")
                    )
                }
            )
            defs = dg.Definitions.merge(defs, project)
            job = defs.resolve_implicit_global_asset_job_def()
            result = job.execute_in_process(instance=instance)
    assert result.success
    (mat,) = result.asset_materializations_for_node("starter")
    log = node_log(local_workspace, mat.metadata["dagster-air/run_id"].value)
    assert "learning_rate: 0.001" in log


def test_multi_stage_component_with_partitions_and_asset_attributes(
    local_workspace, instance, monkeypatch
):
    monkeypatch.setenv("TEST_AIR_HOST", local_workspace.host)
    monkeypatch.setenv("TEST_AIR_TOKEN", local_workspace.token)
    stage_command = 'echo "$STAGE_NAME out=$OUT_DIR"\ncat hyperparameters.yaml\n'
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.defs_folder_path / "pipeline"
        defs_path.mkdir()
        (defs_path / "prepare.yaml").write_text(
            yaml.safe_dump(
                {
                    "experiment_name": "prepare",
                    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                    "env_variables": {"STAGE_NAME": "prepare"},
                    "command": stage_command,
                }
            )
        )
        attributes = {
            "op": {"name": "pipeline"},
            "stages": [
                {"key": "prepare", "workload": "prepare.yaml"},
                {
                    "key": "train",
                    "workload": {
                        "experiment_name": "train",
                        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                        "env_variables": {"STAGE_NAME": "train"},
                        "command": stage_command,
                    },
                    "depends_on": ["prepare"],
                    "asset": {"key": "models/train", "group_name": "training"},
                },
            ],
            "options": {
                "partitions_def": {"type": "static", "partition_keys": ["small", "large"]},
                "partition_parameters": {"small": {"width": 64}, "large": {"width": 1024}},
                "run_env": {"OUT_DIR": "/tmp/out/{partition_key}/{stage}"},
            },
            "workspace": {"host_env": "TEST_AIR_HOST", "token_env": "TEST_AIR_TOKEN"},
        }
        (defs_path / "defs.yaml").write_text(
            yaml.safe_dump(
                {
                    "type": "dagster_air.AirWorkloadComponent",
                    "attributes": attributes,
                    "requirements": {"env": ["TEST_AIR_HOST", "TEST_AIR_TOKEN"]},
                }
            )
        )
        with sandbox.build_all_defs() as defs:
            specs = {s.key: s for s in defs.resolve_all_asset_specs()}
            train = specs[dg.AssetKey(["models", "train"])]
            assert train.group_name == "training"
            assert [d.asset_key for d in train.deps] == [dg.AssetKey("prepare")]
            job = defs.resolve_implicit_global_asset_job_def()
            result = job.execute_in_process(instance=instance, partition_key="large")
    assert result.success
    mats = {m.asset_key: m.materialization for m in result.get_asset_materialization_events()}
    assert set(mats) == {dg.AssetKey("prepare"), dg.AssetKey(["models", "train"])}
    assert counters(local_workspace)["runs_created"] == 1
    train_task = mats[dg.AssetKey(["models", "train"])].metadata["dagster-air/task_run_id"].value
    log = node_log(local_workspace, train_task)
    assert "train out=/tmp/out/large/train" in log and "width: 1024" in log


@pytest.mark.slow
def test_dg_list_components_and_envs_show_the_component_and_what_it_reads():
    out = subprocess.run(
        [str(DG), "list", "components", "--json"],
        capture_output=True,
        text=True,
        env=_dg_env(),
        cwd=EXAMPLE_PROJECT,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "dagster_air.AirWorkloadComponent" in out.stdout
    # The variable the lr_sweep component reads, declared in its defs.yaml.
    envs = subprocess.run(
        [str(DG), "list", "envs"],
        capture_output=True,
        text=True,
        env=_dg_env(),
        cwd=EXAMPLE_PROJECT,
        timeout=240,
    )
    assert envs.returncode == 0, envs.stderr[-3000:]
    (line,) = [row for row in envs.stdout.splitlines() if "HF_TOKEN" in row]
    assert "lr_sweep" in line, envs.stdout


@pytest.mark.slow
def test_dg_check_defs_reports_an_unset_secret_variable_of_the_example_project(tmp_path):
    """(tests/dagster/test_readme_commands.py runs the passing `dg check defs`.)"""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE_PROJECT, project)
    # The example finds the RL workloads two folders up, as in the repository.
    shutil.copytree(REPO / "examples" / "rl", tmp_path / "rl")
    env = {**_dg_env(), "AIRO_HOST": "http://127.0.0.1:9", "AIRO_TOKEN": "unused"}
    env.pop("HF_TOKEN", None)
    env["DAGSTER_HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir()
    out = subprocess.run(
        [str(DG), "check", "defs"],
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
        timeout=300,
    )
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-3000:]
    assert "environment variable(s) not set in this process: HF_TOKEN (HF_TOKEN)" in text


def test_example_rl_pipeline_runs_on_the_local_workspace(
    local_workspace, instance, monkeypatch, tmp_path
):
    """``air_images`` copies both images from the stand-in Docker Hub into the stand-in
    Artifact Registry; ``grpo`` then runs on the copies (the workspace refuses images that
    are not there)."""
    from image_registries import image_registries, push_rl_images

    with image_registries(tmp_path / "registries", local_workspace) as registries:
        built = push_rl_images(registries, tmp_path / "build")
        monkeypatch.setenv("DOCKER_CONFIG", str(registries.docker_config.parent))
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        monkeypatch.setenv("RL_SOURCE_REGISTRY", registries.hub.host)
        monkeypatch.setenv("AIRO_ARTIFACT_REGISTRY", registries.artifact_registry.host)
        _run_the_example_rl_pipeline(local_workspace, instance, monkeypatch, tmp_path, built)


def _run_the_example_rl_pipeline(local_workspace, instance, monkeypatch, tmp_path, built):
    monkeypatch.setenv("AIRO_HOST", local_workspace.host)
    monkeypatch.setenv("AIRO_TOKEN", local_workspace.token)
    monkeypatch.setenv("HF_TOKEN", "hf_example_token_value")
    monkeypatch.setenv("RL_OUTPUT_ROOT", str(tmp_path / "rl"))
    monkeypatch.syspath_prepend(str(EXAMPLE_PROJECT))
    # The example reads its registries from the environment when it is imported.
    for name in [m for m in sys.modules if m == "air_examples" or m.startswith("air_examples.")]:
        monkeypatch.delitem(sys.modules, name)
    import air_examples.definitions

    defs = air_examples.definitions.defs()
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=instance,
        asset_selection=[dg.AssetKey("air_images"), dg.AssetKey("grpo"), dg.AssetKey("evaluate")],
    )
    assert result.success
    mats = {
        m.asset_key.path[-1]: m.materialization for m in result.get_asset_materialization_events()
    }
    assert set(mats) == {"air_images", "grpo", "evaluate"}
    copied = mats["air_images"].metadata
    source = f"{os.environ['RL_SOURCE_REGISTRY']}/vllm/vllm-openai:v0.8.5"
    assert copied[f"dagster-air/unity_catalog_image/{source}"].value == "main.rl.vllm:0.8.5"
    assert (
        copied["dagster-air/digest/main.rl.vllm:0.8.5"].value
        == built["vllm/vllm-openai"].manifests["linux/amd64"]
    )
    output_dir = Path(mats["grpo"].metadata["dagster/uri"].value)
    assert output_dir == tmp_path / "rl" / result.run_id
    assert (output_dir / "metrics.json").is_file()
    # The trainer's blocking check passed, and only then did the evaluation start: a run of
    # its own after grpo's.
    (check,) = [
        e.asset_check_evaluation_data
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ]
    assert check.check_name == "reward_learned" and check.passed and check.blocking
    assert json.loads((output_dir / "evaluation.json").read_text())["passed"] is True
    grpo_run = mats["grpo"].metadata["dagster-air/run_id"].value
    assert mats["evaluate"].metadata["dagster-air/run_id"].value > grpo_run
    containers = mats["grpo"].metadata["dagster-air/containers"].value.records
    assert [(r.data["name"], r.data["ranks"]) for r in containers] == [
        ("inference", "0"),
        ("trainer", "1"),
    ]
    assert "hf_example_token_value" not in dg.serialize_value(
        list(instance.all_logs(result.run_id))
    )
    # Evaluating alone reads where the latest training wrote (its recorded dagster/uri).
    alone = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("evaluate")])
    assert alone.success
    (evaluated,) = alone.get_asset_materialization_events()
    assert evaluated.materialization.metadata["dagster/uri"].value == str(output_dir)
