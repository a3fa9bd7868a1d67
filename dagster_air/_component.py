"""``AirWorkloadComponent``: AI Runtime assets declared in a ``defs.yaml``.

```yaml
type: dagster_air.AirWorkloadComponent
attributes:
  workload: train.yaml                  # next to defs.yaml; or an inline mapping
  overrides: {compute.num_accelerators: 2}
  asset: {key: models/train, group_name: training, deps: [raw/dataset]}
  checks: [{name: loss_below_threshold, blocking: true}]   # reported through Dagster Pipes
  secret_env: {HF_TOKEN: HF_TOKEN}
  pool: gpu                             # also retry_policy, backfill_policy, io_manager_key
```

or ``stages:`` (each with ``key``, ``workload``, ``depends_on``, ``asset``, ``checks``...)
for a multi-stage workflow. The assets use the project's ``air_workspace`` resource; a
project without one may add a ``workspace: {host_env: ..., token_env: ...}`` block instead
(never both). Credentials are named by environment variable, never written here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import dagster as dg
import yaml
from dagster.components.resolved.core_models import (
    AssetSpecUpdateKwargs,
    DailyPartitionsDefinitionModel,
    HourlyPartitionsDefinitionModel,
    StaticPartitionsDefinitionModel,
    TimeWindowPartitionsDefinitionModel,
    WeeklyPartitionsDefinitionModel,
    resolve_asset_spec_update_kwargs_to_mapping,
    resolve_partitions_def,
)
from pydantic import BaseModel, ConfigDict, Field

from ._assets import build_air_assets, check_env_vars_set
from ._resource import AirWorkspace
from ._stage import AirStage
from ._translator import DagsterAirTranslator

AssetAttributes = Annotated[
    Mapping[str, Any],
    dg.Resolver(
        resolve_asset_spec_update_kwargs_to_mapping,
        model_field_type=AssetSpecUpdateKwargs.model(),
        description="AssetSpec attributes (key, key_prefix, deps, group_name, description, "
        "tags, kinds, owners, metadata...) that win over the derived ones.",
    ),
]


class DynamicPartitionsModel(dg.Resolvable, dg.Model):
    type: Literal["dynamic"] = "dynamic"
    name: str


def _resolve_partitions(
    context: dg.ResolutionContext, model: Any
) -> dg.PartitionsDefinition | None:
    if model is not None and model.type == "dynamic":
        return dg.DynamicPartitionsDefinition(name=model.name)
    return resolve_partitions_def(context, model)


ResolvedPartitions = Annotated[
    dg.PartitionsDefinition | None,
    dg.Resolver(
        _resolve_partitions,
        model_field_type=StaticPartitionsDefinitionModel
        | DynamicPartitionsModel
        | DailyPartitionsDefinitionModel
        | HourlyPartitionsDefinitionModel
        | WeeklyPartitionsDefinitionModel
        | TimeWindowPartitionsDefinitionModel,
        description="Partitions of the assets, e.g. a sweep: {type: static, partition_keys: [...]}",
    ),
]


class AirWorkspaceArgs(dg.Resolvable, dg.Model):
    """Where the workspace and its credentials come from. Secrets by env var name only."""

    host: str | None = Field(default=None, description="Workspace URL (not a secret).")
    host_env: str | None = Field(default=None, description="Env var holding the workspace URL.")
    token_env: str | None = Field(default=None, description="Env var holding a token.")
    client_id_env: str | None = Field(default=None, description="Env var: OAuth client id.")
    client_secret_env: str | None = Field(default=None, description="Env var: OAuth client secret.")
    poll_interval: float = 5.0
    request_budget: float = 10.0
    secret_scope: str = "dagster-air"
    deployment_namespace: str | None = Field(
        default=None, description="Pins this deployment's identity (default: made once)."
    )

    def env_vars(self) -> dict[str, str]:
        """The environment variables this block names, by field."""
        fields = ("host_env", "token_env", "client_id_env", "client_secret_env")
        return {f: getattr(self, f) for f in fields if getattr(self, f)}

    def build(self) -> AirWorkspace:
        def env(name: str | None) -> Any:
            return dg.EnvVar(name) if name else None

        return AirWorkspace(
            host=self.host or env(self.host_env),
            token=env(self.token_env),
            client_id=env(self.client_id_env),
            client_secret=env(self.client_secret_env),
            poll_interval=self.poll_interval,
            request_budget=self.request_budget,
            secret_scope=self.secret_scope,
            deployment_namespace=self.deployment_namespace,
        )


class AirCheckArgs(dg.Resolvable, dg.Model):
    """An asset check of a stage's asset, reported by the workload through Dagster Pipes."""

    name: str
    description: str | None = None
    blocking: bool = Field(
        default=False,
        description="A failed check keeps downstream assets of the same run from materializing.",
    )


