"""Apache Airflow provider for Databricks AI Runtime (serverless GPU) workloads.

Public names are loaded on first use so that ``import airflow_air.operators`` (what a DAG file
does) never pays for the HTTP client, the hook or the triggers.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "AirHook": "airflow_air.hooks",
    "AirRunOperator": "airflow_air.operators",
    "AirRegisterImageOperator": "airflow_air.operators",
    "AirRunTrigger": "airflow_air.triggers",
    "AirImageTrigger": "airflow_air.triggers",
    "AirWorkflowTaskGroup": "airflow_air.workflow",
    "AirRunLink": "airflow_air.links",
    "AirMlflowRunLink": "airflow_air.links",
    "AirConfigurationError": "airflow_air.exceptions",
    "AirRunFailedError": "airflow_air.exceptions",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'airflow_air' has no attribute {name!r}")
    return getattr(import_module(module), name)
