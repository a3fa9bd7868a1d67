"""AI Runtime services: workload validation, the index of the caller's runs and the log
records of a run's tasks (`routes`; the rules are the runs family's)."""
