"""Rows into workloads: each row's stage with the run-time overrides (the run config's, then
``AirInvocation.run``'s), its partition's parameters, ``run_env``, the location its upstream
stage last wrote when that stage is not planned with it, and the Pipes environment naming
its own asset (and, in a range run, its own partition)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from air_runtime import Workload, WorkloadError

from ._config import AirRunConfig
from ._partitions import partition_overrides
from ._pipes import PartitionScope, pipes_env
from ._plan import StepPlan, TaskRow
from ._workflow import AirWorkflow

OUTPUT_URI_KEY = "dagster/uri"
# The orchestrator id a submission gives each rank for a partition (air_runtime's).
PARTITION_KEY_ENV = "AIRO_PARTITION_KEY"


def config_failure(error: Exception | str, what: str) -> dg.Failure:
    return dg.Failure(description=f"{what}: {error}", allow_retries=False)


class RowWorkloads:
    """The workloads of a step's planned rows."""

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        workflow: AirWorkflow,
        plan: StepPlan,
        config: AirRunConfig,
        extra_overrides: Mapping[str, Any] | Sequence[str] | None = None,
    ) -> None:
        self.context = context
        self.workflow = workflow
        self.options = workflow.options
        self.plan = plan
        self.config = config
        self.extra_overrides = extra_overrides

    def of_rows(self) -> dict[str, Workload]:
        """Each planned row's workload, by task key."""
        return {key: self._workload(row) for key, row in self.plan.rows.items()}

    def _workload(self, row: TaskRow) -> Workload:
        """A row's workload: its stage with the run-time overrides, its partition's
        parameters, ``run_env`` and the upstream output location."""
        loaded = row.stage
        workload = loaded.workload
        typed, text = self._partition_overrides(row.partition)
        config_typed, config_text = self.config.overrides_for(loaded.key)
        try:
            for overrides in (
                {**config_typed, **typed},
                [*text, *config_text],
                self.extra_overrides,
            ):
                if overrides:
                    workload = workload.with_overrides(overrides)
        except WorkloadError as error:
            raise config_failure(
                error, f"stage {loaded.key}: the run-time overrides do not give a valid workload"
            ) from None
        for extra in (self._run_env(loaded.key, row.partition), self._upstream_output(row)):
            if extra:
                workload = workload.with_overrides(extra)
        if self.plan.is_range and row.partition is not None:
            # The submission names a range run by its range (first...last); each task's ranks
            # get their own partition (the core adds the other orchestrator ids, never
            # replacing a variable the workload sets).
            workload = workload.with_env_variables({PARTITION_KEY_ENV: row.partition})
        return workload

    def _partition_overrides(self, partition: str | None) -> tuple[dict[str, Any], list[str]]:
        if partition is None:
            return {}, []
        partitions_def = self.context.assets_def.partitions_def
        key: str | dg.MultiPartitionKey = partition
        if isinstance(partitions_def, dg.MultiPartitionsDefinition):
            key = partitions_def.get_partition_key_from_str(partition)
        what = f"partition {partition}" if self.plan.is_range else "the partition"
        env = self.options.partition_env if self.options.partitions_def is not None else None
        try:
            return partition_overrides(
                key, self.options.partition_parameters, env, self.options.partition_overrides
            )
        except (KeyError, ValueError) as error:
            raise config_failure(error, f"cannot map {what} to parameters") from None

    def _run_env(self, stage_key: str, partition: str | None) -> dict[str, str]:
        fields = {
            "run_id": self.context.run_id,
            "partition_key": partition or "",
            "stage": stage_key,
        }
        try:
            return {
                f"env_variables.{name}": template.format(**fields)
                for name, template in (self.options.run_env or {}).items()
            }
        except (KeyError, IndexError, ValueError) as error:
            raise config_failure(
                error, "run_env may only use {run_id}, {partition_key} and {stage}"
            ) from None

    def _upstream_output(self, row: TaskRow) -> dict[str, str]:
        """A row planned without an upstream stage of its workflow (not selected, or kept)
        reads where that stage last wrote: ``output_env`` gets the upstream's latest
        recorded ``dagster/uri`` for the row's partition."""
        name = self.options.output_env
        planned = {r.stage.key for r in self.plan.rows.values() if r.partition == row.partition}
        missing = [d for d in row.stage.stage.depends_on if d not in planned]
        if not name or not missing:
            return {}
        by_key = {s.key: s for s in self.workflow.stages}
        for dependency in missing:
            uri = self._latest_uri(by_key[dependency].asset_key, row.partition)
            if uri:
                self.context.log.info(
                    f"stage {row.stage.key}: {name}={uri} (where {dependency} last wrote)"
                )
                return {f"env_variables.{name}": uri}
        raise config_failure(
            f"no materialization of {', '.join(missing)} records an output location "
            f"({OUTPUT_URI_KEY})",
            f"stage {row.stage.key} runs without its upstream stage",
        )

    def _latest_uri(self, asset_key: dg.AssetKey, partition: str | None) -> str | None:
        partitions = [partition] if partition is not None else None
        records = self.context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=partitions), limit=1
        ).records
        for record in records:
            materialization = record.asset_materialization
            value = materialization.metadata.get(OUTPUT_URI_KEY) if materialization else None
            if value is not None:
                return str(value.value)
        return None

    def with_pipes(self, workloads: Mapping[str, Workload]) -> dict[str, Workload]:
        """The workloads with their Pipes environment."""
        partitions_def = self.context.assets_def.partitions_def
        out = {}
        for key, workload in workloads.items():
            row = self.plan.rows[key]
            scope = None
            if self.plan.is_range and row.partition is not None:
                window = None
                if isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
                    window = partitions_def.time_window_for_partition_key(row.partition)
                scope = PartitionScope(row.partition, window)
            env = pipes_env(self.context, row.stage.asset_key, row.stage.key, scope)
            out[key] = workload.with_overrides(
                {f"env_variables.{name}": value for name, value in env.items()}
            )
        return out
