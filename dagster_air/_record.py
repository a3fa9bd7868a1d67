"""What a step records of its rows: ``record(plan, results, scope)``, a pure function from
the rows' results to the step's observations, materializations and check results, as
dagster-dbt's ``to_default_asset_events`` is for a dbt invocation.

A row scope says how rows map to the step's outputs: ``OnePartitionScope`` (one partition, or
none: a ``MaterializeResult`` per asset, the check results as the workload reported them)
or ``RangeScope`` (several partitions in one step: a range output per asset with each
partition's metadata, and check evaluations naming their partition). The step asks its
scope instead of branching on the kind of range.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg

from ._lineage import PARTITION_METADATA
from ._translator import META_PREFIX

if TYPE_CHECKING:
    from ._plan import KeptRow, PlannedRun, StepPlan, TaskRow
    from ._workflow import LoadedStage

# What a step yields; a step over a partition range also yields per-partition
# materializations and check evaluations, and its checks' outputs.
AirEvent = (
    dg.MaterializeResult
    | dg.AssetObservation
    | dg.AssetCheckResult
    | dg.AssetMaterialization
    | dg.AssetCheckEvaluation
    | dg.Output
)


@dataclass(frozen=True)
class RowResult:
    """What one row of the step ended as."""

    stage: LoadedStage
    partition: str | None
    task_key: str | None  # None: kept from the lineage, not trained by this step
    metadata: dict[str, Any] | None = None  # materialized (trained or kept)
    data_version: dg.DataVersion | None = None
    checks: tuple[dg.AssetCheckResult, ...] = ()
    failure: str | None = None  # why it is not materialized
    # What earlier (retried) attempts of the row reported (``earlier_attempt_observation``).
    observations: tuple[dg.AssetObservation, ...] = ()

    @classmethod
    def of(cls, row: TaskRow, **result: Any) -> RowResult:
        return cls(row.stage, row.partition, row.task_key, **result)

    @classmethod
    def kept(cls, row: KeptRow, metadata: dict[str, Any]) -> RowResult:
        return cls(row.stage, row.partition, None, metadata=metadata)

    @property
    def trained(self) -> bool:
        return self.task_key is not None


@dataclass(frozen=True)
class PartitionMetadata:
    """Metadata of one partition of a range output: the step adds it to its context
    (``add_asset_metadata``) before the output's ``MaterializeResult``."""

    asset_key: dg.AssetKey
    partition: str | None
    metadata: Mapping[str, Any]


@dataclass(frozen=True)
class IgnoredCheck:
    """A check a row reported that the step does not run: the step logs it."""

    message: str


Recorded = AirEvent | PartitionMetadata | IgnoredCheck


class OnePartitionScope:
    """A step over one partition, or an unpartitioned one: a row per stage."""

    def partition_metadata(self, partition: str | None) -> dict[str, Any]:
        """What a row's materialization says of its partition (Dagster's own says it)."""
        return {}

    def check_partition(self, partition: str | None) -> str | None:
        """The partition a blocking check of the row is evaluated for."""
        return None

    def where(self, partition: str | None) -> str:
        return "the workload"

    def task_budget(self, stage: float | None, asset: float | None) -> float | None:
        """A row's GPU-hour budget: its stage's own (the asset's bounds the whole step)."""
        return stage

    def step_budget(self, asset: float | None) -> float | None:
        """The GPU-hour budget of all the step's runs together: the asset's."""
        return asset

    def summary(self, plan: StepPlan, runs: int, max_tasks_per_run: int) -> str | None:
        """How the rows were split into runs, for the step's log."""
        return None

    def runs_to_queue(self, plan: StepPlan) -> Iterator[tuple[PlannedRun, int]]:
        """The runs whose partitions may queue in lanes, with how many runs share the pool
        with each (its wave's)."""
        return iter(())

    def materializations(
        self, asset_key: dg.AssetKey, done: Sequence[RowResult], complete: bool, required: bool
    ) -> Iterator[Recorded]:
        """A ``MaterializeResult`` per materialized row; a kept asset gets one only where
        Dagster requires the output (the one asset of a step that cannot be subset: Dagster
        would record it anyway, without metadata)."""
        if any(r.trained for r in done) or required:
            for r in done:
                yield dg.MaterializeResult(
                    asset_key=asset_key, metadata=r.metadata, data_version=r.data_version
                )

    def check_result(
        self,
        assets_def: dg.AssetsDefinition,
        key: dg.AssetCheckKey,
        partition: str | None,
        reported: dg.AssetCheckResult | None,
        metadata: dict[str, Any],
    ) -> AirEvent:
        """A check result of a row: the workload's as it reported it, or a failure when it
        did not report it."""
        if reported is not None:
            return reported
        return dg.AssetCheckResult(
            asset_key=key.asset_key, check_name=key.name, passed=False, metadata=metadata
        )

    def check_outputs(
        self, assets_def: dg.AssetsDefinition, evaluated: Sequence[dg.AssetCheckKey]
    ) -> Iterator[AirEvent]:
        return iter(())

    def failure(self, failed: Sequence[RowResult], metadata: dict[str, Any]) -> str | None:
        """The step's failure message over the rows that failed, when the scope says more
        than the first failed run does (adding to ``metadata``)."""
        return None


