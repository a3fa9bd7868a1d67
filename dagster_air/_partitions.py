"""Partitions → workload overrides, for hyperparameter sweeps.

A partition becomes ``parameters`` (``hyperparameters.yaml``, which the training script
reads) and, optionally, an environment variable with the raw key. Three ways to say what a
partition means, from the most explicit:

- a mapping ``{partition_key: {param: value}}`` (a static sweep with readable keys),
- a function ``partition_key -> {param: value}``,
- nothing: keys of the form ``lr=0.001,batch=32`` (handy for dynamic partitions added by a
  sensor or by hand) become those parameters, values read as YAML scalars; any other key
  becomes ``parameters.partition`` (as text). A multi-partition key gives one text parameter
  per dimension.

Anything else a partition changes (its size, ``compute.num_accelerators``; an environment
variable; a timeout) is a dotted workload override per partition (``partition_overrides``):
a mapping ``{partition_key: {"compute.num_accelerators": 2}}`` (partitions it does not name
keep the workload's values) or a function of the key. They apply to each partition's own task
in a range run too, where ``context.partition_key`` cannot be read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

PartitionParameters = Mapping[str, Mapping[str, Any]] | Callable[[str], Mapping[str, Any]]
# partition key -> {dotted workload key: value}, or a function of the key giving them
PartitionOverrides = Mapping[str, Mapping[str, Any]] | Callable[[str], Mapping[str, Any]]

DEFAULT_PARTITION_ENV = "DAGSTER_PARTITION_KEY"
# Tasks per remote run of a step over a partition range (see ``_plan``).
DEFAULT_MAX_TASKS_PER_RUN = 100


def is_assignment_list(partition_key: str) -> bool:
    parts = [p for p in partition_key.split(",") if p.strip()]
    return bool(parts) and all("=" in p and p.split("=", 1)[0].strip() for p in parts)


def partition_overrides(
    partition_key: str | dg.MultiPartitionKey,
    partition_parameters: PartitionParameters | None,
    partition_env: str | None,
    workload_overrides: PartitionOverrides | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """(typed dotted overrides, ``KEY=VALUE`` text overrides) for one partition."""
    typed: dict[str, Any] = {}
    text: list[str] = []
    if callable(workload_overrides):
        typed.update(workload_overrides(str(partition_key)))
    elif workload_overrides is not None:
        typed.update(workload_overrides.get(str(partition_key)) or {})
    if partition_env:
        typed[f"env_variables.{partition_env}"] = str(partition_key)
    if callable(partition_parameters):
        params = dict(partition_parameters(str(partition_key)))
        typed.update({f"parameters.{k}": v for k, v in params.items()})
    elif partition_parameters is not None:
        if str(partition_key) not in partition_parameters:
            raise KeyError(
                f"partition {partition_key!r} has no entry in partition_parameters "
                f"(known: {', '.join(sorted(partition_parameters))})"
            )
        params = dict(partition_parameters[str(partition_key)])
        typed.update({f"parameters.{k}": v for k, v in params.items()})
    elif isinstance(partition_key, dg.MultiPartitionKey):
        for dimension, key in partition_key.keys_by_dimension.items():
            typed[f"parameters.{dimension}"] = key
    elif is_assignment_list(partition_key):
        for part in partition_key.split(","):
            if part.strip():
                name, value = part.split("=", 1)
                text.append(f"parameters.{name.strip()}={value.strip()}")
    else:
        typed["parameters.partition"] = str(partition_key)
    return typed, text
