"""A failing workload prints an orchestrator secret plainly, base64, URL-encoded and
JSON-escaped: the failure (its description carries the last log lines), the event log, the
materialization metadata and the compute logs show ``***`` for every one of them, in a
single asset and in a multi-asset workflow (one stage fails, the other succeeds)."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import dagster as dg
from dagster_checks import compute_logs, event_log_text, failure_data, node_log, workload

from dagster_air import AirStage, build_air_assets

SECRET = 'wandb/S3cr3t+value "quoted"&more=1'
PRINT_ENCODINGS = "\n".join(
    [
        'echo "plain $WANDB_API_KEY"',
        'echo "base64 $(printf %s "$WANDB_API_KEY" | base64 -w0)"',
        'python3 -c \'import json, os, urllib.parse as u; v = os.environ["WANDB_API_KEY"]; '
        'print("url", u.quote(v, safe=""), u.quote_plus(v)); print("json", json.dumps(v))\'',
    ]
)
FORMS = {
    "plain": SECRET,
    "base64": base64.b64encode(SECRET.encode()).decode(),
    "url": quote(SECRET, safe=""),
    "url_plus": quote_plus(SECRET),
    "json": json.dumps(SECRET)[1:-1],
}


def _leaks(text: str) -> dict[str, int]:
    return {form: text.count(value) for form, value in FORMS.items() if value in text}


def _materialize(assets, air_workspace, instance):
    return dg.materialize(
        [assets],
        resources={"air_workspace": air_workspace},
        instance=instance,
        raise_on_error=False,
    )


def test_failing_asset_printing_a_secret(
    air_workspace, instance, dagster_home, local_workspace, monkeypatch
):
    monkeypatch.setenv("TEST_REDACTED_KEY", SECRET)
    assets = build_air_assets(
        AirStage(key="leaky", workload=workload("leaky", PRINT_ENCODINGS + "\nexit 2\n")),
        secret_env={"WANDB_API_KEY": dg.EnvVar("TEST_REDACTED_KEY")},
    )
    result = _materialize(assets, air_workspace, instance)
    assert not result.success
    failure = failure_data(result).user_failure_data
    assert "plain ***" in failure.description and "base64 ***" in failure.description
    assert 'json "***"' in failure.description and "url *** ***" in failure.description
    assert _leaks(dg.serialize_value(failure)) == {}
    assert _leaks(event_log_text(instance, result.run_id)) == {}
    logs = compute_logs(dagster_home, result.run_id)
    assert "plain ***" in logs  # streamed, redacted
    assert _leaks(logs) == {}
    # The workload printed the value: the platform's node log has it.
    run_id = next(
        e.asset_observation_data.asset_observation.metadata["dagster-air/run_id"].value
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    )
    assert f"plain {SECRET}" in node_log(local_workspace, run_id)


def test_workflow_stage_printing_a_secret(
    air_workspace, instance, dagster_home, local_workspace, monkeypatch
):
    monkeypatch.setenv("TEST_REDACTED_KEY", SECRET)
    assets = build_air_assets(
        [
            AirStage(key="prints", workload=workload("prints", PRINT_ENCODINGS)),
            AirStage(key="fails", workload=workload("fails", PRINT_ENCODINGS + "\nexit 1\n")),
        ],
        name="redaction_flow",
        secret_env={"WANDB_API_KEY": dg.EnvVar("TEST_REDACTED_KEY")},
    )
    result = _materialize(assets, air_workspace, instance)
    assert not result.success
    failure = failure_data(result).user_failure_data
    assert "plain ***" in failure.description
    materialized = [e for e in result.all_events if e.is_step_materialization]
    assert materialized  # the stage that succeeded has its metadata
    for text in (
        dg.serialize_value(failure),
        "\n".join(dg.serialize_value(e) for e in materialized),
        event_log_text(instance, result.run_id),
        compute_logs(dagster_home, result.run_id),
    ):
        assert _leaks(text) == {}


def test_a_too_short_secret_is_not_redacted_and_says_so(air_workspace, instance, monkeypatch):
    monkeypatch.setenv("TEST_SHORT_KEY", "abc")
    assets = build_air_assets(
        AirStage(key="short_secret", workload=workload("short_secret", 'echo "run abc"')),
        secret_env={"WANDB_API_KEY": dg.EnvVar("TEST_SHORT_KEY")},
    )
    result = _materialize(assets, air_workspace, instance)
    assert result.success
    assert "shorter than 4 characters" in event_log_text(instance, result.run_id)
