"""P7: an Airflow Dag of a few tasks of each kind, run before anything is measured."""

from _sweep import WARM_UP_TASKS, air_trials, sweep_dag, waits, zero_worker_wait

with sweep_dag("warm_up"):
    air_trials("air", "warm_up", [5.0] * WARM_UP_TASKS)
    waits("wait", [5.0] * WARM_UP_TASKS)
    for i in range(WARM_UP_TASKS):
        zero_worker_wait(f"zero_worker_{i}", 5.0)
