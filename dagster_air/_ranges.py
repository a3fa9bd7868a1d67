"""Steps over a partition key range: one task per partition key, each its own partition.

A backfill with ``BackfillPolicy.single_run()`` (or ``multi_run(n)``, n > 1) gives a step a
range of partition keys instead of one key. Such a step submits one multi-task run with a
task per selected stage and partition key (each with that key's parameters, environment and
Pipes context), at most ``max_tasks_per_run`` tasks per run (a larger range is split into
several runs, submitted together and waited for in turn), and records each partition from
its own task: its materialization, metadata, GPU-hours and checks. A partition whose task
failed (or is downstream of a failed blocking check) is not recorded as materialized, and
the step fails naming those partitions and why.

Each run is one ``air_runtime.Submission`` whose key is the step's (see ``_identity``) with
the run's first and last partition key: a retry of a crashed worker gets the same runs back,
and each run's secret keys are its own, deleted once that run has ended. The life of the
runs (submit, wait, cancel, finish) is ``StepRun``'s; this module only says what the tasks
are and records each partition from its own task. The metadata is the translator's.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from air_runtime import AirClient, AirError, RunOutcome, RunState, Stage, SubmissionKey, Workload
from air_runtime.plan import task_key_for

from ._blocking import RunTask
from ._execution import AirEvent, StepRun
from ._identity import terminal_failure_observation
from ._step_submission import (
    AirWorkflow,
    LoadedStage,
    PartitionScope,
    RemoteRun,
    StepSubmission,
    pipes_env,
)
from ._translator import META_PREFIX

# A Databricks job run holds at most 1,000 tasks (the Jobs API limit): a larger cap is
# refused when the definitions load.
MAX_TASKS_PER_RUN_LIMIT = 1000
PARTITION_KEY = f"{META_PREFIX}partition"


def check_range_support(
    *,
    stages: int,
    partitions_def: dg.PartitionsDefinition | None,
    backfill_policy: dg.BackfillPolicy | None,
    max_tasks_per_run: int,
) -> None:
    """What a range run cannot do, refused when the definitions load (``dg check defs``)
    rather than in a run after submitting."""
    if (
        isinstance(max_tasks_per_run, bool)
        or not isinstance(max_tasks_per_run, int)
        or not 1 <= max_tasks_per_run <= MAX_TASKS_PER_RUN_LIMIT
    ):
        raise dg.DagsterInvalidDefinitionError(
            f"max_tasks_per_run {max_tasks_per_run!r}: use a whole number from 1 to "
            f"{MAX_TASKS_PER_RUN_LIMIT} (a Databricks job run holds at most "
            f"{MAX_TASKS_PER_RUN_LIMIT} tasks)"
        )
    ranges = backfill_policy is not None and (
        backfill_policy.max_partitions_per_run is None or backfill_policy.max_partitions_per_run > 1
    )
    if partitions_def is None or not ranges:
        return
    if stages > max_tasks_per_run:
        raise dg.DagsterInvalidDefinitionError(
            f"a backfill of a partition range runs every stage once per partition, but the "
            f"{stages} stages do not fit in max_tasks_per_run={max_tasks_per_run}: raise "
            f"max_tasks_per_run to at least {stages}, or use BackfillPolicy.multi_run(1)"
        )


def range_keys(context: dg.AssetExecutionContext) -> list[str] | None:
    """The partition keys of a step over a range of several keys; None for a step over
    one partition (or none)."""
    if context.has_partition_key or not context.has_partition_key_range:
        return None
    return list(context.partition_keys)


def partition_task_key(stage_key: str, partition: str) -> str:
    """The task key of one stage for one partition: readable, unique (a hash of the key
    tells apart keys that read the same once made task-key safe), stable across retries."""
    digest = hashlib.sha256(partition.encode()).hexdigest()[:8]
    return f"{task_key_for(f'{stage_key}__{partition}')[:90]}_{digest}"


@dataclass(frozen=True)
class PartitionTask:
    """One task of a range run: a stage for one partition."""

    task_key: str
    loaded: LoadedStage
    partition: str
    depends_on: tuple[str, ...]


@dataclass
class RangeStepSubmission(StepSubmission):
    """What a step over a partition key range submits: a task per selected stage and
    partition, grouped into runs of at most ``max_tasks_per_run`` tasks (a partition's
    stages always in the same run), each run its own ``air_runtime.Submission``."""

    keys: Sequence[str] = ()
    tasks: dict[str, PartitionTask] = field(default_factory=dict, init=False)
    groups: list[list[PartitionTask]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        selected = self.selected
        if not selected:
            return
        selected_keys = {s.key for s in selected}
        keys = list(self.keys)
        per_run = max(1, self.workflow.max_tasks_per_run // len(selected))
        for start in range(0, len(keys), per_run):
            group = []
            for partition in keys[start : start + per_run]:
                for s in selected:
                    depends_on = tuple(
                        partition_task_key(d, partition)
                        for d in s.stage.depends_on
                        if d in selected_keys
                    )
                    group.append(
                        PartitionTask(
                            partition_task_key(s.key, partition), s, partition, depends_on
                        )
                    )
            self.groups.append(group)
        self.tasks = {t.task_key: t for group in self.groups for t in group}

    # --- the workloads ----------------------------------------------------------------------

    def _partition_key(self, partition: str) -> str | dg.MultiPartitionKey:
        partitions_def = self.context.assets_def.partitions_def
        if isinstance(partitions_def, dg.MultiPartitionsDefinition):
            return partitions_def.get_partition_key_from_str(partition)
        return partition

    def _scope(self, partition: str) -> PartitionScope:
        partitions_def = self.context.assets_def.partitions_def
        window = None
        if isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
            window = partitions_def.time_window_for_partition_key(partition)
        return PartitionScope(partition, window)

    def workloads(self) -> dict[str, Workload]:
        """Each task's workload: its stage with its partition's parameters, ``run_env``
        and upstream output location."""
        workloads = {}
        for task in self.tasks.values():
            partition = self._partition_overrides(self._partition_key(task.partition))
            workload = self._apply_overrides(task.loaded, partition)
            for extra in (
                self._run_env(task.loaded.key, task.partition),
                self._upstream_output(task.loaded, task.partition),
            ):
                if extra:
                    workload = workload.with_overrides(extra)
            workloads[task.task_key] = workload
        return workloads

    # --- the submission ---------------------------------------------------------------------

    def _plan(self, key: SubmissionKey) -> list[tuple[SubmissionKey, str, tuple[str, ...]]]:
        """One submission per run, named by the step and the run's first and last partition
        key: a retry of a crashed worker gets the same runs back, and each run's secret keys
        are deleted once that run has ended."""
        self.context.log.info(
            f"{len(self.keys)} partitions x {len(self.selected)} stage(s): {len(self.tasks)} "
            f"tasks in {len(self.groups)} run(s) of at most {self.workflow.max_tasks_per_run} "
            "tasks"
        )
        plan = []
        for group in self.groups:
            partitions = list(dict.fromkeys(t.partition for t in group))
            plan.append(
                (
                    dataclasses.replace(key, index=f"{partitions[0]}...{partitions[-1]}"),
                    f"partitions {', '.join(partitions)}",
                    tuple(t.task_key for t in group),
                )
            )
        return plan

    def _pipes_env(self, key: str) -> dict[str, str]:
        task = self.tasks[key]
        return pipes_env(
            self.context, task.loaded.asset_key, task.loaded.key, self._scope(task.partition)
        )

    def _payload(self, run: RemoteRun, workloads: dict[str, Workload]) -> list[Stage]:
        tasks = [self.tasks[key] for key in run.task_keys]
        return [
            Stage(task_key=t.task_key, workload=workloads[t.task_key], depends_on=t.depends_on,
                  run_if=t.loaded.stage.run_if if t.depends_on else "ALL_SUCCESS")
            for t in tasks
        ]  # fmt: skip


class RangeStepRun(StepRun):
    """A step over a partition key range (see the module docstring): the step run's events,
    each task recorded as its own partition."""

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        workflow: AirWorkflow,
        *args: Any,
        keys: Sequence[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(context, workflow, *args, **kwargs)
        self.keys = list(keys)

    def _submission(self) -> RangeStepSubmission:
        return RangeStepSubmission(
            self.context,
            self.workflow,
            self.workspace,
            self.config,
            self.extra_overrides,
            keys=self.keys,
        )

    @property
    def _tasks(self) -> dict[str, PartitionTask]:
        assert isinstance(self.step, RangeStepSubmission)
        return self.step.tasks

    # --- which task is which partition ------------------------------------------------

    def _stage_of_task(self, task_key: str) -> LoadedStage | None:
        task = self._tasks.get(task_key)
        return task.loaded if task is not None else None

    def _partition_of_task(self, task_key: str) -> str | None:
        task = self._tasks.get(task_key)
        return task.partition if task is not None else None

    def _run_tasks(self) -> dict[str, RunTask]:
        return {
            t.task_key: RunTask(t.task_key, t.loaded.asset_key, t.partition, t.depends_on)
            for t in self._tasks.values()
        }

    # --- the results ------------------------------------------------------------------

    def _failure_reason(self, outcome: RunOutcome | None, state: RunState, task_key: str) -> str:
        if outcome is not None and outcome.message:
            return self.redact(outcome.message)
        return self.redact(state.stage(task_key).describe())

    def _results(self, client: AirClient, workloads: dict[str, Workload]) -> Iterator[AirEvent]:
        runs = self.step.runs
        reported: dict[str, tuple[dg.MaterializeResult | None, list[dg.AssetCheckResult]]] = {}
        for run in runs:
            assert run.submitted is not None and run.state is not None
            if self.pipes is not None:  # each run's wait followed its blocking checks
                final, earlier = self.pipes.final_reports(run.state)
                yield from self._earlier_attempts(earlier, run.submitted)
                for reports in final:
                    task = self._tasks.get(reports.task_key)
                    if task is not None:
                        reported[reports.task_key] = (
                            reports.materializations.get(task.loaded.asset_key),
                            reports.checks,
                        )
        blocked = self.blocking.blocked if self.blocking is not None else {}
        # asset -> partition -> metadata (materialized), and (task, why) of the others
        materialized: dict[dg.AssetKey, dict[str, dict[str, Any]]] = {}
        failed: list[tuple[PartitionTask, str]] = []
        for run in runs:
            assert run.submitted is not None and run.state is not None
            for task_key in run.task_keys:
                task = self._tasks[task_key]
                if task_key in blocked:
                    failed.append((task, blocked[task_key]))
                    continue
                state = run.state.task(task_key)
                try:
                    outcome: RunOutcome | None = RunOutcome.read(client, run.state, task_key)
                except AirError:
                    outcome = None
                if state is None or not state.is_success or outcome is None:
                    failed.append((task, self._failure_reason(outcome, run.state, task_key)))
                    continue
                outcome = dataclasses.replace(outcome, run_page_url=run.submitted.run_page_url)
                workload = workloads[task_key]
                metadata = self.translator.get_materialization_metadata(
                    task.loaded.stage,
                    workload,
                    outcome,
                    state=run.state,
                    idempotency_token=run.submitted.idempotency_token,
                )
                metadata.update(self._output_metadata(workload))
                metadata[PARTITION_KEY] = task.partition
                from_pipes = reported.get(task_key, (None, []))[0]
                # What the workload reports adds to, never replaces, what the run says.
                metadata = {**((from_pipes.metadata or {}) if from_pipes else {}), **metadata}
                materialized.setdefault(task.loaded.asset_key, {})[task.partition] = metadata
        yield from self._materializations(materialized, complete=not failed)
        yield from self._partition_checks(reported, materialized)
        if not failed:
            return
        failing = [run for run in runs if any(t.task_key in run.task_keys for t, _ in failed)]
        for run in failing:
            # A retry of the step starts new runs (see ``_identity``).
            assert run.submitted is not None
            yield terminal_failure_observation(
                self.context,
                failed[0][0].loaded.asset_key,
                run.submitted,
                run.state,
                self.step.generation,
            )
        first = failing[0]
        lines = [
            f"{t.loaded.asset_key.to_user_string()} partition {t.partition} (task {t.task_key}): "
            f"{why}"
            for t, why in failed
        ]
        partitions = sorted({t.partition for t, _ in failed})
        assert first.submitted is not None
        raise dg.Failure(
            description=self.redact(
                f"{len(partitions)} of {len(self.keys)} partitions not materialized: "
                f"{', '.join(partitions)}\n" + "\n".join(lines)
            ),
            metadata={
                **self.translator.get_run_metadata(
                    first.submitted.run_id, first.submitted.run_page_url, first.state
                ),
                f"{META_PREFIX}failed_partitions": ", ".join(partitions),
            },
        )

    def _materializations(
        self, materialized: Mapping[dg.AssetKey, Mapping[str, dict[str, Any]]], complete: bool
    ) -> Iterator[AirEvent]:
        """Every partition of the range materialized: one result, each partition's metadata
        its own. Otherwise only the materialized partitions (the step fails after)."""
        for asset_key, by_partition in materialized.items():
            if complete and len(by_partition) == len(self.keys):
                for partition, metadata in by_partition.items():
                    self.context.add_asset_metadata(
                        metadata, asset_key=asset_key, partition_key=partition
                    )
                yield dg.MaterializeResult(asset_key=asset_key)
                continue
            for partition, metadata in by_partition.items():
                yield dg.AssetMaterialization(
                    asset_key=asset_key, partition=partition, metadata=metadata
                )

    def _partition_checks(
        self,
        reported: Mapping[str, tuple[dg.MaterializeResult | None, list[dg.AssetCheckResult]]],
        materialized: Mapping[dg.AssetKey, Mapping[str, Any]],
    ) -> Iterator[AirEvent]:
        """Each partition's check results from its own task, as evaluations of that
        partition (a declared check a materialized partition did not report fails)."""
        selected = self.context.selected_asset_check_keys
        assets_def = self.context.assets_def
        seen: set[tuple[dg.AssetCheckKey, str]] = set()
        evaluated: set[dg.AssetCheckKey] = set()
        for task_key, (_, checks) in reported.items():
            task = self._tasks[task_key]
            for result in checks:
                key = dg.AssetCheckKey(task.loaded.asset_key, str(result.check_name))
                if key not in selected or (key, task.partition) in seen:
                    self.context.log.warning(
                        f"partition {task.partition} reported check {result.check_name} of "
                        f"{key.asset_key.to_user_string()}, which this step does not run: ignored"
                    )
                    continue
                seen.add((key, task.partition))
                evaluated.add(key)
                yield self._evaluation(
                    assets_def, key, task.partition, result.passed, result.severity,
                    dict(result.metadata or {}),
                )  # fmt: skip
        for key in sorted(selected, key=str):
            for partition in materialized.get(key.asset_key, {}):
                if (key, partition) not in seen:
                    evaluated.add(key)
                    yield self._evaluation(
                        assets_def, key, partition, False, dg.AssetCheckSeverity.ERROR,
                        {"reason": "the workload did not report this check (dagster-pipes)"},
                    )  # fmt: skip
        for key in sorted(evaluated, key=str):
            # The check's output, once (its evaluations, one per partition, are above).
            yield dg.Output(None, output_name=assets_def.output_names_by_entity_key[key])

    def _evaluation(
        self,
        assets_def: dg.AssetsDefinition,
        key: dg.AssetCheckKey,
        partition: str,
        passed: bool,
        severity: dg.AssetCheckSeverity,
        metadata: dict[str, Any],
    ) -> dg.AssetCheckEvaluation:
        spec = assets_def.get_spec_for_check_key(key)
        return dg.AssetCheckEvaluation(
            asset_key=key.asset_key,
            check_name=key.name,
            passed=passed,
            metadata={**metadata, PARTITION_KEY: partition},
            severity=severity,
            blocking=spec.blocking,
            # An unpartitioned check of a partitioned asset is evaluated once per partition,
            # each evaluation naming its partition in its metadata.
            partition=partition if spec.partitions_def is not None else None,
        )


def run_step(
    context: dg.AssetExecutionContext, workflow: AirWorkflow, *args: Any, **kwargs: Any
) -> Iterator[AirEvent]:
    """Run this context's step: one over a partition range, or the plain one."""
    keys = range_keys(context)
    if keys is None:
        yield from StepRun.run(context, workflow, *args, **kwargs)
    else:
        yield from RangeStepRun.run(context, workflow, *args, keys=keys, **kwargs)
