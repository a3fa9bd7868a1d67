"""OpenLineage for the operators (optional: ``pip install "air-orchestration[openlineage]"``).

With apache-airflow-providers-openlineage installed and a transport configured, its listener
asks each ``AirRunOperator`` for lineage when the task starts and ends
(``get_openlineage_facets_on_start`` / ``_on_complete`` / ``_on_failure``). What it gets:

- run facets: ``airRuntimeRun`` (the AI Runtime run id, page URL, experiment, task key,
  result state, MLflow experiment/run ids and URL) and the standard ``externalQuery``
  (the run id, source ``databricks-ai-runtime``);
- input datasets: the code snapshot's volume (``code_source.remote_volume``), and Unity
  Catalog volume paths (``/Volumes/...``) in ``env_variables`` or ``parameters`` whose name
  does not say output;
- output datasets: ``mlflow_artifact_location``, volume paths whose name holds ``OUT``,
  ``CHECKPOINT``, ``SAVE`` or ``EXPORT`` (``RL_OUTPUT_DIR``), and, once known, the MLflow run
  (namespace the workspace URL, name ``/ml/experiments/<id>/runs/<run id>``).
  Volumes are in the ``dbfs`` namespace, named by their path.

Parent job info: the workload gets two plain environment variables, in the form the
OpenLineage integrations read (dbt-ol, the Python client's parent facets):
``OPENLINEAGE_PARENT_ID`` = ``<namespace>/<dag_id>.<task_id>/<task run uuid>`` and
``OPENLINEAGE_ROOT_PARENT_ID`` = ``<namespace>/<dag_id>/<dag run uuid>``, so lineage the
workload emits links back to the Airflow task. They are added through the core
(``Workload.with_env_variables``): a variable the workload sets itself wins. A workflow's
stages get the submit task's ids (the stages' own tries have not started at submit time).
Transport settings (URLs, API keys) are never passed on: they may hold credentials.

Everything here is best effort: lineage never fails a task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from airflow.sdk import Context

    from air_runtime import Workload

log = logging.getLogger(__name__)

PARENT_ID_ENV = "OPENLINEAGE_PARENT_ID"
ROOT_PARENT_ID_ENV = "OPENLINEAGE_ROOT_PARENT_ID"
RUN_FACET = "airRuntimeRun"
VOLUMES_NAMESPACE = "dbfs"
_OUTPUT_WORDS = ("OUT", "CHECKPOINT", "SAVE", "EXPORT")


def openlineage_enabled() -> bool:
    """The OpenLineage provider is installed and has a transport (its listener emits)."""
    try:
        from airflow.providers.openlineage.conf import is_disabled
    except ImportError:
        return False
    try:
        return not is_disabled()
    except Exception:
        return False


def parent_job_env(context: Context) -> dict[str, str]:
    """The parent/root ids of this task instance for the workload's environment, or {}."""
    if not openlineage_enabled():
        return {}
    try:
        from airflow.providers.openlineage.plugins.macros import (
            lineage_parent_id,
            lineage_root_parent_id,
        )

        ti: Any = context["ti"]
        return {
            PARENT_ID_ENV: lineage_parent_id(ti),
            ROOT_PARENT_ID_ENV: lineage_root_parent_id(ti),
        }
    except Exception as exc:
        log.warning("OpenLineage parent job info not passed to the workload: %s", exc)
        return {}


def with_parent_job_env(workload: Workload, context: Context) -> Workload:
    env = parent_job_env(context)
    return workload.with_env_variables(env) if env else workload


def _run_facet_class() -> type[Any]:
    from openlineage.client.facet_v2 import RunFacet

    @attrs.define
    class AirRuntimeRunFacet(RunFacet):
        """The Databricks AI Runtime run behind an Airflow task."""

        experiment: str | None = None  # camelCase below: OpenLineage facet fields
        runId: int | None = None
        runPageUrl: str | None = None
        taskKey: str | None = None
        resultState: str | None = None
        mlflowExperimentId: str | None = None
        mlflowRunId: str | None = None
        mlflowRunUrl: str | None = None

        @staticmethod
        def _get_schema() -> str:
            return "https://databricks.com/air-orchestration/AirRuntimeRunFacet.json"

    return AirRuntimeRunFacet


def _volume_paths(values: Iterable[tuple[str, Any]]) -> Iterable[tuple[str, str]]:
    for name, value in values:
        if isinstance(value, str) and value.startswith(("/Volumes/", "dbfs:/Volumes/")):
            yield name, value.removeprefix("dbfs:").rstrip("/")


def _flatten(prefix: str, value: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _flatten(f"{prefix}.{key}" if prefix else str(key), item)
    else:
        yield prefix, value


def operator_lineage(
    workload: Workload | None,
    result: Mapping[str, Any] | None,
    *,
    host: str | None,
) -> Any:
    """The ``OperatorLineage`` of a run: what the workload declares, and the run's ids once
    ``result`` (the operator's return value, or what is known of the run) has them."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.facet_v2 import external_query_run

    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    result = dict(result or {})
    if workload is not None:
        code = workload.code_source
        if code is not None and code.remote_volume:
            path = code.remote_volume.rstrip("/")
            inputs[path] = Dataset(namespace=VOLUMES_NAMESPACE, name=path)
        named = [*workload.env_variables.items(), *_flatten("", workload.parameters)]
        for container in workload.containers or ():
            named.extend(container.env_variables.items())
        for name, path in _volume_paths(named):
            target = outputs if any(w in name.upper() for w in _OUTPUT_WORDS) else inputs
            target[path] = Dataset(namespace=VOLUMES_NAMESPACE, name=path)
        for _, path in _volume_paths([("", workload.mlflow_artifact_location)]):
            outputs[path] = Dataset(namespace=VOLUMES_NAMESPACE, name=path)
    experiment, mlflow_run = result.get("mlflow_experiment_id"), result.get("mlflow_run_id")
    if host and experiment and mlflow_run:
        name = f"/ml/experiments/{experiment}/runs/{mlflow_run}"
        outputs[name] = Dataset(namespace=host.rstrip("/"), name=name)

    run_facets: dict[str, Any] = {}
    if workload is not None or result.get("run_id") is not None:
        facet = _run_facet_class()(
            experiment=workload.experiment_name if workload is not None else None,
            runId=result.get("run_id"),
            runPageUrl=result.get("run_page_url") or None,
            taskKey=result.get("task_key"),
            resultState=result.get("result_state"),
            mlflowExperimentId=experiment,
            mlflowRunId=mlflow_run,
            mlflowRunUrl=result.get("mlflow_run_url"),
        )
        run_facets[RUN_FACET] = facet
    if result.get("run_id") is not None:
        run_facets["externalQuery"] = external_query_run.ExternalQueryRunFacet(
            externalQueryId=str(result["run_id"]), source="databricks-ai-runtime"
        )
    return OperatorLineage(
        inputs=list(inputs.values()), outputs=list(outputs.values()), run_facets=run_facets
    )
