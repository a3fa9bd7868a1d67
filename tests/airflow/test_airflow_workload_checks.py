"""Checks before the run: every workload of a Dag folder validated by one call, and workload
errors failing the task at once (no retry, no request to the workspace), naming the file and,
for an override, the override."""

from __future__ import annotations

import pytest
from airflow_runs import REPO, TEST_DAGS, load_test_dag, task_instance, task_states


def test_validate_dag_workloads_checks_every_task():
    from airflow_air.testing import DagWorkloadError, validate_dag_workloads

    workloads = validate_dag_workloads(REPO / "dags")
    assert sorted(workloads) == [
        *(f"hyperparameter_sweep.trial[{i}]" for i in range(4)),
        "rl_pipeline.rl.evaluate",
        "rl_pipeline.rl.grpo",
        "scheduled_training.train",
    ]
    # Rendered with the sample context (ds) and the Dag's params (rl_pipeline's output_root).
    # Each expanded value of the mapped sweep, rendered with the Dag's params (gpu_pool).
    assert workloads["hyperparameter_sweep.trial[2]"].env_variables["LEARNING_RATE"] == "0.01"
    assert workloads["hyperparameter_sweep.trial[0]"].compute.pool_id == "team-a10"
    nightly = workloads["scheduled_training.train"]
    assert nightly.env_variables["TRAINING_DATE"] == "2026-01-01"
    grpo_env = workloads["rl_pipeline.rl.grpo"].raw_mapping()["env_variables"]
    assert grpo_env["RL_OUTPUT_DIR"].startswith("airflow/rl_pipeline/manual__2026-01-01")

    with pytest.raises(DagWorkloadError) as caught:
        validate_dag_workloads(TEST_DAGS)
    problems = caught.value.problems
    assert sorted(problems) == [
        "air_test_workload_errors.bad_override",
        "air_test_workload_errors.group.stage",
        "air_test_workload_errors.invalid_file",
        "air_test_workload_errors.missing_file",
    ]
    assert (
        "workload file 'workloads/missing.yaml' not found"
        in problems["air_test_workload_errors.missing_file"]
    )
    invalid = problems["air_test_workload_errors.invalid_file"]
    assert str(TEST_DAGS / "workloads" / "invalid.yaml") in invalid and "comand" in invalid
    override = problems["air_test_workload_errors.bad_override"]
    assert str(TEST_DAGS / "workloads" / "templated.yaml") in override
    assert "set by override 'compute.num_accelerators'" in override
    assert (
        "set by override 'compute.accelerator_typ'"
        in problems["air_test_workload_errors.group.stage"]
    )


def test_workload_errors_fail_at_once_without_retries(workspace, task_log):
    dag = load_test_dag("air_test_workload_errors", "air_test_workload_errors.py")
    dag_run = dag.test()

    states = task_states(dag_run)
    for task_id in ("missing_file", "invalid_file", "bad_override", "group.submit"):
        assert states[task_id] == "failed", states
        # retries=2, yet one try: AirConfigurationError is not retried.
        assert task_instance(dag.dag_id, dag_run.run_id, task_id).try_number == 1
    assert states["group.stage"] == "upstream_failed"
    assert workspace.admin.counters()["runs_created"] == 0
    log = task_log.text()
    assert "AirConfigurationError" in log
    assert "workload file 'workloads/missing.yaml' not found" in log
    assert f"invalid workload {TEST_DAGS / 'workloads' / 'invalid.yaml'}" in log
    assert "(set by override 'compute.num_accelerators')" in log
    assert "(set by override 'compute.accelerator_typ')" in log
    assert "<text>" not in log


def test_mapped_tasks_are_checked_once_per_expanded_value(capsys):
    """A Dag whose only AI Runtime tasks are mapped: each expanded value is validated as the
    task instance it becomes; values from XCom are a note, not a pass."""
    from airflow_air.testing import check_dag_workloads, main

    folder = TEST_DAGS.parent / "mapped_dag_files"
    report = check_dag_workloads(folder)
    assert sorted(report.workloads) == [
        "air_test_mapped_sweep.by_kwargs[0]",
        "air_test_mapped_sweep.from_xcom",
        "air_test_mapped_sweep.grid[0]",
        "air_test_mapped_sweep.grid[1]",
        "air_test_mapped_sweep.trials[0]",
        "air_test_mapped_sweep.trials[1]",
    ]
    assert report.workloads["air_test_mapped_sweep.trials[1]"].env_variables["LR"] == "0.01"
    assert sorted(report.problems) == [
        "air_test_mapped_sweep.by_kwargs[1]",
        "air_test_mapped_sweep.grid[2]",
        "air_test_mapped_sweep.grid[3]",
        "air_test_mapped_sweep.trials[2]",
    ]
    assert (
        "set by override 'compute.num_accelerators'"
        in report.problems["air_test_mapped_sweep.trials[2]"]
    )
    assert "'comand'" in report.problems["air_test_mapped_sweep.by_kwargs[1]"]
    assert (
        "expanded from XCom at run time (overrides)"
        in report.notes["air_test_mapped_sweep.from_xcom"]
    )

    assert main([str(folder)]) == 1
    out, err = capsys.readouterr()
    assert "no AirRunOperator tasks found" not in out + err
    assert "air_test_mapped_sweep.trials[2]" in err
    assert "air_test_mapped_sweep.from_xcom: note: expanded from XCom at run time" in out
