"""What our client sends, compared with what the `databricks air` CLI sends.

Each test follows one scenario of the CLI's own tests in databricks/cli as of PRs #6617,
#6653, #6657, #6716, #6722 and #6783 (``acceptance/air/*`` and ``cmd/air/*_test.go``) and
names the CLI file the expected requests come from. Docker Hub registration left the CLI in
#6657; its tests here follow the last CLI that had it (``acceptance/experimental/air/
register-image*``) and keep our documented extension working. The expectations are written from reading that code: the
CLI's facts in our words, normalised as its acceptance harness normalises them
(``[USERNAME]``, ``[UUID]``, ``[RUN_ID]``, ``[SNAPSHOT_TARBALL]``). Where we send something
the CLI does not, the test says so and why (docs/cli-conformance.md lists every difference).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_stub import (
    HOST,
    IMPORT,
    LAUNCH,
    SNAPSHOTS,
    USER,
    Recorded,
    StubWorkspace,
    git,
    groups_in_order,
    normalise,
    submit_stub,
    uploads,
)

import air_runtime.client._images as images_module
from air_runtime import AuthError, ConfigurationError, WorkloadError
from air_runtime.client import AirClient
from air_runtime.workload import load_workload

# --- run-submit with a git code source ------------------------------------------------------


def write_workload(folder: Path, text: str) -> Path:
    path = folder / "run.yaml"
    path.write_text(text)
    return path


RUN_SUBMIT_YAML = """\
experiment_name: submit-smoke
command: python train.py
compute:
  accelerator_type: GPU_1xH100
  num_accelerators: 1
code_source:
  type: snapshot
  snapshot:
    root_path: .
    git:
      commit: {commit}
"""

RUN_SUBMIT_UPLOADED = """\
experiment_name: submit-smoke
command: python train.py
compute:
    accelerator_type: GPU_1xH100
    num_accelerators: 1
code_source:
    type: snapshot
    snapshot:
        root_path: .
        git:
            commit: {commit}
