"""``AirAssetOptions``: the options of AI Runtime assets, listed once. The factories take it
(or its fields by name) and ``AirWorkloadComponent`` embeds it whole as ``options:``, each
field resolved from its YAML shape by the resolver beside it."""

# No `from __future__ import annotations`: Dagster reads the resolvers in the annotations.

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import dagster as dg
from dagster.components.resolved.core_models import (
    DailyPartitionsDefinitionModel,
    HourlyPartitionsDefinitionModel,
    MultiRunBackfillPolicyModel,
    SingleRunBackfillPolicyModel,
    StaticPartitionsDefinitionModel,
    TimeWindowPartitionsDefinitionModel,
    WeeklyPartitionsDefinitionModel,
    resolve_backfill_policy,
    resolve_partitions_def,
)
from pydantic import Field

from air_runtime import FailurePolicy

from ._accelerators import ADMISSION_SUFFIX
from ._partitions import (
    DEFAULT_MAX_TASKS_PER_RUN,
    DEFAULT_PARTITION_ENV,
    PartitionOverrides,
    PartitionParameters,
)

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


def described(description: str, yaml_type: Any = None) -> dg.Resolver:
    """A field's description, where Dagster's component schema (``dg`` docs, ``dg check
    yaml``) reads it: the field's resolver (``yaml_type``: its shape in YAML, when the
    Python type is wider, e.g. a mapping or a function)."""
    return dg.Resolver.default(description=description, model_field_type=yaml_type)


class DynamicPartitionsModel(dg.Resolvable, dg.Model):
    # Read as a plain model (the partitions' resolver's model type): pydantic descriptions.
    type: Literal["dynamic"] = Field(default="dynamic", description="Dynamic partitions.")
    name: str = Field(description="The name of the dynamic partitions definition.")


def _resolve_partitions(
    context: dg.ResolutionContext, model: Any
) -> dg.PartitionsDefinition | None:
    if model is not None and model.type == "dynamic":
        return dg.DynamicPartitionsDefinition(name=model.name)
    return resolve_partitions_def(context, model)


class AirRetryPolicyArgs(dg.Resolvable, dg.Model):
    """Dagster retries of the step (a retry after a failed remote run starts a new one)."""

    # Read as a plain model (the retry policy's resolver's model type): pydantic descriptions.
    max_retries: int = Field(default=1, description="How many times Dagster retries the step.")
    delay: float | None = Field(default=None, description="Seconds before a retry.")
    backoff: Literal["LINEAR", "EXPONENTIAL"] | None = Field(
        default=None, description="How the delay grows from one retry to the next."
    )
    jitter: Literal["FULL", "PLUS_MINUS"] | None = Field(
        default=None, description="Randomness added to the delay."
    )


def _resolve_retry_policy(
    context: dg.ResolutionContext, model: AirRetryPolicyArgs | None
) -> dg.RetryPolicy | None:
    if model is None:
        return None
    return dg.RetryPolicy(
        max_retries=model.max_retries,
        delay=model.delay,
        backoff=dg.Backoff(model.backoff) if model.backoff else None,
        jitter=dg.Jitter(model.jitter) if model.jitter else None,
    )


