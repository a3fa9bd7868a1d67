"""Caps in accelerators: ``pool_slots="accelerators"`` weighs a task by its workload, the
Airflow pool is sized in accelerators from the GPU pool, a sweep of mixed sizes becomes one
mapped task per size whose trials weigh their accelerators, and the Dag check says when a
mapped sweep's sizes and its pool cannot both hold. The sweep:
dag_files/air_test_accelerator_caps.py. ``dag.test()`` runs one task at a time and does not
admit by pool: the pool saturated and a trial held by it are shown through the scheduler's
own admission on the sweep's task instances, and on a real scheduler
(tests/e2e/test_airflow_accelerator_caps_on_a_deployment.py)."""

from __future__ import annotations

import json
import shutil
import textwrap

import pendulum
import pytest
from airflow_runs import TEST_DAGS, load_test_dag, task_states

from air_runtime import AirClient, GpuPool

GPU_POOL = {"pool_id": "pool-a10", "accelerator_type": "GPU_1xA10", "accelerator_count": 4}
WORKLOAD = {
    "experiment_name": "weighed",
    "compute": {"accelerator_type": "GPU_8xH100", "num_accelerators": 16},
    "command": "true",
}


@pytest.fixture
def pool_workspace(tmp_path, airflow_db, monkeypatch):
    from air_runtime.local import start_local_workspace

    ws = start_local_workspace(data_dir=tmp_path / "workspace", gpu_pools=[GPU_POOL])
    connection = {"conn_type": "databricks", "host": ws.host, "password": ws.token}
    monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", json.dumps(connection))
    try:
        yield ws
    finally:
        ws.stop()


def _dag(dag_id: str, **kwargs):
    from airflow.sdk import DAG

    return DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1), **kwargs)


def test_pool_slots_from_the_workload_at_parse_time(tmp_path, monkeypatch):
    from airflow_air.operators import AirRunOperator

    (tmp_path / "train.yaml").write_text(
        "experiment_name: t\ncompute:\n  accelerator_type: GPU_1xA10\n  num_accelerators: 3\n"
        "command: 'true'\n"
    )
    with _dag("weigh", template_searchpath=[str(tmp_path)]):
        by_dict = AirRunOperator(task_id="d", workload=WORKLOAD, pool_slots="accelerators")
        by_file = AirRunOperator(task_id="f", workload="train.yaml", pool_slots="accelerators")
        by_override = AirRunOperator(
            task_id="o",
            workload="train.yaml",
            overrides={"compute.num_accelerators": "4"},
            pool_slots="accelerators",
        )
        by_number = AirRunOperator(task_id="n", workload=WORKLOAD, pool_slots=2)
        with pytest.raises(ValueError, match="known when the Dag file is parsed"):
            AirRunOperator(
                task_id="templated",
                workload=WORKLOAD,
                overrides={"compute.num_accelerators": "{{ params.gpus }}"},
                pool_slots="accelerators",
            )
    assert [t.pool_slots for t in (by_dict, by_file, by_override, by_number)] == [16, 3, 4, 2]
    # The [air] default: every task whose count is literal, the others keep Airflow's 1.
    monkeypatch.setenv("AIRFLOW__AIR__POOL_SLOTS_FROM_ACCELERATORS", "True")
    with _dag("weigh_by_default"):
        weighed = AirRunOperator(task_id="d", workload=WORKLOAD)
        unknown = AirRunOperator(task_id="t", workload="{{ params.workload }}")
    assert (weighed.pool_slots, unknown.pool_slots) == (16, 1)


def test_trials_split_by_size_and_unknown_sizes_are_refused():
    from airflow_air.sweeps import trials_by_size

    workload = {**WORKLOAD, "compute": {**WORKLOAD["compute"], "num_accelerators": 8}}
    trials = [{"compute.num_accelerators": 16}, {}, {"compute.num_accelerators": "16"}]
    assert trials_by_size(workload, trials) == {8: [{}], 16: [trials[0], trials[2]]}
    with pytest.raises(ValueError, match=r"trial 1 .* not known when the Dag file is parsed"):
        trials_by_size(workload, [{}, {"compute.num_accelerators": "{{ params.n }}"}])