"""

# acceptance/air/run-submit/output.txt (runsubmit.go defaultDlRuntimeImage "CLIENT-GPU-6").
RUN_SUBMIT_BODY = {
    "environments": [{"environment_key": "default", "spec": {"environment_version": "6"}}],
    "idempotency_token": "[UUID]",
    "run_name": "submit-smoke",
    "tasks": [
        {
            "ai_runtime_task": {
                "code_source_path": f"{SNAPSHOTS}/[SNAPSHOT_TARBALL]",
                "deployments": [
                    {
                        "command_path": LAUNCH.format(exp="submit-smoke") + "/command.sh",
                        "compute": {"accelerator_count": 1, "accelerator_type": "GPU_1xH100"},
                    }
                ],
                "experiment": "submit-smoke",
            },
            "environment_key": "default",
            "max_retries": 3,
            "retry_on_timeout": True,
            "run_if": "ALL_SUCCESS",
            "task_key": "submit-smoke",
        }
    ],
}


def test_run_submit_with_git_code_source(
    stub: StubWorkspace, client: AirClient, git_repo: Callable[..., tuple[Path, str]]
) -> None:
    """acceptance/air/run-submit (script, output.txt, test.toml);
    cmd/air/snapshot_upload.go, snapshot_package.go, snapshot_resolve.go."""
    repo, commit = git_repo()
    # git.commit tolerates a dirty tree: the pinned revision is what gets packed.
    (repo / "train.py").write_text("print('uncommitted edit')\n")
    (repo / "scratch.py").write_text("print('untracked')\n")
    workload = load_workload(write_workload(repo, RUN_SUBMIT_YAML.format(commit=commit)))
    submit_stub(stub)

    submitted = client.submit_workload(workload)

    assert submitted.run_id == 555
    (submit,) = stub.to("POST", "/api/2.2/jobs/runs/submit")
    assert normalise(submit.body) == RUN_SUBMIT_BODY
    (preflight,) = stub.to("POST", "/api/2.0/ai-training/config:validate")
    # validateconfig.go validateConfigRequest: no code_source_path, max_retries only when set
    assert normalise(preflight.body) == {
        "task": {
            "experiment": "submit-smoke",
            "deployments": [
                {
                    "compute": {"accelerator_type": "GPU_1xH100", "accelerator_count": 1},
                    "command_path": LAUNCH.format(exp="submit-smoke") + "/command.sh",
                }
            ],
        },
        "run_options": {"idempotency_token": "[UUID]"},
        "environment": {"environment_version": "6"},
    }
    launch = LAUNCH.format(exp="submit-smoke")
    groups_in_order(
        stub,
        [
            ["GET /api/2.0/preview/scim/v2/Me"],
            [
                "POST /api/2.0/ai-training/config:validate",
                "POST /api/2.0/workspace/mkdirs",  # the launch folder (runupload.go)
                # Ours: the .internal folder is made up front instead of after a first
                # upload answered RESOURCE_DOES_NOT_EXIST (the filer's
                # CreateParentDirectories): the same folder, one round trip fewer.
                "POST /api/2.0/workspace/mkdirs",
                # snapshot_upload.go: the content-addressed name is looked up first.
                "GET /api/2.0/workspace/get-status",
            ],
            [
                f"POST {IMPORT}{launch}/training_config.yaml",
                f"POST {IMPORT}{launch}/command.sh",
                f"POST {IMPORT}{SNAPSHOTS}/[SNAPSHOT_TARBALL]",
            ],
            ["POST /api/2.2/jobs/runs/submit"],
        ],
    )
    assert sorted(r.body["path"] for r in stub.to("POST", "/api/2.0/workspace/mkdirs")) == sorted(
        [
            f"/Workspace/Users/{USER}/.air/repo_snapshots/.internal",
            launch.replace("[USERNAME]", USER).replace("[RUN_ID]", _suffix(submit)),
        ]
    )
    (status,) = stub.to("GET", "/api/2.0/workspace/get-status")
    assert normalise(status.query) == {"path": f"{SNAPSHOTS}/[SNAPSHOT_TARBALL]"}
    # The archive is `git archive --prefix=project/ <commit>`: the committed file under the
    # folder's name, without the edit, the untracked file or run.yaml.
    sent = uploads(stub)
    assert sent[f"{SNAPSHOTS}/[SNAPSHOT_TARBALL]"] == {
        "project": None,
        "project/train.py": "print('committed')\n",
    }
    assert sent[f"{launch}/command.sh"] == "python train.py"  # as written (runupload.go)
    # runconfig_load.go: the YAML tree re-encoded by go-yaml v3 (four-space indentation)
    assert sent[f"{launch}/training_config.yaml"] == RUN_SUBMIT_UPLOADED.format(commit=commit)
    for request in stub.to("POST", f"{IMPORT}/.*"):
        assert request.query == {"overwrite": "true"}
    name = submit.body["tasks"][0]["ai_runtime_task"]["code_source_path"].rsplit("/", 1)[1]
    assert name.startswith("project_") and len(name) == len("project_") + 16 + len(".tar.gz")


def _suffix(submit: Recorded) -> str:
    path = submit.body["tasks"][0]["ai_runtime_task"]["deployments"][0]["command_path"]
    return path.rsplit("/", 2)[1].rsplit("_", 1)[1]


def test_unchanged_snapshot_is_found_and_not_uploaded_again(
    stub: StubWorkspace, client: AirClient, git_repo: Callable[..., tuple[Path, str]]
) -> None:
    """cmd/air/snapshot_upload.go uploadSnapshotTarball: an archive already at its
    content-addressed path is reused (snapshot_cachekey.go: the key is the commit)."""
    repo, commit = git_repo()
    workload = load_workload(write_workload(repo, RUN_SUBMIT_YAML.format(commit=commit)))
    submit_stub(stub)
    first = client.submit_workload(workload, idempotency_token="first")
    (repo / "train.py").write_text("print('a later edit')\n")  # not in the commit
    uploaded = len(stub.to("POST", f"{IMPORT}/.*tar.gz"))
    second = client.submit_workload(workload, idempotency_token="second")
    assert (first.run_id, second.run_id) == (555, 555)
    assert uploaded == 1 and len(stub.to("POST", f"{IMPORT}/.*tar.gz")) == 1
    paths = {
        r.body["tasks"][0]["ai_runtime_task"]["code_source_path"]
        for r in stub.to("POST", "/api/2.2/jobs/runs/submit")
    }
    assert len(paths) == 1


def test_git_branch_with_uncommitted_changes_is_refused_before_any_upload(
    stub: StubWorkspace, client: AirClient, git_repo: Callable[..., tuple[Path, str]]
) -> None:
    """cmd/air/snapshot_resolve.go: git.branch deploys the committed head, so a dirty tree
    is an error; nothing is uploaded or submitted."""
    repo, _ = git_repo()
    text = RUN_SUBMIT_YAML.replace("commit: {commit}", "branch: main")
    workload = load_workload(write_workload(repo, text))
    git(repo, "add", "run.yaml")
    git(repo, "commit", "-q", "-m", "workload")
    (repo / "train.py").write_text("print('dirty')\n")
    submit_stub(stub)
    with pytest.raises(ConfigurationError, match="uncommitted changes"):
        client.submit_workload(workload)
    assert not stub.to("POST", f"{IMPORT}/.*")
    assert not stub.to("POST", "/api/2.2/jobs/runs/submit")


def test_git_branch_packs_its_committed_head(
    stub: StubWorkspace, client: AirClient, git_repo: Callable[..., tuple[Path, str]]
) -> None:
    """cmd/air/snapshot_resolve.go: git.branch resolves to the local branch's head."""
    repo, _ = git_repo()
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "train.py").write_text("print('feature')\n")
    git(repo, "commit", "-q", "-am", "feature")
    git(repo, "checkout", "-q", "main")
    text = RUN_SUBMIT_YAML.replace("commit: {commit}", "branch: feature")
    (repo / ".git" / "info" / "exclude").write_text("run.yaml\n")
    workload = load_workload(write_workload(repo, text))
    submit_stub(stub)
    client.submit_workload(workload)
    assert uploads(stub)[f"{SNAPSHOTS}/[SNAPSHOT_TARBALL]"] == {
        "project": None,
        "project/train.py": "print('feature')\n",
    }