class RangeScope(OnePartitionScope):
    """A step over a range of several partitions: a row per stage and partition."""

    def __init__(self, partitions: Sequence[str | None]) -> None:
        self.partitions = list(partitions)

    def partition_metadata(self, partition: str | None) -> dict[str, Any]:
        return {PARTITION_METADATA: partition}

    def check_partition(self, partition: str | None) -> str | None:
        return partition

    def where(self, partition: str | None) -> str:
        return f"partition {partition}"

    def task_budget(self, stage: float | None, asset: float | None) -> float | None:
        """The asset's budget bounds each partition's task instead of the whole step."""
        given = [float(x) for x in (stage, asset) if x is not None]
        return min(given) if given else None

    def step_budget(self, asset: float | None) -> float | None:
        return None

    def summary(self, plan: StepPlan, runs: int, max_tasks_per_run: int) -> str | None:
        return (
            f"{len(self.partitions)} partitions x {len(plan.selected)} stage(s): "
            f"{len(plan.rows)} tasks in {runs} run(s) of at most {max_tasks_per_run} tasks"
        )

    def runs_to_queue(self, plan: StepPlan) -> Iterator[tuple[PlannedRun, int]]:
        for wave in plan.waves:
            for number in wave:
                yield plan.runs[number], len(wave)

    def materializations(
        self, asset_key: dg.AssetKey, done: Sequence[RowResult], complete: bool, required: bool
    ) -> Iterator[Recorded]:
        """A range materialized in full (trained and kept rows) yields one
        ``MaterializeResult`` per asset, each partition's metadata its own: Dagster records a
        range output for every partition of the range, so a kept partition is recorded again
        there, saying which run made it (``dagster-air/kept_from_run``) and 0 GPU-hours. A
        range not materialized in full yields the partitions that were trained (and the
        step fails after)."""
        trained = [r for r in done if r.trained]
        if complete and len(done) == len(self.partitions) and (trained or required):
            for r in done:
                assert r.metadata is not None
                yield PartitionMetadata(asset_key, r.partition, r.metadata)
            yield dg.MaterializeResult(asset_key=asset_key)
            return
        for r in trained:
            yield dg.AssetMaterialization(
                asset_key=asset_key, partition=r.partition, metadata=r.metadata
            )

    def check_result(
        self,
        assets_def: dg.AssetsDefinition,
        key: dg.AssetCheckKey,
        partition: str | None,
        reported: dg.AssetCheckResult | None,
        metadata: dict[str, Any],
    ) -> AirEvent:
        spec = assets_def.get_spec_for_check_key(key)
        return dg.AssetCheckEvaluation(
            asset_key=key.asset_key,
            check_name=key.name,
            passed=reported.passed if reported is not None else False,
            metadata={**metadata, PARTITION_METADATA: partition},
            severity=reported.severity if reported is not None else dg.AssetCheckSeverity.ERROR,
            blocking=spec.blocking,
            # An unpartitioned check of a partitioned asset is evaluated once per partition,
            # each evaluation naming its partition in its metadata.
            partition=partition if spec.partitions_def is not None else None,
        )

    def check_outputs(
        self, assets_def: dg.AssetsDefinition, evaluated: Sequence[dg.AssetCheckKey]
    ) -> Iterator[AirEvent]:
        for key in evaluated:
            # The check's output, once (its evaluations, one per partition, are above).
            yield dg.Output(None, output_name=assets_def.output_names_by_entity_key[key])

    def failure(self, failed: Sequence[RowResult], metadata: dict[str, Any]) -> str | None:
        lines = [
            f"{r.stage.asset_key.to_user_string()} partition {r.partition} "
            f"(task {r.task_key}): {r.failure}"
            for r in failed
        ]
        partitions = sorted({str(r.partition) for r in failed})
        metadata[f"{META_PREFIX}failed_partitions"] = ", ".join(partitions)
        return (
            f"{len(partitions)} of {len(self.partitions)} partitions not materialized: "
            f"{', '.join(partitions)}\n" + "\n".join(lines)
        )


