"""The deployment namespace: what makes one Airflow deployment's submissions its own.

Two deployments sharing a workspace (dev and prod, blue/green, a metadata database that was
reset) run the same Dags with the same run ids (``scheduled__<date>``) and the same first
generations, so everything derived from (dag, run, task) alone (idempotency tokens, secret
keys) would collide: deployment 2 would get deployment 1's run back. The namespace goes into
both, and is:

1. ``[air] deployment_namespace`` when set (``AIRFLOW__AIR__DEPLOYMENT_NAMESPACE``): to pin
   it, or to carry it over on purpose to a new metadata database that must reattach to the
   runs of the old one;
2. otherwise the Airflow variable ``airflow_air_deployment_namespace``, a random value made
   by the first task that needs it and kept in the metadata database, where every worker of
   the deployment reads the same value (tasks read variables through the Task SDK). A reset
   database makes a new one, so it never reattaches to the runs of its past.

Triggers never need it: they wait on a run id the worker already resolved.

Creation: the execution API only offers an upsert, so two first tasks starting together may
both write a value. Each writer waits ``_SETTLE_S`` after its write and then uses what the
database holds; a later writer can only be one that read "no value" before the first write
landed, so they read the same final value unless that writer took longer than ``_SETTLE_S``
between its read and its write (a loaded machine). What must not change is a task
instance's own namespace from one try to the next, and it does not: each try records the
namespace it submitted under (the task state record, ``_generations``) and the next try
keeps it, and a deferral hands the submission to the trigger and back.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow.sdk import Context

    from air_runtime import SubmissionKey

VARIABLE_KEY = "airflow_air_deployment_namespace"
_SETTLE_S = 1.0
_DESCRIPTION = (
    "Identity of this Airflow deployment in AI Runtime idempotency tokens and secret keys "
    "(made once by airflow_air). Changing or deleting it makes running tasks lose their runs."
)


def deployment_namespace() -> str:
    """The namespace of this deployment (see the module docstring)."""
    from airflow.sdk import Variable, conf

    configured = (conf.get("air", "deployment_namespace", fallback="") or "").strip()
    if configured:
        return configured
    value = Variable.get(VARIABLE_KEY, default=None)
    if value:
        return str(value)
    candidate = uuid.uuid4().hex
    Variable.set(VARIABLE_KEY, candidate, description=_DESCRIPTION)
    time.sleep(_SETTLE_S)
    value = Variable.get(VARIABLE_KEY, default=None)
    return str(value) if value else candidate


def submission_key(context: Context, task_id: str) -> SubmissionKey:
    """The submission of this task instance in this deployment (``task_id``: the submitting
    task of a workflow, whose run its stages share)."""
    from air_runtime import SubmissionKey

    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    mapped = None if map_index is None or map_index < 0 else int(map_index)
    return SubmissionKey("airflow", deployment_namespace(), ti.dag_id, ti.run_id, task_id, mapped)
