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
    """The options of AI Runtime assets, one object for every way of defining them:
    ``build_air_assets(stages, options=AirAssetOptions(...))``, ``@air_workload_asset(...,
    options=AirAssetOptions(...))``, and :class:`AirWorkloadComponent`, whose fields of the
    same names build it.

    Attributes:
        translator: derives asset keys, descriptions, metadata... (subclass
            :class:`DagsterAirTranslator` to change them).
        base_dir: where relative workload paths are looked up (default: the working dir).
        partitions_def: partitions, e.g. a hyperparameter sweep; see ``partition_parameters``.
        partition_parameters: ``{partition_key: {param: value}}`` or a function of the key
            giving the parameters merged into ``parameters`` for that partition. Default:
            ``lr=0.1,batch=32`` style keys become those parameters, other keys
            ``parameters.partition``.
        partition_overrides: ``{partition_key: {dotted workload key: value}}`` or a function
            of the key giving them, e.g. ``{"lr-0.1": {"compute.num_accelerators": 2}}``:
            what else a partition changes (its size, a variable); each partition's task of a
            range run gets its own. Partitions a mapping does not name keep the workload's.
        partition_env: environment variable that receives the raw partition key (``None``:
            none).
        secret_env: workload secret NAME -> environment variable of the Dagster process
            (``dg.EnvVar("HF_TOKEN")`` or its name); stored as Databricks secrets at submit
            time, values never logged.
        resource_key: the key of the :class:`AirWorkspace` resource.
        log_node: print only this node's log lines (default: the resource's ``log_node``;
            unset there too: every node's). Pipes messages are read from every node.
        run_env: environment variables set per materialization, formatted with
            ``{run_id}``, ``{partition_key}`` and ``{stage}``, e.g.
            ``{"OUTPUT_DIR": "/tmp/out/{run_id}"}`` so concurrent runs never share a folder.
        retry_policy: Dagster retries; a retry after a crash reattaches to the remote run,
            a retry after a failed remote run starts a new one. A re-execution from failure
            and a run retry (``dagster/max_retries``) likewise train only the stages and
            partitions their parent runs did not materialize, and adopt a remote run a
            parent started that is still going; "Re-execute all" trains everything again.
        pool: the Dagster concurrency pool of the step (one slot per step, whatever its
            size; see ``accelerator_pool`` to count accelerators).
        accelerator_pool: a Dagster pool counted in accelerators: before submitting, the
            step waits for one slot of it per accelerator its runs ask for at once, and holds
            them until its runs end, so steps of mixed sizes never ask a GPU pool for more
            than the pool's limit (sized from the GPU pool's reservation when unset). Not
            the same pool as ``pool``.
        max_gpu_hours: the most GPU-hours (accelerators x elapsed, every attempt) one
            remote run of the step may use (in a range run: each partition's task): past it
            the run is cancelled and the step fails saying so. A stage's own budget:
            ``AirStage.max_gpu_hours``.
        failure_policy: what an attempt of a remote run that fails while the platform is
            about to retry it gets, by the class of its diagnosis (``air_runtime.
            FailurePolicy`` or a mapping such as ``{"unknown": "stop"}``). Default: a
            deterministic failure (CUDA out of memory, a missing command or module, ...)
            cancels the run and fails the step without retries, the diagnosis first;
            infrastructure and unknown failures are retried by the platform (a warning in
            the step log says so).
        stop_deterministic_retries: deprecated; sets ``failure_policy``'s deterministic
            action (True: stop, False: let the platform retry).
        op_tags: tags of the op (e.g. ``dagster/concurrency_key``).
        backfill_policy: how backfills of partitioned stages are split into runs. A run over
            a range of partitions (``single_run()``, ``multi_run(n)`` with n > 1) submits one
            task per stage and partition, each trained with its partition's parameters and
            recorded as that partition.
        max_tasks_per_run: the most tasks one remote run of a partition range holds; a
            larger range is split into several runs (default 100, at most 1,000).
        io_manager_key: the IO manager that loads a stage for a downstream asset taking it
            as an input (the stages store nothing themselves).
        output_env: the environment variable naming where the stages write (e.g. an
            ``OUTPUT_DIR`` of ``run_env``): its value is recorded as ``dagster/uri``, and a
            stage materialized without an upstream stage it depends on gets, in that
            variable, the location the upstream stage last recorded.
    """

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
