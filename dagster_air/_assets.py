"""Asset factories: ``build_air_assets`` (a workflow as one subsettable multi-asset) and the
``@air_workload_asset`` decorator (the same, with a body the user writes)."""

# No `from __future__ import annotations`: Dagster reads the op signatures at runtime.

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from typing import Any

import dagster as dg

from air_runtime import WorkloadError

from ._config import AirRunConfig
from ._options import AirAssetOptions
from ._partitions import PartitionParameters
from ._record import AirEvent
from ._resource import AirWorkspace
from ._secrets import env_var_name
from ._stage import AirStage, Overrides, WorkloadSource
from ._step import AirStep
from ._translator import DagsterAirTranslator, stage_asset_key
from ._workflow import AirWorkflow, LoadedStage


def _load_stages(
    stages: Sequence[AirStage],
    translator: DagsterAirTranslator,
    base_dir: str | os.PathLike[str] | None,
    partitions_def: dg.PartitionsDefinition | None,
) -> tuple[list[LoadedStage], list[dg.AssetSpec]]:
    if not stages:
        raise dg.DagsterInvalidDefinitionError("an AI Runtime workflow needs at least one stage")
    keys = [s.key for s in stages]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise dg.DagsterInvalidDefinitionError(
            f"stage keys must be unique: {', '.join(duplicates)}"
        )
    for stage in stages:
        unknown = [d for d in stage.depends_on if d not in keys]
        if unknown:
            raise dg.DagsterInvalidDefinitionError(
                f"stage {stage.key!r} depends on unknown stage(s) {', '.join(unknown)}; "
                f"stages: {', '.join(keys)}"
            )
    workloads = {}
    problems = []
    for stage in stages:
        try:
            workloads[stage.key] = stage.load(base_dir)
        except WorkloadError as error:
            problems.append(f"stage {stage.key}: {error}")
    if problems:
        raise dg.DagsterInvalidDefinitionError("\n".join(problems))
    asset_keys = {s.key: stage_asset_key(translator, s, workloads[s.key]) for s in stages}
    specs = [
        translator.get_asset_spec(
            s, workloads[s.key], stage_asset_keys=asset_keys, partitions_def=partitions_def
        )
        for s in stages
    ]
    loaded = [
        LoadedStage(stage=s, workload=workloads[s.key], asset_key=spec.key)
        for s, spec in zip(stages, specs, strict=True)
    ]
    return loaded, specs


def _check_partition_coverage(
    partitions_def: dg.PartitionsDefinition | None,
    partition_parameters: PartitionParameters | None,
) -> None:
    """A static partition without parameters (or parameters of no partition) is a
    definition error, found by ``dg check defs`` instead of by the run of that partition."""
    if partitions_def is None or not isinstance(partition_parameters, Mapping):
        return
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        return  # keys are added later: checked when a run maps its key
    try:
        keys = set(partitions_def.get_partition_keys())
    except Exception:
        return
    missing = sorted(keys - set(partition_parameters))
    unknown = sorted(set(partition_parameters) - keys)
    problems = []
    if missing:
        problems.append(
            f"partitions without an entry in partition_parameters: {', '.join(missing)}"
        )
    if unknown:
        problems.append(f"partition_parameters entries of no partition: {', '.join(unknown)}")
    if problems:
        raise dg.DagsterInvalidDefinitionError("; ".join(problems))


def check_env_vars_set(names: Mapping[str, str], what: str) -> None:
    """Environment variables the runs will read, named at definition time: unset ones are a
    definition error (``dg check defs`` reports it), not a failure in the middle of a run."""
    missing = sorted(
        f"{env_var_name(source)} ({name})"
        for name, source in names.items()
        if not os.environ.get(env_var_name(source))
    )
    if missing:
        raise dg.DagsterInvalidDefinitionError(
            f"{what}: environment variable(s) not set in this process: {', '.join(missing)}. "
            "Set them where the code location runs (e.g. a .env file next to dg.toml)."
        )


_OPTION_NAMES = frozenset(f.name for f in fields(AirAssetOptions))


def _given(options: AirAssetOptions | None, by_name: Mapping[str, Any]) -> AirAssetOptions:
    """The options a factory was given: ``options``, or ``AirAssetOptions``' fields as
    keyword arguments (``by_name``); both ways at once is refused: which would win is not
    obvious."""
    unknown = sorted(set(by_name) - _OPTION_NAMES)
    if unknown:
        raise dg.DagsterInvalidDefinitionError(
            f"unknown option(s) {', '.join(unknown)}: the options are the fields of "
            f"AirAssetOptions ({', '.join(sorted(_OPTION_NAMES))})"
        )
    if options is None:
        return AirAssetOptions(**by_name)
    if by_name:
        raise dg.DagsterInvalidDefinitionError(
            "give the asset options either as options=AirAssetOptions(...) or as keyword "
            "arguments, not both"
        )
    return options