def test_working_tree_snapshot_keeps_the_folder_name_and_honours_gitignore(
    stub: StubWorkspace, client: AirClient, tmp_path: Path
) -> None:
    """cmd/air/snapshot_package.go createPlainTarball: a folder outside git is packed from
    its parent so every entry sits under its name; .git, AppleDouble files and the root's
    .gitignore patterns are left out."""
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "model.py").write_text("MODEL = 1\n")
    (code / "notes.log").write_text("ignored\n")
    (code / "._train.py").write_text("apple double\n")
    (code / ".gitignore").write_text("*.log\n# comment\n!keep.log\n")
    (tmp_path / "run.yaml").write_text(
        "experiment_name: plain\ncommand: python pkg/model.py\n"
        "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
        "code_source: {root_path: code}\n"
    )
    submit_stub(stub)
    client.submit_workload(load_workload(tmp_path / "run.yaml"))
    (archive,) = [v for k, v in uploads(stub).items() if k.endswith("[SNAPSHOT_TARBALL]")]
    assert archive == {
        "code": None,
        "code/.gitignore": "*.log\n# comment\n!keep.log\n",
        "code/pkg": None,
        "code/pkg/model.py": "MODEL = 1\n",
    }


# --- run-submit with dependencies -----------------------------------------------------------

DEPS_YAML = """\
experiment_name: deps-smoke
command: python train.py
compute:
  accelerator_type: GPU_1xH100
  num_accelerators: 1
environment:
  version: 5
  dependencies:
    - numpy
    - torch==2.3.0
"""


def test_environment_version_is_sent_as_written(stub: StubWorkspace, client: AirClient) -> None:
    """cmd/air/runsubmit.go dlRuntimeImage: the version string is not rewritten."""
    submit_stub(stub)
    client.submit_workload(load_workload(DEPS_YAML.replace("version: 5", 'version: "05"')))
    (submit,) = stub.to("POST", "/api/2.2/jobs/runs/submit")
    assert submit.body["environments"][0]["spec"]["environment_version"] == "05"


