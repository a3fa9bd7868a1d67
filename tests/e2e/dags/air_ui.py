"""What the Airflow UI test looks at: each operator with extra links, a task that is
deferred while the test looks, a mapped task, and a workflow group's stages.

``two_containers`` (deferrable) runs a policy server and a trainer on two nodes; both wait
for the file named by the ``flag`` param, so the test sees the task deferred and the run
going, then creates the file and the run ends.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

WAIT_FOR_FLAG = 'while [ ! -e "$FLAG" ]; do sleep 0.2; done\n'


def _two_containers(experiment: str) -> dict[str, object]:
    return {
        "experiment_name": experiment,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 2},
        "max_retries": 0,
        "containers": [
            {
                "name": "inference",
                "ranks": [0],
                "unity_catalog_image": "main.rl.vllm:0.20.0",
                "command": 'echo "policy server ready on rank $POD_RANK"\n'
                + WAIT_FOR_FLAG
                + 'echo "policy server done"\n',
            },
            {
                "name": "trainer",
                "ranks": [1],
                "unity_catalog_image": "main.rl.trl:0.24.0",
                "command": 'echo "trainer started on rank $POD_RANK"\n'
                + WAIT_FOR_FLAG
                + 'echo "trainer step 1 mean reward 0.42"\n',
            },
        ],
    }


QUICK = {
    "experiment_name": "air_ui_quick",
    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
    "max_retries": 0,
    "command": 'echo "quick run $INDEX done"\n',
}

with DAG(
    "air_ui",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"flag": "/nonexistent"},
    tags=["e2e"],
) as dag:
    AirRunOperator(
        task_id="two_containers",
        workload=_two_containers("air_ui_two_containers"),
        overrides={"env_variables.FLAG": "{{ params.flag }}"},
        deferrable=True,
    )
    AirRunOperator.partial(task_id="mapped", workload=QUICK, deferrable=True).expand(
        overrides=[{"env_variables.INDEX": "0"}, {"env_variables.INDEX": "1"}]
    )
    with AirWorkflowTaskGroup("stages", run_name="air_ui_stages"):
        AirRunOperator(task_id="train", workload={**QUICK, "env_variables": {"INDEX": "stage"}})
