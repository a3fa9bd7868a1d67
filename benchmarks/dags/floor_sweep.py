"""P7: the floor, Airflow's deferrable ``WaitSensor`` over the same durations (see ``_sweep``)."""

from _sweep import DURATIONS, sweep_dag, waits

with sweep_dag("floor_sweep"):
    waits("trial", DURATIONS)
