"""Orchestrator-secret keys of one submission: names, deletion once the run ended, the sweep
a task's next run does, and ``airo secrets prune``."""

from __future__ import annotations

import time

import pytest

from air_runtime import AirClient, load_workload, make_idempotency_token
from air_runtime.cli import main
from air_runtime.cli._secrets_cmd import parse_duration
from air_runtime.client import _secrets
from air_runtime.client._secrets import (
    SubmissionSecrets,
    parse_secret_key,
)


def _group(run_id: str, task: str = "train", namespace: str = "ns-1", scope: str = "orch"):
    return SubmissionSecrets.of(
        scope,
        namespace=namespace,
        orchestrator="airflow",
        pipeline_id="nightly",
        task_key=task,
        run_id=run_id,
        map_index=None,
    )


def test_keys_differ_per_deployment_run_task_and_map_index():
    base = _group("scheduled__2026-01-01")
    others = [
        _group("scheduled__2026-01-01", namespace="ns-2"),
        _group("scheduled__2026-01-02"),
        _group("scheduled__2026-01-01", task="evaluate"),
        SubmissionSecrets.of(
            "orch",
            namespace="ns-1",
            orchestrator="airflow",
            pipeline_id="nightly",
            task_key="train",
            run_id="scheduled__2026-01-01",
            map_index=3,
        ),
    ]
    keys = {g.key("HF_TOKEN") for g in [base, *others]}
    assert len(keys) == 5
    key = base.key("HF_TOKEN")
    assert key.startswith("airo.train.") and key.endswith(".HF_TOKEN")
    assert _secrets.secret_key_name(key) == key
    parsed = parse_secret_key(key)
    assert parsed is not None and parsed.task_tag == base.task_tag
    assert parsed.marker_run_id is None
    assert parse_secret_key(base.marker(1234)).marker_run_id == 1234
    assert parse_secret_key(base.key("A", stage="run-7")).marker_run_id is None
    assert parse_secret_key("dagster.job.HF_TOKEN") is None
    long = _group("r", task="x" * 300).key("N" * 200)
    assert len(long) <= 128 and parse_secret_key(long) is not None


def test_token_namespace_keeps_old_tokens_and_separates_deployments():
    old = make_idempotency_token("airflow", "dag", "scheduled__x", "train", None, "0.0")
    assert old == make_idempotency_token(
        "airflow", "dag", "scheduled__x", "train", None, "0.0", namespace=None
    )
    one = make_idempotency_token(
        "airflow", "dag", "scheduled__x", "train", None, "0.0", namespace="a"
    )
    two = make_idempotency_token(
        "airflow", "dag", "scheduled__x", "train", None, "0.0", namespace="b"
    )
    assert len({old, one, two}) == 3 and len(one) == 64


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def _run(client: AirClient, command: str) -> int:
    workload = load_workload(
        {
            "experiment_name": "secrets",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": command,
        }
    )
    return client.submit_workload(workload).run_id


def _keys(client: AirClient, scope: str = "orch") -> set[str]:
    return {s.key for s in client.list_secrets(scope)}


def _store(client: AirClient, group: SubmissionSecrets, run_id: int | None) -> None:
    client.store_submission_secrets(group, {"A": "1", "B": "2"})
    if run_id is not None:
        client.mark_submission_run(group, run_id)


def test_delete_sweep_and_prune(local_workspace, capsys):
    with AirClient(local_workspace.host, local_workspace.token) as client:
        ended = _run(client, "true")
        client.wait(ended, poll_interval=0.1, timeout=60)
        going = _run(client, "sleep 120")
        finished, active, unmarked = _group("r1"), _group("r2"), _group("r3")
        other_task = _group("r1", task="evaluate")
        _store(client, finished, ended)
        _store(client, active, going)
        _store(client, unmarked, None)
        _store(client, other_task, ended)
        client.put_secret("orch", "someone-else", "x")

        # The next run of "train" deletes what earlier runs of "train" left once they ended.
        current = _group("r4")
        swept = client.sweep_ended_submissions(current)
        assert swept == 3  # finished: A, B and its marker
        left = _keys(client)
        assert not any(k.startswith(finished.prefix) for k in left)
        for kept in (active, unmarked, other_task):
            assert any(k.startswith(kept.prefix) for k in left)

        # A task deleting its own keys once its run ended.
        assert client.delete_submission_secrets(other_task) == 3

        # Prune: nothing is old enough yet.
        host, token = local_workspace.host, local_workspace.token
        assert (
            main(
                [
                    "secrets",
                    "prune",
                    "--scope",
                    "orch",
                    "--older-than",
                    "1h",
                    "--host",
                    host,
                    "--token",
                    token,
                ]
            )
            == 0
        )
        assert _keys(client) == left - {k for k in left if k.startswith(other_task.prefix)}
        # "Older than 0s" once the clock is past the newest key's write.
        newest = max(s.last_updated_ms or 0 for s in client.list_secrets("orch"))
        while time.time() * 1000 <= newest:
            time.sleep(0.001)
        assert (
            main(
                [
                    "secrets",
                    "prune",
                    "--scope",
                    "orch",
                    "--older-than",
                    "0s",
                    "--dry-run",
                    "--host",
                    host,
                    "--token",
                    token,
                ]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert f"would delete orch/{unmarked.key('A')}" in out
        assert (
            main(
                [
                    "secrets",
                    "prune",
                    "--scope",
                    "orch",
                    "--older-than",
                    "0s",
                    "--host",
                    host,
                    "--token",
                    token,
                ]
            )
            == 0
        )
        # The unmarked submission went; the one whose run is going stays; others' keys stay.
        remaining = _keys(client)
        assert not any(k.startswith(unmarked.prefix) for k in remaining)
        assert {k for k in remaining if k.startswith(active.prefix)} == {
            active.key("A"),
            active.key("B"),
            active.marker(going),
        }
        assert "someone-else" in remaining
        client.cancel(going)
        client.wait(going, poll_interval=0.1, timeout=60)
        assert (
            main(
                [
                    "secrets",
                    "prune",
                    "--scope",
                    "orch",
                    "--older-than",
                    "0s",
                    "--host",
                    host,
                    "--token",
                    token,
                ]
            )
            == 0
        )
        assert _keys(client) == {"someone-else"}
