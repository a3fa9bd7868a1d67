"""Dagster Pipes from the ranks of a run: metadata, asset checks and log lines reported by the
workload through ``dagster_pipes.open_dagster_pipes()``, read back from the run's logs."""

from __future__ import annotations

import dagster as dg
from dagster_checks import compute_logs, workload

from dagster_air import AirInvocation, air_workload_asset

# Rank 0 reports through Pipes; rank 1 only prints. The workspace runs ranks with the
# interpreter of this environment, where dagster-pipes is installed (as in a training image).
TWO_NODE_TRAINING = """\
echo "rank $NODE_RANK of $NUM_NODES up"
if [ "$NODE_RANK" = 0 ]; then
python - <<'PY'
from dagster_pipes import open_dagster_pipes

with open_dagster_pipes() as pipes:
    assert pipes.asset_key == "train", pipes.asset_key
    pipes.log.info(f"reward computed on rank 0 for run {pipes.run_id}")
    pipes.report_asset_materialization(metadata={"reward": 0.82, "eval/loss": 0.41})
    pipes.report_asset_check("reward_above_half", passed=True, metadata={"reward": 0.82})
    pipes.report_asset_check("loss_below_tenth", passed=False, metadata={"loss": 0.41})
PY
else
python -c 'from dagster_pipes import open_dagster_pipes
with open_dagster_pipes() as pipes:
    pipes.log.info("rank 1 checked its shard")'
fi
"""


def test_rank_zero_reports_metadata_and_checks_and_a_failing_blocking_check_stops_downstream(
    air_workspace, instance, dagster_home
):
    @air_workload_asset(
        workload=workload(
            "pipes_train",
            TWO_NODE_TRAINING,
            compute={"accelerator_type": "GPU_1xA10", "num_accelerators": 2},
        ),
        check_specs=[
            "reward_above_half",
            dg.AssetCheckSpec("loss_below_tenth", asset="train", blocking=True),
        ],
    )
    def train(context: dg.AssetExecutionContext, air: AirInvocation):
        yield from air.run()

    evaluated = []

    @dg.asset(deps=[train])
    def evaluate() -> None:
        evaluated.append(True)

    result = dg.materialize(
        [train, evaluate],
        resources={"air_workspace": air_workspace},
        instance=instance,
        raise_on_error=False,
    )

    (mat,) = result.asset_materializations_for_node("train")
    assert mat.metadata["reward"].value == 0.82
    assert mat.metadata["eval/loss"].value == 0.41
    assert mat.metadata["dagster-air/num_accelerators"].value == 2
    checks = {
        e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
    }
    assert checks["reward_above_half"].passed
    assert checks["reward_above_half"].metadata["reward"].value == 0.82
    assert not checks["loss_below_tenth"].passed
    # The blocking check failed: the downstream asset did not run.
    assert not evaluated
    assert not result.success
    assert "evaluate" not in {
        m.asset_key.path[-1] for m in result.get_asset_materialization_events()
    }
    logs = "\n".join(e.user_message for e in instance.all_logs(result.run_id) if e.user_message)
    assert "reward computed on rank 0 for run " + result.run_id in logs
    assert "rank 1 checked its shard" in logs
    assert mat.metadata["dagster-air/gpu_hours"].value > 0
    # Ordinary lines stay in the compute logs, labelled; Pipes messages do not.
    stdout = compute_logs(dagster_home, result.run_id)
    assert "node 0 attempt 0] rank 0 of 2 up" in stdout
    assert "node 1 attempt 0] rank 1 of 2 up" in stdout
    assert "__dagster_pipes_version" not in stdout
