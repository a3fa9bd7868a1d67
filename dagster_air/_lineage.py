"""A step's lineage: the Dagster runs it continues, and what they already did.

A run *continues* its parent when Dagster made it to finish the parent's work: a
re-execution from failure or from asset failure (``dagster/is_resume_retry``,
``dagster/is_asset_resume_retry``), or a run retry of the daemon (``dagster/retry_number``,
with either retry strategy). "Re-execute all" carries none of these tags: it is the user
asking for everything again, and it starts a lineage of its own.

The lineage of a step is its run and the runs it continues, up to the first that does not
continue another (the *head*, usually the root run). From it the step learns:

- which (asset, partition) rows the lineage materialized, with the same code version: a
  continuing run does not train them again (``materialized``);
- the remote runs the lineage launched for this step (``launches``, written as engine
  events the moment a run is submitted): a retry adopts the one still going, or cancels it
  before submitting another;
- which rows a blocking check refused (``refused``): trained again, never kept;
- the generations whose remote run ended unsuccessfully (``failed_generations``, the
  observations ``_identity`` writes), so a retry never gets a failed run back.

A re-execution *from failure* of a backfill (the backfill page's button) starts runs of a new
backfill, with no parent run: the other recovery button may already have trained what it
asks for (a failed run of the backfill re-executed from failure on its own). Such a run also
keeps the rows any run materialized with the same code version since the first backfill of
its chain was launched (``backfill_since``). A backfill re-executed whole asks for everything
again, as "Re-execute all" does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluation
from dagster._core.events import EngineEventData
from dagster._core.storage.tags import (
    ASSET_RESUME_RETRY_TAG,
    BACKFILL_ID_TAG,
    PARENT_BACKFILL_ID_TAG,
    RESUME_RETRY_TAG,
    RETRY_NUMBER_TAG,
    ROOT_BACKFILL_ID_TAG,
)

from ._translator import META_PREFIX

# The observation ``_identity`` writes when a generation's run ended unsuccessfully.
GENERATION_KEY = f"{META_PREFIX}generation"
STEP_KEY_KEY = f"{META_PREFIX}step_key"
LAUNCH_KEY = f"{META_PREFIX}launch"
CODE_VERSION_TAG = "dagster/code_version"
PARTITION_TAG = "dagster/partition"
# A range run's rows name their partition in this metadata (materializations, evaluations).
PARTITION_METADATA = f"{META_PREFIX}partition"
_MAX_DEPTH = 64  # a guard against a cycle of parent run ids
_MAX_RECORDS = 10_000  # materializations read per asset for a backfill's recovery


def backfill_recovery_since(context: dg.AssetExecutionContext, run: dg.DagsterRun) -> float | None:
    """The launch time of the first backfill of ``run``'s chain when ``run`` belongs to a
    re-execution from failure of a backfill (see the module docstring), else None. Dagster
    does not record the strategy: a re-execution from failure asks for less than its parent
    backfill (what that one did not materialize); one that asks for as much is taken for a
    whole re-execution."""
    parent_id = run.tags.get(PARENT_BACKFILL_ID_TAG)
    own_id = run.tags.get(BACKFILL_ID_TAG)
    if not parent_id or not own_id:
        return None
    instance = context.instance
    own, parent = instance.get_backfill(own_id), instance.get_backfill(parent_id)
    root = instance.get_backfill(run.tags.get(ROOT_BACKFILL_ID_TAG, parent_id))
    if own is None or parent is None or root is None:
        return None
    if not (own.is_asset_backfill and parent.is_asset_backfill):
        return None
    try:
        graph = context.repository_def.asset_graph
        asked = own.get_asset_backfill_data(graph).target_subset
        before = parent.get_asset_backfill_data(graph).target_subset
    except Exception:  # an unreadable backfill: recover nothing rather than fail the step
        return None
    count = asked.num_partitions_and_non_partitioned_assets
    if count >= before.num_partitions_and_non_partitioned_assets:
        return None
    return root.backfill_timestamp


def continues_parent(run: dg.DagsterRun) -> bool:
    """Whether Dagster started ``run`` to finish its parent's work (see the docstring)."""
    if run.parent_run_id is None:
        return False
    tags = run.tags
    return (
        tags.get(RESUME_RETRY_TAG) == "true"
        or tags.get(ASSET_RESUME_RETRY_TAG) == "true"
        or RETRY_NUMBER_TAG in tags
    )


@dataclass(frozen=True)
class Launch:
    """A remote run the lineage submitted for a step."""

    dagster_run_id: str
    run_id: int
    run_page_url: str
    index: str | None
    generation: int
    task_keys: tuple[str, ...]