def test_accelerator_slots_are_the_reservation():
    from airflow_air.pools import accelerator_slots

    assert accelerator_slots(GpuPool("team-h100", "GPU_8xH100", 64)) == 64
    with pytest.raises(ValueError, match="reserves no accelerators"):
        accelerator_slots(GpuPool("empty", "GPU_1xA10", 0))


def test_a_mixed_sweeps_trials_weigh_their_accelerators_in_a_pool_sized_in_accelerators(
    pool_workspace, capsys, task_log
):
    from airflow.models.pool import Pool
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow_air.pools import main

    assert main(["gpu_sweep_accelerators", "--gpu-pool", "pool-a10", "--accelerators"]) == 0
    assert "gpu_sweep_accelerators: 4 slots, in accelerators" in capsys.readouterr().out
    with create_session() as session:
        pool = session.query(Pool).filter(Pool.pool == "gpu_sweep_accelerators").one()
        assert (pool.slots, pool.include_deferred) == (4, True)

    dag = load_test_dag("air_test_accelerator_caps", "air_test_accelerator_caps.py")
    assert {t.task_id: t.partial_kwargs["pool_slots"] for t in dag.tasks} == {
        "trial_1_accelerators": 1,
        "trial_2_accelerators": 2,
    }
    dag_run = dag.test()
    assert task_states(dag_run) == {
        "trial_1_accelerators": "success",
        "trial_2_accelerators": "success",
    }, task_log.text()
    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.run_id == dag_run.run_id).all()
        held = sorted((ti.task_id, ti.map_index, ti.pool, ti.pool_slots) for ti in tis)
    assert held == [
        ("trial_1_accelerators", 0, "gpu_sweep_accelerators", 1),
        ("trial_1_accelerators", 1, "gpu_sweep_accelerators", 1),
        ("trial_2_accelerators", 0, "gpu_sweep_accelerators", 2),
        ("trial_2_accelerators", 1, "gpu_sweep_accelerators", 2),
    ]
    with AirClient(pool_workspace.host, pool_workspace.token) as client:
        runs, _ = client.list_runs(active_only=False, limit=25)
        sizes = sorted(t.num_accelerators for r in runs for t in client.get_run(r.run_id).tasks)
    assert sizes == [1, 1, 2, 2]
    _the_scheduler_saturates_the_pool_and_holds_a_trial(dag_run)


def _admit(dag_id: str) -> list[tuple[str, int, int]]:
    """One pass of the scheduler's own admission (pool slots, the Dag's limits, the
    executor's room): the task instances of ``dag_id`` it queues, as (task, map index, pool
    slots)."""
    from airflow.executors.executor_loader import ExecutorLoader
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.utils.session import create_session

    scheduler = SchedulerJobRunner(job=Job(), executors=ExecutorLoader.init_executors())
    with create_session() as session:
        queued = scheduler._executable_task_instances_to_queued(max_tis=32, session=session)
        return sorted((t.task_id, t.map_index, t.pool_slots) for t in queued if t.dag_id == dag_id)


