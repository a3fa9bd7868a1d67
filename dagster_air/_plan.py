"""A step as a table of tasks, planned once: one row per (stage, partition) the step
trains, each with its task key, its dependencies and the remote run it belongs to.

A step over one partition (or none) is one remote run of its selected stages: a plain
single-task run for the one stage of a one-stage workflow, a multi-task run otherwise. A step
over a range of partition keys (a backfill with ``BackfillPolicy.single_run()`` or
``multi_run(n)``, n > 1) has a row per stage and partition, grouped into runs of at most
``max_tasks_per_run`` tasks (a partition's stages always in the same run).

Recovery is a filter over rows: a row its lineage already materialized (``_lineage``) is
*kept*, not planned, and a planned row that depended on it reads where it wrote.

A blocking check splits the runs (``stage_waves``): the stages downstream of a stage whose
blocking check the step runs are planned in a later *wave*, runs the step submits only once
the runs before ended and the check passed. The platform knows nothing of Dagster's checks:
inside one multi-task run a downstream task would start as soon as its upstream task
succeeded, before any check could stop it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from air_runtime import PartitionRange
from air_runtime.plan import task_key_for

from ._blocking import blocking_check_keys
from ._record import OnePartitionScope, RangeScope, RowScope
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
    # Task keys of an earlier wave's runs it waits for (a blocking check upstream): the step
    # submits it only once they succeeded and passed their blocking checks.
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlannedRun:
    """One remote run of the step."""

    index: str | None  # the submission key's index (see ``_identity``)
    label: str  # what it covers, for the step's log
    task_keys: tuple[str, ...]
    multi_task: bool  # False: a plain single-task run of its one row's workload
    partitions: PartitionRange | None = None  # what the run's name shows (``_identity``)
    wave: int = 0  # submitted once every run of the waves before it ended


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
    scope: RowScope = field(init=False)  # how the rows map to the step's outputs

    def __post_init__(self) -> None:
        self.scope = RangeScope(self.partitions) if self.is_range else OnePartitionScope()

    def rows_of(self, run: PlannedRun) -> list[TaskRow]:
        return [self.rows[key] for key in run.task_keys]

    def holds(self, index: str | None, task_keys: Sequence[str]) -> bool:
        """Whether a run of ``index`` with ``task_keys`` is one the plan submits: one of its
        runs, or a later wave's with the rows the blocking checks before it let through."""
        keys = tuple(task_keys)
        return any(
            run.index == index
            and (run.task_keys == keys or (run.wave > 0 and set(keys) <= set(run.task_keys)))
            for run in self.runs
        )

    def let_through(self, number: int, task_keys: tuple[str, ...]) -> None:
        """Run ``number`` holds only ``task_keys`` (the rest was not let through)."""
        self.runs[number] = dataclasses.replace(self.runs[number], task_keys=task_keys)

    @property
    def waves(self) -> list[list[int]]:
        """The indices of the runs of each wave, first wave first."""
        found: dict[int, list[int]] = {}
        for i, run in enumerate(self.runs):
            found.setdefault(run.wave, []).append(i)
        return [found[w] for w in sorted(found)]


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
    """The step's rows, without those ``kept`` says are already done, in waves split at
    blocking checks (``stage_waves``)."""
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
    checked = {k.asset_key for k in blocking_check_keys(context)}
    gated = {s.key for s in selected if s.asset_key in checked}
    waves = [stage_waves(stages, gated) for _, stages in todo]
    for wave in range(max(max(w.values()) for w in waves) + 1):
        todo_wave = [
            (partition, [s for s in stages if waves[i][s.key] == wave], stages)
            for i, (partition, stages) in enumerate(todo)
        ]
        todo_wave = [t for t in todo_wave if t[1]]
        if not is_range:
            ((partition, stages, planned),) = todo_wave
            multi_task = len(planned) > 1 or workflow.always_workflow
            index = _wave_index(str(partition) if partition else None, wave)
            _add_run(plan, partition, stages, planned, multi_task, index, wave)
            continue
        per_run = max(1, workflow.options.max_tasks_per_run // len(selected))
        for start in range(0, len(todo_wave), per_run):
            group = todo_wave[start : start + per_run]
            index = _wave_index(f"{group[0][0]}...{group[-1][0]}", wave)
            run = len(plan.runs)
            keys: list[str] = []
            for partition, stages, planned in group:
                assert partition is not None
                keys.extend(_rows(plan, partition, stages, planned, run, range_keys=True))
            plan.runs.append(
                PlannedRun(
                    _with_digest(index, keys, plan.kept),
                    f"partitions {', '.join(str(p) for p, _, _ in group)}",
                    tuple(keys),
                    True,
                    PartitionRange.of([str(p) for p, _, _ in group]),
                    wave,
                )
            )
    return plan


def stage_waves(stages: list[LoadedStage], gated: set[str]) -> dict[str, int]:
    """Stage key -> its wave: the number of stages with a blocking check on its longest path
    of upstream stages in ``stages``. A wave is submitted once every earlier one ended, so
    no stage starts before the blocking checks upstream of it passed."""
    names = {s.key for s in stages}
    by_key = {s.key: s for s in stages}
    waves: dict[str, int] = {}

    def wave(key: str) -> int:
        if key not in waves:
            deps = [d for d in by_key[key].stage.depends_on if d in names]
            waves[key] = max((wave(d) + (d in gated) for d in deps), default=0)
        return waves[key]

    for loaded in stages:
        wave(loaded.key)
    return waves


def _wave_index(index: str | None, wave: int) -> str | None:
    """The submission index of a wave's run: the first wave's is the step's own (the token
    of a step without blocking checks never moves); a later wave's says which it is."""
    return index if wave == 0 else f"{index or ''}#wave{wave}"


def _rows(
    plan: StepPlan,
    partition: str | None,
    stages: list[LoadedStage],
    planned: list[LoadedStage],
    run: int,
    *,
    range_keys: bool,
) -> list[str]:
    """The rows of ``stages`` (one wave of the partition's ``planned`` stages) in ``run``:
    an upstream stage of the same wave is a dependency within the run; one of an earlier
    wave is ``after``, waited for by the step."""
    names = {s.key for s in stages}
    earlier = {s.key for s in planned} - names

    def key_of(stage_key: str) -> str:
        return partition_task_key(stage_key, partition) if range_keys and partition else stage_key

    keys = []
    for loaded in stages:
        depends_on = tuple(key_of(d) for d in loaded.stage.depends_on if d in names)
        after = tuple(key_of(d) for d in loaded.stage.depends_on if d in earlier)
        row = TaskRow(key_of(loaded.key), loaded, partition, depends_on, run, after)
        plan.rows[row.task_key] = row
        keys.append(row.task_key)
    return keys


def _add_run(
    plan: StepPlan,
    partition: str | None,
    stages: list[LoadedStage],
    planned: list[LoadedStage],
    multi_task: bool,
    index: str | None,
    wave: int,
) -> None:
    run = len(plan.runs)
    if multi_task:
        keys = _rows(plan, partition, stages, planned, run, range_keys=False)
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
            PartitionRange(partition, partition) if partition is not None else None,
            wave,
        )
    )


def _with_digest(index: str | None, keys: list[str], kept: list[KeptRow]) -> str | None:
    """A run planned without the rows its lineage kept is another submission than the full
    one (another idempotency token): it must never get the full run back."""
    if not kept:
        return index
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:8]
    return f"{index or ''}+{digest}"
