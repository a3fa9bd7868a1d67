"""Whether the step's own Dagster run still wants its result.

A step can outlive its Dagster run: with the multiprocess executor each step is a subprocess
of the run worker, and a run worker killed with SIGKILL (an OOM kill, a node lost) leaves it
re-parented to PID 1, still waiting on its remote run. Dagster marks the run failed (the code
server that launched the worker, or run monitoring) and a run retry adopts the remote run.
Were the orphaned step to go on, it would record a second materialization of the same
training into the failed run, with the same GPU-hours (counted twice).

So while it waits, and once more before it records anything, a step reads its run's status
from the instance (one query, no request to the workspace):

- failed (or, oddly, succeeded): the run is over and whoever continues it (a run retry, a
  re-execution from failure) adopts the remote run through the lineage. The step stops
  without recording anything and leaves the remote run alone;
- canceling or canceled: the run was terminated, as if Dagster had interrupted the step,
  which cancels the remote run (a force-terminated run's worker may be gone, and nothing
  else would).
"""

from __future__ import annotations

import time

import dagster as dg
from dagster._core.errors import DagsterExecutionInterruptedError

# How often the wait reads the run's status: a query of the instance's run storage.
CHECK_EVERY_S = 5.0
_TERMINATED = {dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED}
_OVER = {dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.SUCCESS}


class DagsterRunEnded(Exception):
    """The step's Dagster run ended while the step still waited: record nothing."""

    def __init__(self, run_id: str, status: dg.DagsterRunStatus) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(
            f"Dagster run {run_id} ended ({status.value}) while this step waited: the step "
            "stops and records nothing; a run retry or a re-execution from failure adopts its "
            "remote runs"
        )


class OwnRun:
    """Reads the step's Dagster run status at most every ``CHECK_EVERY_S`` (see the module
    docstring)."""

    def __init__(self, context: dg.AssetExecutionContext) -> None:
        self.context = context
        self._next_check = 0.0

    def check(self, *, now: bool = False) -> None:
        """Raise ``DagsterRunEnded`` when the run is over, ``DagsterExecutionInterruptedError``
        when it was terminated; ``now`` reads it whatever the time since the last read."""
        clock = time.monotonic()
        if not now and clock < self._next_check:
            return
        self._next_check = clock + CHECK_EVERY_S
        run = self.context.instance.get_run_by_id(self.context.run_id)
        if run is None:
            return
        if run.status in _TERMINATED:
            raise DagsterExecutionInterruptedError()
        if run.status in _OVER:
            raise DagsterRunEnded(run.run_id, run.status)
