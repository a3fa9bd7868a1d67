"""A GPU-hour budget shared by every trial of a Dag run (``sweep_gpu_hours_budget`` in
``default_args``): the trials the test lets end are counted, the one it holds is cancelled
within a poll of the moment the budget is spent, every later trial is refused before its
submit, and each failing task's log says what was spent and by which runs. The Dag:
dag_files/air_test_sweep_budget.py."""

from __future__ import annotations

import itertools
import json
import re
import sys
import threading
from pathlib import Path

from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
from airflow_runs import load_test_dag, xcom
from sqlalchemy import select

from air_runtime import AirClient, RunState
from air_runtime.cli._run_views import run_summary

DAG_ID = "air_test_sweep_budget"
RELEASED = 2  # the first trials to start end at once; the next one runs until stopped


def _map_index(state: RunState) -> int:
    return int((state.run_name or "").rsplit("--", 1)[-1])


def _release_the_first_trials(host: str, token: str, gate: Path, done: threading.Event) -> None:
    """Create ``go_<map index>`` for the first ``RELEASED`` trials seen running."""
    released: set[int] = set()
    with AirClient(host, token) as client:
        while len(released) < RELEASED and not done.is_set():
            runs, _ = client.list_runs(active_only=True, limit=25)
            for run in runs:
                index = _map_index(run)
                if run.life_cycle_state == "RUNNING" and len(released) < RELEASED:
                    (gate / f"go_{index}").touch()
                    released.add(index)
            done.wait(0.05)


def _states(run_id: str) -> dict[int, str]:
    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run_id)
        ).all()
        return {ti.map_index: str(getattr(ti.state, "value", ti.state)) for ti in tis}


def _crossing_ms(runs: list[RunState], budget: float) -> float:
    """When the runs' GPU-hours together reached ``budget`` (epoch ms), from their attempts'
    starts, ends and accelerators: they add up linearly between those moments."""
    attempts = [a for r in runs for a in r.attempts if a.start_time and a.num_accelerators]
    moments = sorted(
        {a.start_time for a in attempts} | {a.end_time for a in attempts if a.end_time}
    )
    spent = 0.0
    for before, after in itertools.pairwise(moments):
        held = sum(
            a.num_accelerators or 0
            for a in attempts
            if a.start_time <= before and (a.end_time is None or a.end_time >= after)
        )
        step = held * (after - before) / 3_600_000
        if spent + step >= budget:
            return before + (budget - spent) / held * 3_600_000
        spent += step
    raise AssertionError(f"the runs spent {spent} GPU-hours, never {budget}")


def test_a_sweep_budget_stops_the_spending_and_refuses_the_trials_after_it(
    workspace, task_log, tmp_path, monkeypatch
):
    # The connection's prices put money in the messages and the results.
    connection = {
        "conn_type": "databricks",
        "host": workspace.host,
        "password": workspace.token,
        "extra": {"gpu_hour_prices": {"GPU_8xH100": 98.0}, "currency": "USD"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", json.dumps(connection))
    dag = load_test_dag(DAG_ID, "air_test_sweep_budget.py")
    figures = sys.modules["_air_dagfile_air_test_sweep_budget"]  # the Dag file's
    BUDGET_GPU_HOURS, POLL_INTERVAL_S, TRIALS = (
        figures.BUDGET_GPU_HOURS,
        figures.POLL_INTERVAL_S,
        figures.TRIALS,
    )

    gate = tmp_path / "gate"
    gate.mkdir()
    done = threading.Event()
    releaser = threading.Thread(
        target=_release_the_first_trials, args=(workspace.host, workspace.token, gate, done)
    )
    releaser.start()
    try:
        dag_run = dag.test(run_conf={"gate": str(gate)})
    finally:
        done.set()
        releaser.join(timeout=30)
    log = task_log.text()
    assert str(getattr(dag_run.state, "value", dag_run.state)) == "failed", log

    with AirClient(workspace.host, workspace.token) as client:
        listed, _ = client.list_runs(active_only=False, limit=25)
        runs = [client.get_run(r.run_id) for r in listed]
        by_index = {_map_index(r): r for r in runs}
        results = sorted(r.result_state or "" for r in runs)
        assert results == ["CANCELED"] + ["SUCCESS"] * RELEASED, [r.describe() for r in runs]
        (held,) = [r for r in runs if r.result_state == "CANCELED"]
        summary = client.run_flow(lambda core: run_summary(core, held.run_id))

    # Spending stopped within one poll interval of the moment the budget was spent (the
    # platform's own end of the held run, its cancel included).
    crossed = _crossing_ms(runs, BUDGET_GPU_HOURS)
    assert held.end_time is not None
    late_s = (held.end_time - crossed) / 1000
    assert 0 <= late_s <= POLL_INTERVAL_S, late_s
    assert sum(r.gpu_hours() for r in runs) <= BUDGET_GPU_HOURS + 32 * POLL_INTERVAL_S / 3600

    # The held trial failed with the figure and who spent it; the cause is kept on the run.
    states = _states(dag_run.run_id)
    held_index = _map_index(held)
    assert states[held_index] == "failed", states
    figure = re.compile(
        rf"sweep {DAG_ID}/{re.escape(dag_run.run_id)} spent (0\.\d+) of {BUDGET_GPU_HOURS:g} "
        r"GPU-hours \(USD [\d.]+\): (run \d+ \(trial\[\d+\]\) [\d.e-]+ \(USD [\d.]+\)(, )?)+"
    )
    cancelled = [m for m in figure.finditer(log) if log[m.end() :].startswith("; cancelled")]
    assert cancelled, log
    assert f"run {held.run_id} (trial[{held_index}])" in cancelled[0].group(0)
    assert summary.cancel_cause is not None and summary.cancel_cause.kind == "budget"
    assert summary.cancel_cause.by.endswith(f"/trial[{held_index}]")
    assert summary.termination is not None and summary.termination.code == "USER_CANCELED"

    # Every trial after it was refused before its submit: no run, a failed task, the figure
    # naming the runs that spent it.
    # What each trial that ended cost, at the connection's prices.
    for index in set(by_index) - {held_index}:
        cost = xcom(DAG_ID, dag_run.run_id, "trial", "cost", map_index=index)
        hours = xcom(DAG_ID, dag_run.run_id, "trial", "gpu_hours", map_index=index)
        assert cost == {"amount": round(hours * 98.0, 2), "currency": "USD"}, (cost, hours)

    refused = set(range(TRIALS)) - set(by_index)
    assert len(refused) == TRIALS - RELEASED - 1, (sorted(by_index), states)
    assert all(states[i] == "failed" for i in refused), states
    assert all(states[i] == "success" for i in set(by_index) - {held_index}), states
    refusals = [m for m in figure.finditer(log) if "; not submitted" in log[m.end() : m.end() + 20]]
    assert len({m.start() for m in refusals}) >= len(refused), log
    for match in refusals:
        assert float(match.group(1)) >= BUDGET_GPU_HOURS
        assert all(f"run {r.run_id} (trial[{i}])" in match.group(0) for i, r in by_index.items())
