"""Steps over a partition key range: one task per partition key, each its own partition.

A backfill with ``BackfillPolicy.single_run()`` (or ``multi_run(n)``, n > 1) gives a step a
range of partition keys instead of one key. Such a step submits one multi-task run with a
task per selected stage and partition key (each with that key's parameters, environment and
Pipes context), at most ``max_tasks_per_run`` tasks per run (a larger range is split into
several runs, submitted together and waited for in turn), and records each partition from
its own task: its materialization, metadata, GPU-hours and checks. A partition whose task
failed (or is downstream of a failed blocking check) is not recorded as materialized, and
the step fails naming those partitions and why.

Retries: every run's idempotency token is the step's (see ``_identity``) with the run's
first and last partition key, so a retry of a crashed worker gets the same runs back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterExecutionInterruptedError

from air_runtime import (
    AirClient,
    AirError,
    RunFailed,
    RunState,
    Stage,
    SubmittedRun,
    Workload,
)
from air_runtime.plan import task_key_for

from ._blocking import RunTask
from ._execution import (
    AirEvent,
    AirWorkflow,
    LoadedStage,
    StepRun,
    _apply_overrides,
    _config_failure,
    run_metadata,
    stage_metadata,
)
from ._identity import terminal_failure_observation
from ._interrupts import deferred_interrupts
from ._partitions import partition_overrides
from ._pipes import PartitionScope
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
class RangeSubmission:
    """One remote run of a range step: its tasks, and once submitted, the run."""

    tasks: list[PartitionTask]
    token: str = ""
    submitted: SubmittedRun | None = None
    state: RunState | None = None

    @property
    def keys(self) -> list[str]:
        return list(dict.fromkeys(t.partition for t in self.tasks))


class RangeStepRun(StepRun):
    """A step over a partition key range (see the module docstring)."""

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
        self.max_tasks_per_run = workflow.max_tasks_per_run
        self._tasks: dict[str, PartitionTask] = {}

    # --- what the step submits ------------------------------------------------------

    def _plan(self, selected: list[LoadedStage]) -> list[RangeSubmission]:
        """The tasks, grouped into runs of at most ``max_tasks_per_run`` tasks (a
        partition's stages always in the same run)."""
        selected_keys = {s.key for s in selected}
        per_run = max(1, self.max_tasks_per_run // len(selected))
        runs = []
        for start in range(0, len(self.keys), per_run):
            tasks = []
            for partition in self.keys[start : start + per_run]:
                for s in selected:
                    depends_on = tuple(
                        partition_task_key(d, partition)
                        for d in s.stage.depends_on
                        if d in selected_keys
                    )
                    tasks.append(
                        PartitionTask(
                            partition_task_key(s.key, partition), s, partition, depends_on
                        )
                    )
            runs.append(RangeSubmission(tasks))
        return runs

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

    def _task_workloads(self, runs: list[RangeSubmission]) -> dict[str, Workload]:
        workloads = {}
        selected = self._selected
        for run in runs:
            for task in run.tasks:
                try:
                    partition = partition_overrides(
                        self._partition_key(task.partition),
                        self.workflow.partition_parameters,
                        self.workflow.partition_env,
                    )
                except (KeyError, ValueError) as error:
                    raise _config_failure(
                        error, f"cannot map partition {task.partition} to parameters"
                    ) from None
                workload = _apply_overrides(
                    task.loaded, self.config, partition, self.extra_overrides
                )
                for extra in (
                    self._run_env(task.loaded.key, task.partition),
                    self._upstream_output(task.loaded, selected, task.partition),
                ):
                    if extra:
                        workload = workload.with_overrides(extra)
                workloads[task.task_key] = workload
        return workloads

    def _task_pipes(self, workloads: dict[str, Workload]) -> dict[str, Workload]:
        assert self.pipes is not None
        result = {}
        for key, workload in workloads.items():
            task = self._tasks[key]
            env = self.pipes.env_for(
                task.loaded.asset_key, task.loaded.key, self._scope(task.partition)
            )
            result[key] = workload.with_overrides(
                {f"env_variables.{name}": value for name, value in env.items()}
            )
        return result

    def _submit_run(
        self, client: AirClient, run: RangeSubmission, workloads: dict[str, Workload]
    ) -> SubmittedRun:
        stages = [
            Stage(task_key=t.task_key, workload=workloads[t.task_key], depends_on=t.depends_on,
                  run_if=t.loaded.stage.run_if if t.depends_on else "ALL_SUCCESS")
            for t in run.tasks
        ]  # fmt: skip
        try:
            return client.submit_workload(
                stages, idempotency_token=run.token, run_name=self.workflow.name
            )
        except AirError as error:
            raise self._submit_failure(error) from None

    # --- the step run: which task is which partition ----------------------------------

    def _asset_of_task(self, task_key: str) -> dg.AssetKey | None:
        task = self._tasks.get(task_key)
        return task.loaded.asset_key if task is not None else None

    def _partition_of_task(self, task_key: str) -> str | None:
        task = self._tasks.get(task_key)
        return task.partition if task is not None else None

    def _run_tasks(self) -> dict[str, RunTask]:
        return {
            t.task_key: RunTask(t.task_key, t.loaded.asset_key, t.partition, t.depends_on)
            for t in self._tasks.values()
        }

    # --- the whole step -------------------------------------------------------------

    def execute(self) -> Iterator[AirEvent]:
        selected = self.workflow.selected(self.context)
        if not selected:
            return
        self._selected = selected
        runs = self._plan(selected)
        self._tasks = {t.task_key: t for run in runs for t in run.tasks}
        workloads = self._task_workloads(runs)
        with self._session(sum(w.num_nodes for w in workloads.values())) as (client, namespace):
            workloads = self._with_secrets(client, workloads, namespace)
            submitted_workloads = self._task_pipes(workloads) if self.pipes else workloads
            generation = self.identity.generation(self.context)
            for run in runs:
                run.token = self._token(namespace, generation, f"{run.keys[0]}...{run.keys[-1]}")
            self.context.log.info(
                f"{len(self.keys)} partitions x {len(selected)} stage(s): {len(self._tasks)} "
                f"tasks in {len(runs)} run(s) of at most {self.max_tasks_per_run} tasks"
            )
            try:
                for run in runs:
                    with deferred_interrupts():
                        run.submitted = self._submit_run(client, run, submitted_workloads)
                    self._mark_secrets(client, run.submitted)
                    self.context.log.info(
                        f"run {run.submitted.run_id} for partitions {', '.join(run.keys)}: "
                        f"{run.submitted.run_page_url} (generation {generation})"
                    )
                for run in runs:
                    assert run.submitted is not None
                    run.state = yield from self._wait(run.submitted)
            except DagsterExecutionInterruptedError:
                ended_all = True
                for run in runs:
                    if run.submitted is None:
                        continue
                    ended = run.state or self._cancel_remote(client, run.submitted)
                    ended_all = ended_all and ended is not None
                    yield terminal_failure_observation(
                        self.context, selected[0].asset_key, run.submitted, ended, generation
                    )
                if ended_all:
                    self._delete_secrets(client)
                raise
            self._delete_secrets(client)
            yield from self._range_results(client, runs, workloads, generation)

    def _failure_reason(self, client: AirClient, state: RunState, task_key: str) -> str:
        stage_state = state.stage(task_key)
        try:
            client.raise_for_failure(stage_state)
        except RunFailed as error:
            return self.redact(str(error))
        except AirError as error:
            return self.redact(f"{stage_state.describe()} ({error})")
        return self.redact(stage_state.describe())

    def _range_results(
        self,
        client: AirClient,
        runs: list[RangeSubmission],
        workloads: dict[str, Workload],
        generation: int,
    ) -> Iterator[AirEvent]:
        reported: dict[str, tuple[dg.MaterializeResult | None, list[dg.AssetCheckResult]]] = {}
        for run in runs:
            assert run.submitted is not None and run.state is not None
            self._follow_blocking(run.state)
            if self.pipes is not None:
                yield from self._earlier_attempts(run.state, run.submitted)
                final, _ = self.pipes.final_reports(run.state)
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
            for task in run.tasks:
                state = run.state.task(task.task_key)
                if task.task_key in blocked:
                    failed.append((task, blocked[task.task_key]))
                elif state is None or not state.is_success:
                    failed.append((task, self._failure_reason(client, run.state, task.task_key)))
                else:
                    metadata = stage_metadata(
                        client, run.submitted, run.state, state, workloads[task.task_key]
                    )
                    metadata.update(self._output_metadata(workloads[task.task_key]))
                    metadata[PARTITION_KEY] = task.partition
                    from_pipes = reported.get(task.task_key, (None, []))[0]
                    # What the workload reports adds to, never replaces, what the run says.
                    metadata = {**((from_pipes.metadata or {}) if from_pipes else {}), **metadata}
                    materialized.setdefault(task.loaded.asset_key, {})[task.partition] = metadata
        yield from self._materializations(materialized, complete=not failed)
        yield from self._partition_checks(reported, materialized)
        if not failed:
            return
        failing = [run for run in runs if any(t in run.tasks for t, _ in failed)]
        for run in failing:
            # A retry of the step starts new runs (see ``_identity``).
            assert run.submitted is not None
            yield terminal_failure_observation(
                self.context, failed[0][0].loaded.asset_key, run.submitted, run.state, generation
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
                **run_metadata(first.submitted, first.state),
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


def step_run(
    context: dg.AssetExecutionContext, workflow: AirWorkflow, *args: Any, **kwargs: Any
) -> StepRun:
    """The step run of this context: one over a partition range, or the plain one."""
    keys = range_keys(context)
    if keys is None:
        return StepRun(context, workflow, *args, **kwargs)
    return RangeStepRun(context, workflow, *args, keys=keys, **kwargs)
