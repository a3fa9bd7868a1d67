"""``AirWorkflowTaskGroup``: several ``AirRunOperator`` stages submitted as ONE multi-task run.

A multi-stage pipeline (generate → train → evaluate) then runs on the platform without a round
trip to Airflow between stages (docs/spec/workload.md §6), yet every stage is still its own Airflow task
with its own state, logs and links::

    with AirWorkflowTaskGroup("rl", run_name="rl_pipeline") as rl:
        train = AirRunOperator(task_id="train", workload="rl/grpo_two_containers.yaml")
        evaluate = AirRunOperator(task_id="evaluate", workload="rl/evaluate.yaml")
        train >> evaluate

On leaving the ``with`` block the group adds a ``submit`` task upstream of its first stages.
At run time that task renders and validates every stage's workload, builds one run with one
task per stage (``depends_on`` from the stage dependencies inside the group, ``run_if`` from
each stage's ``trigger_rule``), submits it with a deterministic idempotency token and pushes
``run_id`` / ``run_page_url``. Each stage task then waits for its own task of that run (in the
worker or, when deferrable, in the triggerer) and succeeds or fails with it.

Re-running a failed stage is a **repair**: clear it (with its downstream stages, as the UI
offers), or let its automatic retry run, and once its run has ended only that stage and the
stages cleared with it that did not succeed run again, as new task runs of the same run (Jobs
``runs/repair``); what succeeded is kept, not paid twice. The stage's log says so ("repairing
run 1001: re-running train, evaluate; prep succeeded and is kept"), and the other re-run
stages wait on their new task runs. Where the workspace refuses to repair the run, the stage
submits a new run of only those stages and the others follow it (``StageRerun``). Clearing
the group's submit task (or the whole group) starts a fresh run of every stage: the ask for
everything again. Killing a stage task cancels the whole run when ``cancel_on_kill`` (the
platform cancels runs, not single tasks).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from airflow.sdk import BaseOperator, BaseOperatorLink, TaskGroup

from airflow_air.links import AirRunLink
from airflow_air.operators import DEFAULT_CONN_ID, AirRunOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from air_runtime import AirClient, RunState, Stage, Submission
    from airflow_air._generations import RunRecord
    from airflow_air._task_run import AirTaskRun, TaskRun

SUBMIT_TASK_ID = "submit"

# Airflow trigger rule -> the Jobs API run_if of a task in a multi-task run.
RUN_IF_BY_TRIGGER_RULE = {
    "all_success": "ALL_SUCCESS",
    "all_done": "ALL_DONE",
    "none_failed": "NONE_FAILED",
    "one_success": "AT_LEAST_ONE_SUCCESS",
    "one_failed": "AT_LEAST_ONE_FAILED",
    "all_failed": "ALL_FAILED",
}


def _rule_name(rule: Any) -> str:
    return str(getattr(rule, "value", rule))


@attrs.define(repr=False)
class AirWorkflowTaskGroup(TaskGroup):
    """A task group whose ``AirRunOperator`` tasks run as one AI Runtime multi-task run.

    Clear a failed stage (with its downstream) to repair the run: only the stages cleared
    that did not succeed run again. Clear the ``submit`` task to run every stage again.

    :param run_name: name of the run (default: the group id).
    :param databricks_conn_id: the workspace of the run (stages must use the same).
    :param submit_task_id: id (inside the group) of the task that submits the run.
    """

    run_name: str | None = attrs.field(default=None, kw_only=True)
    databricks_conn_id: str = attrs.field(default=DEFAULT_CONN_ID, kw_only=True)
    submit_task_id: str = attrs.field(default=SUBMIT_TASK_ID, kw_only=True)

    def stages(self) -> list[AirRunOperator]:
        """The ``AirRunOperator`` tasks of this group (nested groups included), in order."""
        found: list[AirRunOperator] = []
        pending: list[Any] = [self]
        while pending:
            group = pending.pop(0)
            for child in group.children.values():
                if isinstance(child, TaskGroup):
                    pending.append(child)
                elif isinstance(child, AirRunOperator):
                    found.append(child)
        return found

    def task_key_of(self, task: BaseOperator) -> str:
        """The stage's task key in the run: its task id without the group prefix."""
        from air_runtime.plan import task_key_for

        prefix = f"{self.group_id}." if self.group_id and self.prefix_group_id else ""
        return task_key_for(task.task_id.removeprefix(prefix))

    def __exit__(self, _type: Any, _value: Any, _tb: Any) -> None:
        if _type is None:
            self._add_submit_task()
        super().__exit__(_type, _value, _tb)

    def _add_submit_task(self) -> None:
        stages = self.stages()
        submit = AirWorkflowSubmitOperator(
            task_id=self.submit_task_id,
            task_group=self,
            dag=self.dag,
            databricks_conn_id=self.databricks_conn_id,
        )
        stage_ids = {stage.task_id for stage in stages}
        for stage in stages:
            stage.workflow_submit_task_id = submit.task_id
            stage.workflow_task_key = self.task_key_of(stage)
            if not (stage.upstream_task_ids & stage_ids):
                submit >> stage