def _workflow_and_specs(
    name: str,
    stages: Sequence[AirStage],
    options: AirAssetOptions,
    translator: DagsterAirTranslator | None,
    base_dir: str | os.PathLike[str] | None,
    check_specs: Sequence[dg.AssetCheckSpec] = (),
) -> tuple[AirWorkflow, list[dg.AssetSpec], list[dg.AssetCheckSpec]]:
    _check_partition_coverage(options.partitions_def, options.partition_parameters)
    options.check(len(stages))
    check_env_vars_set(options.secret_env or {}, "secret_env")
    translator = translator or DagsterAirTranslator()
    loaded, specs = _load_stages(stages, translator, base_dir, options.partitions_def)
    workflow = AirWorkflow(name=name, stages=tuple(loaded), options=options, translator=translator)
    checks = [c for s in loaded for c in s.stage.asset_check_specs(s.asset_key)]
    checks.extend(check_specs)
    return workflow, specs, checks


def _multi_asset(
    name: str,
    specs: list[dg.AssetSpec],
    check_specs: list[dg.AssetCheckSpec],
    options: AirAssetOptions,
    description: str | None = None,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """The multi-asset decorator every factory uses. With ``io_manager_key`` the stages are
    outputs (so a downstream asset taking one as an input loads it through that IO manager,
    e.g. from the ``dagster/uri`` a stage records); without, plain specs."""
    common: dict[str, Any] = {
        "name": name,
        "check_specs": check_specs or None,
        "can_subset": len(specs) > 1,
        "required_resource_keys": {options.resource_key},
        "retry_policy": options.retry_policy,
        "pool": options.pool,
        "op_tags": options.op_tags,
        "backfill_policy": options.backfill_policy,
        "description": description,
    }
    if options.io_manager_key is None:
        return dg.multi_asset(specs=specs, **common)
    outs = {
        "__".join(spec.key.path): dg.AssetOut.from_spec(spec, io_manager_key=options.io_manager_key)
        for spec in specs
    }
    return dg.multi_asset(outs=outs, **common)


def build_air_assets(
    stages: Sequence[AirStage] | AirStage,
    *,
    name: str | None = None,
    options: AirAssetOptions | None = None,
    translator: DagsterAirTranslator | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    check_specs: Sequence[dg.AssetCheckSpec] = (),
    op_description: str | None = None,
    **option_fields: Any,
) -> dg.AssetsDefinition:
    """Assets for a workflow of AI Runtime workloads: one asset per stage, one op.

    Materializing any subset of the stages submits them as **one** multi-task run (the
    dependencies among the selected stages kept, the others assumed already materialized),
    so a pipeline like generate → train → evaluate runs without a round trip to Dagster
    between stages. A single stage submits a plain single-task run.

    Args:
        stages: the stages (``AirStage``), in any order; ``depends_on`` orders them.
        name: the op name (default: the stage key for one stage, else the keys joined).
        options: the asset options (:class:`AirAssetOptions`).
        translator: derives asset keys, descriptions and metadata (subclass
            :class:`DagsterAirTranslator` to change them).
        base_dir: where relative workload paths are looked up (default: the working dir).
        check_specs: asset checks of the stages' assets (see also ``AirStage.check_specs``);
            the workload reports their results through Dagster Pipes.
        op_description: the description of the op (the step).
        **option_fields: the fields of :class:`AirAssetOptions` by name (``pool="gpu"``),
            instead of ``options`` (give one or the other, not both).
    """
    stage_list = [stages] if isinstance(stages, AirStage) else list(stages)
    return air_assets(
        stage_list,
        _given(options, option_fields),
        name=name,
        translator=translator,
        base_dir=base_dir,
        check_specs=check_specs,
        op_description=op_description,
    )


def air_assets(
    stages: Sequence[AirStage],
    options: AirAssetOptions,
    *,
    name: str | None = None,
    translator: DagsterAirTranslator | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    check_specs: Sequence[dg.AssetCheckSpec] = (),
    op_description: str | None = None,
) -> dg.AssetsDefinition:
    """``build_air_assets`` with its options as one object (what the component builds)."""
    op_name = name or "__".join(s.key for s in stages)
    workflow, specs, checks = _workflow_and_specs(
        op_name, stages, options, translator, base_dir, check_specs
    )

    @_multi_asset(op_name, specs, checks, options, op_description)
    def _air_assets(context: dg.AssetExecutionContext, config: AirRunConfig) -> Iterator[AirEvent]:
        workspace = getattr(context.resources, options.resource_key)
        yield from AirStep.run(context, workflow, workspace, config)

    return _air_assets


class AirInvocation:
    """What the body of an ``@air_workload_asset`` function gets as its second argument."""

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        workflow: AirWorkflow,
        workspace: AirWorkspace,
        config: AirRunConfig,
    ) -> None:
        self.context = context
        self.workflow = workflow
        self.workspace = workspace
        self.config = config

    @property
    def stages(self) -> tuple[LoadedStage, ...]:
        return self.workflow.stages

    def run(
        self,
        overrides: Overrides | None = None,
        *,
        translator: DagsterAirTranslator | None = None,
    ) -> Iterator[AirEvent]:
        """Submit the selected stages, wait, and yield one ``MaterializeResult`` per stage.

        ``overrides`` are applied after the run config's, e.g. values computed from
        upstream assets: ``air.run({"env_variables.DATA_PATH": path})``. ``translator``
        derives the run-time metadata (materializations, attempts, failures); by default
        the one the asset was defined with, as dagster-dbt's ``dbt.cli(...,
        dagster_dbt_translator=...)``.
        """
        yield from AirStep.run(
            self.context, self.workflow, self.workspace, self.config, overrides, translator
        )


