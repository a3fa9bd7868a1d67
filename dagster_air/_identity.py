"""Which remote run a Dagster step owns: the idempotency token's inputs.

The submission is ``air_runtime.SubmissionKey("dagster", <deployment namespace>, job, dagster
run id, step key, partition)``; its idempotency token for a generation is
``make_idempotency_token("dagster", job, dagster run id, step key, partition, generation,
namespace=<deployment namespace>)``. Everything but the generation is fixed for a
step of a Dagster run; a new materialization is a new Dagster run, hence a new remote run.

The namespace names the Dagster instance (its run storage): two instances sharing a workspace
(dev and prod, a wiped storage) must never get each other's runs, even for equal run ids
(run ids are random, but a copied or re-created storage, or a test harness, may repeat
them). It is ``AirWorkspace.deployment_namespace`` when set, otherwise a random value made
once and kept in the instance's key-value store (``dagster_air/deployment_namespace``), where
every run worker of the instance reads the same value.

The generation is *not* Dagster's retry number. A step can be retried because its worker
died (the multiprocess executor reports a crashed step process as a failure and applies
the retry policy; run monitoring resumes runs whose worker vanished): the remote run it
started is still the right one, and resubmitting with the same token hands it back, so no
second GPU run starts. A step retried because its remote run *ended* unsuccessfully must
start a new remote run. So the generation counts the terminal remote failures this step
already saw in this Dagster run. Each one is written to the event log (an observation of
the asset with ``dagster-air/generation``) before the step fails, and a retry reads them
back: the count is deterministic and survives any crash of the worker.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import dagster as dg

from air_runtime import RunState, SubmissionKey, SubmittedRun

from ._translator import META_PREFIX

NAMESPACE_KEY = "dagster_air/deployment_namespace"
_SETTLE_S = 1.0
GENERATION_KEY = f"{META_PREFIX}generation"
STEP_KEY_KEY = f"{META_PREFIX}step_key"


@dataclass(frozen=True)
class StepIdentity:
    pipeline_id: str
    run_id: str
    step_key: str
    partition: str | None

    @classmethod
    def of(cls, context: dg.AssetExecutionContext) -> StepIdentity:
        partition: str | None = None
        if context.has_partition_key:
            partition = str(context.partition_key)
        elif context.has_partition_key_range:
            key_range = context.partition_key_range
            partition = f"{key_range.start}...{key_range.end}"
        return cls(
            pipeline_id=context.job_name,
            run_id=context.run_id,
            step_key=str(context.op_handle),
            partition=partition,
        )

    @classmethod
    def submission_of(
        cls, context: dg.AssetExecutionContext, configured_namespace: str | None
    ) -> tuple[StepIdentity, SubmissionKey, int]:
        """The step's identity, its submission and the generation this attempt submits."""
        identity = cls.of(context)
        namespace = deployment_namespace(context.instance, configured_namespace)
        key = SubmissionKey(
            "dagster",
            namespace,
            identity.pipeline_id,
            identity.run_id,
            identity.step_key,
            identity.partition,
        )
        return identity, key, identity.generation(context)

    def generation(self, context: dg.AssetExecutionContext) -> int:
        """1 + the highest generation whose remote run ended unsuccessfully in an earlier
        attempt of this step (0 on a first attempt)."""
        if context.retry_number == 0:
            return 0
        records = context.instance.get_records_for_run(
            run_id=self.run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION
        ).records
        seen = -1
        for record in records:
            event = record.event_log_entry.dagster_event
            if event is None or event.step_key != self.step_key:
                continue
            metadata = event.event_specific_data.asset_observation.metadata
            value = metadata.get(GENERATION_KEY)
            if value is not None and metadata.get(STEP_KEY_KEY) is not None:
                seen = max(seen, int(value.value))
        return seen + 1


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
