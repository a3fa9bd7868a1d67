"""One-time runs of the Jobs API: the routes (`routes`), what may be submitted, read,
cancelled and repaired (`backend`, `validation`), the engine that drives runs (`engine`), one
task attempt's processes (`execution`) and the wire shapes of runs (`run_json`)."""
