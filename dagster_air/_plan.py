"""A step as a table of tasks, planned once: one row per (stage, partition) the step
trains, each with its task key, its dependencies and the remote run it belongs to.

A step over one partition (or none) is one remote run of its selected stages: a plain
single-task run for the one stage of a one-stage workflow, a multi-task run otherwise. A step
over a range of partition keys (a backfill with ``BackfillPolicy.single_run()`` or
``multi_run(n)``, n > 1) has a row per stage and partition, grouped into runs of at most
``max_tasks_per_run`` tasks (a partition's stages always in the same run).

Recovery is a filter over rows: a row its lineage already materialized (``_lineage``) is
*kept*, not planned, and a planned row that depended on it reads where it wrote.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from air_runtime.plan import task_key_for

from ._workflow import AirWorkflow, LoadedStage


def partition_task_key(stage_key: str, partition: str) -> str:
    """The task key of one stage for one partition: readable, unique (a hash of the key
    tells apart keys that read the same once made task-key safe), stable across retries."""
    digest = hashlib.sha256(partition.encode()).hexdigest()[:8]
    return f"{task_key_for(f'{stage_key}__{partition}')[:90]}_{digest}"


@dataclass(frozen=True)
class TaskRow:
    """One task of the step: a stage for one partition (or none)."""

    task_key: str
    stage: LoadedStage
    partition: str | None
    depends_on: tuple[str, ...]  # task keys of the same remote run
    run: int  # the index of its remote run in ``StepPlan.runs``


@dataclass(frozen=True)
class PlannedRun:
    """One remote run of the step."""

    index: str | None  # the submission key's index (see ``_identity``)
    label: str  # what it covers, for the step's log
    task_keys: tuple[str, ...]
    multi_task: bool  # False: a plain single-task run of its one row's workload


@dataclass(frozen=True)
class KeptRow:
    """A row the step's lineage already materialized: recorded as done, not trained."""

    stage: LoadedStage
    partition: str | None
    dagster_run_id: str
    metadata: dict[str, Any]


@dataclass
class StepPlan:
    selected: list[LoadedStage]
    partitions: list[str | None]  # the partitions the step covers (None: unpartitioned)
    is_range: bool  # several partition keys, each its own row
    rows: dict[str, TaskRow] = field(default_factory=dict)
    runs: list[PlannedRun] = field(default_factory=list)
    kept: list[KeptRow] = field(default_factory=list)

    def rows_of(self, run: PlannedRun) -> list[TaskRow]:
        return [self.rows[key] for key in run.task_keys]


def step_partitions(context: dg.AssetExecutionContext) -> tuple[list[str | None], bool]:
    """The partitions a step covers and whether they are a range of several keys. A
    partitioned asset in a run with neither a partition nor a range is refused here, before
    anything is submitted (it would train some default configuration and call it done)."""
    if context.has_partition_key:
        return [str(context.partition_key)], False
    if context.has_partition_key_range:
        return [str(k) for k in context.partition_keys], True
    if context.assets_def.partitions_def is not None:
        raise dg.Failure(
            description=(
                f"{context.assets_def.node_def.name}: the assets are partitioned but this run "
                "names no partition: materialize a partition (or a range: a backfill, or the "
                "tags dagster/asset_partition_range_start and _end), or re-execute a "
                "partitioned run from its run page, which keeps its partition tags"
            ),
            allow_retries=False,
        )
    return [None], False


def plan_step(
    context: dg.AssetExecutionContext,
    workflow: AirWorkflow,
    kept: Callable[[LoadedStage, str | None], KeptRow | None],
) -> StepPlan:
    """The step's rows, without those ``kept`` says are already done."""
    selected = workflow.selected(context)
    partitions, is_range = step_partitions(context)
    plan = StepPlan(selected, partitions, is_range)
    todo: list[tuple[str | None, list[LoadedStage]]] = []
    for partition in partitions:
        stages = []
        for loaded in selected:
            done = kept(loaded, partition)
            if done is None:
                stages.append(loaded)
            else:
                plan.kept.append(done)
        if stages:
            todo.append((partition, stages))
    if not todo:
        return plan
    if not is_range:
        ((partition, stages),) = todo
        multi_task = len(stages) > 1 or workflow.always_workflow
        _add_run(plan, partition, stages, multi_task, str(partition) if partition else None)
        return plan
    per_run = max(1, workflow.options.max_tasks_per_run // len(selected))
    for start in range(0, len(todo), per_run):
        group = todo[start : start + per_run]
        index = f"{group[0][0]}...{group[-1][0]}"
        run = len(plan.runs)
        keys: list[str] = []
        for partition, stages in group:
            assert partition is not None
            keys.extend(_rows(plan, partition, stages, run, range_keys=True))
        plan.runs.append(
            PlannedRun(
                _with_digest(index, keys, plan.kept),
                f"partitions {', '.join(str(p) for p, _ in group)}",
                tuple(keys),
                True,
            )
        )
    return plan


def _rows(
    plan: StepPlan, partition: str | None, stages: list[LoadedStage], run: int, *, range_keys: bool
) -> list[str]:
    names = {s.key for s in stages}

    def key_of(stage_key: str) -> str:
        return partition_task_key(stage_key, partition) if range_keys and partition else stage_key

    keys = []
    for loaded in stages:
        depends_on = tuple(key_of(d) for d in loaded.stage.depends_on if d in names)
        row = TaskRow(key_of(loaded.key), loaded, partition, depends_on, run)
        plan.rows[row.task_key] = row
        keys.append(row.task_key)
    return keys


def _add_run(
    plan: StepPlan,
    partition: str | None,
    stages: list[LoadedStage],
    multi_task: bool,
    index: str | None,
) -> None:
    run = len(plan.runs)
    if multi_task:
        keys = _rows(plan, partition, stages, run, range_keys=False)
    else:
        # A plain run's one task is named after its workload's experiment.
        (loaded,) = stages
        row = TaskRow(loaded.workload.experiment_name, loaded, partition, (), run)
        plan.rows[row.task_key] = row
        keys = [row.task_key]
    plan.runs.append(
        PlannedRun(
            _with_digest(index, keys, plan.kept),
            ", ".join(plan.rows[k].stage.key for k in keys),
            tuple(keys),
            multi_task,
        )
    )


def _with_digest(index: str | None, keys: list[str], kept: list[KeptRow]) -> str | None:
    """A run planned without the rows its lineage kept is another submission than the full
    one (another idempotency token): it must never get the full run back."""
    if not kept:
        return index
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:8]
    return f"{index or ''}+{digest}"
