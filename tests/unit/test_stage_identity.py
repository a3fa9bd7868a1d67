"""Each stage of a workflow says who it is (``AIRO_TASK``: its own task), run names carry the
orchestrator's run in a short, stable form, and none of it moves an idempotency token: a run
in flight when this changed is found again by the token it was submitted with."""

from __future__ import annotations

from air_runtime import SubmissionKey
from air_runtime._submission import short_run
from air_runtime.plan import Stage
from air_runtime.workload import load_workload


def _workload(name: str):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": "true",
        }
    )


def test_the_short_form_of_a_run_is_stable_and_tells_nights_apart():
    assert short_run("scheduled__2026-01-01T00:00:00+00:00") == "scheduled_20260101T000000"
    assert short_run("scheduled__2026-01-02T00:00:00+00:00") == "scheduled_20260102T000000"
    assert short_run("manual__2026-12-05T08:52:35.123456+00:00") == "manual_20261205T085235"
    assert short_run("asset_triggered__2026-12-05T08:52+00:00") == "asset_triggered_20261205T0852"
    # A Dagster run id: its first 8 characters, as Dagster's UI shows it.
    assert short_run("4f9c2e1a-1111-2222-3333-444455556666") == "4f9c2e1a"
    assert short_run("nightly") == "nightly"
    long = short_run("a-custom-run-id-given-by-the-api-" + "x" * 40)
    assert len(long) == 24 and long == short_run("a-custom-run-id-given-by-the-api-" + "x" * 40)
    assert long != short_run("a-custom-run-id-given-by-the-api-" + "y" * 40)


def test_each_nights_run_has_a_name_of_its_own():
    def name(run: str) -> str:
        key = SubmissionKey("airflow", "ns", "nightly_nu_pipe_clear", run, "nightly.submit")
        return key.run_name("nightly_nu_pipe_clear")

    first = name("scheduled__2026-01-01T00:00:00+00:00")
    assert first == (
        "nightly_nu_pipe_clear--nightly_nu_pipe_clear--scheduled_20260101T000000--nightly_submit"
    )
    assert first != name("scheduled__2026-01-02T00:00:00+00:00")
    # Cut to the length rule, the run, task and index stay whole.
    key = SubmissionKey("airflow", "ns", "p" * 80, "scheduled__2026-01-01T00:00:00+00:00", "t", 7)
    cut = key.run_name("e" * 60)
    assert len(cut) <= 100 and "--scheduled_20260101T000000--t--7--" in cut


def test_every_stage_gets_its_own_task_and_the_groups_map_index():
    key = SubmissionKey(
        "airflow", "ns", "nightly", "scheduled__2026-01-01T00:00:00+00:00", "g.submit", 2
    )
    stages, _ = key.identify(
        [
            Stage("prep", _workload("prep"), orchestrator_task="g.prep"),
            Stage("train", _workload("train"), ("prep",), orchestrator_task="g.train"),
            Stage("other", _workload("other")),  # an orchestrator with no task per stage
        ],
        "nightly",
    )
    env = {s.task_key: s.workload.env_variables for s in stages}
    assert [env[k]["AIRO_TASK"] for k in ("prep", "train", "other")] == [
        "g.prep",
        "g.train",
        "g.submit",
    ]
    assert {env[k]["AIRO_STAGE"] for k in env} == {"prep", "train", "other"}
    assert {env[k]["AIRO_MAP_INDEX"] for k in env} == {"2"}


def test_idempotency_tokens_did_not_move():
    # Values computed by the release before run names carried the run and stages their own
    # AIRO_TASK: a submit repeated after an upgrade finds the run it made then.
    airflow = SubmissionKey(
        "airflow", "ns-1", "nightly", "scheduled__2026-01-01T00:00:00+00:00", "nightly.submit"
    )
    assert airflow.idempotency_token(0) == (
        "4220ee675ddc3afa54bb1d5fe737be3a1f309bec6271a8b389ffbb8582caee8b"
    )
    assert airflow.idempotency_token(3) == (
        "18429aa5648af073ee3d83b8a5d2a7291c9c4721e9a51950de6370732529aaab"
    )
    dagster = SubmissionKey(
        "dagster", "inst", "job", "4f9c2e1a-1111-2222-3333-444455556666", "train", "2026-01-01"
    )
    assert dagster.idempotency_token("root") == (
        "ad9fd246bf6bdb41be27177e8e08d5c6e4e0709681b91a7890da3278d0ab9261"
    )
