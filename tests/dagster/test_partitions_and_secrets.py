"""Hyperparameter sweeps through partitions, and orchestrator secrets that never show."""

from __future__ import annotations

import hashlib

import dagster as dg
import pytest
from dagster_checks import compute_logs, event_log_text, failure_data, node_log, workload

from dagster_air import AirStage, build_air_assets

SWEEP_COMMAND = 'echo "partition=$DAGSTER_PARTITION_KEY"\ncat hyperparameters.yaml\n'


def _run_id(result, node):
    (mat,) = result.asset_materializations_for_node(node)
    return mat.metadata["dagster-air/run_id"].value


def test_static_partitions_sweep_feeds_parameters(air_workspace, instance, local_workspace):
    sweep = {
        "lr-small": {"learning_rate": 0.001, "batch_size": 16},
        "lr-large": {"learning_rate": 0.1, "batch_size": 64},
    }
    assets = build_air_assets(
        AirStage(key="sweep", workload=workload("sweep", SWEEP_COMMAND, parameters={"epochs": 2})),
        partitions_def=dg.StaticPartitionsDefinition(list(sweep)),
        partition_parameters=sweep,
    )
    runs = {}
    for key in sweep:
        result = dg.materialize(
            [assets],
            partition_key=key,
            resources={"air_workspace": air_workspace},
            instance=instance,
        )
        assert result.success
        runs[key] = _run_id(result, "sweep")
    assert len(set(runs.values())) == 2  # one remote run per partition

    small = node_log(local_workspace, runs["lr-small"])
    assert "partition=lr-small" in small
    assert "learning_rate: 0.001" in small and "batch_size: 16" in small and "epochs: 2" in small
    large = node_log(local_workspace, runs["lr-large"])
    assert "learning_rate: 0.1" in large and "batch_size: 64" in large
    mats = instance.fetch_materializations(dg.AssetKey("sweep"), limit=10).records
    assert {m.partition_key for m in mats} == set(sweep)


def test_dynamic_partitions_sweep_reads_parameters_from_the_key(
    air_workspace, instance, local_workspace
):
    trials = dg.DynamicPartitionsDefinition(name="trials")
    assets = build_air_assets(
        AirStage(key="trial", workload=workload("trial", SWEEP_COMMAND)),
        partitions_def=trials,
        partition_env="TRIAL_KEY",
    )
    instance.add_dynamic_partitions("trials", ["lr=0.02,warmup=3,schedule=cosine"])
    result = dg.materialize(
        [assets],
        partition_key="lr=0.02,warmup=3,schedule=cosine",
        resources={"air_workspace": air_workspace},
        instance=instance,
    )
    assert result.success
    log = node_log(local_workspace, _run_id(result, "trial"))
    assert "lr: 0.02" in log and "warmup: 3" in log and "schedule: cosine" in log


def test_secret_env_reaches_the_workload_but_no_dagster_record(
    air_workspace, instance, local_workspace, dagster_home, monkeypatch
):
    secret = "hf_s3cr3t_value_0123456789"
    monkeypatch.setenv("TEST_HF_TOKEN", secret)
    digest = hashlib.sha256(secret.encode()).hexdigest()
    # The command checks the value by its hash, so the value itself is in no uploaded file.
    command = (
        f'[ "$(printf %s "$HF_TOKEN" | sha256sum | cut -c1-64)" = "{digest}" ]'
        ' || { echo "HF_TOKEN wrong or missing"; exit 1; }\n'
        'echo "the workload prints its token: $HF_TOKEN"\n'
    )
    assets = build_air_assets(
        AirStage(key="uses_secret", workload=workload("uses_secret", command)),
        secret_env={"HF_TOKEN": dg.EnvVar("TEST_HF_TOKEN")},
    )
    result = dg.materialize([assets], resources={"air_workspace": air_workspace}, instance=instance)
    assert result.success  # the command checked the value it received
    run_id = _run_id(result, "uses_secret")
    # The workload's own log has it (the workload printed it); Dagster's records must not.
    assert secret in node_log(local_workspace, run_id)
    assert "the workload prints its token: ***" in compute_logs(dagster_home, result.run_id)
    assert secret not in compute_logs(dagster_home, result.run_id)
    assert secret not in event_log_text(instance, result.run_id)
    (mat,) = result.asset_materializations_for_node("uses_secret")
    assert secret not in str(mat.metadata)
    # The uploaded files carry only the scope/key reference.
    uploaded = "\n".join(
        p.read_text(errors="replace")
        for p in local_workspace.data_dir.rglob("*")
        if p.is_file() and p.suffix in (".json", ".yaml", ".sh")
    )
    assert secret not in uploaded
    assert "dagster-air" in uploaded


def test_secret_in_a_failure_message_is_redacted(
    air_workspace, instance, local_workspace, monkeypatch
):
    secret = "wandb_s3cr3t_value_987654"
    monkeypatch.setenv("TEST_WANDB_KEY", secret)
    assets = build_air_assets(
        AirStage(
            key="leaky_failure",
            workload=workload("leaky_failure", 'echo "key is $WANDB_API_KEY"\nexit 2\n'),
        ),
        secret_env={"WANDB_API_KEY": "TEST_WANDB_KEY"},
    )
    result = dg.materialize(
        [assets],
        resources={"air_workspace": air_workspace},
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    failure = failure_data(result).user_failure_data
    assert "key is ***" in failure.description
    assert secret not in event_log_text(instance, result.run_id)


def test_a_missing_secret_variable_is_a_definition_error_and_fails_a_run_without_retry(
    air_workspace, instance, local_workspace, monkeypatch
):
    def define():
        return build_air_assets(
            AirStage(key="no_secret", workload=workload("no_secret", "true")),
            secret_env={"HF_TOKEN": dg.EnvVar("SURELY_NOT_SET_ANYWHERE")},
            retry_policy=dg.RetryPolicy(max_retries=2),
        )

    with pytest.raises(dg.DagsterInvalidDefinitionError, match="SURELY_NOT_SET_ANYWHERE"):
        define()
    # Set where the definitions load, unset where the run executes: the run fails, once.
    monkeypatch.setenv("SURELY_NOT_SET_ANYWHERE", "x" * 8)
    assets = define()
    monkeypatch.delenv("SURELY_NOT_SET_ANYWHERE")
    result = dg.materialize(
        [assets],
        resources={"air_workspace": air_workspace},
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    failure = failure_data(result).user_failure_data
    assert "SURELY_NOT_SET_ANYWHERE" in failure.description
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert local_workspace.admin.counters()["runs_created"] == 0
