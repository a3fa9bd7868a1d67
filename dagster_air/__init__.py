"""Run Databricks AI Runtime GPU workloads as Dagster assets.

- :class:`AirWorkspace`: the resource (host, credentials, polling).
- :func:`build_air_assets` / :func:`air_workload_asset`: a workload, or a multi-stage
  workflow as one subsettable multi-asset, with their options as one
  :class:`AirAssetOptions`; :class:`AirRunConfig` for run-time overrides.
- :class:`DagsterAirTranslator`: how stages become asset keys, descriptions, metadata...
- :class:`AirWorkloadComponent`: the same from ``defs.yaml`` (``dg scaffold defs``).
"""

from dagster_air._assets import AirInvocation, air_workload_asset, build_air_assets
from dagster_air._component import AirWorkloadComponent, AirWorkloadScaffolder
from dagster_air._config import AirRunConfig
from dagster_air._images import build_image_registration_asset
from dagster_air._options import AirAssetOptions
from dagster_air._partitions import DEFAULT_PARTITION_ENV
from dagster_air._resource import AirWorkspace
from dagster_air._stage import AirStage, workload_hash
from dagster_air._translator import DagsterAirTranslator
from dagster_air._uc_images import build_unity_catalog_image_asset

__all__ = [
    "DEFAULT_PARTITION_ENV",
    "AirAssetOptions",
    "AirInvocation",
    "AirRunConfig",
    "AirStage",
    "AirWorkloadComponent",
    "AirWorkloadScaffolder",
    "AirWorkspace",
    "DagsterAirTranslator",
    "air_workload_asset",
    "build_air_assets",
    "build_image_registration_asset",
    "build_unity_catalog_image_asset",
    "workload_hash",
]
