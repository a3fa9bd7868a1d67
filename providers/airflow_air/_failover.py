"""Whether a trigger's ``on_kill`` is a real kill of its task, or a triggerer failover.

On Airflow 3.3, a triggerer that missed its heartbeat and comes back finds that its triggers
were handed to another triggerer; ``TriggerRunnerSupervisor.update_triggers`` puts each one it
no longer owns into ``cancelling_triggers``, and ``TriggerRunner.cancel_triggers`` cancels them
with the *user action* message, so ``run_trigger`` calls ``on_kill()`` (airflow-core 3.3.2,
``airflow/jobs/triggerer_job_runner.py``). Cancelling the remote run there would cancel a run
the new owner is still waiting on. Airflow 3.4 drops a reassigned trigger without ``on_kill``
(apache/airflow#73454).

So before 3.4 a trigger asks, as apache-airflow-providers-google's BigQuery trigger does
(``safe_to_cancel``), for its task instance's state through the Task SDK (``GetTaskStates``,
which the triggerer's supervisor answers from the execution API): a task a user marked
failed or success, or cleared, has left DEFERRED by then; a task whose trigger only moved is
still DEFERRED.
"""

from __future__ import annotations

import asyncio
import enum
from functools import cache
from typing import Any

# The triggerer answers within the execution API's timeout; this bounds on_kill's own wait.
_STATE_READ_TIMEOUT_S = 10.0


class KillVerdict(enum.Enum):
    KILLED = "killed"  # the task instance left DEFERRED: a user acted, cancel
    MOVED = "moved"  # still DEFERRED: another triggerer took the trigger over, keep the run
    UNKNOWN = "unknown"  # the state could not be read


@cache
def airflow_drops_moved_triggers_quietly() -> bool:
    """Airflow 3.4 and later never call ``on_kill`` for a reassigned trigger."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    for distribution in ("apache-airflow-core", "apache-airflow"):
        try:
            return Version(version(distribution)).release >= (3, 4)
        except PackageNotFoundError:
            continue
    return False


def _state_of(task_states: dict[str, Any], run_id: str, task_id: str, map_index: int) -> Any:
    """The execution API keys a mapped instance ``<task_id>_<map_index>`` (``/states``)."""
    key = task_id if map_index < 0 else f"{task_id}_{map_index}"
    return (task_states.get(run_id) or {}).get(key, "<missing>")


async def read_kill_verdict(task_instance: Any) -> KillVerdict:
    """Why ``on_kill`` was called for the trigger of ``task_instance`` (see the module doc)."""
    if airflow_drops_moved_triggers_quietly() or task_instance is None:
        return KillVerdict.KILLED
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import GetTaskStates
    except ImportError:  # pragma: no cover - every supported Airflow has both
        return KillVerdict.UNKNOWN
    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None or not hasattr(comms, "asend"):
        # dag.test()'s in-process runner: one process, no other triggerer to move to.
        return KillVerdict.KILLED
    map_index = int(getattr(task_instance, "map_index", -1))
    request = GetTaskStates(
        dag_id=task_instance.dag_id,
        task_ids=[task_instance.task_id],
        run_ids=[task_instance.run_id],
        map_index=map_index,
    )
    try:
        response = await asyncio.wait_for(comms.asend(request), _STATE_READ_TIMEOUT_S)
        task_states = dict(response.task_states)
    except Exception:
        return KillVerdict.UNKNOWN
    state = _state_of(task_states, task_instance.run_id, task_instance.task_id, map_index)
    return KillVerdict.MOVED if getattr(state, "value", state) == "deferred" else KillVerdict.KILLED
