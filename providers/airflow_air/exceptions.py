"""Exceptions the operators raise, chosen so Airflow's retry policy does the right thing.

``AirConfigurationError`` derives from ``AirflowFailException``: an invalid workload, a missing
connection or a refused credential fails the task at once, because retrying cannot fix it.
``AirRunFailedError`` is an ordinary ``AirflowException``: the remote run failed, and a retry
(if the task has retries) submits a new run.
"""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException


class AirConfigurationError(AirflowFailException):
    """Something the user must fix (workload, connection, secret reference); never retried."""


class AirRunFailedError(AirflowException):
    """The AI Runtime run ended in a state other than SUCCESS."""

    def __init__(
        self,
        message: str,
        *,
        run_id: int | None = None,
        result_state: str | None = None,
        run_page_url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.result_state = result_state
        self.run_page_url = run_page_url
