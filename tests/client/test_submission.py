"""``air_runtime.Submission``: the life of one submission at the transport seam.

The requests go to a real local workspace; only the failures cannot be produced there on
cue, so a transport answers the chosen request with the platform's refusal instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from air_runtime import (
    AirClient,
    AirError,
    AsyncAirClient,
    RunOutcome,
    RunStatus,
    Stage,
    Submission,
    SubmissionKey,
    load_workload,
    make_idempotency_token,
)
from air_runtime.client import SubmissionSecrets

SCOPE = "orch"
VALUES = {"HF_TOKEN": "hf_value_one", "WANDB_KEY": "wandb_value_two"}


class Refusing(httpx.HTTPTransport):
    """A real transport that answers the requests ``refuse`` picks, once armed, with a 400."""

    def __init__(self, refuse: Callable[[httpx.Request, bytes], bool], times: int | None) -> None:
        super().__init__()
        self.refuse = refuse
        self.times = times  # None: every matching request
        self.armed = False
        self.refused = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        more = self.times is None or self.refused < self.times
        if self.armed and more and self.refuse(request, body):
            self.refused += 1
            return httpx.Response(
                400,
                json={"error_code": "INVALID_PARAMETER_VALUE", "message": "refused on cue"},
                request=request,
            )
        return super().handle_request(request)


class Lines:
    def __init__(self) -> None:
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, message: str) -> None:
        self.infos.append(message)

    def warning(self, message: str) -> None:
        self.warnings.append(message)


def _workload(name: str, command: str):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": command,
        }
    )


def _key(run: str) -> SubmissionKey:
    return SubmissionKey("airflow", "ns-1", "nightly", run, "train", None)


def _keys(client: AirClient) -> set[str]:
    return {s.key for s in client.list_secrets(SCOPE)}


def _is(path: str, method: str = "POST") -> Callable[[httpx.Request, bytes], bool]:
    return lambda request, body: request.method == method and request.url.path.endswith(path)


def _marker_put(request: httpx.Request, body: bytes) -> bool:
    return request.url.path.endswith("/secrets/put") and b".run-" in body


def _value_put(request: httpx.Request, body: bytes) -> bool:
    return request.url.path.endswith("/secrets/put") and b".run-" not in body


# (failing step, which request fails and how often, the warning it gives)
CASES = [
    # The sweep's list of the scope (the first request of prepare).
    ("sweep", _is("/secrets/list", "GET"), 1, "could not delete the secret keys earlier runs"),
    ("store", _value_put, None, None),
    ("mark", _marker_put, None, "could not record run"),
    ("delete", _is("/secrets/delete"), None, "could not delete the secret keys of run"),
]


@pytest.mark.parametrize(("step", "refuse", "times", "warning"), CASES, ids=[c[0] for c in CASES])
def test_each_secret_step_failing(local_workspace, step, refuse, times, warning):
    transport = Refusing(refuse, times)
    host, token = local_workspace.host, local_workspace.token
    with AirClient(host, token, transport=transport) as client:
        # An earlier run of the same task that ended and left its keys behind.
        earlier = Submission(_key("scheduled__1"))
        workload = earlier.prepare(client, _workload("train", "true"), VALUES, scope=SCOPE)
        first = earlier.submit(client, workload, "0.0")
        client.wait(first.run_id, poll_interval=0.1, timeout=120)
        left_behind = {k for k in _keys(client) if k.startswith(earlier.secrets[0].prefix)}
        assert len(left_behind) == 3  # two values and the marker

        lines = Lines()
        submission = Submission(_key("scheduled__2"), log=lines)
        transport.armed = step != "delete"  # the deletes of the sweep must go through
        if step == "store":
            with pytest.raises(AirError, match="refused on cue"):
                submission.prepare(client, _workload("train", "true"), VALUES, scope=SCOPE)
            transport.armed = False
            assert local_workspace.admin.counters()["runs_created"] == 1  # nothing submitted
            assert not any(
                k.startswith(submission.key.secrets(SCOPE).prefix) for k in _keys(client)
            )
            assert lines.warnings == []
            return
        workload = submission.prepare(client, _workload("train", "true"), VALUES, scope=SCOPE)
        # The workload carries references only, never the values.
        assert set(workload.secrets) == set(VALUES)
        assert not any(v in workload.model_dump_json() for v in VALUES.values())
        submitted = submission.submit(client, workload, "0.0")
        state = client.wait(submitted.run_id, poll_interval=0.1, timeout=120)
        outcome = submission.outcome(client, state)
        assert outcome.status == "success" and outcome.run_id == submitted.run_id
        transport.armed = True
        finished = submission.finish(client, state)
        transport.armed = False

        assert transport.refused >= 1
        assert [w for w in lines.warnings if warning in w], lines.warnings
        for line in lines.warnings + lines.infos:
            assert not any(value in line for value in VALUES.values())
        mine = {k for k in _keys(client) if k.startswith(submission.secrets[0].prefix)}
        earlier_left = {k for k in _keys(client) if k in left_behind}
        if step == "sweep":
            assert earlier_left == left_behind  # kept for the next sweep, not lost
            assert finished and not mine
        elif step == "mark":
            assert earlier_left == set()
            assert finished and not mine  # deleted at the end all the same
        elif step == "delete":
            assert earlier_left == set()
            assert not finished and len(mine) == 3  # left for the next sweep
            # ... which deletes them once the run has ended.
            assert Submission(_key("scheduled__3")).prepare(
                client, _workload("train", "true"), VALUES, scope=SCOPE
            )
            assert not any(k in mine for k in _keys(client))


def test_a_stage_ending_before_its_run_keeps_the_keys_until_the_run_ends(
    local_workspace, tmp_path: Path
):
    release = tmp_path / "release"
    host, token = local_workspace.host, local_workspace.token
    with AirClient(host, token) as client:
        submission = Submission(_key("scheduled__wf"))
        first = submission.prepare(
            client, _workload("first", "true"), VALUES, scope=SCOPE, stage="first"
        )
        second = submission.prepare(
            client,
            _workload("second", f"while [ ! -e {release} ]; do sleep 0.05; done"),
            VALUES,
            scope=SCOPE,
            stage="second",
        )
        submitted = submission.submit(
            client,
            [Stage("first", first), Stage("second", second, depends_on=("first",))],
            "0.0",
            run_name="wf",
        )
        prefix = submission.secrets[0].prefix
        assert len([k for k in _keys(client) if k.startswith(prefix)]) == 5  # 2 x 2 + marker

        # The one stage wait: the first stage ends while the run goes on.
        state = client.wait(submitted.run_id, task_key="first", poll_interval=0.1, timeout=120)
        assert not state.is_terminal
        outcome = submission.outcome(client, state, "first")
        assert (outcome.status, outcome.task_key, outcome.result_state) == (
            "success",
            "first",
            "SUCCESS",
        )
        assert outcome.attempt_number == 0 and outcome.task_run_id is not None
        assert submission.finish(client, state) is False
        assert len([k for k in _keys(client) if k.startswith(prefix)]) == 5

        release.touch()
        ended = client.wait(submitted.run_id, poll_interval=0.1, timeout=120)
        assert ended.is_success
        assert submission.finish(client, ended) is True
        assert not any(k.startswith(prefix) for k in _keys(client))


async def test_finish_from_async_code_carried_as_json(local_workspace):
    """What a trigger does: the submission crosses a process boundary as JSON and its keys
    are deleted from the event loop once the run has ended."""
    host, token = local_workspace.host, local_workspace.token
    with AirClient(host, token) as client:
        submission = Submission(_key("scheduled__async"))
        workload = submission.prepare(client, _workload("train", "true"), VALUES, scope=SCOPE)
        submitted = submission.submit(client, workload, "0.0")
        prefix = submission.secrets[0].prefix
        carried = Submission.from_json(submission.to_json())
        assert carried == submission
        async with AsyncAirClient(host, token) as aclient:
            state = await aclient.wait(submitted.run_id, poll_interval=0.1, timeout=120)
            outcome = await RunOutcome.aread(aclient, state)
            assert outcome.status == "success"
            assert await carried.afinish(aclient, state) is True
        assert not any(k.startswith(prefix) for k in _keys(client))


def test_the_outcome_event_form_is_stable():
    # An event as the trigger stored it before RunOutcome existed (airflow_air Outcome).
    stored = {
        "status": "failed",
        "run_id": 12,
        "run_page_url": "https://ws/#job/1/run/12",
        "result_state": "FAILED",
        "message": "boom",
        "task_key": "train",
        "mlflow_experiment_id": "3",
        "gpu_hours": 0.5,
    }
    outcome = RunOutcome.from_event(stored)
    assert (outcome.status, outcome.run_id, outcome.message, outcome.gpu_hours) == (
        "failed",
        12,
        "boom",
        0.5,
    )
    assert outcome.attempt_number is None and outcome.mlflow_run_id is None
    assert outcome.to_event() == stored  # nothing added that was not there
    assert RunOutcome.from_event({**stored, "from_a_newer_version": 1}) == outcome


def test_an_outcome_s_status_is_a_run_status_stored_as_its_plain_value():
    import json

    url = "https://ws/#job/1/run/12"
    outcome = RunOutcome("budget", 12, url)  # a stored event's string
    assert outcome.status is RunStatus.BUDGET and not outcome.succeeded
    event = outcome.to_event()
    assert json.loads(json.dumps(event))["status"] == "budget"
    assert type(event["status"]) is str  # Airflow's trigger table stores plain JSON
    assert RunOutcome.from_event(event) == outcome
    assert RunOutcome(RunStatus.SUCCESS, 12, url).succeeded
    # A status a newer version wrote and this one does not know is no success.
    newer = RunOutcome.from_event({"status": "paused_for_later", "run_id": 12, "run_page_url": url})
    assert newer.status is RunStatus.ERROR and not newer.succeeded
    assert set(RunOutcome.STOPPED_STATUSES) == {RunStatus.BUDGET, RunStatus.RETRIES_STOPPED}


def test_an_outcome_summary_is_one_line_for_a_log():
    url = "https://ws/#job/1/run/12"
    assert (
        RunOutcome("success", 12, url, "SUCCESS", gpu_hours=0.5).summary()
        == f"Run 12 succeeded (0.5 GPU-hours): {url}"
    )
    assert (
        RunOutcome("success", 12, url, "SUCCESS", task_key="grpo").summary()
        == f"Stage grpo of run 12 succeeded: {url}"
    )
    assert RunOutcome("failed", 12, url, "FAILED", message="Node 1 failed").summary() == (
        "Node 1 failed"
    )
    assert RunOutcome("error", 12, url).summary() == "Run 12 ended: error"


def test_the_key_derives_tokens_per_generation_and_secret_names():
    key = _key("scheduled__x")
    # The same tokens and key names as before the key existed: a retry after an upgrade
    # still gets its run back, and a sweep still finds the keys earlier runs left.
    assert key.idempotency_token("0.0") == make_idempotency_token(
        "airflow", "nightly", "scheduled__x", "train", None, "0.0", namespace="ns-1"
    )
    assert key.secrets(SCOPE) == SubmissionSecrets.of(
        SCOPE,
        namespace="ns-1",
        orchestrator="airflow",
        pipeline_id="nightly",
        task_key="train",
        run_id="scheduled__x",
        map_index=None,
    )
    # Pinned to its text, not compared with another way of computing it today: the name a
    # run of an earlier version wrote, which a sweep must still find.
    assert key.secrets(SCOPE).key("HF_TOKEN") == "airo.train.e6feb02ec823.286c290c5f11.HF_TOKEN"
    assert key.idempotency_token("0.0") != key.idempotency_token("0.1")
    assert key.idempotency_token("0.0") == _key("scheduled__x").idempotency_token("0.0")
    assert key.secrets(SCOPE).prefix != _key("scheduled__y").secrets(SCOPE).prefix
    other_index = SubmissionKey("airflow", "ns-1", "nightly", "scheduled__x", "train", 3)
    assert other_index.secrets(SCOPE).prefix != key.secrets(SCOPE).prefix


def test_the_sync_and_async_clients_offer_the_same_operations():
    def operations(cls: type) -> set[str]:
        return {
            name
            for name, member in inspect.getmembers(cls, callable)
            if not name.startswith("_") and name not in ("close", "aclose")
        }

    assert operations(AirClient) == operations(AsyncAirClient)


class PublicOnly:
    """A client seen only through its public attributes (``run_flow`` among them)."""

    def __init__(self, client: AirClient | AsyncAirClient) -> None:
        self._client = client

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(f"{name} is private to the client")
        return getattr(self._client, name)


async def test_a_submission_uses_the_client_through_its_public_api_only(local_workspace):
    host, token = local_workspace.host, local_workspace.token
    async with AsyncAirClient(host, token) as async_client:
        with AirClient(host, token) as sync_client:
            client: AirClient = PublicOnly(sync_client)  # type: ignore[assignment]
            aclient: AsyncAirClient = PublicOnly(async_client)  # type: ignore[assignment]
            submission = Submission(_key("public__1"))
            workload = submission.prepare(client, _workload("train", "true"), VALUES, scope=SCOPE)
            submitted = submission.submit(client, workload, "0.0")
            state = sync_client.wait(submitted.run_id, poll_interval=0.1, timeout=120)
            assert submission.outcome(client, state).succeeded
            assert RunOutcome.read(client, state).run_id == submitted.run_id
            assert submission.finish(client, state)
            assert not any(k.startswith(submission.secrets[0].prefix) for k in _keys(sync_client))

            second = Submission(_key("public__2"))
            assert second.plan(client, _workload("train", "sleep 30"), "0.0").submit_body
            run = second.submit(client, _workload("train", "sleep 30"), "0.0")
            ended = await second.acancel(aclient, wait_s=60, poll_interval=0.1)
            assert ended is not None and ended.result_state == "CANCELED"
            assert (await second.aoutcome(aclient, ended)).status == "failed"
            assert (await RunOutcome.aread(aclient, ended)).run_id == run.run_id
            assert await second.afinish(aclient, ended)