def _check_specs(checks: list[AirCheckArgs]) -> list[str | Mapping[str, Any]]:
    return [c.model_dump(exclude_none=True) for c in checks]


class AirRetryPolicyArgs(dg.Resolvable, dg.Model):
    """Dagster retries of the step (a retry after a failed remote run starts a new one)."""

    max_retries: int = 1
    delay: float | None = Field(default=None, description="Seconds before a retry.")
    backoff: Literal["LINEAR", "EXPONENTIAL"] | None = None
    jitter: Literal["FULL", "PLUS_MINUS"] | None = None

    def build(self) -> dg.RetryPolicy:
        return dg.RetryPolicy(
            max_retries=self.max_retries,
            delay=self.delay,
            backoff=dg.Backoff(self.backoff) if self.backoff else None,
            jitter=dg.Jitter(self.jitter) if self.jitter else None,
        )


class AirBackfillPolicyArgs(dg.Resolvable, dg.Model):
    """How a backfill of the partitioned assets is split into runs."""

    type: Literal["single_run", "multi_run"] = "multi_run"
    max_partitions_per_run: int = 1

    def build(self) -> dg.BackfillPolicy:
        if self.type == "single_run":
            return dg.BackfillPolicy.single_run()
        return dg.BackfillPolicy.multi_run(self.max_partitions_per_run)


class AirStageArgs(dg.Resolvable, dg.Model):
    """One stage of a multi-stage workflow."""

    key: str = Field(description="Stage name: the task key and default asset name.")
    workload: str | dict[str, Any] = Field(
        description="Workload file (relative to defs.yaml) or an inline workload mapping."
    )
    depends_on: list[str] = Field(default_factory=list)
    run_if: str = "ALL_SUCCESS"
    overrides: dict[str, Any] | list[str] | None = None
    asset: AssetAttributes | None = None
    checks: list[AirCheckArgs] = Field(
        default_factory=list,
        description="Asset checks of this stage's asset: {name, blocking, description}.",
    )


class AirWorkloadScaffoldParams(BaseModel):
    experiment_name: str = "my_experiment"
    accelerator_type: str = "GPU_1xA10"
    num_accelerators: int = 1


STARTER_WORKLOAD = """\
# A Databricks AI Runtime workload (see `airo schema` for every field).
experiment_name: {experiment_name}
compute:
  accelerator_type: {accelerator_type}
  num_accelerators: {num_accelerators}
parameters:
  learning_rate: 0.001
command: |
  echo "training on $NUM_NODES node(s), $WORLD_SIZE GPU(s)"
  cat hyperparameters.yaml
"""


class AirWorkloadScaffolder(dg.Scaffolder[AirWorkloadScaffoldParams]):
    """``dg scaffold defs dagster_air.AirWorkloadComponent <path>``: a ``defs.yaml`` and a
    starter ``workload.yaml`` next to it. The component uses the project's ``air_workspace``
    resource (define it once, e.g. in ``defs/resources.py``)."""

    @classmethod
    def get_scaffold_params(cls) -> type[AirWorkloadScaffoldParams]:
        return AirWorkloadScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[AirWorkloadScaffoldParams]) -> None:
        params = request.params or AirWorkloadScaffoldParams()
        # No `workspace:` block: the component uses the project's `air_workspace` resource
        # (one per project; a second definition of the key would clash with it).
        dg.scaffold_component(request, {"workload": "workload.yaml"})
        workload = STARTER_WORKLOAD.format(**params.model_dump())
        yaml.safe_load(workload)  # the starter must stay valid YAML
        (Path(request.target_path) / "workload.yaml").write_text(workload)


