"""Plans: launch directory, uploaded files, preflight and submit bodies (docs/spec/workload.md §4-§6)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from workload_cases import minimal

from air_runtime._errors import WorkloadError
from air_runtime.plan import (
    ImageRequirement,
    Stage,
    SubmissionPlan,
    build_plan,
    build_workflow_plan,
    make_idempotency_token,
    task_key_for,
    task_key_problem,
)
from air_runtime.workload import load_workload

USER = "someone@example.com"
HOME = f"/Workspace/Users/{USER}"
TOKEN = "tok-1"
SUFFIX = hashlib.sha256(TOKEN.encode()).hexdigest()[:16]
UUID = "12345678-1234-1234-1234-1234567890ab"


def plan_of(data: dict[str, Any], **kwargs: Any) -> SubmissionPlan:
    return build_plan(load_workload(data), user_name=USER, idempotency_token=TOKEN, **kwargs)


def files_of(plan: SubmissionPlan, launch_dir: str) -> dict[str, str]:
    return {f.path.removeprefix(launch_dir + "/"): f.content.decode() for f in plan.files}


def test_minimal_plan() -> None:
    plan = plan_of(minimal())
    launch = f"{HOME}/.air/cli_launch/exp/exp_{SUFFIX}"
    assert plan.launch_dirs == {"exp": launch}
    assert plan.home == HOME
    assert plan.folders == (launch,)
    assert files_of(plan, launch) == {
        "training_config.yaml": plan.file("training_config.yaml").content.decode(),
        "command.sh": "echo hi",  # as written (runupload.go)
    }
    assert plan.submit_body == {
        "run_name": "exp",
        "idempotency_token": TOKEN,
        "environments": [{"environment_key": "default", "spec": {"environment_version": "6"}}],
        "tasks": [
            {
                "task_key": "exp",
                "run_if": "ALL_SUCCESS",
                "environment_key": "default",
                "max_retries": 3,
                "retry_on_timeout": True,
                "ai_runtime_task": {
                    "experiment": "exp",
                    "deployments": [
                        {
                            "compute": {"accelerator_type": "GPU_1xA10", "accelerator_count": 1},
                            "command_path": f"{launch}/command.sh",
                        }
                    ],
                },
            }
        ],
    }
    assert plan.preflight_bodies == (
        {
            "task": plan.submit_body["tasks"][0]["ai_runtime_task"],
            "run_options": {
                "idempotency_token": TOKEN
            },  # max_retries only when set (validateconfig.go)
            "environment": {"environment_version": "6"},
        },
    )
    assert plan.docker_images == () and plan.permissions == () and plan.usage_policy_name is None


def test_every_optional_field() -> None:
    data = minimal(
        compute={
            "accelerator_type": "GPU_8xH100",
            "num_accelerators": 16,
            "pool_id": "pool-1",
            "priority_class": "critical",
        },
        environment={"docker_image": {"url": "myorg/train:2"}},
        max_retries=0,
        timeout_minutes=90,
        mlflow_run_name="run_a",
        mlflow_experiment_directory="/Workspace/Shared/exp",
        mlflow_artifact_location="/Volumes/c/s/v/a",
        usage_policy_id=UUID,
        env_variables={"B": "2", "A": "1"},
        secrets={"TOKEN": "scope/key"},
        parameters={"lr": 0.1, "layers": [1, 2]},
        permissions=[{"user_name": "u@x.com", "level": "CAN_VIEW"}],
        code_source={"root_path": "src", "remote_volume": "/Volumes/c/s/code"},
    )
    plan = plan_of(data)
    launch = f"{HOME}/.air/cli_launch/exp/run_a_{SUFFIX}"
    body = plan.submit_body
    assert body["timeout_seconds"] == 5400
    assert body["budget_policy_id"] == UUID
    task = body["tasks"][0]
    assert task["max_retries"] == 0 and "retry_on_timeout" not in task
    assert task["ai_runtime_task"] == {
        "experiment": "exp",
        "deployments": [
            {
                "compute": {
                    "accelerator_type": "GPU_8xH100",
                    "accelerator_count": 16,
                    "provisioned_capacity_id": "pool-1",
                },
                "command_path": f"{launch}/command.sh",
            }
        ],
        "mlflow_run": "run_a",
        "mlflow_experiment_directory": "/Workspace/Shared/exp",
        "mlflow_artifact_location": "dbfs:/Volumes/c/s/v/a",
        "docker_image_url": "docker.io/myorg/train:2",
        "priority_class": "CRITICAL",
    }
    files = files_of(plan, launch)
    assert files["hyperparameters.yaml"] == "layers:\n    - 1\n    - 2\nlr: 0.1\n"
    assert json.loads(files["env_vars.json"]) == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
    ]
    assert json.loads(files["secret_env_vars.json"]) == [
        {"name": "TOKEN", "secret_scope": "scope", "secret_key": "key"}
    ]
    assert plan.docker_images == ("docker.io/myorg/train:2",)
    assert plan.permissions == ({"user_name": "u@x.com", "permission_level": "CAN_VIEW"},)
    (snapshot,) = plan.code_snapshots
    assert snapshot.root_path == "src" and snapshot.include_paths == ()
    assert snapshot.remote_volume == "/Volumes/c/s/code"
    # code_source_path names the packed archive: the client sets it (runsubmit.go)
    assert (
        plan.submit_body_with_code(
            {"exp": "/Volumes/c/s/code/.internal/src_0123456789abcdef.tar.gz"}
        )["tasks"][0]["ai_runtime_task"]["code_source_path"]
        == "/Volumes/c/s/code/.internal/src_0123456789abcdef.tar.gz"
    )
    run_options = plan.preflight_bodies[0]["run_options"]
    # as the CLI builds it (validateconfig.go): max_retries because the workload sets it, the
    # usage policy fields as given
    assert run_options == {
        "idempotency_token": TOKEN,
        "max_retries": 0,
        "timeout_minutes": 90,
        "usage_policy_id": UUID,
        "env_variables": {"A": "1", "B": "2"},
        "secrets": {"TOKEN": "scope/key"},
    }
    assert "code_source_path" not in plan.preflight_bodies[0]["task"]
    assert "environment_version" in plan.preflight_bodies[0]["environment"]


def test_environment_spec_forms() -> None:
    base = plan_of(
        minimal(environment={"version": "databricks_ai_v5", "dependencies": ["torch==2.6.0"]})
    )
    assert base.submit_body["environments"][0]["spec"] == {
        "base_environment": "workspace-base-environments/databricks_ai_v5",
        "dependencies": ["torch==2.6.0"],
    }
    plain = plan_of(minimal(environment={"version": 7, "dependencies": []}))
    assert plain.submit_body["environments"][0]["spec"] == {"environment_version": "7"}


def test_unity_catalog_image_and_usage_policy_name() -> None:
    plan = plan_of(
        minimal(environment={"unity_catalog_image": "main.img.x:1"}, usage_policy_name="team")
    )
    assert (
        plan.submit_body["tasks"][0]["ai_runtime_task"]["unity_catalog_image_path"]
        == "main.img.x:1"
    )
    assert "budget_policy_id" not in plan.submit_body
    assert plan.usage_policy_name == "team"


def test_containers_plan() -> None:
    data = minimal(
        command=...,
        compute={"accelerator_type": "GPU_1xA10", "num_accelerators": 2},
        env_variables={"SHARED": "top", "MODEL": "m"},
        secrets={"HF": "s/hf"},
        parameters={"epochs": 5},
        containers=[
            {
                "name": "inference",
                "ranks": [0],
                "unity_catalog_image": "main.rl.vllm:0.20.0",
                "command": "serve",
                "environment_variables": {
                    "variables": {"SHARED": "inf", "HF": "plain", "W": "{{secrets/research/wandb}}"}
                },
            },
            {
                "name": "trainer",
                "ranks": [1],
                "unity_catalog_image": "main.rl.trl:0.24.0",
                "command": "train\n",
            },
        ],
    )
    plan = plan_of(data)
    launch = plan.launch_dirs["exp"]
    assert plan.folders == (
        launch,
        f"{launch}/containers",
        f"{launch}/containers/inference",
        f"{launch}/containers/trainer",
    )
    files = files_of(plan, launch)
    assert sorted(files) == sorted(
        [
            "training_config.yaml",
            "hyperparameters.yaml",
            "env_vars.json",
            "secret_env_vars.json",
            "containers/inference/command.sh",
            "containers/inference/hyperparameters.yaml",
            "containers/inference/env_vars.json",
            "containers/inference/secret_env_vars.json",
            "containers/trainer/command.sh",
            "containers/trainer/hyperparameters.yaml",
            "containers/trainer/env_vars.json",
            "containers/trainer/secret_env_vars.json",
        ]
    )
    assert json.loads(files["containers/inference/env_vars.json"]) == [
        {"name": "HF", "value": "plain"},
        {"name": "MODEL", "value": "m"},
        {"name": "SHARED", "value": "inf"},
    ]
    assert json.loads(files["containers/inference/secret_env_vars.json"]) == [
        {"name": "W", "secret_scope": "research", "secret_key": "wandb"}
    ]
    assert json.loads(files["containers/trainer/env_vars.json"]) == [
        {"name": "MODEL", "value": "m"},
        {"name": "SHARED", "value": "top"},
    ]
    assert files["containers/trainer/command.sh"] == "train\n"
    assert (
        files["containers/trainer/hyperparameters.yaml"]
        == files["hyperparameters.yaml"]
        == "epochs: 5\n"
    )
    deployment = plan.submit_body["tasks"][0]["ai_runtime_task"]["deployments"][0]
    assert "command_path" not in deployment
    assert deployment["containers"] == [
        {
            "name": "inference",
            "ranks": [0],
            "command_path": f"{launch}/containers/inference/command.sh",
            "unity_catalog_image_path": "main.rl.vllm:0.20.0",
        },
        {
            "name": "trainer",
            "ranks": [1],
            "command_path": f"{launch}/containers/trainer/command.sh",
            "unity_catalog_image_path": "main.rl.trl:0.24.0",
        },
    ]


def test_code_snapshot_paths() -> None:
    w = load_workload(
        minimal(code_source={"root_path": "../code", "include_paths": ["a.py"]}),
        base_dir="/repo/jobs",
    )
    plan = build_plan(w, user_name=USER, idempotency_token=TOKEN)
    (snapshot,) = plan.code_snapshots
    assert (snapshot.root_path, snapshot.base_dir) == ("../code", "/repo/jobs")
    assert snapshot.include_paths == ("a.py",)
    assert snapshot.task_key == "exp"
    assert "code_source_path" not in plan.submit_body["tasks"][0]["ai_runtime_task"]


def test_preflight_leaves_out_max_retries_the_workload_does_not_set() -> None:
    plan = plan_of(minimal())
    assert "max_retries" not in plan.preflight_bodies[0]["run_options"]
    assert plan.submit_body["tasks"][0]["max_retries"] == 3  # always sent on submit


def test_tokens_and_suffixes() -> None:
    w = load_workload(minimal(idempotency_token="from-yaml"))
    assert build_plan(w, user_name=USER).idempotency_token == "from-yaml"
    assert build_plan(w, user_name=USER, idempotency_token="given").idempotency_token == "given"
    random_a = build_plan(load_workload(minimal()), user_name=USER)
    random_b = build_plan(load_workload(minimal()), user_name=USER)
    assert random_a.idempotency_token != random_b.idempotency_token
    assert random_a.launch_dirs["exp"].endswith(
        hashlib.sha256(random_a.idempotency_token.encode()).hexdigest()[:16]
    )
    fixed = build_plan(w, user_name=USER, launch_suffix="0123456789abcdef")
    assert fixed.launch_dirs["exp"].endswith("/exp_0123456789abcdef")
    with pytest.raises(WorkloadError):
        build_plan(w, user_name=USER, launch_suffix="nothex")
    with pytest.raises(WorkloadError):
        build_plan(w, user_name=USER, idempotency_token="x" * 65)
    with pytest.raises(WorkloadError):
        build_plan(w, user_name="")


_PLAN_IN_A_PROCESS = """
import json, sys
from air_runtime import build_plan, load_workload
workload = load_workload(sys.argv[1], {
    "parameters": {"b": [1, {"z": 2, "a": 3}], "a": "x", "lr": 0.1},
    "env_variables.ZED": "1", "env_variables.ALPHA": "2",
    "permissions": [{"group_name": "g", "level": "CAN_VIEW"}, {"user_name": "u@x.com", "level": "CAN_MANAGE"}],
})
plan = build_plan(workload, user_name="someone@example.com", idempotency_token="tok-1")
print(json.dumps(plan.to_json()))
"""


def test_plan_is_deterministic_across_processes() -> None:
    """Two interpreters (each with its own hash seed, so its own set and dict-of-set order)
    build the same bytes for the same workload, user and token: a retry on another worker
    plans what the first try planned."""
    workload = Path(__file__).resolve().parents[2] / "examples" / "rl" / "grpo_two_containers.yaml"
    outputs = []
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", _PLAN_IN_A_PROCESS, str(workload)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    plan = json.loads(outputs[0])
    assert plan["submit_body"]["idempotency_token"] == "tok-1" and len(plan["files"]) > 3


def test_json_round_trip_and_redacted() -> None:
    plan = plan_of(minimal(parameters={"a": 1}, secrets={"S": "a/b"}))
    data = json.loads(json.dumps(plan.to_json()))
    assert SubmissionPlan.from_json(data) == plan
    shown = plan.redacted()
    assert {f["path"].rsplit("/", 1)[1] for f in shown["files"]} >= {
        "command.sh",
        "secret_env_vars.json",
    }
    assert all("content" in f for f in shown["files"])
    json.dumps(shown)


def test_image_requirements_carry_tag_policy_and_credentials() -> None:
    image = {
        "url": "myorg/train:2",
        "tag_policy": "latest",
        "credentials_scope": "docker-creds",
        "credentials_key": "hub",
    }
    plan = plan_of(minimal(environment={"docker_image": image}))
    assert plan.docker_images == ("docker.io/myorg/train:2",)
    wanted = ImageRequirement("docker.io/myorg/train:2", "latest", "docker-creds", "hub")
    assert plan.image_requirements == (wanted,)
    assert plan.required_images() == (wanted,)
    # the wire body names the image only: the policy is the client's business
    body = json.dumps(plan.submit_body) + json.dumps(plan.preflight_bodies)
    assert "docker.io/myorg/train:2" in body
    assert "tag_policy" not in body and "docker-creds" not in body
    data = json.loads(json.dumps(plan.to_json()))
    assert data["image_requirements"] == [
        {
            "url": "docker.io/myorg/train:2",
            "tag_policy": "latest",
            "credentials_scope": "docker-creds",
            "credentials_key": "hub",
        }
    ]
    assert SubmissionPlan.from_json(data) == plan

    auto = plan_of(minimal(environment={"docker_image": {"url": "myorg/train:2"}}))
    assert auto.image_requirements == (ImageRequirement("docker.io/myorg/train:2"),)
    assert plan_of(minimal()).image_requirements == ()


def test_plans_without_image_requirements_treat_images_as_auto() -> None:
    plan = plan_of(minimal(environment={"docker_image": {"url": "myorg/train:2"}}))
    data = json.loads(json.dumps(plan.to_json()))
    del data["image_requirements"]  # a plan serialized before the field existed
    old = SubmissionPlan.from_json(data)
    assert old.docker_images == ("docker.io/myorg/train:2",) and old.image_requirements == ()
    assert old.required_images() == (ImageRequirement("docker.io/myorg/train:2", "auto"),)
    with pytest.raises(ValueError, match="tag_policy"):
        ImageRequirement.from_json({"url": "docker.io/a/b:1", "tag_policy": "sometimes"})


def test_workflow_image_requirements_merge_per_image() -> None:
    stages = [
        _stage("a", environment={"docker_image": {"url": "myorg/train:2"}}),
        _stage(
            "b",
            depends_on=["a"],
            environment={
                "docker_image": {
                    "url": "docker.io/myorg/train:2",
                    "tag_policy": "latest",
                    "credentials_scope": "s",
                    "credentials_key": "k",
                }
            },
        ),
        _stage("c", depends_on=["b"], environment={"docker_image": {"url": "library/ubuntu"}}),
    ]
    plan = build_workflow_plan(stages, run_name="r", user_name=USER, idempotency_token=TOKEN)
    assert plan.docker_images == ("docker.io/library/ubuntu:latest", "docker.io/myorg/train:2")
    assert plan.image_requirements == (
        ImageRequirement("docker.io/library/ubuntu:latest"),
        ImageRequirement("docker.io/myorg/train:2", "latest", "s", "k"),
    )
    assert SubmissionPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def test_make_idempotency_token() -> None:
    a = make_idempotency_token("airflow", "dag", "run_1", "train", None, 0)
    assert a == make_idempotency_token("airflow", "dag", "run_1", "train")
    # The same text in every process and version (a retry on another worker, after an
    # upgrade, must send the token the first try sent): pinned, not compared within one
    # interpreter, where a token derived from hash() would pass too. Without a namespace it
    # is the token of the first versions.
    assert a == "7900c9bc2073dfc86b1e4f93ef214623e424bff70157823e975815cd0c4c07ca"
    assert make_idempotency_token("airflow", "dag", "run_1", "train", namespace="prod-eu") == (
        "039365a5ee8b397dd1bba82de3a976b2942c84a5a3e501214fd4f598f6d1630b"
    )
    assert a != make_idempotency_token("airflow", "dag", "run_1", "train", generation=1)
    assert a != make_idempotency_token("airflow", "dag", "run_1", "train", map_index=0)
    assert a != make_idempotency_token("dagster", "dag", "run_1", "train")
    assert make_idempotency_token("a", "b", "c", "d", 3, 2) == make_idempotency_token(
        "a", "b", "c", "d", "3", "2"
    )
    assert len(make_idempotency_token("x" * 500, "y" * 500, "z", "w")) <= 64


# -- multi-stage runs ---------------------------------------------------------------------


def _stage(key: str, **changes: Any) -> Stage:
    depends = changes.pop("depends_on", ())
    run_if = changes.pop("run_if", "ALL_SUCCESS")
    return Stage(
        key, load_workload(minimal(experiment_name=key, **changes)), tuple(depends), run_if
    )


def test_workflow_plan() -> None:
    stages = [
        _stage("generate"),
        _stage("train", depends_on=["generate"], timeout_minutes=10),
        _stage("evaluate", depends_on=["train"], run_if="ALL_DONE"),
    ]
    plan = build_workflow_plan(stages, run_name="pipeline", user_name=USER, idempotency_token=TOKEN)
    body = plan.submit_body
    assert body["run_name"] == "pipeline" and body["idempotency_token"] == TOKEN
    assert "timeout_seconds" not in body
    assert body["environments"] == [
        {"environment_key": "default", "spec": {"environment_version": "6"}}
    ]
    tasks = body["tasks"]
    assert [t["task_key"] for t in tasks] == ["generate", "train", "evaluate"]
    assert "depends_on" not in tasks[0]
    assert tasks[1]["depends_on"] == [{"task_key": "generate"}]
    assert tasks[1]["timeout_seconds"] == 600
    assert tasks[2]["run_if"] == "ALL_DONE"
    assert all(t["environment_key"] == "default" for t in tasks)
    assert len(set(plan.launch_dirs.values())) == 3
    assert len(plan.preflight_bodies) == 3
    assert all(p["run_options"]["idempotency_token"] == TOKEN for p in plan.preflight_bodies)
    for key, folder in plan.launch_dirs.items():
        assert folder.startswith(f"{HOME}/.air/cli_launch/{key}/{key}_")
        assert any(f.path == f"{folder}/command.sh" for f in plan.files)
    again = build_workflow_plan(
        stages, run_name="pipeline", user_name=USER, idempotency_token=TOKEN
    )
    assert again == plan
    assert SubmissionPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def test_workflow_distinct_environments() -> None:
    stages = [_stage("a"), _stage("b", environment={"dependencies": ["x"]}, depends_on=["a"])]
    body = build_workflow_plan(
        stages, run_name="r", user_name=USER, idempotency_token=TOKEN
    ).submit_body
    assert body["environments"] == [
        {"environment_key": "env_a", "spec": {"environment_version": "6"}},
        {"environment_key": "env_b", "spec": {"environment_version": "6", "dependencies": ["x"]}},
    ]
    assert [t["environment_key"] for t in body["tasks"]] == ["env_a", "env_b"]


def test_same_experiment_stages_get_distinct_dirs() -> None:
    w = load_workload(minimal())
    plan = build_workflow_plan(
        [Stage("a", w), Stage("b", w)], run_name="r", user_name=USER, idempotency_token=TOKEN
    )
    assert plan.launch_dirs["a"] != plan.launch_dirs["b"]


@pytest.mark.parametrize(
    ("stages", "text"),
    [
        ([], "at least one stage"),
        ([("a", ()), ("a", ())], "already used"),
        ([("a", ("missing",))], "unknown stage 'missing'"),
        ([("a", ("a",))], "depends on itself"),
        ([("a", ("c",)), ("b", ("a",)), ("c", ("b",))], "cycle"),
        ([("bad key!", ())], "invalid"),
    ],
)
def test_workflow_dag_errors(stages: list[tuple[str, tuple[str, ...]]], text: str) -> None:
    w = load_workload(minimal())
    with pytest.raises(WorkloadError) as info:
        build_workflow_plan([Stage(k, w, d) for k, d in stages], run_name="r", user_name=USER)
    assert any(text in p.message for p in info.value.problems), str(info.value)


@pytest.mark.parametrize(
    "name, key",
    [
        ("train", "train"),
        ("rl.grpo", "rl_grpo"),
        ("trainé v2", "train__v2"),
        ("a" * 120, "a" * 100),
    ],
)
def test_task_key_for_makes_keys_the_rule_accepts(name: str, key: str) -> None:
    assert task_key_for(name) == key
    assert task_key_problem(key, "key") is None


def test_workflow_run_if_and_policy_conflicts() -> None:
    w = load_workload(minimal())
    with pytest.raises(WorkloadError, match="unknown run_if"):
        build_workflow_plan([Stage("a", w, run_if="SOMETIMES")], run_name="r", user_name=USER)
    other = load_workload(minimal(usage_policy_id=UUID))
    third = load_workload(minimal(usage_policy_id=UUID.replace("1", "2")))
    with pytest.raises(WorkloadError, match="different usage_policy_id"):
        build_workflow_plan([Stage("a", other), Stage("b", third)], run_name="r", user_name=USER)
    plan = build_workflow_plan([Stage("a", other), Stage("b", w)], run_name="r", user_name=USER)
    assert plan.submit_body["budget_policy_id"] == UUID
