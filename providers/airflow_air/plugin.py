"""The provider's Airflow plugin: the task modules loaded once per Airflow component, not once
per task process.

Every try of an ``AirRunOperator`` runs in a task process of its own, and its ``execute``
imports the submit path (``airflow_air._task_run``: the workload models, the plan, the client,
the submission; ~40 ms of CPU on an idle machine, two to three times that on a busy one). The
LocalExecutor's task processes are forked from the scheduler, and a trigger runner from the
triggerer, after the component loaded its plugins: what a plugin imports there, every task
process inherits (copy-on-write) instead of importing it again. So, when Airflow loads this
plugin (``airflow.plugins`` entry point) in a component, ``on_load`` imports the modules a
submitting try needs (``TASK_MODULES``).

Not in a process that already talks to a supervisor (a task process, a trigger runner, a Dag
file parse: the Task SDK's ``SUPERVISOR_COMMS`` is set there): such a process imports what its
own task needs, and nothing for a task that is not ours. Off with ``[air]
preload_task_modules = False``; what it costs is the modules' memory in each component that
loads plugins (about 2 MB beside the Task SDK it already holds), shared with the processes it
forks.
"""

from __future__ import annotations

import importlib
import logging
import sys

from airflow.plugins_manager import AirflowPlugin

log = logging.getLogger(__name__)

# What the execute of a try that submits and defers imports (tests/airflow/test_airflow_plugin.py
# checks that a try finds nothing left to import).
TASK_MODULES = (
    "airflow_air._task_run",
    "airflow_air.triggers",
    "airflow_air._workload_source",
    "airflow_air._openlineage",
    "air_runtime.client",
    "air_runtime.plan",
    "air_runtime.workload",
    "air_runtime._submission",
)


def in_supervised_process() -> bool:
    """Whether this process's Task SDK talks to a supervisor: a task process, a trigger
    runner, a Dag file parse (not the scheduler, triggerer, Dag processor or API server)."""
    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    return getattr(runner, "SUPERVISOR_COMMS", None) is not None


def preload_task_modules() -> bool:
    """Import ``TASK_MODULES`` unless ``[air] preload_task_modules`` is off or this is a
    supervised process; whether it did."""
    from airflow.sdk import conf

    if not conf.getboolean("air", "preload_task_modules", fallback=True):
        return False
    if in_supervised_process():
        return False
    for name in TASK_MODULES:
        importlib.import_module(name)
    log.debug("airflow_air: task modules preloaded for the task processes this one starts")
    return True


class AirPlugin(AirflowPlugin):
    """Loads the provider's task modules once per Airflow component (see the module)."""

    name = "airflow_air"

    @classmethod
    def on_load(cls, *args: object, **kwargs: object) -> None:
        preload_task_modules()
