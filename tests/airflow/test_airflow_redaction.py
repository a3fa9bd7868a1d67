"""A failing workload that prints an orchestrator secret (plainly, base64, URL-encoded,
JSON-escaped): the failure message carries its last log lines, yet neither the value nor
its encodings reach the task log (captured before Airflow's own masker), the task's
exception, XComs or the trigger's event and log lines."""

from __future__ import annotations

import asyncio
import base64
import json
from urllib.parse import quote, quote_plus

import pytest
from airflow_runs import all_xcom_text, load_test_dag, task_states

from air_runtime import AirClient, load_workload

HF_TOKEN = 'hf_Redact/Me+Now "please"&ok=1'
API_KEY = "api-key-redaction-0b7e-4d1f"
PRINT_ENCODINGS = "\n".join(
    [
        'printf \'plain %s %s\\n\' "$HF_TOKEN" "$API_KEY"',
        'printf \'base64 %s\\n\' "$(printf %s "$HF_TOKEN" | base64 -w0)"',
        'python3 -c \'import json, os, urllib.parse as u; v = os.environ["HF_TOKEN"]; '
        'print("url", u.quote(v, safe=""), u.quote_plus(v)); print("json", json.dumps(v))\'',
        "exit 1",
    ]
)


def _forms(value: str) -> dict[str, str]:
    return {
        "plain": value,
        "base64": base64.b64encode(value.encode()).decode(),
        "url": quote(value, safe=""),
        "url_plus": quote_plus(value),
        "json": json.dumps(value)[1:-1],
    }


FORMS = {f"{name} {kind}": v for name in (HF_TOKEN, API_KEY) for kind, v in _forms(name).items()}


def _leaks(text: str) -> dict[str, int]:
    return {form: text.count(value) for form, value in FORMS.items() if value in text}


@pytest.fixture
def secrets(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_HF_REDACT", json.dumps({"conn_type": "generic", "password": HF_TOKEN})
    )
    monkeypatch.setenv("AIRFLOW_VAR_AIR_REDACT_KEY", API_KEY)


@pytest.mark.parametrize(
    ("dag_id", "failing"),
    [
        ("air_test_redaction_sync", ["run"]),
        ("air_test_redaction_deferred", ["run"]),
        ("air_test_redaction_workflow", ["pipeline.stage_sync", "pipeline.stage_deferred"]),
    ],
)
def test_failure_messages_and_logs_are_redacted(workspace, task_log, secrets, dag_id, failing):
    dag = load_test_dag(dag_id)
    dag_run = dag.test(run_conf={"command": PRINT_ENCODINGS})
    states = task_states(dag_run)
    assert all(states[task] == "failed" for task in failing), states

    # The task's exception, as logged ("Task failed with exception", traceback formatted).
    messages = "\n".join(
        str(error)
        for e in task_log.events
        for error in (e.get("exception"), e.get("exc_info"))
        if error and not isinstance(error, bool)
    )
    # The failure message did carry the printed lines, redacted.
    assert messages.count("plain *** ***") >= len(failing), messages
    assert "base64 ***" in messages and 'json "***"' in messages
    assert _leaks(messages) == {}
    assert _leaks(task_log.text()) == {}
    assert _leaks(all_xcom_text(dag_id)) == {}
    # The workloads did print the values: the platform's own node logs keep them.
    with AirClient(workspace.host, workspace.token) as client:
        (run,) = client.list_runs(active_only=False)[0]
        tasks = [t.run_id for t in client.get_run(run.run_id).tasks if t.run_id]
        node_logs = "\n".join(
            record.body for run_id in tasks for record in client.iter_logs(run_id, node=0)
        )
    assert node_logs.count(f"plain {HF_TOKEN} {API_KEY}") == len(failing)


def test_trigger_redacts_its_event_and_log_lines(workspace, task_log, secrets):
    from airflow_air.triggers import AirRunTrigger

    workload = load_workload(
        {
            "experiment_name": "trigger-redaction",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "env_variables": {"HF_TOKEN": HF_TOKEN, "API_KEY": API_KEY},
            "command": PRINT_ENCODINGS,
        }
    )
    with AirClient(workspace.host, workspace.token) as client:
        run = client.submit_workload(workload)
    trigger = AirRunTrigger(
        run.run_id,
        run_page_url=run.run_page_url,
        poll_interval=0.2,
        secret_env={"HF_TOKEN": "conn:hf_redact:password", "API_KEY": "var:air_redact_key"},
    )
    _, kwargs = trigger.serialize()
    stored = json.dumps(kwargs)
    assert _leaks(stored) == {} and "conn:hf_redact:password" in stored  # references only
    # As the triggerer builds it: from the stored kwargs.
    again = AirRunTrigger(**json.loads(stored))

    async def first_event() -> dict:
        async for event in again.run():
            return dict(event.payload)
        raise AssertionError("no event")

    event = asyncio.run(first_event())
    assert event["status"] == "failed"
    assert "plain *** ***" in event["message"] and "base64 ***" in event["message"]
    assert _leaks(json.dumps(event)) == {}
    assert _leaks(task_log.text()) == {}
    # The token of the connection is redacted as well.
    assert workspace.token not in json.dumps(event)


def test_image_registration_failures_hide_the_registry_password(airflow_db, monkeypatch):
    from airflow_air.exceptions import AirConfigurationError
    from airflow_air.operators import AirRegisterImageOperator

    password = "dckr_pat_Registry+Secret/42"
    monkeypatch.setenv(
        "AIRFLOW_CONN_DOCKER_REDACT",
        json.dumps({"conn_type": "generic", "login": "acme", "password": password}),
    )
    operator = AirRegisterImageOperator(
        task_id="register", image="acme/private:1", docker_conn_id="docker_redact"
    )
    basic = base64.b64encode(f"acme:{password}".encode()).decode()
    event = {
        "status": "failed",
        "image": "docker.io/acme/private:1",
        "message": f"registration FAILED: pull with {password} (auth {basic}) was refused",
    }
    with pytest.raises(AirConfigurationError) as caught:
        operator.execute_complete({}, event)
    message = str(caught.value)
    assert "pull with *** (auth ***) was refused" in message
    assert password not in message and basic not in message
