"""``AirStage``: one workload of a workflow, as the user declares it.

A stage names its workload (a file, YAML text or a mapping), the stages it waits for and the
overrides applied at definition time. Stages are loaded and validated when the definitions
load, so a broken workload shows up in ``dg check defs`` with its line and column instead
of in the middle of a run.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from air_runtime import Workload, load_workload
from air_runtime.plan import RUN_IF_VALUES, task_key_problem

from ._options import check_gpu_hours

WorkloadSource = str | os.PathLike[str] | Mapping[str, Any]
Overrides = Mapping[str, Any] | Sequence[str]


@dataclass(frozen=True)
class AirStage:
    """One workload of a (possibly single-stage) workflow.

    Args:
        key: the stage name; the task key of the multi-task run and the default asset name.
        workload: a YAML file path, YAML text, or a mapping of the same structure.
        depends_on: keys of the stages this one waits for (within the same workflow).
        run_if: when a stage with dependencies runs (``ALL_SUCCESS`` by default).
        overrides: dotted overrides applied when the definitions load
            (``{"compute.num_accelerators": 16}`` or ``["parameters.epochs=3"]``).
        deps: upstream assets outside the workflow (keys or specs).
        asset_attributes: ``AssetSpec`` attributes that win over what the translator derives
            (``key``, ``group_name``, ``description``, ``tags``, ``kinds``, ``owners``...).
        check_specs: asset checks of this stage's asset: ``dg.AssetCheckSpec``, a check
            name, or ``{"name": ..., "blocking": True, "description": ...}`` (the asset is the
            stage's). The workload reports their results through
            Dagster Pipes (``report_asset_check``); with ``blocking=True`` the stages
            downstream are a run of their own, submitted once the check passed (after a
            failed check they never start).
        max_gpu_hours: the most GPU-hours (accelerators x elapsed, every attempt) this
            stage's task may use: past it the run is cancelled (the platform cancels whole
            runs) and the step fails saying so. The asset's ``max_gpu_hours`` bounds the run.
    """

    key: str
    workload: WorkloadSource | Workload
    depends_on: Sequence[str] = ()
    run_if: str = "ALL_SUCCESS"
    overrides: Overrides | None = None
    deps: Sequence[dg.AssetKey | str | Sequence[str] | dg.AssetSpec | dg.AssetsDefinition] = ()
    asset_attributes: Mapping[str, Any] = field(default_factory=dict)
    check_specs: Sequence[dg.AssetCheckSpec | str | Mapping[str, Any]] = ()
    max_gpu_hours: float | None = None

    def __post_init__(self) -> None:
        # The task key rule of the plan, so a bad key fails at `dg check defs`, not mid-run.
        problem = task_key_problem(self.key, "key")
        if problem is not None:
            raise dg.DagsterInvalidDefinitionError(
                f"stage key {self.key!r}: {problem.message}; {problem.hint}"
            )
        if self.run_if not in RUN_IF_VALUES:
            raise dg.DagsterInvalidDefinitionError(
                f"stage {self.key!r}: run_if {self.run_if!r} is not one of {', '.join(RUN_IF_VALUES)}"
            )
        check_gpu_hours(self.max_gpu_hours, f"stage {self.key!r}: max_gpu_hours")
        object.__setattr__(self, "depends_on", tuple(self.depends_on))
        # A check_specs attribute among the spec attributes (AssetSpec has none) joins the
        # stage's own checks.
        attributes = dict(self.asset_attributes)
        extra_checks = attributes.pop("check_specs", None) or ()
        object.__setattr__(self, "asset_attributes", attributes)
        object.__setattr__(self, "check_specs", (*self.check_specs, *extra_checks))

    def asset_check_specs(self, asset_key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
        """The stage's checks, check names bound to its asset."""
        specs = []
        for spec in self.check_specs:
            if isinstance(spec, str):
                spec = dg.AssetCheckSpec(spec, asset=asset_key)
            elif isinstance(spec, Mapping):
                spec = dg.AssetCheckSpec(asset=asset_key, **spec)
            specs.append(spec)
        return specs

    def load(self, base_dir: str | os.PathLike[str] | None = None) -> Workload:
        """Validate the workload (with this stage's overrides); raises ``WorkloadError``.

        A relative file path is looked up under ``base_dir`` (the folder of a component's
        ``defs.yaml``) first; YAML text and mappings resolve ``code_source`` from there.
        """
        if isinstance(self.workload, Workload):
            return self.workload.with_overrides(self.overrides) if self.overrides else self.workload
        path = self.source_path
        if path is not None:
            candidate = Path(path)
            if (
                base_dir is not None
                and not candidate.is_absolute()
                and ((Path(base_dir) / candidate).is_file() or not candidate.is_file())
            ):
                candidate = Path(base_dir) / candidate
            return load_workload(candidate, self.overrides)
        return load_workload(self.workload, self.overrides, base_dir=base_dir)

    @property
    def source_path(self) -> str | None:
        """The workload file, when the stage was declared from one (not YAML text or a mapping)."""
        if isinstance(self.workload, os.PathLike):
            return os.fspath(self.workload)
        if (
            isinstance(self.workload, str)
            and "\n" not in self.workload
            and (self.workload.endswith((".yaml", ".yml")) or Path(self.workload).is_file())
        ):
            return self.workload
        return None


def workload_hash(workload: Workload) -> str:
    """A short, stable hash of what a workload asks the platform to do.

    Used as the assets' code version, so Dagster flags an asset as changed when its
    workload (after overrides) changes, and recorded with each materialization.
    """
    data = workload.model_dump(mode="json", exclude={"source_text", "base_dir"})
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