def test_runtime_image_and_user_folder_overrides(
    stub: StubWorkspace, client: AirClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cmd/air/runsubmit.go (DATABRICKS_DL_RUNTIME_IMAGE, its CLIENT-GPU- prefix dropped)
    and cmd/air/runlaunch.go (DATABRICKS_INTERNAL_USER_WORKSPACE_DIR)."""
    monkeypatch.setenv("DATABRICKS_DL_RUNTIME_IMAGE", "CLIENT-GPU-7")
    monkeypatch.setenv("DATABRICKS_INTERNAL_USER_WORKSPACE_DIR", "/Workspace/Shared/air")
    submit_stub(stub)
    client.submit_workload(
        load_workload(DEPS_YAML.replace("  version: 5\n", "").replace("deps-smoke", "env"))
    )
    (submit,) = stub.to("POST", "/api/2.2/jobs/runs/submit")
    assert submit.body["environments"][0]["spec"]["environment_version"] == "7"
    command = submit.body["tasks"][0]["ai_runtime_task"]["deployments"][0]["command_path"]
    assert command.startswith("/Workspace/Shared/air/.air/cli_launch/env/env_")


# --- side files ---------------------------------------------------------------------------


def test_side_files_are_written_as_the_cli_writes_them(
    stub: StubWorkspace, client: AirClient
) -> None:
    """cmd/air/runupload.go buildArtifacts: env_vars.json and secret_env_vars.json as Go's
    json.Marshal writes them, hyperparameters.yaml as go-yaml writes the map."""
    submit_stub(stub)
    client.submit_workload(
        load_workload(
            "experiment_name: side\ncommand: echo hi\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            "env_variables: {B: '2', A: 'x<y'}\nsecrets: {HF_TOKEN: research/hf}\n"
            "parameters: {lr: 0.05, epochs: 5, schedule: {warmup: 10}}\n"
        )
    )
    launch = LAUNCH.format(exp="side")
    sent = uploads(stub)
    assert sent[f"{launch}/env_vars.json"] == (
        '[{"name":"A","value":"x\\u003cy"},{"name":"B","value":"2"}]'
    )
    assert sent[f"{launch}/secret_env_vars.json"] == (
        '[{"name":"HF_TOKEN","secret_scope":"research","secret_key":"hf"}]'
    )
    assert sent[f"{launch}/hyperparameters.yaml"] == (
        "epochs: 5\nlr: 0.05\nschedule:\n    warmup: 10\n"
    )


# --- logs -------------------------------------------------------------------------------------


def test_log_following_asks_from_the_last_second(stub: StubWorkspace, client: AirClient) -> None:
    """cmd/air/logbricklens.go and logstream.go: ``from`` is Unix epoch seconds, derived
    from the last record's time_unix_nano; ``ascending`` is always sent."""
    reads = iter(
        [
            [
                {"time_unix_nano": 1700000001000000000, "body": "step 1", "node_index": 0},
                {"time_unix_nano": 1700000003500000000, "body": "step 2", "node_index": 0},
            ],
            [
                {"time_unix_nano": 1700000003500000000, "body": "step 2", "node_index": 0},
                {"time_unix_nano": 1700000009000000000, "body": "done", "node_index": 0},
            ],
        ]
    )
    states = iter(["RUNNING", "TERMINATED"])
    stub.stub(
        "GET /api/2.0/ai-training/workflows/by-run-id/123/logs",
        lambda _: (200, {"log_records": next(reads, [])}),
    )

    def run_state(_: Recorded) -> tuple[int, Any]:
        life = next(states, "TERMINATED")
        state: dict[str, Any] = {"life_cycle_state": life}
        if life == "TERMINATED":
            state["result_state"] = "SUCCESS"
        return 200, {"run_id": 123, "state": state, "tasks": [{"task_key": "t", "run_id": 456}]}

    stub.stub("GET /api/2.2/jobs/runs/get", run_state)
    lines = [r.body for r in client.iter_logs(123, node=0, follow=True)]
    assert lines == ["step 1", "step 2", "done"]
    queries = [r.query for r in stub.to("GET", ".*/logs")]
    assert queries[0] == {"ascending": "true", "filter.node_index": "0", "page_size": "500"}
    # Ours: a first read with no lower bound (the CLI bounds it by the run's start second,
    # which asks for the same records), and 500 records a page where the CLI takes the
    # server's default.
    assert queries[1]["from"] == "1700000003"
    assert all(q["ascending"] == "true" for q in queries)


def test_whole_run_logs_ask_each_node_of_each_attempt(
    stub: StubWorkspace, client: AirClient
) -> None:
    """cmd/air/logbricklens.go: a retry attempt is chosen with ``ref.attempt_number`` on the
    Jobs run id and one node with ``filter.node_index``; logdownload.go: the node count is
    the accelerator count over accelerators per node (16 H100 on GPU_8xH100: 2 nodes)."""
    compute = {"accelerator_type": "GPU_8xH100", "accelerator_count": 16}
    task = {"deployments": [{"compute": compute}]}
    attempts = [
        {
            "task_key": "t",
            "run_id": 456,
            "attempt_number": 0,
            "ai_runtime_task": task,
            "state": {"life_cycle_state": "TERMINATED", "result_state": "FAILED"},
            "start_time": 1_700_000_000_000,
            "end_time": 1_700_000_360_000,
        },
        {
            "task_key": "t",
            "run_id": 457,
            "attempt_number": 1,
            "ai_runtime_task": task,
            "state": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"},
            "start_time": 1_700_000_400_000,
            "end_time": 1_700_001_120_000,
        },
    ]
    stub.stub(
        "GET /api/2.2/jobs/runs/get",
        lambda _: (
            200,
            {
                "run_id": 123,
                "tasks": attempts,
                "state": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"},
            },
        ),
    )

    def logs(recorded: Recorded) -> tuple[int, Any]:
        node = int(recorded.query["filter.node_index"])
        attempt = int(recorded.query["ref.attempt_number"])
        body = f"attempt {attempt} node {node}"
        return 200, {
            "log_records": [
                {"time_unix_nano": 1_700_000_001_000_000_000, "body": body, "node_index": node}
            ]
        }

    stub.stub("GET /api/2.0/ai-training/workflows/by-run-id/123/logs", logs)
    labelled = [(r.label, r.body) for r in client.iter_run_logs(123)]
    assert labelled == [
        ("t node 0 attempt 0", "attempt 0 node 0"),
        ("t node 1 attempt 0", "attempt 0 node 1"),
        ("t node 0 attempt 1", "attempt 1 node 0"),
        ("t node 1 attempt 1", "attempt 1 node 1"),
    ]
    queries = [r.query for r in stub.to("GET", ".*/logs")]
    assert [(q["ref.attempt_number"], q["filter.node_index"]) for q in queries] == [
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("1", "1"),
    ]
    # 16 accelerators for 6 minutes, then for 12: 4.8 accelerator-hours.
    assert abs(client.get_run(123).gpu_hours() - 4.8) < 1e-9


# --- get, list, cancel ------------------------------------------------------------------------


def test_get_list_and_cancel(stub: StubWorkspace, client: AirClient) -> None:
    """acceptance/air/get, list, cancel; cmd/air/list.go newJobsScanStrategy
    (SUBMIT_RUN runs with their tasks, 25 a page), get.go, cancel.go."""
    stub.stub(
        "GET /api/2.2/jobs/runs/get",
        (200, {"run_id": 123, "state": {"life_cycle_state": "RUNNING"}}),
    )
    stub.stub("GET /api/2.2/jobs/runs/list", (200, {"runs": [], "has_more": False}))
    stub.stub("POST /api/2.2/jobs/runs/cancel", (200, {}))
    client.get_run(123)
    client.list_runs()
    client.cancel(123)
    assert [r.view() for r in stub.requests] == [
        {"method": "GET", "path": "/api/2.2/jobs/runs/get", "q": {"run_id": "123"}},
        {
            "method": "GET",
            "path": "/api/2.2/jobs/runs/list",
            "q": {
                "run_type": "SUBMIT_RUN",
                "expand_tasks": "true",
                "limit": "25",
                "active_only": "true",
            },
        },
        {"method": "POST", "path": "/api/2.2/jobs/runs/cancel", "body": {"run_id": 123}},
    ]


# --- register-image ---------------------------------------------------------------------------


@pytest.fixture
def docker_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local Docker config with a Docker Hub login for bob (register-image/dockercfg)."""
    folder = tmp_path / "dockercfg"
    folder.mkdir()
    auth = base64.b64encode(b"bob:secretpat").decode()
    (folder / "config.json").write_text(json.dumps({"auths": {"docker.io": {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))
    return folder


def image_stub(stub: StubWorkspace, access: tuple[int, Any]) -> None:
    stub.stub("GET /api/2.0/ai-compute-manager/images:get", (404, {"error_code": "NOT_FOUND"}))
    stub.stub("GET /api/2.0/ai-compute-manager/images:checkImageAccess", access)
    stub.stub(
        "POST /api/2.0/ai-compute-manager/images",
        lambda r: (200, {"docker_image_url": r.body["docker_image_url"], "state": "AVAILABLE"}),
    )
    stub.stub("POST /api/2.0/secrets/scopes/create", (200, {}))
    stub.stub("POST /api/2.0/secrets/put", (200, {}))


@pytest.mark.parametrize(
    "access",
    [(200, {"publicly_accessible": False}), (404, {"error_code": "NOT_FOUND"})],
    ids=["private", "probe-not-exposed"],
)
def test_register_image_with_local_docker_credentials(
    stub: StubWorkspace, client: AirClient, docker_login: Path, access: tuple[int, Any]
) -> None:
    """History (removed from the CLI in #6657, kept as our extension):
    acceptance/experimental/air/register-image ("the registration POST carries the
    auto-stored credential reference"); cmd/air/image_credentials.go storeDockerCredentials
    (scope docker-credentials-<user>, key <host>-<user>-local, base64 user:password);
    image_client.go checkImageAccess: an error is "unknown", never an abort."""
    image_stub(stub, access)
    registration = client.register_image("myorg/img:1.0")
    assert registration.is_available
    (register,) = stub.to("POST", "/api/2.0/ai-compute-manager/images")
    assert normalise(register.body) == {
        "docker_image_url": "docker.io/myorg/img:1.0",
        "credentials_scope": "docker-credentials-[USERNAME]",
        "credentials_key": "docker.io-bob-local",
    }
    (put,) = stub.to("POST", "/api/2.0/secrets/put")
    assert put.body == {
        "scope": f"docker-credentials-{USER}",
        "key": "docker.io-bob-local",
        "string_value": base64.b64encode(b"bob:secretpat").decode(),
    }
    (probe,) = stub.to("GET", "/api/2.0/ai-compute-manager/images:checkImageAccess")
    assert probe.query == {"docker_image_url": "docker.io/myorg/img:1.0"}


def test_register_image_without_local_credentials_skips_the_probe(
    stub: StubWorkspace, client: AirClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cmd/air/register_image.go discoverCredentials: the access probe is only asked when
    local credentials exist; without them the image is registered as it is."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker"))
    image_stub(stub, (200, {"publicly_accessible": True}))
    client.register_image("ubuntu")
    assert not stub.to("GET", "/api/2.0/ai-compute-manager/images:checkImageAccess")
    (register,) = stub.to("POST", "/api/2.0/ai-compute-manager/images")
    assert register.body == {"docker_image_url": "docker.io/library/ubuntu:latest"}


def test_register_image_without_secret_permission(
    stub: StubWorkspace, client: AirClient, docker_login: Path
) -> None:
    """History (removed from the CLI in #6657, kept as our extension):
    acceptance/experimental/air/register-image-no-secret-permission: the scope cannot be
    created, so the image is tried without credentials, and the refusal names why the
    local credentials were not used."""
    stub.stub(
        "POST /api/2.0/secrets/scopes/create",
        (
            403,
            {
                "error_code": "PERMISSION_DENIED",
                "message": "user does not have permission to create secret scopes",
            },
        ),
    )
    stub.stub(
        "POST /api/2.0/ai-compute-manager/images",
        (403, {"error_code": "PERMISSION_DENIED", "message": "cannot pull: unauthorized"}),
    )
    image_stub(stub, (200, {"publicly_accessible": False}))
    with pytest.raises(ConfigurationError, match="could not be stored") as raised:
        client.register_image("myorg/img:1.0")
    assert "secret scope" in str(raised.value)
    (register,) = stub.to("POST", "/api/2.0/ai-compute-manager/images")
    assert register.body == {"docker_image_url": "docker.io/myorg/img:1.0"}
    assert not stub.to("POST", "/api/2.0/secrets/put")


def test_image_still_importing_is_waited_for(
    stub: StubWorkspace, client: AirClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cmd/air/rundockerimage.go waitForRegisteredImage: PENDING/IMPORTING at submit time
    is waited for (up to an hour), not refused."""
    monkeypatch.setattr(images_module, "IMAGE_POLL_INTERVAL_S", 0.05)
    states = iter(["IMPORTING", "IMPORTING", "AVAILABLE"])
    stub.stub(
        "GET /api/2.0/ai-compute-manager/images:get",
        lambda r: (
            200,
            {"docker_image_url": r.query["docker_image_url"], "state": next(states, "AVAILABLE")},
        ),
    )
    submit_stub(stub)
    client.submit_workload(
        load_workload(
            "experiment_name: img\ncommand: echo hi\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            "environment: {docker_image: {url: myorg/train:2}}\n"
        )
    )
    gets = stub.to("GET", "/api/2.0/ai-compute-manager/images:get")
    (submit,) = stub.to("POST", "/api/2.2/jobs/runs/submit")
    assert len(gets) == 3 and max(g.seq for g in gets) < submit.seq
    assert (
        submit.body["tasks"][0]["ai_runtime_task"]["docker_image_url"] == "docker.io/myorg/train:2"
    )


# --- usage policies -----------------------------------------------------------------------------

POLICY_YAML = (
    "experiment_name: policy\ncommand: echo hi\n"
    "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
    "usage_policy_name: {name}\n"
)


def test_usage_policy_name_is_resolved_over_every_page(
    stub: StubWorkspace, client: AirClient
) -> None:
    """cmd/air/usagepolicy.go: GET /api/2.0/serverless-policies with
    filter_by.policy_name and page_size 1000, pages followed by page_token, the exact
    case-insensitive policy_name match taken, sent as budget_policy_id (runsubmit.go)."""
    pages = {
        None: {
            "policies": [{"policy_id": "p-1", "policy_name": "ml-team-dev"}],
            "next_page_token": "t2",
        },
        "t2": {"policies": [{"policy_id": "p-2", "policy_name": "ML-Team"}]},
    }
    stub.stub("GET /api/2.0/serverless-policies", lambda r: (200, pages[r.query.get("page_token")]))
    submit_stub(stub)
    client.submit_workload(load_workload(POLICY_YAML.replace("{name}", "ml-team")))
    assert [r.query for r in stub.to("GET", "/api/2.0/serverless-policies")] == [
        {"filter_by.policy_name": "ml-team", "page_size": "1000"},
        {"filter_by.policy_name": "ml-team", "page_size": "1000", "page_token": "t2"},
    ]
    (submit,) = stub.to("POST", "/api/2.2/jobs/runs/submit")
    assert submit.body["budget_policy_id"] == "p-2"
    (preflight,) = stub.to("POST", "/api/2.0/ai-training/config:validate")
    assert preflight.body["run_options"]["usage_policy_name"] == "ml-team"


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        (
            [{"policy_id": "p-1", "policy_name": "ml-team-dev"}],
            "did you mean one of: 'ml-team-dev'",
        ),
        (
            [
                {"policy_id": "p-1", "policy_name": "ml-team"},
                {"policy_id": "p-2", "policy_name": "ML-TEAM"},
            ],
            "ids: 'p-1', 'p-2'",
        ),
    ],
    ids=["no-match", "ambiguous"],
)
def test_usage_policy_that_does_not_resolve_stops_before_any_upload(
    stub: StubWorkspace, client: AirClient, policies: list[dict[str, str]], message: str
) -> None:
    """cmd/air/usagepolicy.go resolveUsagePolicyIDByName: 0 matches name up to ten
    candidates, more than one names the ids; nothing is uploaded or submitted."""
    stub.stub("GET /api/2.0/serverless-policies", (200, {"policies": policies}))
    submit_stub(stub)
    with pytest.raises(ConfigurationError, match=message):
        client.submit_workload(load_workload(POLICY_YAML.replace("{name}", "ml-team")))
    assert not stub.to("POST", f"{IMPORT}/.*")
    assert not stub.to("POST", "/api/2.2/jobs/runs/submit")


# --- MLflow experiment folder and permissions -------------------------------------------------


def test_missing_mlflow_experiment_directory_is_created_before_the_submit(
    stub: StubWorkspace, client: AirClient
) -> None:
    """cmd/air/runlaunch.go ensureExperimentDirectory: get-status, then mkdirs when it is
    missing (the platform would answer only INTERNAL_ERROR)."""
    submit_stub(stub)
    client.submit_workload(
        load_workload(
            "experiment_name: mlf\ncommand: echo hi\n"
            "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
            "mlflow_experiment_directory: /Workspace/Shared/experiments\n"
        )
    )
    (status,) = [
        r
        for r in stub.to("GET", "/api/2.0/workspace/get-status")
        if r.query["path"] == "/Workspace/Shared/experiments"
    ]
    (made,) = [
        r
        for r in stub.to("POST", "/api/2.0/workspace/mkdirs")
        if r.body["path"] == "/Workspace/Shared/experiments"
    ]
    (submit,) = stub.to("POST", "/api/2.2/jobs/runs/submit")
    assert status.seq < made.seq < submit.seq


def test_a_file_as_mlflow_experiment_directory_is_refused(
    stub: StubWorkspace, client: AirClient
) -> None:
    """cmd/air/runlaunch.go: an existing object that is not a directory is an error."""
    stub.stub(
        "GET /api/2.0/workspace/get-status",
        (200, {"path": "/Workspace/Shared/x", "object_type": "NOTEBOOK"}),
    )
    submit_stub(stub)
    with pytest.raises(ConfigurationError, match="not a folder"):
        client.submit_workload(
            load_workload(
                "experiment_name: mlf\ncommand: echo hi\n"
                "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
                "mlflow_experiment_directory: /Workspace/Shared/x\n"
            )
        )
    assert not stub.to("POST", "/api/2.2/jobs/runs/submit")


# --- preflight ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "blocks"),
    [
        ((400, {"error_code": "INVALID_PARAMETER_VALUE", "message": "bad compute"}), True),
        ((403, {"error_code": "PERMISSION_DENIED", "message": "no"}), True),
        (
            (
                200,
                {
                    "errors": [
                        {"path": "compute.accelerator_type", "message": "unknown", "code": "X"}
                    ]
                },
            ),
            True,
        ),
        ((404, {"error_code": "ENDPOINT_NOT_FOUND", "message": "no such endpoint"}), False),
        ((501, {"error_code": "NOT_IMPLEMENTED", "message": "later"}), False),
        ((503, {"error_code": "TEMPORARILY_UNAVAILABLE", "message": "later"}), False),
        ((400, {"error_code": "FEATURE_DISABLED", "message": "off"}), False),
    ],
    ids=["400", "403", "field-errors", "404", "501", "503", "feature-disabled"],
)
def test_preflight_blocks_on_refusals_and_not_on_unavailability(
    stub: StubWorkspace, answer: tuple[int, Any], blocks: bool
) -> None:
    """cmd/air/validateconfig.go classifyValidationFailure: any 4xx but 404/408/429 (and
    FEATURE_DISABLED) blocks the submit before any upload; the others mean "unavailable"."""
    from air_runtime.client import RetryPolicy

    stub.stub("POST /api/2.0/ai-training/config:validate", answer)
    stub.stub("POST /api/2.2/jobs/runs/submit", (200, {"run_id": 1}))
    fast = RetryPolicy(max_attempts=2, max_total_s=1.0, initial_backoff_s=0.01, max_backoff_s=0.02)
    with AirClient(HOST, "dapi-conformance", transport=stub, retry=fast) as client:
        if blocks:
            with pytest.raises((WorkloadError, ConfigurationError, AuthError)):
                client.submit_workload(load_workload(DEPS_YAML))
            assert not stub.to("POST", f"{IMPORT}/.*")
            assert not stub.to("POST", "/api/2.2/jobs/runs/submit")
        else:
            assert client.submit_workload(load_workload(DEPS_YAML)).run_id == 1
