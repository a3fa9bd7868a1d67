"""Which remote run a Dagster step owns: the idempotency token's inputs.

The submission of one planned run (``_plan``) is ``air_runtime.SubmissionKey("dagster",
<deployment namespace>, job, <lineage head run id>, step key, index)``, the index being the
partition (or a range run's first...last partition key, with a digest of its tasks when its
lineage kept some rows); its idempotency token for a generation comes from that key. The
run's name shows the head's first 8 characters and the partition key (or the range's first
and last keys and count), encoded reversibly (``air_runtime``'s run names). The
head is the run the step's Dagster run continues (``_lineage``): the root run for a run
retry or a re-execution from failure, the run itself for a new run or "Re-execute all". So
a retry of a killed run worker names the same submission as its parent and gets the
parent's remote run back, never a second one.

The namespace names the Dagster instance (its run storage): two instances sharing a workspace
(dev and prod, a wiped storage) must never get each other's runs, even for equal run ids
(run ids are random, but a copied or re-created storage, or a test harness, may repeat
them). It is ``AirWorkspace.deployment_namespace`` when set, otherwise a random value made
once and kept in the instance's key-value store (``dagster_air/deployment_namespace``), where
every run worker of the instance reads the same value.

The generation is *not* Dagster's retry number. A step can be retried because its worker
died (the multiprocess executor reports a crashed step process as a failure; run monitoring
and run retries start the work again): the remote run it started is still the right one,
and resubmitting with the same token hands it back. A step retried because its remote run
*ended* unsuccessfully must start a new remote run. So the generation counts the terminal
remote failures the lineage already saw for this step. Each one is written to the event log
(an observation of the asset with ``dagster-air/generation``) before the step fails, and a
retry reads them back: the count is deterministic and survives any crash of the worker.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import dagster as dg

from air_runtime import PartitionRange, RunState, SubmissionKey, SubmittedRun, Sweep

from ._lineage import GENERATION_KEY, STEP_KEY_KEY, Lineage
from ._translator import META_PREFIX

if TYPE_CHECKING:
    from ._resource import AirWorkspace

BACKFILL_TAG = "dagster/backfill"  # the tag every run of a backfill carries (its id)
NAMESPACE_KEY = "dagster_air/deployment_namespace"
_SETTLE_S = 1.0


def submission_key(
    context: dg.AssetExecutionContext,
    workspace: AirWorkspace,
    lineage: Lineage,
    index: str | None,
    partitions: PartitionRange | None = None,
) -> SubmissionKey:
    """The submission of one planned run of the step: the lineage head's, so a run retry
    or a re-execution from failure names the same submission as the run it continues.
    ``partitions`` is what the run's name shows (its partition key, or its range's first
    and last keys and count), never part of its identity."""
    namespace = deployment_namespace(context.instance, workspace.deployment_namespace)
    return SubmissionKey(
        "dagster", namespace, context.job_name, lineage.head_run_id, str(context.op_handle),
        index, partitions,
    )  # fmt: skip


def sweep_of(
    context: dg.AssetExecutionContext, workspace: AirWorkspace, lineage: Lineage
) -> Sweep | None:
    """The sweep whose GPU-hour budget the step's runs share, when the resource has a
    ``sweep_gpu_hours_budget`` (``air_runtime._sweeps``): the runs of its backfill (every
    Dagster run with the backfill's ``dagster/backfill`` tag, whose short id the run names
    carry, whatever their job), else the runs of its own Dagster run (its lineage head's,
    which names its submissions). Counted from the earliest of those runs' creation. A run of
    the backfill launched after this step began is counted by the steps that start after it
    (whichever step sees the budget spent stops every run of the sweep)."""
    budget = workspace.sweep_budget()
    if budget is None:
        return None
    instance = context.instance
    backfill = context.run.tags.get(BACKFILL_TAG)
    if backfill:
        records = instance.get_run_records(dg.RunsFilter(tags={BACKFILL_TAG: backfill}))
        runs = {r.dagster_run.run_id for r in records} | {context.run_id, lineage.head_run_id}
        label, pipeline = f"backfill {backfill}", None
    else:
        records = [r for r in [instance.get_run_record_by_id(lineage.head_run_id)] if r]
        runs = {lineage.head_run_id}
        label, pipeline = f"run {lineage.head_run_id[:8]}", context.job_name
    created = [r.create_timestamp.timestamp() for r in records if r.create_timestamp]
    return Sweep(
        label=label,
        pipeline=pipeline,
        runs=tuple(sorted(runs)),
        budget=budget,
        since_ms=int(min(created) * 1000) if created else None,
        prices=workspace.prices(),
    )


def deployment_namespace(instance: dg.DagsterInstance, configured: str | None = None) -> str:
    """The namespace of this Dagster instance (see the module docstring)."""
    if configured and configured.strip():
        return configured.strip()
    storage = instance.run_storage
    found = storage.get_cursor_values({NAMESPACE_KEY}).get(NAMESPACE_KEY)
    if found:
        return found
    candidate = uuid.uuid4().hex
    if not _insert_if_absent(storage, NAMESPACE_KEY, candidate):
        # A storage without SQL access offers only an upsert: every writer waits, then uses
        # what was stored last (a later writer read "no value" before the first write).
        storage.set_cursor_values({NAMESPACE_KEY: candidate})
        time.sleep(_SETTLE_S)
    return storage.get_cursor_values({NAMESPACE_KEY}).get(NAMESPACE_KEY) or candidate


def _insert_if_absent(storage: Any, key: str, value: str) -> bool:
    """Create the key unless it exists, atomically (the key-value table's unique key makes
    every writer but the first fail). False when this storage is not a SQL one."""
    try:
        from dagster._core.storage.runs.schema import KeyValueStoreTable
        from dagster._core.storage.runs.sql_run_storage import SqlRunStorage
        from sqlalchemy.exc import IntegrityError
    except ImportError:  # pragma: no cover - a Dagster without these internals
        return False
    if not isinstance(storage, SqlRunStorage):
        return False
    try:
        with storage.connect() as conn:
            conn.execute(KeyValueStoreTable.insert().values(key=key, value=value))
    except IntegrityError:
        pass  # another worker was first: its value is the namespace
    return True


def terminal_failure_observation(
    context: dg.AssetExecutionContext,
    asset_key: dg.AssetKey,
    submitted: SubmittedRun,
    state: RunState | None,
    generation: int,
) -> dg.AssetObservation:
    """The event that says this generation's remote run ended unsuccessfully (or was
    cancelled), so a retry of the step starts the next generation. It is yielded, not
    ``log_event``-ed: events logged that way are lost when the step raises right after."""
    final = (state.result_state or state.life_cycle_state) if state is not None else "CANCELING"
    return dg.AssetObservation(
        asset_key=asset_key,
        partition=context.partition_key if context.has_partition_key else None,
        metadata={
            f"{META_PREFIX}run_id": dg.MetadataValue.int(submitted.run_id),
            f"{META_PREFIX}run_url": dg.MetadataValue.url(submitted.run_page_url),
            f"{META_PREFIX}final_state": final,
            GENERATION_KEY: dg.MetadataValue.int(generation),
            STEP_KEY_KEY: str(context.op_handle),
        },
    )