RowScope = OnePartitionScope  # the base: each scope above is one


def record(
    plan: StepPlan,
    results: Sequence[RowResult],
    scope: RowScope,
    assets_def: dg.AssetsDefinition,
    selected_checks: Sequence[dg.AssetCheckKey] | frozenset[dg.AssetCheckKey],
) -> Iterator[Recorded]:
    """The observations of earlier attempts, then the materializations and check results
    of every row (see the module docstring)."""
    for result in results:
        yield from result.observations
    failed = any(r.failure is not None for r in results)
    required = not assets_def.can_subset
    by_asset: dict[dg.AssetKey, list[RowResult]] = {}
    for result in results:
        if result.metadata is not None:
            by_asset.setdefault(result.stage.asset_key, []).append(result)
    for loaded in plan.selected:
        done = by_asset.get(loaded.asset_key, [])
        yield from scope.materializations(loaded.asset_key, done, not failed, required)
    yield from _checks(results, scope, assets_def, selected_checks)


def _checks(
    results: Sequence[RowResult],
    scope: RowScope,
    assets_def: dg.AssetsDefinition,
    selected: Sequence[dg.AssetCheckKey] | frozenset[dg.AssetCheckKey],
) -> Iterator[Recorded]:
    """The check results each trained row reported, for the checks this step runs; a
    declared check a materialized row did not report fails (it cannot pass unseen)."""
    seen: set[tuple[dg.AssetCheckKey, str | None]] = set()
    evaluated: set[dg.AssetCheckKey] = set()
    for result in results:
        if not result.trained:
            continue
        asset_key, partition = result.stage.asset_key, result.partition
        for check in result.checks:
            key = dg.AssetCheckKey(asset_key, str(check.check_name))
            if key not in selected or (key, partition) in seen:
                yield IgnoredCheck(
                    f"{scope.where(partition)} reported check {check.check_name} of "
                    f"{key.asset_key.to_user_string()}, which this step does not run: ignored"
                )
                continue
            seen.add((key, partition))
            evaluated.add(key)
            yield scope.check_result(assets_def, key, partition, check, dict(check.metadata or {}))
        for key in sorted(selected, key=str):
            if (
                key.asset_key == asset_key
                and result.metadata is not None
                and (key, partition) not in seen
            ):
                seen.add((key, partition))
                evaluated.add(key)
                yield scope.check_result(
                    assets_def,
                    key,
                    partition,
                    None,
                    {"reason": "the workload did not report this check (dagster-pipes)"},
                )
    yield from scope.check_outputs(assets_def, sorted(evaluated, key=str))


def row_name(stage: LoadedStage, partition: str | None) -> str:
    name = stage.asset_key.to_user_string()
    return f"{name} partition {partition}" if partition is not None else name
