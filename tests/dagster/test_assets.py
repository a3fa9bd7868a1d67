"""Single-workload assets against the local workspace: success, failure, config errors,
run-time overrides, the decorator form."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster_checks import compute_logs, counters, failure_data, node_log, workload

from dagster_air import (
    AirInvocation,
    AirRunConfig,
    AirStage,
    DagsterAirTranslator,
    air_workload_asset,
    build_air_assets,
)


def _materialize(assets, air_workspace, instance, **kwargs):
    return dg.materialize(
        [assets], resources={"air_workspace": air_workspace}, instance=instance, **kwargs
    )


def test_success_records_metadata_and_streams_node_logs(
    air_workspace, instance, dagster_home, local_workspace
):
    assets = build_air_assets(
        AirStage(
            key="hello",
            workload=workload(
                "hello",
                'echo "hello from rank $POD_RANK"\ncat hyperparameters.yaml\n',
                parameters={"learning_rate": 0.25},
            ),
        )
    )
    result = _materialize(assets, air_workspace, instance)
    assert result.success

    (mat,) = result.asset_materializations_for_node("hello")
    md = mat.metadata
    run_id = md["dagster-air/run_id"].value
    assert isinstance(run_id, int)
    assert md["dagster-air/run_url"].url == f"{local_workspace.host}/jobs/runs/{run_id}"
    assert md["dagster-air/final_state"].value == "SUCCESS"
    assert md["dagster-air/attempt_number"].value == 0
    assert md["dagster-air/duration_s"].value >= 0
    assert md["dagster-air/accelerator"].value == "GPU_1xA10"
    assert md["dagster-air/container/command"].value == "ranks 0, image runtime 6"
    assert [r.data for r in md["dagster-air/containers"].value.records] == [
        {"name": "command", "ranks": "0", "image": "runtime 6"}
    ]
    assert md["dagster-air/mlflow_run_id"].value
    assert md["dagster-air/mlflow_experiment_id"].value
    assert md["dagster-air/mlflow_run"].url == (
        f"{local_workspace.host}/ml/experiments/{md['dagster-air/mlflow_experiment_id'].value}"
        f"/runs/{md['dagster-air/mlflow_run_id'].value}"
    )
    assert md["dagster-air/gpu_hours"].value > 0
    assert len(md["dagster-air/workload_hash"].value) == 16

    # The asset definition carries the derived fields of the translator.
    spec = assets.specs_by_key[dg.AssetKey("hello")]
    assert spec.code_version == md["dagster-air/workload_hash"].value
    assert spec.kinds == {"databricks", "gpu"}
    assert "hello" in (spec.description or "")

    # Node 0's log went to the step's compute log while waiting.
    assert "hello from rank 0" in node_log(local_workspace, run_id)
    logs = compute_logs(dagster_home, result.run_id)
    assert f"[run {run_id} hello node 0 attempt 0] hello from rank 0" in logs
    assert "learning_rate: 0.25" in logs
    assert counters(local_workspace)["runs_created"] == 1


def test_failure_raises_with_the_platform_message_and_run_url(
    air_workspace, instance, local_workspace
):
    assets = build_air_assets(
        AirStage(key="broken", workload=workload("broken", "echo about to fail\nexit 3\n"))
    )
    result = _materialize(assets, air_workspace, instance, raise_on_error=False)
    assert not result.success
    data = failure_data(result)
    failure = data.user_failure_data
    assert failure is not None
    assert "ended FAILED" in failure.description
    assert "exit code 3" in failure.description
    assert "about to fail" in failure.description  # the log tail of the failing node
    run_id = failure.metadata["dagster-air/run_id"].value
    assert failure.metadata["dagster-air/run_url"].url.endswith(f"/jobs/runs/{run_id}")
    assert failure.metadata["dagster-air/final_state"].value == "FAILED"
    assert not result.asset_materializations_for_node("broken")


def test_configuration_errors_fail_without_retry_or_submit(
    air_workspace, instance, local_workspace
):
    assets = build_air_assets(
        AirStage(key="bad_config", workload=workload("bad_config", "true")),
        retry_policy=dg.RetryPolicy(max_retries=2),
    )
    # 3 GPUs of an 8-GPU node type is not a valid workload.
    run_config = dg.RunConfig(
        {"bad_config": AirRunConfig(accelerator_type="GPU_8xH100", accelerators=3)}
    )
    result = _materialize(
        assets, air_workspace, instance, run_config=run_config, raise_on_error=False
    )
    assert not result.success
    failure = failure_data(result).user_failure_data
    assert "compute.num_accelerators" in failure.description
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert counters(local_workspace)["runs_created"] == 0


def test_a_broken_workload_fails_when_definitions_load():
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="compute"):
        build_air_assets(AirStage(key="x", workload={"experiment_name": "x", "command": "true"}))


def test_run_config_overrides_reach_the_workload(air_workspace, instance, local_workspace):
    assets = build_air_assets(
        AirStage(
            key="tuned",
            workload=workload(
                "tuned",
                'echo "greeting=$GREETING"\ncat hyperparameters.yaml\n',
                parameters={"epochs": 1},
            ),
        )
    )
    config = AirRunConfig(
        env={"GREETING": "bonjour"},
        parameters={"epochs": 7, "schedule": {"warmup": 2}},
        overrides=["max_retries=1"],
    )
    result = _materialize(
        assets, air_workspace, instance, run_config=dg.RunConfig({"tuned": config})
    )
    assert result.success
    (mat,) = result.asset_materializations_for_node("tuned")
    log = node_log(local_workspace, mat.metadata["dagster-air/run_id"].value)
    assert "greeting=bonjour" in log
    assert "epochs: 7" in log
    assert "warmup: 2" in log


def test_decorator_runs_user_code_around_the_workload(air_workspace, instance, local_workspace):
    calls = []

    @air_workload_asset(
        workload=workload("decorated", 'echo "out=$OUTPUT_DIR"\n'),
        group_name="training",
        owners=["team:ml"],
    )
    def decorated(context: dg.AssetExecutionContext, air: AirInvocation):
        """Trains the decorated model."""
        calls.append("before")
        yield from air.run({"env_variables.OUTPUT_DIR": f"/tmp/out/{context.run_id}"})
        calls.append("after")

    spec = decorated.specs_by_key[dg.AssetKey("decorated")]
    assert spec.group_name == "training"
    assert spec.owners == ["team:ml"]
    assert spec.description == "Trains the decorated model."

    result = _materialize(decorated, air_workspace, instance)
    assert result.success
    assert calls == ["before", "after"]
    (mat,) = result.asset_materializations_for_node("decorated")
    log = node_log(local_workspace, mat.metadata["dagster-air/run_id"].value)
    assert f"out=/tmp/out/{result.run_id}" in log


def test_translator_subclass_changes_keys_groups_and_tags():
    class MyTranslator(DagsterAirTranslator):
        def get_asset_key(self, stage, workload):
            return dg.AssetKey(["gpu", workload.experiment_name])

        def get_group_name(self, stage, workload):
            return "ml"

        def get_tags(self, stage, workload):
            return {"accelerator": workload.compute.accelerator_type}

    assets = build_air_assets(
        [
            AirStage(key="prep", workload=workload("prep_data", "true")),
            AirStage(key="fit", workload=workload("fit_model", "true"), depends_on=["prep"]),
        ],
        translator=MyTranslator(),
    )
    fit = assets.specs_by_key[dg.AssetKey(["gpu", "fit_model"])]
    assert fit.group_name == "ml"
    assert fit.tags["accelerator"] == "GPU_1xA10"
    assert [d.asset_key for d in fit.deps] == [dg.AssetKey(["gpu", "prep_data"])]


def test_translator_derives_the_run_time_metadata_and_the_invocation_can_pass_one(
    air_workspace, instance
):
    class CostTranslator(DagsterAirTranslator):
        def __init__(self, rate: float) -> None:
            self.rate = rate

        def get_materialization_metadata(self, stage, workload, outcome, **kwargs):
            metadata = super().get_materialization_metadata(stage, workload, outcome, **kwargs)
            return {**metadata, "cost_usd": round((outcome.gpu_hours or 0.0) * self.rate, 6)}

        def get_attempt_metadata(self, stage, workload, run_id, attempt):
            return {**super().get_attempt_metadata(stage, workload, run_id, attempt), "rate": 1}

    defined = build_air_assets(
        AirStage(key="costed", workload=workload("costed", "true")),
        translator=CostTranslator(2.0),
    )
    result = _materialize(defined, air_workspace, instance)
    (mat,) = result.asset_materializations_for_node("costed")
    gpu_hours = mat.metadata["dagster-air/gpu_hours"].value
    assert mat.metadata["cost_usd"].value == round(gpu_hours * 2.0, 6)
    assert mat.metadata["dagster-air/run_id"].value > 0  # the default metadata stays
    (observation,) = [
        e.asset_observation_data.asset_observation for e in result.get_asset_observation_events()
    ]
    assert observation.metadata["rate"].value == 1

    @air_workload_asset(workload=workload("invoked", "true"))
    def invoked(context: dg.AssetExecutionContext, air: AirInvocation):
        yield from air.run(translator=CostTranslator(10.0))

    result = _materialize(invoked, air_workspace, instance)
    (mat,) = result.asset_materializations_for_node("invoked")
    gpu_hours = mat.metadata["dagster-air/gpu_hours"].value
    assert mat.metadata["cost_usd"].value == round(gpu_hours * 10.0, 6)
