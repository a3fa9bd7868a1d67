"""The workspace's own admin API, not part of the Databricks API (`routes`; faults, counters
and the request log are `_faults`, shared with the app's middleware)."""
