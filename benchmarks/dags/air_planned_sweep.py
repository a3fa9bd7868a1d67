"""P7: the Airflow Dag of the same trials as ``air_sweep``, each submitted by its trigger."""

from _sweep import DURATIONS, air_trials, sweep_dag

with sweep_dag("air_planned_sweep"):
    air_trials("trial", "air_planned_sweep", DURATIONS, submit_in_triggerer=True)
