"""Today's `databricks air` (PRs #6617, #6653, #6657, #6716, #6722, #6783): what it accepts,
refuses and sends, scenario by scenario.

Each test drives our real client through the recording stub (``cli_stub.py``) and compares
what we send with what the CLI sends. The expected requests and bytes are the acceptance
transcripts (``acceptance/air/<scenario>/output.txt`` with the stubs of its ``test.toml``)
or, where no transcript records the case, what the named ``cmd/air/*.go`` file builds.
docs/cli-conformance.md lists every scenario with its CLI file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_stub import HOST, LAUNCH, SNAPSHOTS, StubWorkspace, normalise, submit_stub, uploads

from air_runtime import WorkloadError
from air_runtime.client import AirClient
from air_runtime.workload import load_workload

SUBMIT = "/api/2.2/jobs/runs/submit"
PREFLIGHT = "/api/2.0/ai-training/config:validate"


def submitted(stub: StubWorkspace) -> dict[str, Any]:
    (submit,) = stub.to("POST", SUBMIT)
    body: dict[str, Any] = normalise(submit.body)
    return body


def preflight_body(stub: StubWorkspace) -> dict[str, Any]:
    (request,) = stub.to("POST", PREFLIGHT)
    body: dict[str, Any] = normalise(request.body)
    return body


def nothing_sent_after_refusal(stub: StubWorkspace) -> None:
    assert not stub.to("POST", "/api/2.0/workspace-files/import-file/.*")
    assert not stub.to("POST", SUBMIT)


# --- acceptance/air/run-submit-deps ------------------------------------------------------------

# acceptance/air/run-submit-deps/run.yaml
DEPS_RUN_YAML = """\
experiment_name: deps-smoke
command: python train.py
compute:
  accelerator_type: GPU_1xH100
  num_accelerators: 1
  pool_id: capacity-123
environment:
  version: 5
  dependencies:
    - numpy
    - torch==2.3.0
mlflow_artifact_location: /Volumes/main/default/air-artifacts
"""


def test_run_submit_deps(stub: StubWorkspace, client: AirClient) -> None:
    """acceptance/air/run-submit-deps (output.txt): training_config.yaml is the tree re-encoded
    by go-yaml v3 (runconfig_load.go), byte for byte; no requirements file; dependencies,
    artifact location and the pool (as provisioned_capacity_id) reach the submit body."""
    submit_stub(stub)
    client.submit_workload(load_workload(DEPS_RUN_YAML))
    launch = LAUNCH.format(exp="deps-smoke")
    assert uploads(stub) == {
        f"{launch}/command.sh": "python train.py",
        f"{launch}/training_config.yaml": (
            "experiment_name: deps-smoke\ncommand: python train.py\ncompute:\n"
            "    accelerator_type: GPU_1xH100\n    num_accelerators: 1\n"
            "    pool_id: capacity-123\nenvironment:\n    version: 5\n    dependencies:\n"
            "        - numpy\n        - torch==2.3.0\n"
            "mlflow_artifact_location: /Volumes/main/default/air-artifacts\n"
        ),
    }
    assert submitted(stub) == {
        "environments": [
            {
                "environment_key": "default",
                "spec": {"dependencies": ["numpy", "torch==2.3.0"], "environment_version": "5"},
            }
        ],
        "idempotency_token": "[UUID]",
        "run_name": "deps-smoke",
        "tasks": [
            {
                "ai_runtime_task": {
                    "deployments": [
                        {
                            "command_path": f"{launch}/command.sh",
                            "compute": {
                                "accelerator_count": 1,
                                "accelerator_type": "GPU_1xH100",
                                "provisioned_capacity_id": "capacity-123",
                            },
                        }
                    ],
                    "experiment": "deps-smoke",
                    "mlflow_artifact_location": "dbfs:/Volumes/main/default/air-artifacts",
                },
                "environment_key": "default",
                "max_retries": 3,
                "retry_on_timeout": True,
                "run_if": "ALL_SUCCESS",
                "task_key": "deps-smoke",
            }
        ],
    }


def test_run_submit_deps_file_reference_is_refused(stub: StubWorkspace) -> None:
    """acceptance/air/run-submit-deps (run-file.yaml): a requirements file path instead of a
    list is refused before any request (runconfig.go dependencies.UnmarshalYAML)."""
    with pytest.raises(WorkloadError) as refused:
        load_workload(
            "experiment_name: deps-file-smoke\ncommand: python train.py\ncompute:\n"
            "  accelerator_type: GPU_1xH100\n  num_accelerators: 1\n"
            "environment:\n  dependencies: ./reqs.yaml\n"
        )
    (problem,) = refused.value.problems
    assert (problem.path, problem.line) == ("environment.dependencies", 7)
    assert "must be a list" in problem.message
    assert not stub.requests


# --- acceptance/air/run-submit-overrides -------------------------------------------------------

OVERRIDES_RUN_YAML = """\
# comments are not uploaded
experiment_name: overrides-smoke
command: python train.py
compute:
  accelerator_type: GPU_1xH100
  num_accelerators: 1   # overridden below
