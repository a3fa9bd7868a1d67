"""The client against the local workspace over real HTTP: happy path, error storms,
idempotent submits, auth failures, secret hygiene, submit round trips."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest

from air_runtime import AirClient, OAuthM2M, RetryPolicy, load_workload
from air_runtime._errors import AuthError, NotFound, PlatformError, RunFailed, WorkloadError

FAST_RETRY = RetryPolicy(max_attempts=30, initial_backoff_s=0.02, max_backoff_s=0.2, max_total_s=60)


def _workload(name: str, command: str = "echo hello from $POD_RANK", nodes: int = 1, **extra):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": nodes},
            "command": command,
            **extra,
        }
    )


def test_submit_wait_logs_success(workspace_factory):
    ws = workspace_factory()
    updates = []
    with AirClient(ws.host, ws.token, user_agent_extra="airflow/3.3.2") as client:
        run = client.submit_workload(_workload("hello", nodes=2, parameters={"lr": 0.1}))
        state = client.wait(run.run_id, poll_interval=0.2, on_update=updates.append)
        assert state.is_success
        client.raise_for_failure(state)
        bodies = [r.body for r in client.iter_logs(run.run_id, node=1)]
        assert "hello from 1" in bodies
        assert run.run_page_url.endswith(f"/jobs/runs/{run.run_id}")
    assert updates[-1].is_success
    assert len({(u.life_cycle_state, u.result_state, u.state_message) for u in updates}) == len(
        updates
    )


def test_user_agent_names_project_and_orchestrator(workspace_factory, recorder):
    ws = workspace_factory()
    with AirClient(ws.host, ws.token, transport=recorder, user_agent_extra="airflow/3.3.2") as c:
        c.whoami()
        c.whoami()  # cached
    assert len(recorder.exchanges) == 1
    agent = recorder.exchanges[0].headers["user-agent"]
    assert agent.startswith("air-orchestration/") and agent.endswith(" airflow/3.3.2")


def test_failure_message_from_a_real_failed_run(workspace_factory):
    ws = workspace_factory()
    command = "echo working; if [ $POD_RANK = 1 ]; then exit 3; fi; sleep 0.5"
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(_workload("fails", command, nodes=2, max_retries=0))
        state = client.wait(run.run_id, poll_interval=0.2)
        with pytest.raises(RunFailed) as caught:
            client.raise_for_failure(state)
    text = str(caught.value)
    assert caught.value.result_state == "FAILED" and caught.value.run_id == run.run_id
    assert "Failed task: fails" in text and "node 1" in text
    assert "Script failed with exit code 3" in text
    assert "MLflow" in text and run.run_page_url in text


def test_run_result_gives_the_failure_or_the_task_output(workspace_factory):
    ws = workspace_factory()
    with AirClient(ws.host, ws.token) as client:
        good = client.submit_workload(_workload("fine", "echo ok", nodes=1, max_retries=0))
        bad = client.submit_workload(_workload("broken", "exit 4", nodes=1, max_retries=0))
        good_result = client.run_result(client.wait(good.run_id, poll_interval=0.2))
        bad_result = client.run_result(client.wait(bad.run_id, poll_interval=0.2))
    assert good_result.failure is None
    assert good_result.output["ai_runtime_task_output"]["mlflow_run_id"]
    assert isinstance(bad_result.failure, RunFailed)
    assert "Script failed with exit code 4" in str(bad_result.failure)
    # The failed task's output too: its MLflow ids name the failed run's MLflow page.
    assert bad_result.output == bad_result.failure.output
    assert all(bad_result.mlflow_ids), bad_result.output
    assert bad_result.mlflow_url(ws.host) in str(bad_result.failure)


def test_preflight_field_errors_stop_before_any_upload(workspace_factory, recorder):
    ws = workspace_factory()
    workload = _workload("tooBig", nodes=1)
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        identity = client.whoami()
        from air_runtime import build_plan

        plan = build_plan(workload, user_name=identity.user_name)
        # A body the workspace's validation rejects (the local validator checks the fields).
        bad = dict(plan.preflight_bodies[0])
        deployment = dict(bad["task"]["deployments"][0])
        deployment["compute"] = {"accelerator_type": "GPU_3xQ9", "accelerator_count": 3}
        bad["task"] = {**bad["task"], "deployments": [deployment]}
        bad_plan = type(plan)(**{**plan.__dict__, "preflight_bodies": (bad,)})
        with pytest.raises(WorkloadError) as caught:
            client.submit(bad_plan)
    assert caught.value.problems
    assert not recorder.to("import-file") and not recorder.to("runs/submit")


def test_429_storm_with_retry_after_is_honoured(workspace_factory, recorder):
    ws = workspace_factory(
        faults={"seed": 3, "*": {"rate_429": 0.4, "retry_after_s": 0.3}},
    )
    with AirClient(ws.host, ws.token, transport=recorder, retry=FAST_RETRY) as client:
        run = client.submit_workload(_workload("storm"))
        state = client.wait(run.run_id, poll_interval=0.1)
    assert state.is_success
    counters = ws.admin.counters()
    limited = sum(c.get("429", 0) for c in counters["responses"].values())
    assert limited >= 3
    # After each 429 the same request is sent again no sooner than Retry-After.
    waits = [
        later.started - earlier.ended
        for earlier, later in zip(recorder.exchanges, recorder.exchanges[1:], strict=False)
        if earlier.status == 429 and later.path == earlier.path and later.method == earlier.method
    ]
    assert waits and min(waits) >= 0.3
    assert counters["runs_created"] == 1


def test_5xx_and_dropped_connections(workspace_factory):
    ws = workspace_factory(
        faults={"seed": 11, "*": {"rate_5xx": 0.25, "status_5xx": 500, "rate_drop": 0.15}},
    )
    with AirClient(ws.host, ws.token, retry=FAST_RETRY) as client:
        run = client.submit_workload(_workload("flaky", nodes=2, parameters={"a": 1}))
        state = client.wait(run.run_id, poll_interval=0.1)
        logs = [r.body for r in client.iter_logs(run.run_id)]
    assert state.is_success and "hello from 0" in logs
    counters = ws.admin.counters()
    faults = [kind for f in counters["faults"].values() for kind in f]
    assert "drop" in faults and any("5" in k or "5xx" in k for k in faults)
    assert counters["runs_created"] == 1


def test_other_4xx_are_never_retried(workspace_factory):
    ws = workspace_factory()
    with AirClient(ws.host, ws.token, retry=FAST_RETRY) as client:
        with pytest.raises(NotFound):
            client.get_run(987654)
        with pytest.raises(PlatformError) as caught:
            client.cancel(987654)
    assert caught.value.status_code == 400 and not caught.value.retryable
    requests = ws.admin.counters()["requests"]
    assert requests["jobs/runs/get"] == 1 and requests["jobs/runs/cancel"] == 1


def test_lost_submit_responses_create_exactly_one_run(workspace_factory):
    ws = workspace_factory(faults={"seed": 5, "jobs/runs/submit": {"rate_response_lost": 0.6}})
    submissions = 8
    with AirClient(ws.host, ws.token, retry=FAST_RETRY) as client:
        runs = [
            client.submit_workload(_workload(f"lost{i}"), idempotency_token=f"logical-{i}")
            for i in range(submissions)
        ]
        # The same logical submission repeated (e.g. a retried task) gets the same run.
        again = client.submit_workload(_workload("lost0"), idempotency_token="logical-0")
    counters = ws.admin.counters()
    assert counters["faults"]["jobs/runs/submit"].get("response_lost", 0) >= 1
    assert sum(counters["submits_per_token"].values()) > submissions  # retries happened
    assert counters["runs_created"] == submissions
    assert len({r.run_id for r in runs}) == submissions
    assert again.run_id == runs[0].run_id


def test_expired_oauth_token_is_refreshed_once(workspace_factory, recorder):
    # Long enough that the first use after the grant is within it even on a loaded machine.
    ws = workspace_factory(oauth_clients={"sp-1": "sp-secret"}, oauth_token_lifetime_s=3.0)
    credentials = OAuthM2M(ws.host, "sp-1", "sp-secret", transport=recorder)
    with AirClient(ws.host, credentials=credentials, transport=recorder) as client:
        assert client.whoami().user_name
        # Clock skew: the client still believes the token is valid, the server does not.
        # The event: the workspace refuses the token the client holds.
        held = {"Authorization": recorder.to("scim/v2/Me")[-1].headers["authorization"]}
        deadline = time.monotonic() + 60
        while httpx.get(ws.host + "/api/2.0/preview/scim/v2/Me", headers=held).status_code == 200:
            assert time.monotonic() < deadline, "the token never expired"
            time.sleep(0.1)
        credentials._expires_at = time.monotonic() + 3600
        client.list_runs()
    tokens = recorder.to("/oidc/v1/token")
    assert len(tokens) == 2
    statuses = [e.status for e in recorder.to("jobs/runs/list")]
    assert statuses == [401, 200]


def test_wrong_oauth_secret_names_the_client_not_the_secret(workspace_factory):
    ws = workspace_factory(oauth_clients={"sp-1": "sp-secret"})
    credentials = OAuthM2M(ws.host, "sp-1", "not-the-secret")
    with AirClient(ws.host, credentials=credentials) as client, pytest.raises(AuthError) as caught:
        client.whoami()
    assert "sp-1" in str(caught.value) and "not-the-secret" not in str(caught.value)


def test_token_service_down_is_an_outage_not_refused_credentials(workspace_factory):
    """A 503 from the token endpoint across a renewal is retryable (a waiter waits it out),
    never the AuthError that refused credentials are."""
    ws = workspace_factory(oauth_clients={"sp-1": "sp-secret"})
    ws.admin.set_faults({"oidc/v1/token": {"rate_5xx": 1.0, "status_5xx": 503}})
    credentials = OAuthM2M(ws.host, "sp-1", "sp-secret")
    with pytest.raises(PlatformError) as caught:
        credentials.headers()
    assert not isinstance(caught.value, AuthError) and caught.value.retryable
    assert caught.value.status_code == 503 and "sp-1" in str(caught.value)
    ws.admin.set_faults({})
    assert credentials.headers()["Authorization"].startswith("Bearer ")


def test_revoked_token_fails_at_once_naming_the_host(workspace_factory):
    ws = workspace_factory(token=["admin-token", "user-token"])
    ws.admin.revoke_token("user-token")
    ws.admin.reset_counters()
    with (
        AirClient(ws.host, "user-token", retry=FAST_RETRY) as client,
        pytest.raises(AuthError) as caught,
    ):
        client.get_run(1)
    message = str(caught.value)
    assert ws.host in message and "user-token" not in message
    assert "token argument" in message
    assert ws.admin.counters()["requests"] == {"jobs/runs/get": 1}


def test_secret_and_token_never_leak(workspace_factory, recorder, caplog, tmp_path: Path):
    ws = workspace_factory(token="tok-SENSITIVE-123")
    secret_value = "hf_SECRET_VALUE_987"
    caplog.set_level(logging.DEBUG)
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        refs = client.materialize_secrets(
            {"HF_TOKEN": secret_value}, scope="orch", key_prefix="dag1."
        )
        assert refs == {"HF_TOKEN": "orch/dag1.HF_TOKEN"}
        workload = _workload(
            "secretive", 'test -n "$HF_TOKEN" && echo has-secret', parameters={"p": 1}
        ).with_secrets(refs)
        run = client.submit_workload(workload)
        state = client.wait(run.run_id, poll_interval=0.2)
        assert state.is_success
        logs = [r.body for r in client.iter_logs(run.run_id)]
        assert "has-secret" in logs
        # Every uploaded file, read back from the workspace.
        uploads = [e for e in recorder.exchanges if "import-file" in e.path]
        exported = [
            httpx.get(
                f"{ws.host}/api/2.0/workspace/export",
                params={
                    "path": "/" + e.path.split("/import-file/", 1)[1],
                    "direct_download": "true",
                },
                headers={"Authorization": f"Bearer {ws.token}"},
            ).content
            for e in uploads
        ]
    assert uploads and all(exported)
    for blob in [*exported, *(e.body for e in recorder.exchanges if "secrets/put" not in e.path)]:
        assert secret_value.encode() not in blob
        assert ws.token.encode() not in blob
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert caplog.records and secret_value not in text and ws.token not in text
    request_log = str(ws.admin.request_log(limit=10_000))
    assert secret_value not in request_log and ws.token not in request_log


def test_submit_critical_path_is_four_round_trips(workspace_factory, recorder):
    ws = workspace_factory(faults={"*": {"latency_ms": 50}})
    containers = [
        {
            "name": f"role{i}",
            "ranks": [i],
            "unity_catalog_image": "main.rl.img:1",
            "command": f"echo role {i}",
        }
        for i in range(4)
    ]
    workload = load_workload(
        {
            "experiment_name": "four",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 4},
            "containers": containers,
            "parameters": {"lr": 0.001, "epochs": 3},
            "env_variables": {"A": "1"},
        }
    )
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        client.submit_workload(workload)
    uploads = recorder.to("import-file")
    assert len(uploads) >= 9  # config + per-container command/hyperparameters/env
    phases = recorder.round_trips()
    print(f"submit: {len(recorder.exchanges)} requests in {phases} sequential round trips")
    assert phases <= 4


def test_scheme_less_host_of_a_plain_http_workspace_fails_at_once(workspace_factory, recorder):
    """``127.0.0.1:PORT`` gets https:// assumed; the local workspace speaks plain HTTP. The
    failed TLS handshake is not retried: one probe without credentials finds plain HTTP, and
    the error says which host to use."""
    import asyncio

    from air_runtime import AsyncAirClient, ConfigurationError

    ws = workspace_factory()
    bare = ws.host.removeprefix("http://")
    fix = f"use http://{bare} as the host"
    started = time.monotonic()
    with (
        AirClient(bare, ws.token, transport=recorder) as client,
        pytest.raises(ConfigurationError) as caught,
    ):
        client.whoami()
    assert fix in str(caught.value) and ws.token not in str(caught.value)
    assert not caught.value.retryable
    # Two requests: the TLS attempt, then the probe (plain HTTP, no token).
    assert [(e.path, e.status) for e in recorder.exchanges] == [
        ("/api/2.0/preview/scim/v2/Me", None),
        ("/", 404),
    ]
    assert "authorization" not in recorder.exchanges[1].headers

    async def async_whoami() -> None:
        async with AsyncAirClient(bare, ws.token) as aclient:
            await aclient.whoami()

    with pytest.raises(ConfigurationError, match="use http://"):
        asyncio.run(async_whoami())
    assert time.monotonic() - started < 45  # was over a minute of TLS retries


def test_a_wait_sleeps_the_clients_poll_interval_unless_it_names_its_own(
    workspace_factory, monkeypatch, tmp_path: Path
):
    """``AirClient(poll_interval=...)`` is every wait's default (the Airflow hook sets it
    from ``[air] default_poll_interval``); a wait's own ``poll_interval`` wins."""
    import air_runtime.client._client as client_module

    ws = workspace_factory()
    asked: list[float] = []
    paused = tmp_path / "paused"
    sleep = time.sleep

    def recorded_sleep(seconds: float) -> None:  # what the wait asks for, slept briefly
        asked.append(seconds)
        paused.touch()  # the run ends once the wait has paused at least once
        sleep(min(seconds, 0.05))

    monkeypatch.setattr(client_module.time, "sleep", recorded_sleep)
    command = f"until [ -e {paused} ]; do sleep 0.05; done"
    with AirClient(ws.host, ws.token, poll_interval=0.7) as client:
        assert client.poll_interval == 0.7
        run = client.submit_workload(_workload("interval", command=command))
        assert client.wait(run.run_id).is_success
        assert asked and all(0.63 <= s <= 0.77 for s in asked), asked  # jittered by 10%
        asked.clear()
        paused.unlink()
        run = client.submit_workload(_workload("own-interval", command=command))
        assert client.wait(run.run_id, poll_interval=0.3).is_success
        assert asked and all(0.27 <= s <= 0.33 for s in asked), asked


