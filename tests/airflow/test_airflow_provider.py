"""Provider registration, Dag imports, trigger serialization, and the parse-time cost rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_provider_info_matches_airflow_schema():
    import jsonschema
    from airflow import __file__ as airflow_init
    from airflow_air.get_provider_info import get_provider_info

    schema = json.loads((Path(airflow_init).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "air-orchestration"
    assert set(info["config"]["air"]["options"]) == {
        "default_poll_interval",
        "trigger_first_poll_delay",
        "defer_timeout_grace",
        "workspace_request_budget",
        "completed_log_lines",
        "live_lines",
        "live_lines_interval",
        "live_lines_per_read",
        "live_lines_share",
        "live_progress_interval",
        "live_progress_share",
        "default_secret_scope",
        "deployment_namespace",
        "submit_in_triggerer",
        "pool_slots_from_accelerators",
        "preload_task_modules",
    }


def test_airflow_providers_list_shows_the_provider(airflow_db, capsys):
    # `airflow providers list --output json`, parsed and run by Airflow's CLI in this process
    # (a new interpreter would only add Airflow's import time).
    from airflow.cli import cli_parser

    args = cli_parser.get_parser().parse_args(["providers", "list", "--output", "json"])
    capsys.readouterr()
    args.func(args)
    out = capsys.readouterr().out
    packages = {p["package_name"]: p for p in json.loads(out[out.index("[") :])}
    assert packages["air-orchestration"]["version"] == "0.1.0"


def test_repository_dags_import_without_errors(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert {"scheduled_training", "rl_pipeline"} <= set(bag.dag_ids)
    rl = bag.get_dag("rl_pipeline")
    assert {"rl.submit", "rl.grpo", "rl.evaluate"} <= set(rl.task_ids)
    assert rl.get_task("rl.grpo").upstream_task_ids == {"rl.submit"}


def test_run_trigger_serialization_round_trip():
    from airflow_air.triggers import AirImageTrigger, AirRunTrigger

    trigger = AirRunTrigger(
        42,
        run_page_url="http://127.0.0.1:1/jobs/runs/42",
        databricks_conn_id="ws",
        poll_interval=3,
        deadline=1_900_000_000.5,
        cancel_on_kill=False,
        task_key="train",
        first_poll_at=1_800_000_000.25,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_air.triggers.AirRunTrigger"
    json.dumps(kwargs)  # small and plain: the triggerer stores it in the database
    again = AirRunTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    # The wait's policy is one value, stored whole.
    assert kwargs["wait"]["deadline"] == 1_900_000_000.5 and kwargs["wait"]["task_key"] == "train"
    assert "deadline" not in kwargs and "task_key" not in kwargs
    assert (again.deadline, again.task_key) == (1_900_000_000.5, "train")

    # A trigger an earlier version stored has the policy's keys flat: read the same.
    flat = {k: v for k, v in kwargs.items() if k != "wait"}
    flat.update(
        deadline=1_900_000_000.5,
        task_key="train",
        max_gpu_hours=2.5,
        failure_policy={"infrastructure": "platform", "deterministic": "platform"},
        sweep=None,
    )
    earlier = AirRunTrigger(**flat)
    assert earlier.wait_policy.max_gpu_hours == 2.5
    assert earlier.wait_policy.task_key == "train" and earlier.deadline == 1_900_000_000.5
    assert not earlier.wait_policy.failure_policy.examines  # every class left to the platform
    with pytest.raises(TypeError, match="max_gpu_hour"):
        AirRunTrigger(42, max_gpu_hour=1.0)  # a misspelt key is refused, not dropped

    image = AirImageTrigger(
        "docker.io/library/ubuntu:latest", deadline=None, first_poll_at=1_800_000_000.25
    )
    path, image_kwargs = image.serialize()
    assert AirImageTrigger(**image_kwargs).serialize() == (path, image_kwargs)


@pytest.mark.slow
def test_importing_the_operators_module_stays_cheap():
    """P2: a Dag file's import of the operators must not load the HTTP client, the core
    client, the hook or the triggers. What Airflow's own classes load is Airflow's (its
    BaseOperator loads pydantic's TypeAdapter from 3.4 on): counted from after them."""
    code = (
        "import sys; from airflow.sdk import BaseOperator, BaseOperatorLink, TaskGroup; "
        "before = set(sys.modules); "
        "from airflow_air.operators import AirRunOperator; "
        "from airflow_air.workflow import AirWorkflowTaskGroup; "
        "new = set(sys.modules) - before; "
        "print(sorted(m for m in new if m.split('.')[0] in ('httpx', 'pydantic', 'air_runtime') "
        "or m in ('airflow_air.hooks', 'airflow_air.triggers')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_a_submitting_try_imports_only_what_its_submit_needs():
    """Every task process imports what its try runs: a workload with no image, no code
    snapshot and no refused key loads neither the image flows, the Docker reference parser,
    tar, difflib nor the templating helpers of the core; a try that submits and defers
    loads none of what only waiting or ``airo`` reads (run views, pools, log reads, the dry
    run, live lines, training progress)."""
    code = (
        "import sys, airflow.sdk; import airflow_air._task_run; "
        "from air_runtime import AirClient, Submission, build_plan, load_workload; "
        "from airflow_air.triggers import AirRunTrigger; "
        "w = load_workload({'experiment_name': 'e', 'command': 'python t.py', "
        "'compute': {'accelerator_type': 'GPU_1xA10', 'num_accelerators': 1}}); "
        "build_plan(w, user_name='u@example.com', idempotency_token='t'); "
        "print(sorted(m for m in ('tarfile', 'difflib', 'air_runtime.client._images', "
        "'air_runtime._docker_ref', 'air_runtime._docker_credentials', "
        "'air_runtime._templates', 'air_runtime.cli', 'air_runtime.cli._run_views', "
        "'air_runtime.client._pools', 'air_runtime.client._log_reads', "
        "'air_runtime.client._dry_run', 'air_runtime.client._live_lines', "
        "'air_runtime.client._training_progress', 'air_runtime._progress', "
        "'air_runtime._watcher') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("conn", [{"extra": json.dumps({"token": "t"})}, {"password": "t"}])
def test_hook_reads_databricks_connections(conn):
    from airflow.sdk import Connection
    from airflow_air.hooks import access_from_connection

    access = access_from_connection(
        Connection(conn_id="c", conn_type="databricks", host="adb-1.azuredatabricks.net", **conn)
    )
    assert access.host == "https://adb-1.azuredatabricks.net"
    assert access.credentials.headers() == {"Authorization": "Bearer t"}


def test_hook_oauth_service_principal():
    from airflow.sdk import Connection
    from airflow_air.hooks import access_from_connection

    from air_runtime import OAuthM2M

    access = access_from_connection(
        Connection(
            conn_id="sp",
            conn_type="databricks",
            host="http://127.0.0.1:9",
            login="client-id",
            password="client-secret",
            extra=json.dumps({"service_principal_oauth": True}),
        )
    )
    assert isinstance(access.credentials, OAuthM2M)
    assert access.credentials.client_id == "client-id"


def test_first_poll_delay_outlasts_the_workers_heartbeat_by_default(monkeypatch):
    from airflow_air.hooks import first_poll_delay

    monkeypatch.delenv("AIRFLOW__AIR__TRIGGER_FIRST_POLL_DELAY", raising=False)
    assert first_poll_delay() == 10.0  # twice [workers] min_heartbeat_interval (5 s)
    monkeypatch.setenv("AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL", "3")
    assert first_poll_delay() == 6.0
    monkeypatch.setenv("AIRFLOW__AIR__TRIGGER_FIRST_POLL_DELAY", "2.5")
    assert first_poll_delay() == 2.5


def test_the_hooks_clients_wait_at_the_configured_interval(monkeypatch):
    """A task without ``poll_interval`` waits at ``[air] default_poll_interval``: the hook's
    clients carry it (``AirClient.poll_interval``)."""
    import asyncio

    from airflow_air.hooks import AirHook, run_lookups_in_loop

    from air_runtime import AsyncAirClient

    monkeypatch.setenv(
        "AIRFLOW_CONN_AIR_INTERVAL",
        json.dumps({"conn_type": "databricks", "host": "http://127.0.0.1:9", "password": "t"}),
    )
    monkeypatch.setenv("AIRFLOW__AIR__DEFAULT_POLL_INTERVAL", "0.25")
    hook = AirHook("air_interval")
    with hook.get_client() as client:
        assert client.poll_interval == 0.25

    async def async_interval() -> float:
        async with await run_lookups_in_loop(hook.client_lookup(AsyncAirClient)) as client:
            return client.poll_interval

    assert asyncio.run(async_interval()) == 0.25


def test_an_operators_own_poll_interval_wins_over_the_hooks(monkeypatch):
    """What a run's and an image registration's wait (in the worker or deferred) poll at."""
    from airflow_air._deferral import poll_interval_of
    from airflow_air.hooks import AirHook
    from airflow_air.operators import AirRegisterImageOperator, AirRunOperator

    monkeypatch.setenv(
        "AIRFLOW_CONN_AIR_INTERVAL",
        json.dumps({"conn_type": "databricks", "host": "http://127.0.0.1:9", "password": "t"}),
    )
    monkeypatch.setenv("AIRFLOW__AIR__DEFAULT_POLL_INTERVAL", "0.25")
    tasks = [
        AirRunOperator(task_id="run", workload={"command": "true"}),
        AirRegisterImageOperator(task_id="image", image="python:3.11"),
    ]
    with AirHook("air_interval").get_client() as client:
        for task in tasks:
            assert poll_interval_of(task, client) == 0.25
            task.poll_interval = 7.0
            assert poll_interval_of(task, client) == 7.0


@pytest.mark.parametrize(("map_index", "index"), [(-1, None), (None, None), (3, 3)])
def test_a_task_instances_submission_is_named_in_its_deployment(monkeypatch, map_index, index):
    from types import SimpleNamespace

    from airflow_air._deployment import submission_key

    from air_runtime import SubmissionKey

    monkeypatch.setenv("AIRFLOW__AIR__DEPLOYMENT_NAMESPACE", "pinned-prod")
    ti = SimpleNamespace(dag_id="sweep", run_id="manual__1", map_index=map_index)
    assert submission_key({"ti": ti}, "trial") == SubmissionKey(  # type: ignore[arg-type]
        "airflow", "pinned-prod", "sweep", "manual__1", "trial", index
    )


def test_the_trigger_event_is_one_value_and_an_earlier_version_s_payload_reads_the_same():
    from airflow_air._run_event import RunEvent
    from airflow_air.links import LinkXComs

    from air_runtime import RunOutcome, RunStatus

    outcome = RunOutcome(RunStatus.BUDGET, 42, "http://127.0.0.1:1/jobs/runs/42", gpu_hours=1.5)
    event = RunEvent(
        outcome,
        links=LinkXComs({"run_id": 42}, run_pending=False),
        submission={"key": {"orchestrator": "airflow"}, "scopes": ["s"]},
        shown_lines={"train/0/0": 17},
    )
    payload = event.to_payload()
    assert json.loads(json.dumps(payload)) == payload  # Airflow stores it as JSON
    again = RunEvent.from_payload(payload)
    assert again.outcome == outcome and again.outcome.status is RunStatus.BUDGET
    assert again.links.written == {"run_id": 42} and not again.refused
    assert again.shown_lines == {"train/0/0": 17} and again.submission == event.submission

    # As a version before RunEvent stored it: the outcome's fields flat, its own keys beside.
    stored = {
        "status": "failed",
        "run_id": 7,
        "run_page_url": "u",
        "message": "boom",
        "attempt": 2,  # before attempts were counted from 0
        "run_xcoms_pending": True,
        "refused": True,
        "shown_lines": {"a/0/0": 5},
    }
    earlier = RunEvent.from_payload(stored)
    assert earlier.outcome.status is RunStatus.FAILED and earlier.outcome.attempt_number == 1
    assert earlier.links.run_pending and earlier.refused and earlier.shown_lines == {"a/0/0": 5}
    assert earlier.submission is None