parameters:
  model:
    hidden_size: 1024
  optimizer:
    name: adamw
mlflow_artifact_location: /Volumes/main/default/air-artifacts
"""


def test_run_submit_overrides(stub: StubWorkspace, client: AirClient) -> None:
    """acceptance/air/run-submit-overrides (output.txt): overrides are applied to the tree
    (runconfig_override.go: a changed key keeps its place, a new one is appended), the
    uploaded config keeps the source order, and hyperparameters.yaml is go-yaml's sorted
    map (runupload.go)."""
    submit_stub(stub)
    workload = load_workload(
        OVERRIDES_RUN_YAML,
        [
            "compute.num_accelerators=2",
            "parameters.model.hidden_size=2048",
            "parameters.optimizer.learning_rate=0.001",
        ],
    )
    client.submit_workload(workload)
    launch = LAUNCH.format(exp="overrides-smoke")
    assert uploads(stub) == {
        f"{launch}/command.sh": "python train.py",
        f"{launch}/hyperparameters.yaml": (
            "model:\n    hidden_size: 2048\noptimizer:\n    learning_rate: 0.001\n    name: adamw\n"
        ),
        f"{launch}/training_config.yaml": (
            "experiment_name: overrides-smoke\ncommand: python train.py\ncompute:\n"
            "    accelerator_type: GPU_1xH100\n    num_accelerators: 2\nparameters:\n"
            "    model:\n        hidden_size: 2048\n    optimizer:\n        name: adamw\n"
            "        learning_rate: 0.001\n"
            "mlflow_artifact_location: /Volumes/main/default/air-artifacts\n"
        ),
    }
    assert submitted(stub)["tasks"][0]["ai_runtime_task"]["deployments"][0]["compute"] == {
        "accelerator_count": 2,
        "accelerator_type": "GPU_1xH100",
    }


def test_training_config_keeps_flow_style_and_quoting(
    stub: StubWorkspace, client: AirClient
) -> None:
    """runconfig_load.go: yaml.Marshal of the document node keeps each node's style (flow
    collections, quotes, literal blocks); a sequence item's mapping continues after "- "."""
    submit_stub(stub)
    client.submit_workload(
        load_workload(
            "experiment_name: styles\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            "command: |\n  echo 'one'\n  echo two\n"
            "env_variables:\n  RANK: \"0\"\n  MODE: 'fast'\n"
            "permissions:\n  - user_name: a@example.com\n    level: CAN_VIEW\n"
        )
    )
    assert uploads(stub)[LAUNCH.format(exp="styles") + "/training_config.yaml"] == (
        "experiment_name: styles\n"
        "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
        "command: |\n    echo 'one'\n    echo two\n"
        "env_variables:\n    RANK: \"0\"\n    MODE: 'fast'\n"
        "permissions:\n    - user_name: a@example.com\n      level: CAN_VIEW\n"
    )


# --- acceptance/air/run-submit-databricks-ai ---------------------------------------------------