@dataclass(frozen=True)
class AirAssetOptions(dg.Resolvable):
    """The options of AI Runtime assets, one object for every way of defining them:
    ``build_air_assets(stages, options=AirAssetOptions(...))``, ``@air_workload_asset(...,
    options=AirAssetOptions(...))`` (or, in both, its fields as keyword arguments), and
    :class:`AirWorkloadComponent`, which embeds it as ``options:`` (each field in its YAML
    shape: a mapping, a partitions or retry policy block).

    Attributes:
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

    partitions_def: Annotated[
        dg.PartitionsDefinition | None,
        dg.Resolver(
            _resolve_partitions,
            model_field_type=StaticPartitionsDefinitionModel
            | DynamicPartitionsModel
            | DailyPartitionsDefinitionModel
            | HourlyPartitionsDefinitionModel
            | WeeklyPartitionsDefinitionModel
            | TimeWindowPartitionsDefinitionModel
            | None,
            description="Partitions of the assets, e.g. a sweep: "
            "{type: static, partition_keys: [...]}",
        ),
    ] = None
    partition_parameters: Annotated[
        PartitionParameters | None,
        described(
            "Per partition key, the parameters merged into `parameters`.",
            dict[str, dict[str, Any]] | None,
        ),
    ] = None
    partition_overrides: Annotated[
        PartitionOverrides | None,
        described(
            "Per partition key, dotted workload overrides (e.g. compute.num_accelerators: 2); "
            "each partition's task of a range run gets its own.",
            dict[str, dict[str, Any]] | None,
        ),
    ] = None
    partition_env: Annotated[
        str | None, described("Env var that receives the raw partition key (null: none).")
    ] = DEFAULT_PARTITION_ENV
    secret_env: Annotated[
        Mapping[str, str] | None,
        described(
            "Workload secret NAME -> environment variable holding its value.",
            dict[str, str] | None,
        ),
    ] = None
    resource_key: Annotated[str, described("The key of the AirWorkspace resource.")] = (
        "air_workspace"
    )
    log_node: Annotated[
        int | None, described("Print only this node's log lines (default: every node's).")
    ] = None
    run_env: Annotated[
        Mapping[str, str] | None,
        described(
            "Env vars set per materialization, formatted with {run_id}, {partition_key}, "
            "{stage}: e.g. OUTPUT_DIR: /tmp/out/{run_id}.",
            dict[str, str] | None,
        ),
    ] = None
    retry_policy: Annotated[
        dg.RetryPolicy | None,
        dg.Resolver(
            _resolve_retry_policy,
            model_field_type=AirRetryPolicyArgs | None,
            description="Dagster retries of the step: max_retries, delay, backoff, jitter.",
        ),
    ] = None
    pool: Annotated[
        str | None,
        described("Dagster concurrency pool of the step (one slot per step); or op.pool."),
    ] = None
    op_tags: Annotated[
        Mapping[str, Any] | None,
        described("Tags of the op; or op.tags.", dict[str, Any] | None),
    ] = None
    backfill_policy: Annotated[
        dg.BackfillPolicy | None,
        dg.Resolver(
            resolve_backfill_policy,
            model_field_type=SingleRunBackfillPolicyModel | MultiRunBackfillPolicyModel | None,
            description="How backfills are split into runs (a run over several partitions "
            "trains each in a task of its own); or op.backfill_policy.",
        ),
    ] = None
    io_manager_key: Annotated[
        str | None,
        described("IO manager that loads a stage for downstream assets taking it as input."),
    ] = None
    output_env: Annotated[
        str | None,
        described(
            "Env var naming where the stages write: recorded as dagster/uri; a stage run "
            "without its upstream stage gets the upstream's last location in it."
        ),
    ] = None
    max_tasks_per_run: Annotated[
        int,
        described(
            "Most tasks in one remote run of a partition range (one per stage and "
            "partition); a larger range is split into several runs."
        ),
    ] = DEFAULT_MAX_TASKS_PER_RUN
    accelerator_pool: Annotated[
        str | None,
        described(
            "Dagster pool counted in accelerators: the step waits for one slot per "
            "accelerator its runs ask for before submitting (sized from the GPU pool when "
            "unset). Not the step's pool."
        ),
    ] = None
    max_gpu_hours: Annotated[
        float | None,
        described(
            "Most GPU-hours (accelerators x elapsed, every attempt) one remote run of the "
            "step may use (a range run: each partition's task): past it the run is "
            "cancelled and the step fails."
        ),
    ] = None
    stop_deterministic_retries: Annotated[
        bool | None,
        described(
            "Deprecated: sets failure_policy's deterministic action (true: stop, false: "
            "let the platform retry)."
        ),
    ] = None
    failure_policy: Annotated[
        FailurePolicy | Mapping[str, str] | None,
        described(
            "What an attempt that fails while the platform would retry it gets, by failure "
            "class (infrastructure, deterministic, unknown): platform, stop or orchestrator. "
            "Default: deterministic failures stop, the others are retried by the platform.",
            dict[str, str] | None,
        ),
    ] = None

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
