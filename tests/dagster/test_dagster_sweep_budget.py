"""A GPU-hour budget shared by the runs of a sweep (``AirWorkspace.sweep_gpu_hours_budget``):
a backfill's partitions (each its own Dagster run, tagged with the backfill as the daemon
tags them) and the partitions of one range run. The runs wait for a file the test creates, so
the test decides which end and which spend until the budget stops them: spending stops within
a poll of the moment it is spent, later partitions are refused before their submit, and each
failure says what was spent and by which runs."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import dagster as dg
import pytest
from dagster_checks import failure_data

from air_runtime import AirClient, RunState
from air_runtime.cli._run_views import run_summary
from air_runtime.local import LocalWorkspace
from dagster_air import AirStage, AirWorkspace, build_air_assets

BUDGET = 0.03  # GPU-hours
POLL_INTERVAL_S = 1.0
PARTITIONS = ["p0", "p1", "p2", "p3"]
PRICES = {"GPU_8xH100": 98.0}


def _assets(gate: Path, **options):
    return build_air_assets(
        AirStage(
            key="train",
            workload={
                "experiment_name": "budget_sweep",
                "compute": {"accelerator_type": "GPU_8xH100", "num_accelerators": 32},
                "max_retries": 0,
                "timeout_minutes": 1,  # a budget that stops nothing fails, never hangs
                "command": f'until [ -e "{gate}/go_$AIRO_PARTITION_KEY" ]; do sleep 0.05; done',
            },
        ),
        partitions_def=dg.StaticPartitionsDefinition(PARTITIONS),
        backfill_policy=dg.BackfillPolicy.single_run(),
        **options,
    )


@pytest.fixture
def budgeted(local_workspace: LocalWorkspace, monkeypatch: pytest.MonkeyPatch) -> AirWorkspace:
    monkeypatch.setenv("AIRO_HOST", local_workspace.host)
    monkeypatch.setenv("AIRO_TOKEN", local_workspace.token)
    return AirWorkspace(
        host=dg.EnvVar("AIRO_HOST"),
        token=dg.EnvVar("AIRO_TOKEN"),
        poll_interval=POLL_INTERVAL_S,
        request_budget=50,
        cancel_wait=20,
        sweep_gpu_hours_budget=BUDGET,
        gpu_hour_prices=PRICES,
        currency="USD",
    )


def _runs(local_workspace: LocalWorkspace) -> list[RunState]:
    with AirClient(local_workspace.host, local_workspace.token) as client:
        listed, _ = client.list_runs(active_only=False, limit=25)
        return [client.wait(r.run_id, timeout=60) for r in listed]


def _crossing_ms(runs: list[RunState], budget: float) -> float:
    """When the runs' GPU-hours together reached ``budget`` (epoch ms)."""
    attempts = [a for r in runs for a in r.attempts if a.start_time and a.num_accelerators]
    ends = {a.end_time for a in attempts if a.end_time}
    moments = sorted({a.start_time for a in attempts if a.start_time} | ends)
    spent = 0.0
    for before, after in itertools.pairwise(moments):
        held = sum(
            a.num_accelerators or 0
            for a in attempts
            if (a.start_time or 0) <= before and (a.end_time is None or a.end_time >= after)
        )
        if held and spent + held * (after - before) / 3_600_000 >= budget:
            return before + (budget - spent) / held * 3_600_000
        spent += held * (after - before) / 3_600_000
    raise AssertionError(f"the runs spent {spent} GPU-hours, never {budget}")


def _stopped_within_a_poll(runs: list[RunState]) -> None:
    crossed = _crossing_ms(runs, BUDGET)
    for run in runs:
        if run.result_state == "CANCELED":
            assert run.end_time is not None
            late_s = (run.end_time - crossed) / 1000
            assert 0 <= late_s <= POLL_INTERVAL_S, (run.run_id, late_s)


def _figure(label: str) -> re.Pattern[str]:
    return re.compile(
        rf"sweep {re.escape(label)} spent (0\.\d+) of {BUDGET:g} GPU-hours \(USD [\d.,]+\): "
        r"run \d+ \(train\[p\d\]\) [\d.e-]+ \(USD [\d.,]+\)"
    )


def test_a_backfill_stops_at_its_budget_and_refuses_its_later_partitions(
    budgeted: AirWorkspace,
    instance: dg.DagsterInstance,
    local_workspace: LocalWorkspace,
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "go_p0").touch()  # p0 ends at once; p1 runs until the budget stops it
    assets = _assets(gate)
    backfill = {"dagster/backfill": "sweepbf1"}  # what the backfill daemon tags its runs with

    def materialize(partition: str) -> dg.ExecuteInProcessResult:
        return dg.materialize(
            [assets], resources={"air_workspace": budgeted}, instance=instance,
            partition_key=partition, tags=backfill, raise_on_error=False,
        )  # fmt: skip

    first = materialize("p0")
    assert first.success
    (materialized,) = first.asset_materializations_for_node("train")
    assert materialized.metadata["dagster-air/currency"].value == "USD"
    cost = materialized.metadata["dagster-air/cost"].value
    hours = materialized.metadata["dagster-air/gpu_hours"].value
    assert cost == pytest.approx(hours * 98.0, abs=0.01)

    held = materialize("p1")
    assert not held.success
    message = failure_data(held).error.message
    assert _figure("backfill sweepbf1").search(message), message
    assert message.rstrip().endswith("; cancelled"), message
    assert failure_data(held).error.cls_name == "Failure"

    for partition in ("p2", "p3"):
        refused = materialize(partition)
        assert not refused.success
        text = failure_data(refused).error.message
        assert _figure("backfill sweepbf1").search(text), text
        assert "not submitted (sweep_gpu_hours_budget)" in text, text

    runs = _runs(local_workspace)
    assert sorted(r.result_state or "" for r in runs) == ["CANCELED", "SUCCESS"], runs
    _stopped_within_a_poll(runs)
    (cancelled,) = [r for r in runs if r.result_state == "CANCELED"]
    with AirClient(local_workspace.host, local_workspace.token) as client:
        cause = client.run_flow(lambda core: run_summary(core, cancelled.run_id)).cancel_cause
    assert cause is not None and cause.kind == "budget", cause
    assert "sweep backfill sweepbf1 spent" in cause.message


def test_a_range_run_cancels_all_its_runs_when_the_budget_is_spent(
    budgeted: AirWorkspace,
    instance: dg.DagsterInstance,
    local_workspace: LocalWorkspace,
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    assets = _assets(gate, max_tasks_per_run=1)  # one remote run per partition, side by side
    result = dg.materialize(
        [assets], resources={"air_workspace": budgeted}, instance=instance,
        tags={
            "dagster/asset_partition_range_start": "p0",
            "dagster/asset_partition_range_end": "p2",
        },
        raise_on_error=False,
    )  # fmt: skip
    assert not result.success
    message = failure_data(result).error.message
    label = f"run {result.run_id[:8]}"
    assert _figure(label).search(message), message
    assert "3 of 3 partitions not materialized" in message, message

    runs = _runs(local_workspace)
    assert [r.result_state for r in runs] == ["CANCELED"] * 3, runs
    _stopped_within_a_poll(runs)
    with AirClient(local_workspace.host, local_workspace.token) as client:
        causes = [
            client.run_flow(lambda core, r=r: run_summary(core, r.run_id)).cancel_cause
            for r in runs
        ]
    assert all(c is not None and c.kind == "budget" for c in causes), causes