def test_run_submit_databricks_ai(stub: StubWorkspace, client: AirClient) -> None:
    """acceptance/air/run-submit-databricks-ai: version databricks_ai_v5 is sent as the base
    environment (runconfig_load.go validateRuntimeVersion, runsubmit.go buildRunEnvironment)."""
    submit_stub(stub)
    client.submit_workload(
        load_workload(
            "experiment_name: databricks-ai-v5-smoke\ncommand: python train.py\ncompute:\n"
            "  accelerator_type: GPU_1xA10\n  num_accelerators: 1\n"
            "environment:\n  version: databricks_ai_v5\n"
        )
    )
    body = submitted(stub)
    assert body["environments"] == [
        {
            "environment_key": "default",
            "spec": {"base_environment": "workspace-base-environments/databricks_ai_v5"},
        }
    ]
    assert body["tasks"][0]["ai_runtime_task"] == {
        "deployments": [
            {
                "command_path": LAUNCH.format(exp="databricks-ai-v5-smoke") + "/command.sh",
                "compute": {"accelerator_count": 1, "accelerator_type": "GPU_1xA10"},
            }
        ],
        "experiment": "databricks-ai-v5-smoke",
    }


@pytest.mark.parametrize("version", ["databricks_ai_v4", "databricks_ai_v", "latest", "6.1"])
def test_versions_the_cli_refuses(version: str, stub: StubWorkspace) -> None:
    """runconfig_load.go validateRuntimeVersion: digits, or databricks_ai_v<N> with N >= 5."""
    with pytest.raises(WorkloadError) as refused:
        load_workload(
            "experiment_name: v\ncommand: x\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            f"environment:\n  version: '{version}'\n"
        )
    assert [p.path for p in refused.value.problems] == ["environment.version"]
    assert refused.value.problems[0].line == 5
    assert not stub.requests


# --- acceptance/air/run-submit (B300, retries) ---------------------------------------------------


def test_run_submit_b300_without_retries(stub: StubWorkspace, client: AirClient) -> None:
    """acceptance/air/run-submit (b300.yaml): max_retries: 0 is sent and retry_on_timeout left
    out; an empty dependencies list is not sent (runsubmit.go buildSubmitPayload)."""
    submit_stub(stub)
    client.submit_workload(
        load_workload(
            "experiment_name: b300-submit-smoke\ncommand: nvidia-smi\ncompute:\n"
            "  accelerator_type: GPU_8xB300\n  num_accelerators: 8\n"
            "environment:\n  version: 6\n  dependencies: []\nmax_retries: 0\n"
        )
    )
    body = submitted(stub)
    assert body["environments"] == [
        {"environment_key": "default", "spec": {"environment_version": "6"}}
    ]
    task = body["tasks"][0]
    assert task["max_retries"] == 0 and "retry_on_timeout" not in task
    assert task["ai_runtime_task"]["deployments"][0]["compute"] == {
        "accelerator_count": 8,
        "accelerator_type": "GPU_8xB300",
    }


# --- acceptance/air/run-submit (permissions) + runpermissions.go -------------------------------


