"""Orchestrator secrets (docs/spec/workload.md §6): values held by the Dagster process, handed to the
workload as Databricks secrets, never shown (``air_runtime.Redactor`` removes them, and their
encodings, from every message and log line of the step).

``secret_env`` maps a workload variable NAME to the *name* of an environment variable of the
Dagster process: ``{"HF_TOKEN": dg.EnvVar("HF_TOKEN")}`` or ``{"HF_TOKEN": "HF_TOKEN"}``
(``dg.EnvVar`` is a ``str`` holding the variable's name). A literal secret value has no
place in code, so a plain string is a variable name too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import dagster as dg


def resolve_secret_env(secret_env: Mapping[str, str]) -> dict[str, str]:
    """NAME -> value from the process environment; a missing variable is a config error."""
    values: dict[str, str] = {}
    missing: list[str] = []
    for name, source in secret_env.items():
        variable = env_var_name(source)
        value = os.environ.get(variable)
        if value is None or value == "":
            missing.append(f"{name} (from environment variable {variable})")
        else:
            values[name] = value
    if missing:
        raise dg.Failure(
            description="orchestrator secrets are not set in the Dagster process: "
            + ", ".join(missing)
            + ". Set the environment variables of the code location (or fix secret_env).",
            allow_retries=False,
        )
    return values


def env_var_name(source: str) -> str:
    """The variable a ``secret_env`` value names (``dg.EnvVar`` refuses ``str()``)."""
    return source.env_var_name if isinstance(source, dg.EnvVar) else str(source)
