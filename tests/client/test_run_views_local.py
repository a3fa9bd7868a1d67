"""The operations behind `airo get/list/logs/cancel --all/run --dry-run`, run by both
clients (`airo`'s run views with `run_flow`), over HTTP against the local workspace: what they send (list.go, aitraining.go,
logs.go, logmlflow.go, validateconfig.go) and what they make of the answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_states import wait_for_state

from air_runtime import AirClient, AsyncAirClient, load_workload
from air_runtime._errors import ConfigurationError
from air_runtime.cli import _run_views


def _workload(name: str, command: str, **extra):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": command,
            **extra,
        }
    )


def test_summary_list_and_the_workflows_index(workspace_factory, recorder, tmp_path: Path):
    ws = workspace_factory()
    release = tmp_path / "release"
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        done = client.submit_workload(_workload("done", "echo hi"))
        assert client.wait(done.run_id, poll_interval=0.1).is_success
        going = client.submit_workload(
            _workload("going", f"while [ ! -e {release} ]; do sleep 0.05; done")
        )
        wait_for_state(ws.host, ws.token, going.run_id, "RUNNING")
        summary = client.run_flow(lambda core: _run_views.run_summary(core, done.run_id))
        active = client.run_flow(
            lambda core: _run_views.list_runs(core, limit=20, all_status=False)
        )
        every = client.run_flow(lambda core: _run_views.list_runs(core, limit=5, all_status=True))
        newest = client.run_flow(lambda core: _run_views.list_runs(core, limit=1, all_status=True))
        release.touch()
        client.wait(going.run_id, poll_interval=0.1)
    assert summary.status == "SUCCESS" and summary.experiment_name == "done"
    assert summary.attempt_number == 0 and summary.duration_seconds is not None
    assert summary.user == "local-user@example.com" and summary.gpu_hours > 0
    assert summary.mlflow_run_url and summary.mlflow_run_url.startswith(
        f"{ws.host}/ml/experiments/"
    )
    as_json = summary.to_dict()
    assert as_json["run_id"] == str(done.run_id)
    assert as_json["mlflow_url"] == summary.mlflow_run_url + "/artifacts/logs/node_0"
    assert [r.run_id for r in active] == [going.run_id]
    assert [r.run_id for r in every] == [going.run_id, done.run_id]
    assert [r.run_id for r in newest] == [going.run_id]
    # --all-status reads the index, then each run; the active list scans runs/list.
    assert recorder.to("/api/2.0/ai-training/workflows")
    lists = [e for e in recorder.exchanges if e.path.endswith("/jobs/runs/list")]
    assert len(lists) == 1


async def test_async_twin_and_the_index_fallback(workspace_factory):
    ws = workspace_factory(faults={"ai-training/workflows": {"rate_404": 1}})
    async with AsyncAirClient(ws.host, ws.token) as client:
        run = await client.submit_workload(_workload("fallback", "echo hi"))
        await client.wait(run.run_id, poll_interval=0.1)
        every = await client.run_flow(
            lambda core: _run_views.list_runs(core, limit=20, all_status=True)
        )
        summary = await client.run_flow(lambda core: _run_views.run_summary(core, run.run_id))
        assert await client.run_flow(lambda core: _run_views.task_run_ref(core, run.run_id)) is None
    # The index is not there: the runs/list scan answers instead (list.go newListStrategy).
    assert [r.run_id for r in every] == [run.run_id]
    assert summary.status == "SUCCESS"
    assert ws.admin.counters()["requests"]["ai-training/workflows"] == 1


def test_task_run_ids_and_active_runs(workspace_factory, tmp_path: Path):
    ws = workspace_factory()
    release = tmp_path / "release"
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(
            _workload("active", f"while [ ! -e {release} ]; do sleep 0.05; done")
        )
        wait_for_state(ws.host, ws.token, run.run_id, "RUNNING")
        task_run = client.get_run(run.run_id).tasks[0].run_id
        assert task_run is not None
        ref = client.run_flow(lambda core: _run_views.task_run_ref(core, task_run))
        active = client.run_flow(_run_views.active_runs_of_current_user)
        release.touch()
        client.wait(run.run_id, poll_interval=0.1)
        assert client.run_flow(_run_views.active_runs_of_current_user) == []
    assert ref is not None and (ref.task_key, ref.parent_run_id) == ("active", run.run_id)
    assert ref.describe() == f"{task_run} is task `active` of run {run.run_id}"
    assert [r.run_id for r in active] == [run.run_id]


def test_dry_run_reports_every_field_the_service_refuses(workspace_factory, recorder):
    ws = workspace_factory()
    too_many = load_workload(
        {
            "experiment_name": "smoke-test",
            "compute": {"accelerator_type": "GPU_8xH100", "num_accelerators": 1032},
            "command": "python train.py",
        }
    )
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        problems = client.preflight(too_many)
        assert client.preflight(_workload("fine", "echo hi")) == []
    # In the workload's names (the service's: deployments[0].compute.accelerator_count).
    assert [(p.path, p.message) for p in problems] == [
        (
            "compute.num_accelerators",
            "compute.num_accelerators must be at most 1024, but was 1032.",
        )
    ]
    assert problems[0].hint == "choose a value within the range the message gives"
    # Only the identity and the check: nothing uploaded, nothing submitted.
    assert {e.path for e in recorder.exchanges} == {
        "/api/2.0/preview/scim/v2/Me",
        "/api/2.0/ai-training/config:validate",
    }
    assert len(recorder.to("config:validate")) == 2


def test_the_service_check_names_refused_variable_names():
    from air_runtime.local.runs.validation import validate_config

    body = {
        "task": {
            "experiment": "x",
            "deployments": [
                {
                    "compute": {"accelerator_type": "GPU_8xH100", "accelerator_count": 1032},
                    "command_path": "/Workspace/Users/u/x/command.sh",
                }
            ],
        },
        "run_options": {"env_variables": {"1INVALID": "value", "OK": "1"}},
    }
    errors = validate_config(body)
    pools = [{"pool_id": "p", "accelerator_type": "GPU_1xA10", "accelerator_count": 8}]
    compute = body["task"]["deployments"][0]["compute"]
    compute["provisioned_capacity_id"] = "p"
    assert validate_config(body, pools)[0] == {
        "path": "deployments[0].compute.accelerator_type",
        "message": "accelerator_type must be GPU_1xA10, the type of GPU pool p, but was GPU_8xH100.",
        "code": "FAILED_PRECONDITION",
    }
    compute["provisioned_capacity_id"] = "elsewhere"
    assert validate_config(body, pools)[0]["code"] == "NOT_FOUND"
    del compute["provisioned_capacity_id"]
    # acceptance/air/run-backend-error/test.toml: both fields, in the service's words.
    assert errors == [
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


def test_logs_tail_minutes_and_attempt(workspace_factory):
    ws = workspace_factory()
    retried = _workload(
        "retried",
        "for i in 1 2 3 4 5; do echo line $i; done; exit 1",
        max_retries=1,
    )
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(retried)
        state = client.wait(run.run_id, poll_interval=0.1)
        assert len(state.attempts) == 2
        tail = [(r.attempt, r.body) for r in client.read_logs(run.run_id, tail=2)]
        full = [(r.attempt, r.body) for r in client.read_logs(run.run_id)]
        second = [r for r in client.read_logs(run.run_id, attempt=1)]
        recent = [r.body for r in client.read_logs(run.run_id, minutes=10)]
        with pytest.raises(ConfigurationError, match="attempts 0 to 1"):
            list(client.read_logs(run.run_id, attempt=2))
        with pytest.raises(ConfigurationError, match="cannot combine --tail with --minutes"):
            list(client.read_logs(run.run_id, tail=1, minutes=1))
    # The last two records of each attempt's stream, in order.
    assert tail == [r for r in full if r[0] == 0][-2:] + [r for r in full if r[0] == 1][-2:]
    assert {r.attempt for r in second} == {1}
    assert sum("line" in b for b in recent) == 10


def test_mlflow_artifacts_serve_the_logs_when_the_log_service_is_off(workspace_factory, recorder):
    ws = workspace_factory(disabled_features=["log-records"])
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        run = client.submit_workload(_workload("mlflow-logs", "for i in 1 2 3; do echo m$i; done"))
        assert client.wait(run.run_id, poll_interval=0.1).is_success
        everything = [r.body for r in client.read_logs(run.run_id)]
        tail = [r.body for r in client.read_logs(run.run_id, tail=1)]
        iterated = list(client.iter_run_logs(run.run_id))
    assert [b for b in everything if b.startswith("m")] == ["m1", "m2", "m3"]
    assert tail == [everything[-1]]
    assert iterated == []  # the log service itself answers FEATURE_DISABLED
    paths = [e.path for e in recorder.exchanges]
    for step in (
        "/api/2.2/jobs/runs/get-output",
        "/api/2.0/mlflow/runs/get",
        "/api/2.0/mlflow/artifacts/list",
        "/api/2.0/mlflow/artifacts/credentials-for-read",
        "/airo-artifacts/download",
    ):
        assert step in paths, step
    # The pre-signed download goes without the workspace's token.
    download = next(e for e in recorder.exchanges if e.path == "/airo-artifacts/download")
    assert "authorization" not in download.headers


async def test_async_logs_fallback_and_tail(workspace_factory):
    ws = workspace_factory(disabled_features=["log-records"])
    async with AsyncAirClient(ws.host, ws.token) as client:
        run = await client.submit_workload(_workload("async-logs", "echo a; echo b"))
        await client.wait(run.run_id, poll_interval=0.1)
        lines = [r.body async for r in client.read_logs(run.run_id, tail=1)]
    assert lines == ["b"]


def test_mlflow_artifacts_in_a_volume_are_read_with_the_files_api(workspace_factory, recorder):
    ws = workspace_factory(disabled_features=["log-records"])
    workload = _workload(
        "volume-logs",
        "echo v1; echo v2",
        mlflow_artifact_location="/Volumes/main/ml/artifacts/runs",
    )
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        run = client.submit_workload(workload)
        assert client.wait(run.run_id, poll_interval=0.1).is_success
        lines = [r.body for r in client.read_logs(run.run_id)]
    assert lines == ["v1", "v2"]
    # logmlflow.go volumeArtifactRoot: a dbfs:/Volumes/ root is listed and read as files.
    paths = [e.path for e in recorder.exchanges]
    assert any(
        p.startswith("/api/2.0/fs/directories/Volumes/main/ml/artifacts/runs/") for p in paths
    )
    assert any(p.startswith("/api/2.0/fs/files/Volumes/main/ml/artifacts/runs/") for p in paths)
    assert "/api/2.0/mlflow/artifacts/credentials-for-read" not in paths


def test_following_an_active_run_through_its_mlflow_artifacts(workspace_factory, tmp_path: Path):
    import threading

    ws = workspace_factory(disabled_features=["log-records"])
    release = tmp_path / "release"
    workload = _workload(
        "follow-mlflow", f"echo first; while [ ! -e {release} ]; do sleep 0.05; done; echo last"
    )
    seen: list[str] = []
    first = threading.Event()
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(workload)

        def follow() -> None:
            for record in client.read_logs(run.run_id, follow=True):
                seen.append(record.body)
                if record.body == "first":
                    first.set()

        follower = threading.Thread(target=follow)
        follower.start()
        while not first.wait(0.1):  # read from the chunk while the run goes on
            assert follower.is_alive(), "the follower stopped before the first line"
        release.touch()
        follower.join()
    assert seen == ["first", "last"]  # each complete line once


async def test_cancel_all_active_in_the_async_client(workspace_factory, tmp_path: Path):
    ws = workspace_factory()
    release = tmp_path / "release"
    async with AsyncAirClient(ws.host, ws.token) as client:
        runs = [
            await client.submit_workload(
                _workload(f"all-{i}", f"while [ ! -e {release} ]; do sleep 0.05; done")
            )
            for i in range(2)
        ]
        result = await client.run_flow(_run_views.cancel_all_active)
        ended = [await client.wait(r.run_id, poll_interval=0.1) for r in runs]
        assert (await client.run_flow(_run_views.cancel_all_active)).cancelled == ()
        missing = await client.run_flow(lambda core: _run_views.cancel_runs(core, [999]))
    assert sorted(result.cancelled) == sorted(r.run_id for r in runs) and result.failed == ()
    assert [s.result_state for s in ended] == ["CANCELED", "CANCELED"]
    assert missing.cancelled == () and "999 does not exist" in missing.failed[0][1]


def test_the_service_s_field_errors_are_named_after_the_workload_s_fields():
    from air_runtime.client._refusals import field_problems

    # acceptance/air/run-backend-error/test.toml's answer, a pool and an image refusal, and a
    # path no table knows (kept as the service sent it).
    answer = {
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
            {
                "path": "deployments[0].compute.provisioned_capacity_id",
                "message": "provisioned_capacity_id 'p' is not a GPU pool of this workspace.",
                "code": "NOT_FOUND",
            },
            {
                "path": "deployments[0].containers[1].unity_catalog_image_path",
                "message": "no such image",
                "code": "NOT_FOUND",
            },
            {"path": "something.new", "message": "new rule", "code": "SOMETHING_NEW"},
        ]
    }
    assert [(p.path, p.message, p.hint) for p in field_problems(answer)] == [
        (
            "compute.num_accelerators",
            "compute.num_accelerators must be at most 1024, but was 1032.",
            "choose a value within the range the message gives",
        ),
        (
            "env_variables.1INVALID",
            "env_variables[1INVALID] contains characters that are not allowed.",
            "use letters, digits and underscores, not starting with a digit",
        ),
        (
            "compute.pool_id",
            "compute.pool_id 'p' is not a GPU pool of this workspace.",
            "name one of this workspace's GPU pools (`airo pools list`), or leave pool_id out",
        ),
        (
            "containers[1].unity_catalog_image",
            "no such image",
            "push the image first (`airo images push`), or correct its name and tag",
        ),
        ("something.new", "new rule", None),
    ]