def test_run_submit_permissions_as_written(stub: StubWorkspace, client: AirClient) -> None:
    """acceptance/air/run-submit (run.yaml.tmpl, output.txt, test.toml): after the submit the
    job gets the grants with their levels as written (PATCH permissions/jobs/123); the
    experiment grant follows the newest runpermissions.go, which takes the run's own
    experiment from runs/get-output (that transcript predates it and resolves a name)."""
    submit_stub(stub)
    stub.stub(
        "GET /api/2.2/jobs/runs/get",
        (
            200,
            {"job_id": 123, "run_id": 555, "tasks": [{"task_key": "submit-smoke", "run_id": 556}]},
        ),
    )
    stub.stub(
        "GET /api/2.2/jobs/runs/get-output",
        (200, {"ai_runtime_task_output": {"mlflow_experiment_id": "42"}}),
    )
    stub.stub("PATCH /api/2.0/permissions/jobs/123", (200, {}))
    stub.stub("PATCH /api/2.0/permissions/experiments/42", (200, {}))
    client.submit_workload(
        load_workload(
            "experiment_name: submit-smoke\ncommand: python train.py\ncompute:\n"
            "  accelerator_type: GPU_1xH100\n  num_accelerators: 1\npermissions:\n"
            "  - user_name: alice@example.com\n    level: CAN_MANAGE\n"
            "  - group_name: data-team\n    level: CAN_VIEW\n"
            "  - service_principal_name: training-sp\n    level: CAN_MANAGE_RUN\n"
        )
    )
    (job,) = stub.to("PATCH", "/api/2.0/permissions/jobs/123")
    assert job.body == {
        "access_control_list": [
            {"permission_level": "CAN_MANAGE", "user_name": "alice@example.com"},
            {"group_name": "data-team", "permission_level": "CAN_VIEW"},
            {"permission_level": "CAN_MANAGE_RUN", "service_principal_name": "training-sp"},
        ]
    }
    (experiment,) = stub.to("PATCH", "/api/2.0/permissions/experiments/42")
    assert experiment.body == {
        "access_control_list": [
            {"permission_level": "CAN_MANAGE", "user_name": "alice@example.com"},
            {"group_name": "data-team", "permission_level": "CAN_READ"},
            {"permission_level": "CAN_EDIT", "service_principal_name": "training-sp"},
        ]
    }
    assert job.seq < experiment.seq
    # runs/get once (applySubmittedPermissions), then get-output for the task's run
    assert len(stub.to("GET", "/api/2.2/jobs/runs/get")) == 1
    assert [r.query for r in stub.to("GET", "/api/2.2/jobs/runs/get-output")] == [{"run_id": "556"}]


def test_lower_case_level_is_sent_as_written(stub: StubWorkspace, client: AirClient) -> None:
    """runpermissions.go permissionAccessControl sends the level as written; its experiment
    mapping matches levels exactly, so a lower-case one gets no experiment grant."""
    submit_stub(stub)
    stub.stub("GET /api/2.2/jobs/runs/get", (200, {"job_id": 9, "run_id": 555, "tasks": []}))
    stub.stub("PATCH /api/2.0/permissions/jobs/9", (200, {}))
    client.submit_workload(
        load_workload(
            "experiment_name: lower\ncommand: x\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            "permissions: [{group_name: ml, level: can_view}]\n"
        )
    )
    (job,) = stub.to("PATCH", "/api/2.0/permissions/jobs/9")
    assert job.body == {
        "access_control_list": [{"group_name": "ml", "permission_level": "can_view"}]
    }
    assert not stub.to("GET", "/api/2.2/jobs/runs/get-output")


# --- acceptance/air/run-backend-error + validateconfig.go ---------------------------------------

# acceptance/air/run-backend-error/test.toml
BACKEND_FIELD_ERRORS = {
    "errors": [
        {
            "path": "deployments[0].compute.accelerator_count",
            "message": "accelerator_count must be at most 1024, but was 1032.",
            "code": "OUT_OF_RANGE",
        },
        {
            "path": "env_variables[1INVALID]",
            "message": "env_variables[1INVALID] contains characters that are not allowed.",
            "code": "DISALLOWED_CHARACTERS",
        },
    ]
}


def test_run_backend_error_lists_every_field_error(stub: StubWorkspace, client: AirClient) -> None:
    """acceptance/air/run-backend-error: the preflight's field errors stop the submit before
    anything is uploaded, every one listed with its path. Its valid.yaml names a variable
    ``1INVALID``, which our validator already refuses (with its line); the backend's answer
    is the transcript's, so the workload here names a variable the backend refuses too."""
    stub.stub(f"POST {PREFLIGHT}", (200, BACKEND_FIELD_ERRORS))
    workload = load_workload(
        "experiment_name: smoke-test\ncommand: python train.py\ncompute:\n"
        "  accelerator_type: GPU_8xH100\n  num_accelerators: 1032\n"
        "env_variables:\n  INVALID_1: value\n"
    )
    with pytest.raises(WorkloadError) as refused:
        client.submit_workload(workload)
    # The CLI prints the service's wire paths as they come (formatConfigErrors); ours name
    # the workload's fields (client/_refusals.py), the request being the CLI's.
    assert [(p.path, p.message) for p in refused.value.problems] == [
        (
            "compute.num_accelerators",
            "compute.num_accelerators must be at most 1024, but was 1032.",
        ),
        (
            "env_variables.1INVALID",
            "env_variables[1INVALID] contains characters that are not allowed.",
        ),
    ]
    body = preflight_body(stub)
    assert body["task"]["deployments"][0]["compute"] == {
        "accelerator_type": "GPU_8xH100",
        "accelerator_count": 1032,
    }
    assert body["run_options"]["env_variables"] == {"INVALID_1": "value"}
    nothing_sent_after_refusal(stub)