@dataclass(frozen=True)
class Lineage:
    instance: dg.DagsterInstance
    runs: tuple[dg.DagsterRun, ...]  # the current run first, the head last
    head_run_id: str
    continued: bool  # the current run continues earlier ones
    # The parent of a run the user re-executed whole ("Re-execute all"), if it is one.
    whole_reexecution_of: str | None
    # When the lineage re-executes a backfill from failure: the time its first backfill was
    # launched (rows any run materialized since then are kept).
    backfill_since: float | None = None

    @classmethod
    def of(cls, context: dg.AssetExecutionContext) -> Lineage:
        instance = context.instance
        runs = [context.run]
        while continues_parent(runs[-1]) and len(runs) < _MAX_DEPTH:
            parent = instance.get_run_by_id(str(runs[-1].parent_run_id))
            if parent is None or any(r.run_id == parent.run_id for r in runs):
                break
            runs.append(parent)
        head = runs[-1]
        whole = head.parent_run_id if len(runs) == 1 else None
        since = backfill_recovery_since(context, head)
        return cls(instance, tuple(runs), head.run_id, len(runs) > 1, whole, since)

    def materialized(
        self, asset_key: dg.AssetKey, code_version: str | None
    ) -> dict[str | None, tuple[str, dict[str, Any]]]:
        """Partition (None: unpartitioned) -> (the Dagster run, its metadata) of the newest
        materialization of ``asset_key`` with ``code_version`` by a run of the lineage, then,
        for a backfill's re-execution from failure, by any run since ``backfill_since``."""
        found: dict[str | None, tuple[str, dict[str, Any]]] = {}

        def keep(run_id: str, materialization: dg.AssetMaterialization | None) -> None:
            """The first found per partition wins (callers go newest first)."""
            if materialization is None or materialization.asset_key != asset_key:
                return
            tags = materialization.tags or {}
            if code_version is not None and tags.get(CODE_VERSION_TAG) not in (None, code_version):
                return
            partition = materialization.partition
            found.setdefault(
                str(partition) if partition is not None else None,
                (run_id, dict(materialization.metadata)),
            )

        for run in self.runs:  # newest first
            records = self.instance.get_records_for_run(
                run_id=run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
            ).records
            for record in reversed(records):
                keep(run.run_id, record.asset_materialization)
        if self.backfill_since is not None:
            for asset_record in self.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset_key, after_timestamp=self.backfill_since),
                limit=_MAX_RECORDS,
            ).records:  # newest first
                keep(asset_record.run_id, asset_record.asset_materialization)
        return found

    def refused(self, asset_key: dg.AssetKey) -> set[str | None]:
        """The partitions (None: unpartitioned) of ``asset_key`` whose newest evaluation of a
        blocking check in the lineage failed: such a row is trained again, never kept, or its
        downstream stages would run on what the check refused."""
        newest: dict[tuple[str, str | None], bool] = {}
        for run in self.runs:  # newest first: the first found wins
            records = self.instance.get_records_for_run(
                run_id=run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
            ).records
            for record in reversed(records):
                event = record.event_log_entry.dagster_event
                evaluation = event.event_specific_data if event is not None else None
                if (
                    not isinstance(evaluation, AssetCheckEvaluation)
                    or evaluation.asset_key != asset_key
                    or not evaluation.blocking
                ):
                    continue
                # A range run's evaluation names its partition in its metadata; a run of one
                # partition in its tags.
                named = evaluation.metadata.get(PARTITION_METADATA)
                partition = (
                    evaluation.partition
                    or (str(named.value) if named is not None else None)
                    or run.tags.get(PARTITION_TAG)
                )
                failed = (
                    not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
                )
                newest.setdefault((evaluation.check_name, partition), not failed)
        return {partition for (_, partition), passed in newest.items() if not passed}

    def _step_events(
        self, step_key: str, of_type: dg.DagsterEventType
    ) -> Iterable[tuple[str, dg.DagsterEvent]]:
        for run in reversed(self.runs):  # oldest first
            for record in self.instance.get_records_for_run(
                run_id=run.run_id, of_type=of_type
            ).records:
                event = record.event_log_entry.dagster_event
                if event is not None and event.step_key == step_key:
                    yield run.run_id, event

    def launches(self, step_key: str) -> list[Launch]:
        """The remote runs the lineage submitted for the step, oldest first."""
        found = []
        for run_id, event in self._step_events(step_key, dg.DagsterEventType.ENGINE_EVENT):
            value = event.engine_event_data.metadata.get(LAUNCH_KEY)
            if value is None:
                continue
            try:
                data = json.loads(str(value.value))
                found.append(
                    Launch(
                        run_id,
                        int(data["run_id"]),
                        str(data.get("run_page_url") or ""),
                        data.get("index"),
                        int(data["generation"]),
                        tuple(data["task_keys"]),
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue  # not one of ours, or unreadable: never fail the step for it
        return found

    def failed_generations(self, step_key: str) -> set[int]:
        """The generations of the step whose remote run ended unsuccessfully."""
        found = set()
        for _, event in self._step_events(step_key, dg.DagsterEventType.ASSET_OBSERVATION):
            metadata = event.event_specific_data.asset_observation.metadata  # type: ignore[union-attr]
            value = metadata.get(GENERATION_KEY)
            if value is not None and metadata.get(STEP_KEY_KEY) is not None:
                found.add(int(value.value))  # type: ignore[arg-type]
        return found


def record_launch(context: dg.AssetExecutionContext, launch: Launch) -> None:
    """Write the launch to the event log at once (an engine event of the step), before the
    step waits: a run worker killed in the wait leaves it for the retry that continues it."""
    data = {
        "run_id": launch.run_id,
        "run_page_url": launch.run_page_url,
        "index": launch.index,
        "generation": launch.generation,
        "task_keys": list(launch.task_keys),
    }
    context.instance.report_engine_event(
        f"submitted run {launch.run_id}",
        dagster_run=context.run,
        engine_event_data=EngineEventData(
            metadata={
                LAUNCH_KEY: dg.MetadataValue.text(json.dumps(data)),
                f"{META_PREFIX}run_url": dg.MetadataValue.url(launch.run_page_url),
            }
        ),
        step_key=str(context.op_handle),
    )
