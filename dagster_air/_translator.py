"""``DagsterAirTranslator``: the one place that maps a workload stage to Dagster asset fields.

Each method derives one thing from a stage and its validated workload (at definition time)
or from how its run went (at run time). Subclass it and override a method to change that one
thing, instead of forking the asset factory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from air_runtime import RunOutcome, RunState, TaskState, Workload

from ._stage import AirStage, workload_hash

# Definition-time metadata keys (materializations add their own under the same prefix).
META_PREFIX = "dagster-air/"
# GPU-hours, named apart so a metric summing one of them never counts an attempt twice:
# materializations carry every attempt's total (sum this one), the observation of each
# ended attempt only that attempt's.
GPU_HOURS_KEY = f"{META_PREFIX}gpu_hours"
ATTEMPT_GPU_HOURS_KEY = f"{META_PREFIX}attempt_gpu_hours"
COST_KEY = f"{META_PREFIX}cost"


def container_rows(workload: Workload) -> list[dict[str, str]]:
    """One row per container (name, ranks, image); a single-command workload is one row."""
    if workload.containers:
        return [
            {
                "name": c.name,
                "ranks": ",".join(str(r) for r in c.ranks),
                "image": c.unity_catalog_image,
            }
            for c in workload.containers
        ]
    env = workload.environment
    if env.docker_image is not None:
        image = env.docker_image.url
    elif env.unity_catalog_image:
        image = env.unity_catalog_image
    else:
        image = f"runtime {env.version}"
    ranks = ",".join(str(r) for r in range(workload.num_nodes))
    return [{"name": "command", "ranks": ranks, "image": image}]


def containers_table(workload: Workload) -> dg.MetadataValue:
    return dg.MetadataValue.table(
        records=[dg.TableRecord(row) for row in container_rows(workload)],
        schema=dg.TableSchema(
            columns=[
                dg.TableColumn("name", "string"),
                dg.TableColumn("ranks", "string"),
                dg.TableColumn("image", "string"),
            ]
        ),
    )


class DagsterAirTranslator:
    """Derives asset keys, descriptions, metadata, tags, groups and kinds from workloads.

    Pass an instance (of a subclass) as ``translator=`` to :func:`air_workload_asset`,
    :func:`build_air_assets` or the component. Every method receives the declared
    :class:`AirStage` and its validated ``Workload``.
    """

    def get_asset_key(self, stage: AirStage, workload: Workload) -> dg.AssetKey:
        """The asset key of a stage: the stage key by default.

        Override example, to put every workload under a ``gpu`` prefix::

            class MyTranslator(DagsterAirTranslator):
                def get_asset_key(self, stage, workload):
                    return dg.AssetKey(["gpu", workload.experiment_name])
        """
        return dg.AssetKey([stage.key])

    def get_description(self, stage: AirStage, workload: Workload) -> str:
        """A description shown in the asset catalog.

        Override example, to show the MLflow run name::

            class MyTranslator(DagsterAirTranslator):
                def get_description(self, stage, workload):
                    return f"MLflow run {workload.mlflow_run_name or workload.experiment_name}"
        """
        compute = workload.compute
        nodes = workload.num_nodes
        shape = f"{compute.num_accelerators} x {compute.accelerator_type}"
        shape += f" ({nodes} node{'s' if nodes != 1 else ''})"
        if workload.containers:
            what = "containers " + ", ".join(c.name for c in workload.containers)
        else:
            what = "a command"
        where = f" from `{stage.source_path}`" if stage.source_path else ""
        return (
            f"Runs the Databricks AI Runtime workload `{workload.experiment_name}`{where}: "
            f"{what} on {shape}."
        )

    def get_metadata(self, stage: AirStage, workload: Workload) -> Mapping[str, Any]:
        """Definition metadata (accelerators, containers, workload file).

        Override example, to add a link to the training code::

            class MyTranslator(DagsterAirTranslator):
                def get_metadata(self, stage, workload):
                    return {
                        **super().get_metadata(stage, workload),
                        "code": dg.MetadataValue.url("https://github.com/acme/train"),
                    }
        """
        metadata: dict[str, Any] = {
            f"{META_PREFIX}experiment": workload.experiment_name,
            f"{META_PREFIX}accelerator": workload.compute.accelerator_type,
            f"{META_PREFIX}num_accelerators": workload.compute.num_accelerators,
            f"{META_PREFIX}num_nodes": workload.num_nodes,
            f"{META_PREFIX}containers": containers_table(workload),
            f"{META_PREFIX}workload_hash": workload_hash(workload),
        }
        if stage.source_path:
            metadata[f"{META_PREFIX}workload_file"] = dg.MetadataValue.path(stage.source_path)
        return metadata

    def get_tags(self, stage: AirStage, workload: Workload) -> Mapping[str, str]:
        """Asset tags (used for filtering in the UI and in asset selections).

        Override example, to tag assets by accelerator type::

            class MyTranslator(DagsterAirTranslator):
                def get_tags(self, stage, workload):
                    return {"accelerator": workload.compute.accelerator_type}
        """
        return {}

    def get_group_name(self, stage: AirStage, workload: Workload) -> str | None:
        """The asset group; ``None`` puts the asset in the default group.

        Override example, to group by experiment::

            class MyTranslator(DagsterAirTranslator):
                def get_group_name(self, stage, workload):
                    return workload.experiment_name
        """
        return None

    def get_kinds(self, stage: AirStage, workload: Workload) -> set[str]:
        """Kinds shown as badges in the UI (at most three).

        Override example, to show the framework::

            class MyTranslator(DagsterAirTranslator):
                def get_kinds(self, stage, workload):
                    return {"databricks", "pytorch"}
        """
        return {"databricks", "gpu"}

    def get_owners(self, stage: AirStage, workload: Workload) -> Sequence[str]:
        """Asset owners (emails or ``team:<name>``).

        Override example::

            class MyTranslator(DagsterAirTranslator):
                def get_owners(self, stage, workload):
                    return ["team:ml-platform"]
        """
        return ()

    def get_code_version(self, stage: AirStage, workload: Workload) -> str | None:
        """The code version: a hash of the workload, so a changed workload marks the asset
        as changed in the UI.

        Override example, to version by the MLflow run name instead::

            class MyTranslator(DagsterAirTranslator):
                def get_code_version(self, stage, workload):
                    return workload.mlflow_run_name
        """
        return workload_hash(workload)

    def get_asset_spec(
        self,
        stage: AirStage,
        workload: Workload,
        *,
        stage_asset_keys: Mapping[str, dg.AssetKey],
        partitions_def: dg.PartitionsDefinition | None = None,
    ) -> dg.AssetSpec:
        """The full spec, from the methods above; ``stage.asset_attributes`` win over them.

        ``stage_asset_keys`` maps every stage key of the workflow to its final asset key
        (``get_asset_key`` unless the stage's attributes set ``key``/``key_prefix``), so a
        stage depends on the assets of the stages it waits for.

        Override example, to add an automation condition to every stage::

            class MyTranslator(DagsterAirTranslator):
                def get_asset_spec(self, stage, workload, **kwargs):
                    spec = super().get_asset_spec(stage, workload, **kwargs)
                    return spec.replace_attributes(
                        automation_condition=dg.AutomationCondition.eager()
                    )
        """
        deps: list[Any] = [stage_asset_keys[key] for key in stage.depends_on]
        deps.extend(stage.deps)
        spec = dg.AssetSpec(
            key=stage_asset_keys[stage.key],
            deps=deps,
            description=self.get_description(stage, workload),
            metadata=self.get_metadata(stage, workload),
            tags=self.get_tags(stage, workload),
            group_name=self.get_group_name(stage, workload),
            kinds=self.get_kinds(stage, workload),
            owners=self.get_owners(stage, workload),
            code_version=self.get_code_version(stage, workload),
            partitions_def=partitions_def,
            skippable=True,
        )
        return apply_asset_attributes(spec, stage.asset_attributes)

    # --- run time: what the step records --------------------------------------------------

    def get_run_metadata(
        self, run_id: int, run_page_url: str, state: RunState | None = None
    ) -> dict[str, Any]:
        """The run's id and page (and, when it ended, its final state): on a failure, and
        as the base of every materialization."""
        metadata: dict[str, Any] = {
            f"{META_PREFIX}run_id": dg.MetadataValue.int(run_id),
            f"{META_PREFIX}run_url": dg.MetadataValue.url(run_page_url),
        }
        if state is not None:
            metadata[f"{META_PREFIX}final_state"] = state.result_state or state.life_cycle_state
        return metadata

    def get_materialization_metadata(
        self,
        stage: AirStage,
        workload: Workload,
        outcome: RunOutcome,
        *,
        state: RunState,
        idempotency_token: str,
    ) -> dict[str, Any]:
        """What a successful stage's materialization records: the run, the attempt, the
        compute and containers, GPU-hours, duration and the MLflow run.

        Override example, to add the cost at a rate per GPU-hour::

            class MyTranslator(DagsterAirTranslator):
                def get_materialization_metadata(self, stage, workload, outcome, **kwargs):
                    metadata = super().get_materialization_metadata(
                        stage, workload, outcome, **kwargs
                    )
                    return {**metadata, "cost_usd": round((outcome.gpu_hours or 0) * 2.5, 2)}
        """
        metadata = self.get_run_metadata(outcome.run_id, outcome.run_page_url)
        metadata.update(
            {
                f"{META_PREFIX}final_state": outcome.result_state or state.life_cycle_state,
                f"{META_PREFIX}attempt_number": outcome.attempt_number or 0,
                f"{META_PREFIX}accelerator": workload.compute.accelerator_type,
                f"{META_PREFIX}num_accelerators": workload.compute.num_accelerators,
                f"{META_PREFIX}containers": containers_table(workload),
                f"{META_PREFIX}workload_hash": workload_hash(workload),
                f"{META_PREFIX}idempotency_token": idempotency_token,
            }
        )
        for row in container_rows(workload):
            metadata[f"{META_PREFIX}container/{row['name']}"] = (
                f"ranks {row['ranks']}, image {row['image']}"
            )
        # Every attempt of the stage's task: what the platform held, retries included. This
        # is the figure to sum; the per-attempt observations carry ATTEMPT_GPU_HOURS_KEY.
        metadata[GPU_HOURS_KEY] = dg.MetadataValue.float(round(outcome.gpu_hours or 0.0, 6))
        if outcome.cost is not None:  # at the resource's gpu_hour_prices
            metadata[COST_KEY] = dg.MetadataValue.float(outcome.cost)
            metadata[f"{META_PREFIX}currency"] = outcome.currency or ""
        if outcome.duration_s is not None:
            metadata[f"{META_PREFIX}duration_s"] = dg.MetadataValue.float(outcome.duration_s)
        if outcome.task_run_id is not None:
            metadata[f"{META_PREFIX}task_run_id"] = dg.MetadataValue.int(outcome.task_run_id)
        if outcome.mlflow_experiment_id:
            metadata[f"{META_PREFIX}mlflow_experiment_id"] = outcome.mlflow_experiment_id
        if outcome.mlflow_run_id:
            metadata[f"{META_PREFIX}mlflow_run_id"] = outcome.mlflow_run_id
        if outcome.mlflow_run_url:
            metadata[f"{META_PREFIX}mlflow_run"] = dg.MetadataValue.url(outcome.mlflow_run_url)
        return metadata

    def get_attempt_metadata(
        self, stage: AirStage, workload: Workload, run_id: int, attempt: TaskState
    ) -> dict[str, Any]:
        """The observation of one ended attempt of a stage's task (platform retries
        included); ``attempt.state_message`` is already redacted."""
        metadata: dict[str, Any] = {
            f"{META_PREFIX}run_id": dg.MetadataValue.int(run_id),
            f"{META_PREFIX}attempt_number": attempt.attempt_number,
            f"{META_PREFIX}attempt_state": attempt.result_state or attempt.life_cycle_state,
            ATTEMPT_GPU_HOURS_KEY: dg.MetadataValue.float(round(attempt.gpu_hours(), 6)),
        }
        if attempt.state_message:
            metadata[f"{META_PREFIX}state_message"] = attempt.state_message
        if attempt.run_id is not None:
            metadata[f"{META_PREFIX}task_run_id"] = dg.MetadataValue.int(attempt.run_id)
        return metadata


def stage_asset_key(
    translator: DagsterAirTranslator, stage: AirStage, workload: Workload
) -> dg.AssetKey:
    """The final key of a stage's asset: a ``key`` in its attributes wins over the
    translator, then ``key_prefix`` is put in front."""
    attributes = stage.asset_attributes
    if attributes.get("key"):
        key = dg.AssetKey.from_coercible(attributes["key"])
    else:
        key = translator.get_asset_key(stage, workload)
    prefix = attributes.get("key_prefix")
    return key.with_prefix(prefix) if prefix else key


def apply_asset_attributes(spec: dg.AssetSpec, attributes: Mapping[str, Any]) -> dg.AssetSpec:
    """Apply user-given spec attributes (the key is already final): ``deps``, ``metadata``,
    ``tags`` and ``kinds`` are added to the derived ones, the others replace them."""
    attributes = {k: v for k, v in attributes.items() if k not in ("key", "key_prefix")}
    if not attributes:
        return spec
    merged = {
        k: attributes.pop(k) for k in ("deps", "metadata", "tags", "kinds") if k in attributes
    }
    if "kinds" in merged:
        merged["kinds"] = set(merged["kinds"])
    if merged:
        spec = spec.merge_attributes(**merged)
    if attributes:
        spec = spec.replace_attributes(**attributes)
    return spec
