"""Holding Dagster's interrupt (run termination) across a short critical section."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dagster._core.errors import DagsterExecutionInterruptedError


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Within the block, SIGINT only takes note; on a clean exit a noted interrupt is raised
    as ``DagsterExecutionInterruptedError``, as Dagster would have raised it.

    Used around the submit: interrupted half-way, the step would not know the run id it
    must cancel, and the remote run would be orphaned.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signals only reach the main thread: nothing to hold
        return
    received: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise DagsterExecutionInterruptedError()
