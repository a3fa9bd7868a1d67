"""A Dag whose only AI Runtime tasks are mapped, for ``python -m airflow_air.testing``: every
expanded value is checked, literal lists, literal dicts, ``expand_kwargs`` lists and the
product of two expanded arguments; values from XCom are reported as checked at run time."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task
from airflow_air.operators import AirRunOperator

WORKLOAD = {
    "experiment_name": "mapped_sweep",
    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
    "command": "python train.py --lr $LR",
}

with DAG("air_test_mapped_sweep", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    # Trial 2 sets a value the workload schema refuses.
    AirRunOperator.partial(task_id="trials", workload=WORKLOAD).expand(
        overrides=[
            {"env_variables.LR": "0.1"},
            {"env_variables.LR": "0.01"},
            {"compute.num_accelerators": "many"},
        ]
    )
    # 2 x 2 task instances (secret_scope varies fastest): the second overrides misspell a
    # field, so map indexes 2 and 3 fail.
    AirRunOperator.partial(task_id="grid", workload=WORKLOAD).expand(
        overrides=[{"compute.accelerator_type": "GPU_1xA10"}, {"compute.accelerator_typ": "x"}],
        secret_scope=["scope-a", "scope-b"],
    )
    # expand_kwargs: the second trial's workload misspells a field.
    AirRunOperator.partial(task_id="by_kwargs").expand_kwargs(
        [
            {"workload": WORKLOAD},
            {"workload": {**WORKLOAD, "comand": "x"}},
        ]
    )

    @task
    def learning_rates() -> list[dict[str, str]]:
        return [{"env_variables.LR": str(lr)} for lr in (0.1, 0.01)]

    AirRunOperator.partial(task_id="from_xcom", workload=WORKLOAD).expand(
        overrides=learning_rates()
    )
