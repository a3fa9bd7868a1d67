"""The MLflow run of a running run, for its link as soon as the run has one.

Both orchestrators show the link while the run trains (Airflow: an extra link; Dagster: an
observation of the asset), read the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from air_runtime._states import RunState, mlflow_ids, mlflow_run_url

if TYPE_CHECKING:
    from air_runtime.client import AirClient, AsyncAirClient

# A running attempt's MLflow ids are assigned once its task run starts, so the first read may
# find none: read up to 3 times, 500 ms apart, as the CLI does after its submit
# (experimental/air/cmd/mlflow.go resolveMLflowIDsForRun, mlflowLinkPollAttempts).
MLFLOW_LINK_READS = 3
MLFLOW_LINK_READ_INTERVAL = 0.5


class MlflowLinkReader:
    """The MLflow run of a running run, for its link as soon as the run has one: the ids the
    platform gives the newest attempt of the run's task (of ``task_key``'s stage) in its
    ``runs/get-output`` (``ai_runtime_task_output``, as the CLI's ``air get`` reads them:
    mlflow.go mlflowIDs), read once per attempt, once the attempt is RUNNING, from the state
    changes a wait sees anyway. The same task run ``RunOutcome`` reads at the end, so the
    link does not change when the run ends (only when a retry starts a new attempt)."""

    def __init__(self, task_key: str | None = None) -> None:
        self.task_key = task_key
        self._read: set[int] = set()

    def due(self, state: RunState) -> int | None:
        """The task run to read now (taken: asked once per attempt); None when none is."""
        view = state.stage(self.task_key)
        task = view.tasks[0] if len(view.tasks) == 1 else None
        if task is None or task.run_id is None or task.life_cycle_state != "RUNNING":
            return None
        if task.run_id in self._read:
            return None
        self._read.add(task.run_id)
        return task.run_id

    @staticmethod
    def url_of(host: str, output: Mapping[str, Any]) -> str | None:
        return mlflow_run_url(host, *mlflow_ids(output))

    def read(
        self, client: AirClient, task_run_id: int, sleep: Callable[[float], None] = time.sleep
    ) -> str | None:
        """The MLflow URL of ``task_run_id``; None when it has none yet or the read failed
        (a convenience link: never an error of the task)."""
        for attempt in range(MLFLOW_LINK_READS):
            if attempt:
                sleep(MLFLOW_LINK_READ_INTERVAL)
            try:
                url = self.url_of(client.host, client.get_output(task_run_id))
            except Exception:
                return None
            if url:
                return url
        return None

    async def aread(self, client: AsyncAirClient, task_run_id: int) -> str | None:
        """``read`` from an event loop (a trigger's, within its share of the shared watcher's
        request budget: ``RunWatcher.aside``)."""
        import asyncio

        for attempt in range(MLFLOW_LINK_READS):
            if attempt:
                await asyncio.sleep(MLFLOW_LINK_READ_INTERVAL)
            try:
                url = self.url_of(client.host, await client.get_output(task_run_id))
            except Exception:
                return None
            if url:
                return url
        return None
