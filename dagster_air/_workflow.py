"""What an AI Runtime asset definition fixes when the definitions load: its options (one
object for what ``build_air_assets``, ``air_workload_asset`` and the component accept) and
its stages, validated, each with the asset it materializes."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from air_runtime import FailurePolicy, Workload

from ._accelerators import ADMISSION_SUFFIX
from ._partitions import (
    DEFAULT_MAX_TASKS_PER_RUN,
    DEFAULT_PARTITION_ENV,
    PartitionOverrides,
    PartitionParameters,
)
from ._stage import AirStage
from ._translator import DagsterAirTranslator

# A Databricks job run holds at most 1,000 tasks (the Jobs API limit): a larger cap is
# refused when the definitions load.
MAX_TASKS_PER_RUN_LIMIT = 1000


def check_gpu_hours(value: object, what: str) -> None:
    """A GPU-hour budget is a positive, finite number (or None), checked when the
    definitions load."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise dg.DagsterInvalidDefinitionError(
            f"{what} {value!r}: give a positive number of GPU-hours (accelerators x hours)"
        )


@dataclass(frozen=True)
class AirAssetOptions:
    """The options every way of defining AI Runtime assets shares (their meaning is in
    ``build_air_assets``'s docstring)."""

    translator: DagsterAirTranslator | None = None
    base_dir: str | os.PathLike[str] | None = None
    partitions_def: dg.PartitionsDefinition | None = None
    partition_parameters: PartitionParameters | None = None
    partition_overrides: PartitionOverrides | None = None
    partition_env: str | None = DEFAULT_PARTITION_ENV
    secret_env: Mapping[str, str] | None = None
    resource_key: str = "air_workspace"
    log_node: int | None = None
    run_env: Mapping[str, str] | None = None
    retry_policy: dg.RetryPolicy | None = None
    pool: str | None = None
    op_tags: Mapping[str, Any] | None = None
    backfill_policy: dg.BackfillPolicy | None = None
    io_manager_key: str | None = None
    output_env: str | None = None
    max_tasks_per_run: int = DEFAULT_MAX_TASKS_PER_RUN
    accelerator_pool: str | None = None
    max_gpu_hours: float | None = None
    stop_deterministic_retries: bool | None = None  # deprecated: failure_policy's setting
    failure_policy: FailurePolicy | Mapping[str, str] | None = None

    @property
    def ranges(self) -> bool:
        """Whether a backfill may give a step a range of several partitions."""
        policy = self.backfill_policy
        return (
            self.partitions_def is not None
            and policy is not None
            and (policy.max_partitions_per_run is None or policy.max_partitions_per_run > 1)
        )

    def check(self, stages: int) -> None:
        """What the options cannot do, refused when the definitions load (``dg check
        defs``) rather than in a run after submitting."""
        cap = self.max_tasks_per_run
        if (
            isinstance(cap, bool)
            or not isinstance(cap, int)
            or not 1 <= cap <= MAX_TASKS_PER_RUN_LIMIT
        ):
            raise dg.DagsterInvalidDefinitionError(
                f"max_tasks_per_run {cap!r}: use a whole number from 1 to "
                f"{MAX_TASKS_PER_RUN_LIMIT} (a Databricks job run holds at most "
                f"{MAX_TASKS_PER_RUN_LIMIT} tasks)"
            )
        if self.accelerator_pool is not None:
            name = self.accelerator_pool
            if not isinstance(name, str) or not name.strip() or name.endswith(ADMISSION_SUFFIX):
                raise dg.DagsterInvalidDefinitionError(
                    f"accelerator_pool {name!r}: name a Dagster pool (not ending in "
                    f"{ADMISSION_SUFFIX}, the name of its admission slot)"
                )
            if name in (self.pool, (self.op_tags or {}).get("dagster/concurrency_key")):
                raise dg.DagsterInvalidDefinitionError(
                    f"accelerator_pool {name!r} is also the step's pool: Dagster would take "
                    "one more slot of it per step, on top of the step's accelerators"
                )
        check_gpu_hours(self.max_gpu_hours, "max_gpu_hours")
        if self.ranges and stages > cap:
            raise dg.DagsterInvalidDefinitionError(
                f"a backfill of a partition range runs every stage once per partition, but the "
                f"{stages} stages do not fit in max_tasks_per_run={cap}: raise "
                f"max_tasks_per_run to at least {stages}, or use BackfillPolicy.multi_run(1)"
            )


@dataclass(frozen=True)
class LoadedStage:
    """A stage with its validated workload and the asset it materializes."""

    stage: AirStage
    workload: Workload
    asset_key: dg.AssetKey
    key: str = field(init=False)  # the stage's key (its task key in a multi-task run)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.stage.key)


@dataclass(frozen=True)
class AirWorkflow:
    """Everything an asset needs at run time, fixed when the definitions load."""

    name: str
    stages: tuple[LoadedStage, ...]
    options: AirAssetOptions = field(default_factory=AirAssetOptions)
    # Derives the run-time metadata too (materializations, attempts, failures).
    translator: DagsterAirTranslator = field(default_factory=DagsterAirTranslator)

    @property
    def always_workflow(self) -> bool:
        """Several stages: always a multi-task run, even with one selected."""
        return len(self.stages) > 1

    def selected(self, context: dg.AssetExecutionContext) -> list[LoadedStage]:
        keys = context.selected_asset_keys
        return [s for s in self.stages if s.asset_key in keys]
