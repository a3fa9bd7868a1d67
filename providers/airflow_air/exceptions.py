"""Exceptions the operators raise, chosen so Airflow's retry policy does the right thing.

``AirConfigurationError`` derives from ``AirflowFailException``: an invalid workload, a missing
connection or a refused credential fails the task at once, because retrying cannot fix it.
``AirRunFailedError`` is an ordinary ``AirflowException``: the remote run failed, and a retry
(if the task has retries) submits a new run.
"""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from air_runtime import RunFailed


class AirConfigurationError(AirflowFailException):
    """Something the user must fix (workload, connection, secret reference); never retried."""


class AirRunFailedError(AirflowException, RunFailed):
    """The AI Runtime run ended in a state other than SUCCESS (the core's ``RunFailed``)."""
