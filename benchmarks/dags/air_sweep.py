"""P7: the Airflow Dag of deferrable ``AirRunOperator`` trials (see ``_sweep``)."""

from _sweep import DURATIONS, air_trials, sweep_dag

with sweep_dag("air_sweep"):
    air_trials("trial", "air_sweep", DURATIONS)
