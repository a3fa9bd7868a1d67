"""``AirWorkloadComponent``: AI Runtime assets declared in a ``defs.yaml``.

```yaml
type: dagster_air.AirWorkloadComponent
attributes:
  workload: train.yaml                  # next to defs.yaml; or an inline mapping
  overrides: {compute.num_accelerators: 2}
  asset: {key: models/train, group_name: training, deps: [raw/dataset]}
  checks: [{name: loss_below_threshold, blocking: true}]   # reported through Dagster Pipes
  op: {pool: gpu}                       # Dagster's OpSpec: name, tags, pool, backfill_policy
  options:                              # AirAssetOptions, each field in its YAML shape
    secret_env: {HF_TOKEN: HF_TOKEN}
    accelerator_pool: gpu-a10           # one slot per accelerator, taken before submitting
    max_gpu_hours: 40                   # the run is cancelled past it
```

or ``stages:`` (each with ``key``, ``workload``, ``depends_on``, ``asset``, ``checks``...)
for a multi-stage workflow. The assets use the project's ``air_workspace`` resource; a
project without one may add a ``workspace: {host_env: ..., token_env: ...}`` block instead
(never both). Credentials are named by environment variable, never written here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Annotated, Any

import dagster as dg
import yaml
from dagster.components.resolved.core_models import (
    AssetSpecUpdateKwargs,
    OpSpec,
    resolve_asset_spec_update_kwargs_to_mapping,
)
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._assets import air_assets, check_env_vars_set
from ._options import AirAssetOptions, described
from ._resource import AirWorkspace
from ._secrets import env_var_name
from ._stage import AirStage
from ._translator import DagsterAirTranslator

# Keys the component took at the top level until its options became one field: where each
# went (a defs.yaml that still has one is refused with this move, not a bare "extra key").
_MOVED_KEYS = {
    **{f.name: f"options.{f.name}" for f in fields(AirAssetOptions)},
    "name": "op.name",
    "pool": "op.pool",
    "backfill_policy": "op.backfill_policy",
    "max_retries": "options.retry_policy.max_retries",
}


def _refuse_moved_keys(attributes: Any) -> Any:
    if isinstance(attributes, Mapping):
        moved = [f"`{k}` -> `{_MOVED_KEYS[k]}`" for k in attributes if k in _MOVED_KEYS]
        if moved:
            raise ValueError(f"these keys moved under `options:` or `op:`: {', '.join(moved)}")
    return attributes


def _resolve_asset_attributes(context: dg.ResolutionContext, model: Any) -> Mapping[str, Any]:
    return {} if model is None else resolve_asset_spec_update_kwargs_to_mapping(context, model)


AssetAttributes = Annotated[
    Mapping[str, Any] | None,
    dg.Resolver(
        _resolve_asset_attributes,
        model_field_type=AssetSpecUpdateKwargs.model() | None,
        description="AssetSpec attributes (key, key_prefix, deps, group_name, description, "
        "tags, kinds, owners, metadata...) that win over the derived ones.",
    ),
]


class AirWorkspaceArgs(dg.Resolvable, dg.Model):
    """Where the workspace and its credentials come from. Secrets by env var name only."""

    host: Annotated[str | None, described("Workspace URL (not a secret).")] = None
    host_env: Annotated[str | None, described("Env var holding the workspace URL.")] = None
    token_env: Annotated[str | None, described("Env var holding a token.")] = None
    client_id_env: Annotated[str | None, described("Env var: OAuth client id.")] = None
    client_secret_env: Annotated[str | None, described("Env var: OAuth client secret.")] = None
    poll_interval: Annotated[float, described("Seconds between run state polls.")] = 5.0
    request_budget: Annotated[
        float, described("Requests per second this process may send the workspace.")
    ] = 10.0
    secret_scope: Annotated[str, described("Secret scope where secret_env values are stored.")] = (
        "dagster-air"
    )
    deployment_namespace: Annotated[
        str | None, described("Pins this deployment's identity (default: made once).")
    ] = None

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

    name: Annotated[str, described("The check name the workload reports (report_asset_check).")]
    description: Annotated[str | None, described("Shown with the check.")] = None
    blocking: Annotated[
        bool,
        described(
            "The stages downstream start only once it passed (a run of their own); after a "
            "failed check they never start."
        ),
    ] = False


def _check_specs(checks: list[AirCheckArgs]) -> list[str | Mapping[str, Any]]:
    return [c.model_dump(exclude_none=True) for c in checks]


class AirStageArgs(dg.Resolvable, dg.Model):
    """One stage of a multi-stage workflow."""

    key: Annotated[str, described("Stage name: the task key and default asset name.")]
    workload: Annotated[
        str | dict[str, Any],
        described("Workload file (relative to defs.yaml) or an inline workload mapping."),
    ]
    depends_on: Annotated[list[str], described("Keys of the stages this one waits for.")] = Field(
        default_factory=list
    )
    run_if: Annotated[str, described("When a stage with dependencies runs (the Jobs run_if).")] = (
        "ALL_SUCCESS"
    )
    overrides: Annotated[
        dict[str, Any] | list[str] | None, described("Dotted overrides of this stage's workload.")
    ] = None
    asset: AssetAttributes = None
    checks: Annotated[
        list[AirCheckArgs],
        described("Asset checks of this stage's asset: {name, blocking, description}."),
    ] = Field(default_factory=list)
    max_gpu_hours: Annotated[
        float | None,
        described(
            "Most GPU-hours (accelerators x elapsed, every attempt) this stage's task may "
            "use: past it the run is cancelled and the step fails."
        ),
    ] = None


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

    workload: Annotated[
        str | dict[str, Any] | None,
        described("Workload file (relative to defs.yaml) or inline mapping."),
    ] = None
    key: Annotated[
        str | None, described("Stage/asset name of a single workload (default: folder name).")
    ] = None
    overrides: Annotated[
        dict[str, Any] | list[str] | None, described("Dotted overrides of the single workload.")
    ] = None
    asset: AssetAttributes = None
    stages: Annotated[
        list[AirStageArgs] | None,
        described("A multi-stage workflow: one asset per stage, any subset one multi-task run."),
    ] = None
    op: Annotated[
        OpSpec | None, described("The step's op: name, tags, description, pool, backfill_policy.")
    ] = None
    options: Annotated[
        AirAssetOptions | None,
        described(
            "The asset options (AirAssetOptions): partitions, secret_env, run_env, "
            "retry_policy, accelerator_pool, max_gpu_hours, failure_policy..."
        ),
    ] = None
    workspace: Annotated[
        AirWorkspaceArgs | None,
        described(
            "A workspace resource of this component's own (default: the project's "
            "air_workspace resource)."
        ),
    ] = None
    checks: Annotated[
        list[AirCheckArgs],
        described(
            "Asset checks of the single workload's asset ({name, blocking, "
            "description}), reported by the workload through Dagster Pipes."
        ),
    ] = Field(default_factory=list)

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

        name = base.__name__

        class Model(base):  # type: ignore[valid-type,misc]
            model_config = ConfigDict(title=name)  # what a validation error names

            @classmethod
            def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
                return schema_naming_nested_keys(super().model_json_schema(*args, **kwargs))

            _moved = model_validator(mode="before")(_refuse_moved_keys)

        Model.__name__ = Model.__qualname__ = name
        cls._model_naming_keys = Model  # type: ignore[attr-defined]
        return Model

    @classmethod
    def get_spec(cls) -> dg.ComponentTypeSpec:
        return dg.ComponentTypeSpec(
            description="Databricks AI Runtime GPU workloads (or a multi-stage workflow of "
            "them) as Dagster assets, trained on the workspace and followed to the end.",
            tags=["databricks", "gpu", "training"],
        )

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
                    max_gpu_hours=s.max_gpu_hours,
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

    def _options(self, context: dg.ComponentLoadContext, op: OpSpec) -> AirAssetOptions:
        """``options`` with the op's settings from ``op`` (Dagster's OpSpec); a setting
        given in both is refused."""
        options = self.options or AirAssetOptions()
        from_op: dict[str, Any] = {
            "pool": op.pool,
            "op_tags": op.tags,
            "backfill_policy": op.backfill_policy,
        }
        both = [k for k, v in from_op.items() if v is not None and getattr(options, k) is not None]
        if both:
            raise dg.DagsterInvalidDefinitionError(
                f"{context.path}: {', '.join(both)} given both under `op` and under "
                "`options`: keep one (`op` is Dagster's usual place)"
            )
        return replace(options, **{k: v for k, v in from_op.items() if v is not None})

    def _read_env_vars(self) -> dict[str, str]:
        """Environment variables the component reads when it loads or runs, by what reads
        them."""
        secret_env = (self.options.secret_env if self.options else None) or {}
        found = {
            f"options.secret_env.{name}": env_var_name(var) for name, var in secret_env.items()
        }
        if self.workspace is not None:
            found.update({f"workspace.{f}": v for f, v in self.workspace.env_vars().items()})
        return found

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        op = self.op or OpSpec()
        options = self._options(context, op)
        assets = air_assets(
            self._stages(context),
            options,
            name=op.name,
            translator=self.translator,
            base_dir=context.path,
            op_description=op.description,
        )
        if self.workspace is not None:
            check_env_vars_set(self.workspace.env_vars(), f"{context.path}: workspace")
        check_env_vars_declared(self._read_env_vars(), Path(context.path))
        resources = {options.resource_key: self.workspace.build()} if self.workspace else {}
        return dg.Definitions(assets=[assets], resources=resources)


COMPONENT_FILES = ("defs.yaml", "defs.yml", "component.yaml")


def declared_env_vars(folder: Path) -> set[str] | None:
    """The ``requirements.env`` of this component's entries in its ``defs.yaml`` (what
    ``dg list envs`` reads); None when the component was not loaded from such a file."""
    path = next((folder / n for n in COMPONENT_FILES if (folder / n).is_file()), None)
    if path is None:
        return None
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError:
        return None
    declared: set[str] = set()
    for document in documents:
        if not isinstance(document, Mapping):
            continue
        if not str(document.get("type", "")).endswith("AirWorkloadComponent"):
            continue
        requirements = document.get("requirements") or {}
        declared.update(str(v) for v in (requirements.get("env") or []))
    return declared


def check_env_vars_declared(read: Mapping[str, str], folder: Path) -> None:
    """Every environment variable the component reads is declared in ``requirements.env``,
    so ``dg list envs`` (and Dagster+) know the project needs it."""
    declared = declared_env_vars(folder)
    if declared is None:
        return
    missing = sorted({var for var in read.values() if var not in declared})
    if missing:
        where = ", ".join(
            f"{var} ({field})" for field, var in sorted(read.items()) if var in missing
        )
        raise dg.DagsterInvalidDefinitionError(
            f"{folder}: environment variable(s) read but not declared: {where}. Add them to "
            f"the defs.yaml, next to `attributes:`, as `requirements: {{env: [{', '.join(missing)}]}}` "
            "so `dg list envs` lists them."
        )
