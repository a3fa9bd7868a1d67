"""What an AI Runtime asset definition fixes when the definitions load: its options
(``AirAssetOptions``) and its stages, validated, each with the asset it materializes."""

from __future__ import annotations

from dataclasses import dataclass, field

import dagster as dg

from air_runtime import Workload

from ._options import AirAssetOptions
from ._stage import AirStage
from ._translator import DagsterAirTranslator


@dataclass(frozen=True)
class LoadedStage:
    """A stage with its validated workload and the asset it materializes."""

    stage: AirStage
    workload: Workload
    asset_key: dg.AssetKey
    key: str = field(init=False)  # the stage's key (its task key in a multi-task run)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.stage.key)


@dataclass(frozen=True)
class AirWorkflow:
    """Everything an asset needs at run time, fixed when the definitions load."""

    name: str
    stages: tuple[LoadedStage, ...]
    options: AirAssetOptions = field(default_factory=AirAssetOptions)
    # Derives the run-time metadata too (materializations, attempts, failures).
    translator: DagsterAirTranslator = field(default_factory=DagsterAirTranslator)

    @property
    def always_workflow(self) -> bool:
        """Several stages: always a multi-task run, even with one selected."""
        return len(self.stages) > 1

    def selected(self, context: dg.AssetExecutionContext) -> list[LoadedStage]:
        keys = context.selected_asset_keys
        return [s for s in self.stages if s.asset_key in keys]