def _structured_type(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> str | None:
    if "$ref" in schema:
        schema = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
    kind = schema.get("type")
    return kind if kind in ("object", "array") else None


def _discriminator(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> str | None:
    if "$ref" in schema:
        schema = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
    kind = (schema.get("properties") or {}).get("type") or {}
    value = kind.get("const", kind.get("default"))
    return value if isinstance(value, str) else None


def _branch(alternatives: list[dict[str, Any]], defs: Mapping[str, Any]) -> dict[str, Any]:
    """One structured schema, or several objects told apart by their ``type`` field."""
    if len(alternatives) == 1:
        return alternatives[0]
    chain: dict[str, Any] = {"anyOf": alternatives}  # no `type` given: the plain union
    for alternative in reversed(alternatives):
        value = _discriminator(alternative, defs)
        if value is None:
            return {"anyOf": alternatives}
        chain = {
            "if": {"properties": {"type": {"const": value}}, "required": ["type"]},
            "then": alternative,
            "else": chain,
        }
    return chain


def schema_naming_nested_keys(schema: Any, defs: Mapping[str, Any] | None = None) -> Any:
    """The same schema, with each union of a structured value (object or list) and scalars
    (Dagster adds a template string to every field) written as if/then/else: a validator
    then reports the nested problem itself (``'group_nam' was unexpected``) instead of
    "is not valid under any of the given schemas" at the top of the union."""
    if defs is None and isinstance(schema, dict):
        defs = schema.get("$defs", {})
    if isinstance(schema, list):
        return [schema_naming_nested_keys(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {k: schema_naming_nested_keys(v, defs) for k, v in schema.items()}
    alternatives = result.get("anyOf")
    if isinstance(alternatives, list):
        structured = [a for a in alternatives if _structured_type(a, defs or {})]
        scalars = [a for a in alternatives if not _structured_type(a, defs or {})]
        kinds = {_structured_type(a, defs or {}) for a in structured}
        if structured and scalars and len(kinds) == 1:
            del result["anyOf"]
            result.update(
                {
                    "if": {"type": kinds.pop()},
                    "then": _branch(structured, defs or {}),
                    "else": {"anyOf": scalars},
                }
            )
    return result


@dg.scaffold_with(AirWorkloadScaffolder)
class AirWorkloadComponent(dg.Component, dg.Resolvable, dg.Model):
    """Databricks AI Runtime workloads as Dagster assets, declared in YAML.

    Give ``workload`` (one asset) or ``stages`` (one asset per stage; any subset runs as
    one multi-task run). Relative paths are resolved from this ``defs.yaml``'s folder.
    """

    # The resolved partitions definition is a plain Dagster object, not a pydantic model.
    model_config = ConfigDict(arbitrary_types_allowed=True)

    workload: str | dict[str, Any] | None = Field(
        default=None, description="Workload file (relative to defs.yaml) or inline mapping."
    )
    key: str | None = Field(
        default=None, description="Stage/asset name of a single workload (default: folder name)."
    )
    overrides: dict[str, Any] | list[str] | None = Field(
        default=None, description="Dotted overrides of the single workload."
    )
    asset: AssetAttributes | None = None
    stages: list[AirStageArgs] | None = None
    name: str | None = Field(default=None, description="Op name (default: the stage keys).")
    partitions_def: ResolvedPartitions = None
    partition_parameters: dict[str, dict[str, Any]] | None = Field(
        default=None, description="Per partition key, the parameters merged into `parameters`."
    )
    partition_env: str | None = "DAGSTER_PARTITION_KEY"
    secret_env: dict[str, str] = Field(
        default_factory=dict,
        description="Workload secret NAME -> environment variable holding its value.",
    )
    run_env: dict[str, str] = Field(
        default_factory=dict,
        description="Env vars set per materialization, formatted with {run_id}, "
        "{partition_key}, {stage}: e.g. OUTPUT_DIR: /tmp/out/{run_id}.",
    )
    workspace: AirWorkspaceArgs | None = None
    resource_key: str = "air_workspace"
    log_node: int | None = None
    max_retries: int = Field(
        default=0, description="Dagster retries of the step (retry_policy says more)."
    )
    retry_policy: AirRetryPolicyArgs | None = None
    pool: str | None = Field(
        default=None, description="Dagster concurrency pool of the step (limits GPU runs)."
    )
    backfill_policy: AirBackfillPolicyArgs | None = None
    output_env: str | None = Field(
        default=None,
        description="Env var naming where the stages write: recorded as dagster/uri; a stage "
        "run without its upstream stage gets the upstream's last location in it.",
    )
    io_manager_key: str | None = Field(
        default=None,
        description="IO manager that loads a stage for downstream assets taking it as input.",
    )
    checks: list[AirCheckArgs] = Field(
        default_factory=list,
        description="Asset checks of the single workload's asset ({name, blocking, "
        "description}), reported by the workload through Dagster Pipes.",
    )

    @classmethod
    def get_model_cls(cls) -> type[BaseModel] | None:
        """The attributes model, whose JSON schema (what ``dg check yaml`` validates with)
        names the nested key at fault."""
        base = super().get_model_cls()
        if base is None:
            return None
        cached = cls.__dict__.get("_model_naming_keys")
        if cached is not None and cached.__bases__[0] is base:
            return cached

        class Model(base):  # type: ignore[valid-type,misc]
            @classmethod
            def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
                return schema_naming_nested_keys(super().model_json_schema(*args, **kwargs))

        Model.__name__ = Model.__qualname__ = base.__name__
        cls._model_naming_keys = Model  # type: ignore[attr-defined]
        return Model

    @property
    def translator(self) -> DagsterAirTranslator:
        """Override in a subclass to change how stages map to assets."""
        return DagsterAirTranslator()

    def _stages(self, context: dg.ComponentLoadContext) -> list[AirStage]:
        if (self.workload is None) == (self.stages is None):
            raise dg.DagsterInvalidDefinitionError(
                f"{context.path}: give exactly one of `workload` and `stages`"
            )
        if self.stages is not None:
            return [
                AirStage(
                    key=s.key,
                    workload=s.workload,
                    depends_on=s.depends_on,
                    run_if=s.run_if,
                    overrides=s.overrides,
                    asset_attributes=s.asset or {},
                    check_specs=_check_specs(s.checks),
                )
                for s in self.stages
            ]
        key = self.key or Path(context.path).name.replace("-", "_")
        return [
            AirStage(
                key=key,
                workload=self.workload,  # type: ignore[arg-type]
                overrides=self.overrides,
                asset_attributes=self.asset or {},
                check_specs=_check_specs(self.checks),
            )
        ]

    def _retry_policy(self) -> dg.RetryPolicy | None:
        if self.retry_policy is not None:
            return self.retry_policy.build()
        return dg.RetryPolicy(max_retries=self.max_retries) if self.max_retries else None

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        assets = build_air_assets(
            self._stages(context),
            name=self.name,
            translator=self.translator,
            base_dir=context.path,
            partitions_def=self.partitions_def,
            partition_parameters=self.partition_parameters,
            partition_env=self.partition_env,
            secret_env=self.secret_env,
            resource_key=self.resource_key,
            log_node=self.log_node,
            run_env=self.run_env,
            retry_policy=self._retry_policy(),
            pool=self.pool,
            backfill_policy=self.backfill_policy.build() if self.backfill_policy else None,
            io_manager_key=self.io_manager_key,
            output_env=self.output_env,
        )
        if self.workspace is not None:
            check_env_vars_set(self.workspace.env_vars(), f"{context.path}: workspace")
        resources = {self.resource_key: self.workspace.build()} if self.workspace else {}
        return dg.Definitions(assets=[assets], resources=resources)