def _set_states(dag_run, states: dict[tuple[str, int] | None, str]) -> None:
    """Task instances of ``dag_run`` to the given states (None: every one)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        for key, state in states.items():
            query = session.query(TaskInstance).filter(TaskInstance.run_id == dag_run.run_id)
            if key is not None:
                query = query.filter(
                    TaskInstance.task_id == key[0], TaskInstance.map_index == key[1]
                )
            query.update({TaskInstance.state: state})


def _the_scheduler_saturates_the_pool_and_holds_a_trial(dag_run) -> None:
    """The sweep's trials as the scheduler finds them when its Dag run starts (all four
    ready, 6 accelerators for a pool of 4 slots), through the scheduler's own admission:
    it queues trials until the pool is full and holds the next; the trials it queued keep
    their slots while deferred (waiting on their runs in the triggerer), so the held trial
    stays held; it is queued once a trial of 2 accelerators has ended."""
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    dag_id = dag_run.dag_id
    with create_session() as session:
        session.query(DagModel).filter(DagModel.dag_id == dag_id).update(
            {DagModel.is_paused: False}
        )
        session.query(DagRun).filter(DagRun.id == dag_run.id).update(
            {DagRun.state: DagRunState.RUNNING}
        )
    try:
        _set_states(dag_run, {None: "scheduled"})
        admitted = _admit(dag_id)
        # Saturated (1 + 1 + 2 of 4 slots); the second trial of 2 accelerators is held.
        assert admitted == [
            ("trial_1_accelerators", 0, 1),
            ("trial_1_accelerators", 1, 1),
            ("trial_2_accelerators", 0, 2),
        ]
        _set_states(dag_run, {(task, index): "deferred" for task, index, _ in admitted})
        assert _admit(dag_id) == []  # still held: deferred trials keep their slots
        _set_states(dag_run, {("trial_1_accelerators", 0): "success"})
        assert _admit(dag_id) == []  # 1 slot open: not enough for 2 accelerators
        _set_states(dag_run, {("trial_2_accelerators", 0): "success"})
        assert _admit(dag_id) == [("trial_2_accelerators", 1, 2)]  # 3 open: admitted
    finally:
        _set_states(dag_run, {None: "success"})
        with create_session() as session:
            session.query(DagRun).filter(DagRun.id == dag_run.id).update(
                {DagRun.state: DagRunState.SUCCESS}
            )


MIXED_MAPPED = """
import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

WORKLOAD = {
    "experiment_name": "mixed",
    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
    "command": "true",
}

with DAG("mixed_mapped", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    AirRunOperator.partial(task_id="trial", workload=WORKLOAD, pool="gpu_sweep").expand(
        overrides=[{"compute.num_accelerators": 1}, {"compute.num_accelerators": 2}]
    )
    # One size in a pool: the pool sized in trials holds it.
    AirRunOperator.partial(task_id="even", workload=WORKLOAD, pool="gpu_sweep").expand(
        overrides=[{"env_variables.A": "1"}, {"env_variables.A": "2"}]
    )
    # Mixed sizes without a pool: nothing to overrun.
    AirRunOperator.partial(task_id="free", workload=WORKLOAD).expand(
        overrides=[{"compute.num_accelerators": 1}, {"compute.num_accelerators": 2}]
    )
"""


def test_the_dag_check_says_when_a_mapped_sweeps_sizes_and_pool_cannot_both_hold(tmp_path):
    from airflow_air.testing import check_dag_workloads

    shutil.copy(TEST_DAGS / "air_test_accelerator_caps.py", tmp_path)
    (tmp_path / "mixed_mapped.py").write_text(textwrap.dedent(MIXED_MAPPED))
    report = check_dag_workloads(tmp_path)
    assert set(report.problems) == {"mixed_mapped.trial"}, report.problems
    message = report.problems["mixed_mapped.trial"]
    assert "ask for 1 and 2 accelerators but each holds 1 slot(s) of pool 'gpu_sweep'" in message
    assert "airflow_air.sweeps.mapped_by_size" in message
    # The sweep built by size checks clean, every trial of it.
    assert {w for w in report.workloads if w.startswith("air_test_accelerator_caps.")} == {
        "air_test_accelerator_caps.trial_1_accelerators[0]",
        "air_test_accelerator_caps.trial_1_accelerators[1]",
        "air_test_accelerator_caps.trial_2_accelerators[0]",
        "air_test_accelerator_caps.trial_2_accelerators[1]",
    }