def _me_requests(ws) -> int:
    return sum(1 for e in ws.admin.request_log() if e["path"].endswith("/scim/v2/Me"))


def test_an_identity_asked_ahead_is_asked_once(workspace_factory):
    """``prefetch_identity`` sends the submit's first request early; the submit waits for
    its answer instead of asking again (the same requests as without it)."""
    ws = workspace_factory()
    with AirClient(ws.host, ws.token) as client:
        client.prefetch_identity()
        client.prefetch_identity()  # one in flight is enough
        run = client.submit_workload(_workload("ahead"))
        assert client.wait(run.run_id, poll_interval=0.2).is_success
    assert _me_requests(ws) == 1


def test_a_failed_identity_ahead_fails_the_submit_with_its_own_error(workspace_factory):
    ws = workspace_factory()
    with AirClient(ws.host, "not-a-token") as client:
        client.prefetch_identity()
        with pytest.raises(AuthError):
            client.submit_workload(_workload("refused"))
    assert _me_requests(ws) == 1  # the answer to the request made ahead is the submit's
    with AirClient(ws.host, "not-a-token") as client:  # asked again once that error is raised
        client.prefetch_identity()
        with pytest.raises(AuthError):
            client.whoami()
        with pytest.raises(AuthError):
            client.whoami()
    assert _me_requests(ws) == 3


def test_the_async_client_asks_its_identity_ahead_once(workspace_factory):
    import asyncio

    from air_runtime import AsyncAirClient

    ws = workspace_factory()

    async def submit() -> int:
        async with AsyncAirClient(ws.host, ws.token) as client:
            client.prefetch_identity()
            run = await client.submit_workload(_workload("ahead-async"))
            return run.run_id

    assert asyncio.run(submit()) > 0
    assert _me_requests(ws) == 1
