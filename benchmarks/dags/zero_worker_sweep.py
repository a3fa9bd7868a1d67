"""P7: the zero-worker floor, an Airflow Dag of tasks that start and end in the triggerer."""

from _sweep import DURATIONS, sweep_dag, zero_worker_wait

with sweep_dag("zero_worker_sweep"):
    for i, seconds in enumerate(DURATIONS):  # not mapped: see _sweep
        zero_worker_wait(f"trial_{i:04d}", seconds)