class AirWorkflowSubmitOperator(BaseOperator):
    """Submits the stages of its ``AirWorkflowTaskGroup`` as one run (added by the group).

    Same idempotency rules as ``AirRunOperator``: a retry after a worker crash gets the same
    run back, a clear starts a new one. With a ``sweep_gpu_hours_budget`` (``default_args``)
    nothing is submitted once the Dag run's runs spent it. Returns ``{"run_id",
    "run_page_url"}``.
    """

    ui_color = "#ffd8be"
    operator_extra_links: Collection[BaseOperatorLink] = (AirRunLink(),)

    def __init__(
        self,
        *,
        databricks_conn_id: str = DEFAULT_CONN_ID,
        sweep_gpu_hours_budget: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.databricks_conn_id = databricks_conn_id
        # As ``AirRunOperator``'s (from ``default_args``): no run is submitted once spent.
        self.sweep_gpu_hours_budget = sweep_gpu_hours_budget
        # This try (``airflow_air._task_run.TaskRun``): its run, lineage and link XComs.
        self.try_run: TaskRun | None = None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The submitted run as OpenLineage run facets (each stage reports its own datasets)."""
        from airflow_air._openlineage import operator_lineage

        lineage = self.try_run.lineage if self.try_run is not None else None
        return operator_lineage(None, lineage, host=None)

    def workflow_group(self) -> AirWorkflowTaskGroup:
        """The ``AirWorkflowTaskGroup`` whose run this task submits."""
        group = self.task_group
        while group is not None and not isinstance(group, AirWorkflowTaskGroup):
            group = group.parent_group
        if group is None:
            from airflow_air.exceptions import AirConfigurationError

            raise AirConfigurationError(f"{self.task_id} is not inside an AirWorkflowTaskGroup")
        return group

    def _stage_plan(self, context: Context, group: AirWorkflowTaskGroup) -> list[PlannedStage]:
        """Each stage planned: workloads rendered and validated; no secrets yet."""
        from air_runtime import Stage
        from airflow_air.exceptions import AirConfigurationError

        stages = [s for s in group.stages() if s.workflow_submit_task_id == self.task_id]
        if not stages:
            raise AirConfigurationError(f"workflow group {group.group_id!r} has no AirRunOperator")
        by_id = {stage.task_id: stage for stage in stages}
        group_task_ids = {t.task_id for t in group.iter_tasks()}
        problems: list[str] = []
        planned = []
        for stage in stages:
            if stage.databricks_conn_id != self.databricks_conn_id:
                problems.append(
                    f"{stage.task_id}: uses connection {stage.databricks_conn_id!r}, the "
                    f"workflow runs on {self.databricks_conn_id!r}"
                )
            rule = _rule_name(stage.trigger_rule)
            run_if = RUN_IF_BY_TRIGGER_RULE.get(rule)
            if run_if is None:
                problems.append(
                    f"{stage.task_id}: trigger_rule {rule!r} has no equivalent in a multi-task "
                    f"run; use one of {', '.join(RUN_IF_BY_TRIGGER_RULE)}"
                )
            others = stage.upstream_task_ids - set(by_id) - {self.task_id}
            inside = sorted(t for t in others if t in group_task_ids)
            if inside:
                problems.append(
                    f"{stage.task_id}: depends on {', '.join(inside)}, which is not a stage of "
                    "the run (the platform would not wait for it); move it out of the group"
                )
            # Rendered into a copy of the fields: the operator objects may be shared (in-process
            # runs) and the stage task renders its own fields when it runs.
            env = stage.get_template_env()
            rendered = {
                name: stage.render_template(getattr(stage, name), context, env, set())
                for name in stage.template_fields
            }
            depends_on = tuple(
                sorted(
                    by_id[t].workflow_task_key or t for t in stage.upstream_task_ids if t in by_id
                )
            )
            # A missing run_if was reported above; the placeholder is never submitted.
            task_key = stage.workflow_task_key or stage.task_id
            planned.append((stage, rendered, task_key, depends_on, run_if or "ALL_SUCCESS"))
        if problems:
            raise AirConfigurationError("invalid workflow:\n  - " + "\n  - ".join(problems))
        return [
            PlannedStage(
                stage,
                rendered,
                Stage(
                    task_key=task_key,
                    workload=stage.load_workload(rendered["workload"], rendered["overrides"]),
                    depends_on=depends_on,
                    run_if=run_if,
                    # Its ranks' AIRO_TASK: the stage's own task, not the group's submit.
                    orchestrator_task=stage.task_id,
                ),
            )
            for stage, rendered, task_key, depends_on, run_if in planned
        ]

    def execute(self, context: Context) -> Any:
        from airflow_air._task_run import TaskRun

        self.try_run = TaskRun(self, context)
        try:
            return self._submit_run(context, self.try_run)
        finally:
            # An instance attribute of this try's copy: the Dag's links (serialized) stay.
            self.operator_extra_links = self.try_run.links.offered(type(self).operator_extra_links)

    def _submit_run(self, context: Context, run: TaskRun) -> dict[str, Any]:
        from airflow_air._deferral import configuration_errors_fail_fast
        from airflow_air._generations import clear_generation
        from airflow_air.hooks import AirHook

        group = self.workflow_group()
        with (
            configuration_errors_fail_fast(),
            AirHook(self.databricks_conn_id).get_client() as client,
        ):
            planned = self._stage_plan(context, group)
            self.log.info(
                "Workflow %s: %s",
                group.group_id,
                ", ".join(
                    f"{stage.task_key}"
                    + (
                        f" (after {', '.join(stage.depends_on)}; {stage.run_if})"
                        if stage.depends_on
                        else ""
                    )
                    for stage in (p.stage for p in planned)
                ),
            )
            # One submission for the run the stages share; each stage's values under keys
            # of its own (``stage``), in the scope that stage names.
            run.read_sweep()
            submission = run.open_submission()
            # Clearing this task asks for every stage again: new checkpoint folders. The
            # stages' own clears and repairs keep them (they read this epoch back).
            submission.checkpoint_epoch = str(clear_generation(context, self))
            context["ti"].xcom_push(key=CHECKPOINT_EPOCH_KEY, value=submission.checkpoint_epoch)
            record = run.own(
                client,
                lambda: stages_with_secrets(client, context, submission, planned),
                run_name=group.run_name or group.group_id,
            )
            for stage in (p.stage for p in planned):
                folder = submission.checkpoint_dir(stage)
                if folder is not None:
                    self.log.info("Checkpoints of stage %s: %s", stage.task_key, folder)
            # When this run was made, on Airflow's clock: a stage try that was cleared (or
            # retried) after it re-runs its stage (``StageRerun``).
            context["ti"].xcom_push(key=SUBMITTED_AT_KEY, value=_now_ms())
            return {"run_id": record.run_id, "run_page_url": record.run_page_url}

    def stage_run(self, attempt: AirTaskRun, client: AirClient) -> tuple[RunRecord, bool]:
        """The run a try of one of this group's stages waits on, re-run first when the try
        asks for it (``StageRerun``); and whether its XComs were pushed already."""
        return StageRerun(attempt, client, self).run_record()

    def rerun_plan(self, context: Context, task_keys: Sequence[str]) -> list[PlannedStage]:
        """The stages ``task_keys`` only, rendered as the submit renders them, each depending
        only on the others re-run (the stages kept have succeeded)."""
        keep = set(task_keys)
        return [
            dataclasses.replace(
                planned,
                stage=dataclasses.replace(
                    planned.stage,
                    depends_on=tuple(d for d in planned.stage.depends_on if d in keep),
                ),
            )
            for planned in self._stage_plan(context, self.workflow_group())
            if planned.stage.task_key in keep
        ]


@dataclasses.dataclass(frozen=True)
class PlannedStage:
    """One stage of a workflow group as its submit task plans it: the stage's operator, its
    template fields rendered into a copy (the operator objects may be shared), and the core's
    ``Stage`` (its workload, task key, dependencies and ``run_if``; no secrets yet)."""

    operator: AirRunOperator
    rendered: dict[str, Any]
    stage: Stage


def stages_with_secrets(
    client: AirClient, context: Context, submission: Submission, planned: Sequence[PlannedStage]
) -> list[Stage]:
    """The planned stages as submitted: each stage's ``secret_env`` values under keys of
    ``submission`` (in the scope that stage names), the workloads carrying references only."""
    from airflow_air._openlineage import with_parent_job_env
    from airflow_air._secret_env import resolve_secret_env, secret_scope_of

    stages = []
    for each in planned:
        stage, rendered = each.stage, each.rendered
        workload = with_parent_job_env(stage.workload, context)
        references = rendered["secret_env"] or {}
        if references:
            workload = submission.prepare(
                client,
                workload,
                resolve_secret_env(references),
                scope=secret_scope_of(each.operator, rendered["secret_scope"]),
                stage=stage.task_key,
            )
        stages.append(dataclasses.replace(stage, workload=workload))
    return stages


# --- re-running stages ---------------------------------------------------------------------

SUBMITTED_AT_KEY = "air_submitted_at"  # the submit task's: when it made its run (Airflow's clock)
# The submit task's: its clear generation, which names its stages' checkpoint folders.
CHECKPOINT_EPOCH_KEY = "air_checkpoint_epoch"
RERUN_KEY = "air_rerun"  # a stage's: the stages it re-ran, where and when (``Rerun``)
# Task-instance states that end a try; a stage in any other state is waiting to run again.
_ENDED_TI_STATES = frozenset({"success", "failed", "upstream_failed", "skipped", "removed"})
_MAX_REPAIR_ROUNDS = 10  # a guard against a loop, not a real limit


def _now_ms() -> int:
    return int(time.time() * 1000)


def clear_time_ms(ti: Any) -> int | None:
    """When this try of the task instance was asked for, on Airflow's clock: Airflow 3 gives
    a task instance a new uuid7 id each time it is cleared or put up for retry
    (``TaskInstance.prepare_db_for_next_try``), and a uuid7 starts with its time in ms. None
    when the id is not a uuid7."""
    try:
        value = uuid.UUID(str(getattr(ti, "id", "")))
    except ValueError:
        return None
    return value.int >> 80 if value.version == 7 else None


@dataclasses.dataclass(frozen=True)
class Rerun:
    """What a stage try that re-ran stages left in its XCom (``RERUN_KEY``) for the other
    stages it re-ran: the run they now run in (the same run repaired, or a new run of only
    them), the group's run it descends from, and when (Airflow's clock)."""

    run_id: int
    run_page_url: str
    task_keys: tuple[str, ...]
    root_run_id: int
    at_ms: int
    repair_id: int | None = None
    # A new run: the stage task that submitted it, whose submission holds its secret keys.
    submitted_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "task_keys": list(self.task_keys)}

    @classmethod
    def from_json(cls, raw: Any) -> Rerun | None:
        if not isinstance(raw, Mapping):
            return None
        try:
            repair_id = raw.get("repair_id")
            return cls(
                run_id=int(raw["run_id"]),
                run_page_url=str(raw.get("run_page_url") or ""),
                task_keys=tuple(str(k) for k in raw["task_keys"]),
                root_run_id=int(raw["root_run_id"]),
                at_ms=int(raw["at_ms"]),
                repair_id=None if repair_id is None else int(repair_id),
                submitted_by=raw.get("submitted_by") or None,
            )
        except (KeyError, TypeError, ValueError):
            return None


def _kept(keys: Sequence[str]) -> str:
    if not keys:
        return "nothing else ran before"
    verb = "succeeded and is kept" if len(keys) == 1 else "succeeded and are kept"
    return f"{', '.join(keys)} {verb}"


class StageRerun:
    """The run a try of a workflow stage waits on: the group's run, or the newest run its
    stage was re-run in; re-running the stage first when this try was asked for (cleared,
    or retried) after its task in that run had failed.

    Re-running is one repair of the run (Jobs ``runs/repair``) of this stage and of every
    other stage of the group that did not succeed in the run and whose task instance waits
    to run again (the downstream stages cleared with it, a sibling cleared at the same
    time); a stage that succeeded is kept. Each try that re-runs stages records it
    (``Rerun``) in its XCom, so a stage it re-ran waits on its new task run instead of
    re-running it again. Two stage tries that read the run at once send the same
    ``latest_repair_id``: the platform takes one repair and refuses the other, whose try
    then finds its stage's new task run. Where the workspace refuses to repair the run, the
    try submits a new run of only those stages under its own submission (a retry after a
    worker crash gets that run back) and the stages it re-ran wait on that run.
    """

    def __init__(
        self, attempt: AirTaskRun, client: AirClient, submit: AirWorkflowSubmitOperator
    ) -> None:
        self.attempt = attempt
        self.client = client
        self.submit = submit
        self.task = attempt.task
        self.ti = attempt.context["ti"]
        self.stage = attempt.stage or self.task.task_id

    def run_record(self) -> tuple[RunRecord, bool]:
        """The run to wait on, and whether its XComs were pushed already (a new run)."""
        from airflow_air._generations import RunRecord, is_first_try
        from airflow_air.exceptions import AirConfigurationError
        from airflow_air.links import RUN_ID_KEY, RUN_PAGE_URL_KEY

        submit_id = self.submit.task_id
        root = self.ti.xcom_pull(task_ids=submit_id, key=RUN_ID_KEY)
        if root is None:
            raise AirConfigurationError(
                f"workflow task {submit_id!r} recorded no run_id; it must run (and succeed) "
                f"before stage {self.task.task_id!r}"
            )
        root_url = self.ti.xcom_pull(task_ids=submit_id, key=RUN_PAGE_URL_KEY) or ""
        rerun = self._newest_rerun(int(root))
        cleared = clear_time_ms(self.ti)
        if rerun is None:
            record = RunRecord(int(root), root_url, 0, 0)
        else:
            record = RunRecord(rerun.run_id, rerun.run_page_url, 0, 0)
            if rerun.submitted_by:  # a new run: its secret keys are that task's submission's
                self.attempt.use_submission_of(rerun.submitted_by)
            if cleared is None or rerun.at_ms >= cleared:  # re-run for this try
                how = f"repair {rerun.repair_id}" if rerun.repair_id is not None else "a new run"
                self.attempt.log.info(
                    "Stage %s re-runs in run %s (%s, with %s)",
                    self.stage,
                    rerun.run_id,
                    how,
                    ", ".join(rerun.task_keys),
                )
                return record, False
        if is_first_try(self.attempt.context):
            return record, False  # the run this try was scheduled for
        since = (
            rerun.at_ms
            if rerun is not None
            else int(self.ti.xcom_pull(task_ids=submit_id, key=SUBMITTED_AT_KEY) or 0)
        )
        if cleared is not None and since >= cleared:
            return record, False  # made after this try was asked for: its own
        return self._rerun(record, int(root))

    def _newest_rerun(self, root: int) -> Rerun | None:
        ids = [stage.task_id for stage in self.task.workflow_stages()]
        pulled = self.ti.xcom_pull(task_ids=ids, key=RERUN_KEY) if ids else None
        found = [Rerun.from_json(v) for v in (pulled if isinstance(pulled, list) else [pulled])]
        mine = [
            r
            for r in found
            if r is not None and r.root_run_id == root and self.stage in r.task_keys
        ]
        return max(mine, key=lambda r: r.at_ms) if mine else None

    def _rerun(self, record: RunRecord, root: int) -> tuple[RunRecord, bool]:
        from air_runtime import AirError

        log = self.attempt.log
        run_id = record.run_id
        for _ in range(_MAX_REPAIR_ROUNDS):
            state = self.client.get_run(run_id, include_history=True)
            mine = state.task(self.stage)
            if mine is None or not mine.is_terminal or mine.is_success:
                return record, False  # running again (another stage's repair), or succeeded
            if not state.is_terminal:
                log.info(
                    "Stage %s of run %s ended %s; the run is still going: re-running the "
                    "stage once it has ended",
                    self.stage,
                    run_id,
                    mine.result_state,
                )
                self.client.wait(run_id)
                continue
            rerun = self._stages_to_rerun(state)
            kept = [t.task_key for t in state.tasks if t.is_success]
            self._restore_secrets(rerun)
            try:
                repair_id = self.client.repair_run(
                    run_id, rerun, latest_repair_id=state.latest_repair_id
                )
            except AirError as refused:
                if refused.retryable:
                    raise
                newer = self.client.get_run(run_id, include_history=True)
                task = newer.task(self.stage)
                if task is not None and task.run_id != mine.run_id:
                    log.info(
                        "Run %s was repaired meanwhile: stage %s re-runs in it", run_id, self.stage
                    )
                    return record, False
                if not newer.is_terminal:
                    continue  # another repair is going: wait for it, then repair
                restored = self.attempt.submission
                if restored is not None and restored.scopes:  # no task of the run reads them
                    restored.attach(run_id).finish(self.client, newer)
                return self._resubmit(run_id, rerun, kept, root, str(refused)), True
            log.info("repairing run %s: re-running %s; %s", run_id, ", ".join(rerun), _kept(kept))
            self._remember(
                Rerun(run_id, record.run_page_url, tuple(rerun), root, _now_ms(), repair_id)
            )
            return record, False
        raise RuntimeError(f"run {run_id} kept changing while stage {self.stage} was re-run")

    def _restore_secrets(self, rerun: list[str]) -> None:
        """Write the ``secret_env`` values of the stages to re-run again, under the keys their
        task in the run reads: the run's keys were deleted when it ended, and a repaired task
        reads them again when its containers start. The stage that sees the repaired run end
        deletes them, as after any run."""
        from airflow_air._secret_env import resolve_secret_env, secret_scope_of

        stages = self.task.workflow_stages()
        if not any(s.secret_env for s in stages if (s.workflow_task_key or s.task_id) in rerun):
            return
        submission = self.attempt.submission or self.attempt.open_submission()
        for planned in self.submit.rerun_plan(self.attempt.context, rerun):
            references = planned.rendered["secret_env"] or {}
            if references:
                submission.store(
                    self.client,
                    resolve_secret_env(references),
                    scope=secret_scope_of(planned.operator, planned.rendered["secret_scope"]),
                    stage=planned.stage.task_key,
                )

    def _stages_to_rerun(self, state: RunState) -> list[str]:
        """This stage, and every other stage that did not succeed in the run and whose task
        instance waits to run again (without Airflow's task states: every downstream
        stage that did not succeed), in the order of the group."""
        stages = self.task.workflow_stages()
        waiting = self._waiting_task_ids([s.task_id for s in stages])
        if waiting is None:
            waiting = set(self.task.get_flat_relative_ids(upstream=False))
        chosen = []
        for stage in stages:
            key = stage.workflow_task_key or stage.task_id
            task = state.task(key)
            if key == self.stage or (
                stage.task_id in waiting and (task is None or not task.is_success)
            ):
                chosen.append(key)
        return chosen

    def _waiting_task_ids(self, task_ids: list[str]) -> set[str] | None:
        try:
            found = self.ti.get_task_states(
                dag_id=self.ti.dag_id, task_ids=task_ids, run_ids=[self.ti.run_id]
            )
        except Exception as exc:  # an older runtime: no task states
            self.attempt.log.info("Could not read the task states of the Dag run: %s", exc)
            return None
        states = found.get(self.ti.run_id) or {}
        return {
            task_id
            for task_id, ti_state in states.items()
            if str(getattr(ti_state, "value", ti_state) or "none") not in _ENDED_TI_STATES
        }

    def _resubmit(
        self, run_id: int, rerun: list[str], kept: list[str], root: int, why: str
    ) -> RunRecord:
        """A new run of only the stages ``rerun``, under this stage task's own submission."""
        from airflow_air._generations import RunRecord
        from airflow_air._task_run import TaskRun

        submit = self.submit
        group = submit.workflow_group()
        self.attempt.log.info(
            "Run %s cannot be repaired (%s): submitting a new run of %s; %s",
            run_id,
            why.splitlines()[0] if why else "refused",
            ", ".join(rerun),
            _kept(kept),
        )
        planned = submit.rerun_plan(self.attempt.context, rerun)
        own = TaskRun(self.task, self.attempt.context)
        own.log = self.attempt.log
        submission = own.open_submission()
        # The stages' folders of the run before: the epoch its submit task named them by.
        epoch = self.attempt.context["ti"].xcom_pull(
            task_ids=self.submit.task_id, key=CHECKPOINT_EPOCH_KEY
        )
        submission.checkpoint_epoch = None if epoch is None else str(epoch)
        found = own.own(
            self.client,
            lambda: stages_with_secrets(self.client, self.attempt.context, submission, planned),
            run_name=group.run_name or group.group_id,
        )
        # This try's keys are now those of the new run (``_finish`` deletes them).
        self.attempt.use_submission_of(self.task.task_id, submission, own_run=own.own_run)
        self._remember(
            Rerun(
                found.run_id,
                found.run_page_url,
                tuple(rerun),
                root,
                _now_ms(),
                submitted_by=self.task.task_id,
            )
        )
        return RunRecord(found.run_id, found.run_page_url, 0, 0)

    def _remember(self, rerun: Rerun) -> None:
        self.ti.xcom_push(key=RERUN_KEY, value=rerun.to_json())


__all__: Sequence[str] = ["AirWorkflowSubmitOperator", "AirWorkflowTaskGroup"]
