"""Permissions of runs and of their MLflow experiments (`routes`, kept by `backend`)."""