def _dropped(_request: Any) -> tuple[int, Any]:
    raise httpx.ConnectError("connection refused")


def _timed_out(_request: Any) -> tuple[int, Any]:
    raise httpx.ReadTimeout("no answer")


@pytest.mark.parametrize(
    "answer",
    [
        (400, {"error_code": "FEATURE_DISABLED", "message": "off"}),
        (404, {"error_code": "ENDPOINT_NOT_FOUND", "message": "no such endpoint"}),
        (408, {"error_code": "REQUEST_TIMEOUT", "message": "slow"}),
        (429, {"error_code": "REQUEST_LIMIT_EXCEEDED", "message": "slow down"}),
        (500, {"error_code": "INTERNAL_ERROR", "message": "boom"}),
        (503, {"error_code": "TEMPORARILY_UNAVAILABLE", "message": "later"}),
        _dropped,
        _timed_out,
    ],
    ids=["feature-disabled", "404", "408", "429", "500", "503", "network", "timeout"],
)
def test_preflight_unavailable_warns_once_and_submits(
    stub: StubWorkspace, client: AirClient, answer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """validateconfig.go preflightValidate: one attempt bounded by 5 s; when the service is
    unavailable the CLI warns and goes on with the submit."""
    stub.stub(f"POST {PREFLIGHT}", answer)
    stub.stub(f"POST {SUBMIT}", (200, {"run_id": 7}))
    with caplog.at_level(logging.WARNING, logger="air_runtime.client"):
        assert client.submit_workload(load_workload(DEPS_RUN_YAML)).run_id == 7
    assert len(stub.to("POST", PREFLIGHT)) == 1
    warned = [
        r
        for r in caplog.records
        if "server-side config validation was unavailable; continuing with submission" in r.message
    ]
    assert len(warned) == 1, [r.message for r in caplog.records]  # once, not per attempt


def test_preflight_is_bounded_by_five_seconds(stub: StubWorkspace) -> None:
    """validateconfig.go submissionValidationTimeout: the preflight request carries a 5 s
    bound of its own, whatever the client's timeout."""
    submit_stub(stub)
    seen: list[dict[str, Any]] = []
    original = stub.handle_request

    def record_timeout(request: httpx.Request) -> httpx.Response:
        if request.url.path == PREFLIGHT:
            seen.append(dict(request.extensions["timeout"]))
        return original(request)

    stub.handle_request = record_timeout  # type: ignore[method-assign]
    with AirClient(HOST, "dapi-conformance", transport=stub, timeout=60.0) as client:
        client.submit_workload(load_workload(DEPS_RUN_YAML))
    assert seen == [{"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}]


# --- runconfig.go: what today's CLI accepts ------------------------------------------------------


def test_legacy_code_source_form_sends_what_the_nested_form_sends(
    stub: StubWorkspace, git_repo: Callable[..., tuple[Path, str]]
) -> None:
    """runconfig.go: code_source with type: snapshot and the fields directly under it is the
    same workload as the nested snapshot: form; both pack and send the same."""
    repo, commit = git_repo()
    forms = {
        "nested": f"code_source:\n  type: snapshot\n  snapshot:\n    root_path: .\n    git:\n      commit: {commit}\n",
        "legacy": f"code_source:\n  type: snapshot\n  root_path: .\n  git:\n    commit: {commit}\n    remote: false\n",
    }
    sent = {}
    for form, code_source in forms.items():
        recording = submit_stub(StubWorkspace())
        (repo / "run.yaml").write_text(
            "experiment_name: legacy\ncommand: python train.py\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n" + code_source
        )
        with AirClient(HOST, "dapi-conformance", transport=recording) as client:
            client.submit_workload(load_workload(repo / "run.yaml"))
        files = uploads(recording)
        sent[form] = (submitted(recording), files[f"{SNAPSHOTS}/[SNAPSHOT_TARBALL]"])
    assert sent["legacy"] == sent["nested"]
    assert sent["legacy"][1] == {"project": None, "project/train.py": "print('committed')\n"}


def test_mixed_code_source_forms_are_refused() -> None:
    """runconfig.go: the nested snapshot: form and fields directly under code_source, mixed."""
    with pytest.raises(WorkloadError) as refused:
        load_workload(
            "experiment_name: mixed\ncommand: x\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            "code_source:\n  type: snapshot\n  root_path: .\n  snapshot:\n    root_path: .\n"
        )
    (problem,) = refused.value.problems
    assert (problem.path, problem.line, problem.column) == ("code_source.snapshot", 7, 3)


@pytest.mark.parametrize("remote", ["true", "origin"])
def test_truthy_git_remote_is_refused_with_the_clis_reason(
    remote: str, stub: StubWorkspace
) -> None:
    """runconfig.go gitRef.validate: only false or empty; the snapshot is the local copy."""
    with pytest.raises(WorkloadError) as refused:
        load_workload(
            "experiment_name: remote\ncommand: x\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            f"code_source:\n  root_path: .\n  git:\n    branch: main\n    remote: {remote}\n"
        )
    (problem,) = refused.value.problems
    assert problem.path == "code_source.git.remote" and problem.line == 8
    assert problem.message.startswith(
        "git.remote is no longer supported: the snapshot archives your local copy"
    )
    assert not stub.requests


def test_containers_ranks_in_the_order_written_and_empty_files(
    stub: StubWorkspace, client: AirClient
) -> None:
    """runsubmit.go submittedContainers/injectContainers: each container with its command,
    its ranks as written and its image; the deployment has no command_path of its own. An
    empty environment_variables.files list is accepted (runconfig.go)."""
    submit_stub(stub)
    client.submit_workload(
        load_workload(
            "experiment_name: rl\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 3}\n"
            "containers:\n"
            "  - name: trainer\n    ranks: [2, 0]\n    unity_catalog_image: main.rl.trl:0.24.0\n"
            "    command: python train.py\n"
            "    environment_variables: {files: [], variables: {A: '1'}}\n"
            "  - name: inference\n    ranks: [1]\n    unity_catalog_image: main.rl.vllm:0.20.0\n"
            "    command: python serve.py\n"
        )
    )
    launch = LAUNCH.format(exp="rl")
    deployment = submitted(stub)["tasks"][0]["ai_runtime_task"]["deployments"][0]
    assert deployment == {
        "compute": {"accelerator_count": 3, "accelerator_type": "GPU_1xA10"},
        "containers": [
            {
                "name": "trainer",
                "command_path": f"{launch}/containers/trainer/command.sh",
                "ranks": [2, 0],
                "unity_catalog_image_path": "main.rl.trl:0.24.0",
            },
            {
                "name": "inference",
                "command_path": f"{launch}/containers/inference/command.sh",
                "ranks": [1],
                "unity_catalog_image_path": "main.rl.vllm:0.20.0",
            },
        ],
    }
    # validateconfig.go validateConfigRequest: the same containers in the preflight
    assert preflight_body(stub)["task"]["deployments"][0]["containers"] == deployment["containers"]


def test_container_environment_files_are_refused_when_listed(stub: StubWorkspace) -> None:
    with pytest.raises(WorkloadError) as refused:
        load_workload(
            "experiment_name: rl\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            "containers:\n"
            "  - name: trainer\n    unity_catalog_image: main.rl.trl:0.24.0\n    command: x\n"
            "    environment_variables: {files: [a.env]}\n"
        )
    (problem,) = refused.value.problems
    assert problem.path == "containers[0].environment_variables.files"
    assert not stub.requests


def test_pool_and_priority_are_trimmed_and_sent_where_the_cli_sends_them(
    stub: StubWorkspace, client: AirClient
) -> None:
    """compute.go: pool_id trimmed (1-255), priority_class trimmed and upper-cased;
    runsubmit.go injectPoolFields: provisioned_capacity_id on the deployment's compute,
    priority_class on the ai_runtime_task; validateconfig.go: the same in the preflight."""
    submit_stub(stub)
    client.submit_workload(
        load_workload(
            "experiment_name: pooled\ncommand: x\ncompute:\n"
            "  accelerator_type: GPU_8xH100\n  num_accelerators: 16\n"
            "  pool_id: '  pool-7 '\n  priority_class: ' critical'\n"
        )
    )
    task = submitted(stub)["tasks"][0]["ai_runtime_task"]
    assert task["priority_class"] == "CRITICAL"
    assert task["deployments"][0]["compute"]["provisioned_capacity_id"] == "pool-7"
    check = preflight_body(stub)["task"]
    assert check["priority_class"] == "CRITICAL"
    assert check["deployments"][0]["compute"]["provisioned_capacity_id"] == "pool-7"


def test_unity_catalog_image(stub: StubWorkspace, client: AirClient) -> None:
    """runconfig.go unityCatalogImageRe (structural: mixed case and dots in the tag are the
    workspace's to judge) and runsubmit.go: the image as unity_catalog_image_path on the
    task, beside the default environment."""
    submit_stub(stub)
    client.submit_workload(
        load_workload(
            "experiment_name: uc\ncommand: python train.py\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            "environment:\n  unity_catalog_image: Main.R-L.trl:v0.24.0-rc.1\n"
        )
    )
    body = submitted(stub)
    assert body["tasks"][0]["ai_runtime_task"]["unity_catalog_image_path"] == (
        "Main.R-L.trl:v0.24.0-rc.1"
    )
    assert body["environments"] == [
        {"environment_key": "default", "spec": {"environment_version": "6"}}
    ]
    assert preflight_body(stub)["task"]["unity_catalog_image_path"] == "Main.R-L.trl:v0.24.0-rc.1"


@pytest.mark.parametrize(
    ("environment", "refused"),
    [
        ("  unity_catalog_image: main.rl.trl:1\n  dependencies: []\n", "environment.dependencies"),
        ("  unity_catalog_image: main.rl.trl:1\n  version: 6\n", "environment.version"),
        ("  unity_catalog_image: main.rl.v.trl:1\n", "<catalog>.<schema>.<image>:<tag>"),
        ("  unity_catalog_image: 'main.rl.trl :1'\n", "<catalog>.<schema>.<image>:<tag>"),
    ],
)
def test_unity_catalog_image_refusals(environment: str, refused: str, stub: StubWorkspace) -> None:
    """runconfig.go environmentConfig.validate: an image excludes dependencies (even an
    empty list) and version; a part holding '.', ':' or whitespace is not an image name."""
    with pytest.raises(WorkloadError) as error:
        load_workload(
            "experiment_name: uc\ncommand: x\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            "environment:\n" + environment
        )
    (problem,) = error.value.problems
    assert problem.path == "environment.unity_catalog_image" and refused in problem.message
    assert problem.line == 5
    assert not stub.requests


def test_every_refusal_is_reported_at_once_with_its_line(stub: StubWorkspace) -> None:
    """Where the CLI stops at its first problem (runconfig.go validate), we list them all,
    each at its line:column, and nothing is sent."""
    with pytest.raises(WorkloadError) as refused:
        load_workload(
            "experiment_name: many\n"  # 1
            "command: x\n"  # 2
            "compute:\n"  # 3
            "  accelerator_type: GPU_1xA10\n"  # 4
            "  num_accelerators: 1\n"  # 5
            "  priority_class: urgent\n"  # 6
            "environment:\n"  # 7
            "  unity_catalog_image: main.rl:1\n"  # 8
            "code_source:\n"  # 9
            "  root_path: .\n"  # 10
            "  git: {branch: main, remote: origin}\n"  # 11
        )
    located = [(p.path, p.line, p.column) for p in refused.value.problems]
    assert located == [
        ("compute.priority_class", 6, 19),
        ("environment.unity_catalog_image", 8, 24),
        ("code_source.git.remote", 11, 31),
    ]
    assert not stub.requests
