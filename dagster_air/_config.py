"""``AirRunConfig``: what a user may change for one materialization, from the launchpad or a
schedule, without editing the workload file.

Everything becomes dotted overrides for the core's ``Workload.with_overrides``, so the
workload rules (and their messages) stay in one place.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field


class AirRunConfig(dg.Config):
    """Run-time overrides for AI Runtime assets.

    ``env``, ``parameters``, ``accelerators``, ``accelerator_type`` and ``image`` apply to
    every selected stage; ``overrides`` are raw dotted ``KEY=VALUE`` strings (values parsed
    as YAML scalars) for every stage, and ``stage_overrides`` the same per stage key.
    """

    accelerators: int | None = Field(
        default=None, description="compute.num_accelerators (total GPUs) for every stage."
    )
    accelerator_type: str | None = Field(
        default=None, description="compute.accelerator_type, e.g. GPU_8xH100."
    )
    image: str | None = Field(
        default=None,
        description="A Docker Hub image (environment.docker_image.url) for single-command workloads.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables added to every stage."
    )
    parameters: dict[str, Any] = Field(
        default_factory=dict,
        description="Hyperparameters merged into `parameters` (hyperparameters.yaml).",
    )
    overrides: list[str] = Field(
        default_factory=list,
        description="Raw dotted overrides, e.g. ['compute.pool_id=my-pool', 'max_retries=0'].",
    )
    stage_overrides: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Raw dotted overrides for one stage: {stage_key: ['parameters.epochs=2']}.",
    )

    def overrides_for(self, stage_key: str) -> tuple[dict[str, Any], list[str]]:
        """The overrides of one stage: the typed fields as dotted overrides (values keep
        their types), and the raw ``KEY=VALUE`` strings (every stage's, then the stage's)."""
        typed: dict[str, Any] = {}
        if self.accelerators is not None:
            typed["compute.num_accelerators"] = self.accelerators
        if self.accelerator_type is not None:
            typed["compute.accelerator_type"] = self.accelerator_type
        if self.image is not None:
            typed["environment.docker_image.url"] = self.image
        for name, value in self.env.items():
            typed[f"env_variables.{name}"] = value
        for name, value in self.parameters.items():
            typed[f"parameters.{name}"] = value
        return typed, [*self.overrides, *self.stage_overrides.get(stage_key, [])]
