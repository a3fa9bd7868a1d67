"""The official databricks-sdk client works against the local workspace."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.errors import NotFound, ResourceAlreadyExists
from databricks.sdk.service import jobs, workspace

from tests.local_workspace.conftest import Workloads


@pytest.fixture
def sdk(local_workspace, monkeypatch) -> WorkspaceClient:
    for name in ("DATABRICKS_CONFIG_PROFILE", "DATABRICKS_CLIENT_ID", "DATABRICKS_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    return WorkspaceClient(host=local_workspace.host, token=local_workspace.token)


def test_current_user_workspace_and_secrets(sdk: WorkspaceClient) -> None:
    me = sdk.current_user.me()
    assert me.user_name == "local-user@example.com"
    folder = f"/Users/{me.user_name}/sdk-{uuid.uuid4().hex[:8]}"
    sdk.workspace.mkdirs(folder)
    status = sdk.workspace.get_status(folder)
    assert status.object_type == workspace.ObjectType.DIRECTORY
    with pytest.raises(NotFound):
        sdk.workspace.get_status(folder + "/missing")
    sdk.secrets.create_scope("sdk-scope")
    with pytest.raises(ResourceAlreadyExists):
        sdk.secrets.create_scope("sdk-scope")
    sdk.secrets.put_secret("sdk-scope", "api_key", string_value="hidden")
    keys = [s.key for s in sdk.secrets.list_secrets("sdk-scope")]
    assert keys == ["api_key"]
    assert "sdk-scope" in [s.name for s in sdk.secrets.list_scopes()]


def test_jobs_submit_get_cancel_list(sdk: WorkspaceClient, workloads: Workloads) -> None:
    quick = workloads.command_task("echo from sdk")
    slow = workloads.command_task("sleep 60", key="slow")

    def typed(task: dict) -> jobs.SubmitTask:
        deployment = task["ai_runtime_task"]["deployments"][0]
        return jobs.SubmitTask(
            task_key=task["task_key"],
            max_retries=0,
            ai_runtime_task=jobs.AiRuntimeTask(
                experiment=task["task_key"],
                deployments=[
                    jobs.DeploymentSpec(
                        compute=jobs.ComputeSpec(
                            accelerator_type=jobs.ComputeSpecAcceleratorType.GPU_1X_A10,
                            accelerator_count=1,
                        ),
                        command_path=deployment["command_path"],
                    )
                ],
            ),
        )

    token = uuid.uuid4().hex
    waiter = sdk.jobs.submit(run_name="sdk", idempotency_token=token, tasks=[typed(quick)])
    run = waiter.result(timeout=datetime.timedelta(seconds=60))
    assert run.state.result_state == jobs.RunResultState.SUCCESS
    assert run.tasks[0].attempt_number == 0
    again = sdk.jobs.submit(run_name="sdk", idempotency_token=token, tasks=[typed(quick)])
    assert again.run_id == run.run_id
    fetched = sdk.jobs.get_run(run.run_id)
    assert fetched.run_page_url.endswith(f"/jobs/runs/{run.run_id}")
    output = sdk.jobs.get_run_output(run.tasks[0].run_id)
    assert output.metadata.run_id == run.tasks[0].run_id

    long_run = sdk.jobs.submit(run_name="slow", tasks=[typed(slow)]).run_id
    deadline = time.monotonic() + 20
    while sdk.jobs.get_run(long_run).state.life_cycle_state != jobs.RunLifeCycleState.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    active = [r.run_id for r in sdk.jobs.list_runs(active_only=True)]
    assert active == [long_run]
    sdk.jobs.cancel_run(long_run).result()
    final = sdk.jobs.get_run(long_run)
    assert final.state.result_state == jobs.RunResultState.CANCELED
    everything = [r.run_id for r in sdk.jobs.list_runs(run_type=jobs.RunType.SUBMIT_RUN)]
    assert set(everything) == {run.run_id, long_run}