def air_workload_asset(
    *,
    workload: WorkloadSource | None = None,
    stages: Sequence[AirStage] | None = None,
    key: str | None = None,
    overrides: Overrides | None = None,
    deps: Sequence[Any] = (),
    options: AirAssetOptions | None = None,
    translator: DagsterAirTranslator | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    check_specs: Sequence[dg.AssetCheckSpec | str] = (),
    **asset_attributes: Any,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """Decorator: an asset (or a multi-stage multi-asset) whose body runs the workload.

    The function receives the context and an :class:`AirInvocation`; its ``run()`` submits,
    waits and yields the results, so code can run before and after::

        @air_workload_asset(workload="train.yaml", secret_env={"HF_TOKEN": dg.EnvVar("HF_TOKEN")})
        def train(context: dg.AssetExecutionContext, air: AirInvocation):
            yield from air.run({"env_variables.OUTPUT_DIR": f"/tmp/out/{context.run_id}"})

    Give either ``workload`` (one stage, keyed by the function name unless ``key`` is set)
    or ``stages``. The options are an :class:`AirAssetOptions` (``options=``) or its fields
    as keyword arguments; ``translator`` and ``base_dir`` are as in
    :func:`build_air_assets`. Other keyword arguments are ``AssetSpec`` attributes for a
    single stage (``group_name``, ``description``, ``owners``, ``tags``, ``kinds``,
    ``metadata``...).
    """
    given = _given(options, {k: v for k, v in asset_attributes.items() if k in _OPTION_NAMES})
    asset_attributes = {k: v for k, v in asset_attributes.items() if k not in _OPTION_NAMES}
    if (workload is None) == (stages is None):
        raise dg.DagsterInvalidDefinitionError(
            "air_workload_asset needs exactly one of workload= and stages="
        )

    def decorator(fn: Callable[..., Any]) -> dg.AssetsDefinition:
        stage_checks: list[dg.AssetCheckSpec] = []
        if stages is not None:
            stage_list = list(stages)
            stage_checks = [c for c in check_specs if isinstance(c, dg.AssetCheckSpec)]
            if len(stage_checks) != len(check_specs):
                raise dg.DagsterInvalidDefinitionError(
                    "with stages=, check_specs are dg.AssetCheckSpec (a check name belongs "
                    "in its AirStage's check_specs)"
                )
        else:
            stage_list = [
                AirStage(
                    key=key or fn.__name__,
                    workload=workload,  # type: ignore[arg-type]
                    overrides=overrides,
                    deps=deps,
                    asset_attributes=asset_attributes,
                    check_specs=list(check_specs),
                )
            ]
        workflow, specs, checks = _workflow_and_specs(
            fn.__name__, stage_list, given, translator, base_dir, stage_checks
        )
        if stages is None and fn.__doc__:
            specs = [specs[0].replace_attributes(description=fn.__doc__.strip())]

        @_multi_asset(fn.__name__, specs, checks, given)
        def _air_asset(
            context: dg.AssetExecutionContext, config: AirRunConfig
        ) -> Iterator[AirEvent]:
            workspace = getattr(context.resources, given.resource_key)
            result = fn(context, AirInvocation(context, workflow, workspace, config))
            if result is not None:
                yield from result

        return _air_asset

    return decorator
