"""What every try of the provider's operators shares, whatever it runs: when it may defer and
for how long, how often its wait polls, and which of the core's errors fail it at once.

Only imported from ``execute`` (``AirTaskRun``, ``AirImageRegistration``, the workflow
group's submit task).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING

from air_runtime import AirError, RunFailed, RunTimeout
from airflow_air.exceptions import AirConfigurationError
from airflow_air.hooks import defer_timeout_grace, first_poll_delay

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context

    from air_runtime import AirClient


@contextlib.contextmanager
def configuration_errors_fail_fast(redact: Callable[[str], str] = str) -> Iterator[None]:
    """The core's errors a retry cannot fix (``retryable`` False: an invalid workload, a
    refused credential, a request the workspace rejects) become ``AirConfigurationError`` (an
    AirflowFailException); a failed or timed-out run stays retryable (a retry submits a new
    run). ``redact`` cleans the message (an image registration's reason may echo credentials)."""
    try:
        yield
    except AirError as exc:
        if exc.retryable or isinstance(exc, RunFailed | RunTimeout):
            raise
        raise AirConfigurationError(redact(str(exc))) from exc


def try_deadline(task: BaseOperator, context: Context) -> float | None:
    """Wall-clock end of ``execution_timeout`` counted from this try's start, for triggers."""
    if task.execution_timeout is None:
        return None
    started = getattr(context.get("ti"), "start_date", None)
    start = started.timestamp() if started is not None else time.time()
    return start + task.execution_timeout.total_seconds()


def poll_interval_of(task: BaseOperator, client: AirClient) -> float:
    """Seconds between a wait's polls: the operator's ``poll_interval``, else the client's
    (the hook sets it from ``[air] default_poll_interval``)."""
    own = getattr(task, "poll_interval", None)
    return float(own) if own is not None else client.poll_interval


def first_poll_at() -> float:
    """When a trigger created now may first ask the workspace (see ``airflow_air.triggers``)."""
    return time.time() + max(first_poll_delay(), 0.0)


def defer_timeout(deadline: float | None) -> timedelta | None:
    """The deferral's timeout: the task's deadline plus ``[air] defer_timeout_grace``, the
    extra time the triggerer gets before Airflow gives up on the trigger (the trigger
    cancels the run at the deadline itself; past the grace ``resume_execution`` does)."""
    if deadline is None:
        return None
    return timedelta(seconds=max(deadline - time.time(), 0) + defer_timeout_grace())
