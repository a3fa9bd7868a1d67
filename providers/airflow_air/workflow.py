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

Re-running: the run is one unit. Clear the whole group (or the submit task with its
downstream tasks) to start a new run; clearing only a stage waits on the same run again.
Killing a stage task cancels the whole run when ``cancel_on_kill`` (the platform cancels runs,
not single tasks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
from airflow.sdk import BaseOperator, TaskGroup

from airflow_air.links import AirRunLink
from airflow_air.operators import DEFAULT_CONN_ID, AirRunOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

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
    run back, a clear starts a new one. Returns ``{"run_id", "run_page_url"}``.
    """

    ui_color = "#ffd8be"
    operator_extra_links = (AirRunLink(),)

    def __init__(self, *, databricks_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.databricks_conn_id = databricks_conn_id
        self._lineage_result: dict[str, Any] | None = None
        # The extra link's URL of this try (airflow_air._task_run.TaskRun.remember_url).
        self.air_link_urls: dict[str, str] = {}

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The submitted run as OpenLineage run facets (each stage reports its own datasets)."""
        from airflow_air._openlineage import operator_lineage

        return operator_lineage(None, self._lineage_result, host=None)

    def _group(self) -> AirWorkflowTaskGroup:
        group = self.task_group
        while group is not None and not isinstance(group, AirWorkflowTaskGroup):
            group = group.parent_group
        if group is None:
            from airflow_air.exceptions import AirConfigurationError

            raise AirConfigurationError(f"{self.task_id} is not inside an AirWorkflowTaskGroup")
        return group

    def _stage_plan(
        self, context: Context, group: AirWorkflowTaskGroup
    ) -> list[tuple[Any, dict[str, Any], Any]]:
        """(operator, rendered fields, Stage) per stage, workloads rendered and validated; no secrets yet."""
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
            (
                stage,
                rendered,
                Stage(
                    task_key=task_key,
                    workload=stage.load_workload(rendered["workload"], rendered["overrides"]),
                    depends_on=depends_on,
                    run_if=run_if,
                ),
            )
            for stage, rendered, task_key, depends_on, run_if in planned
        ]

    def execute(self, context: Context) -> Any:
        from airflow_air._openlineage import with_parent_job_env
        from airflow_air._task_run import TaskRun, configuration_errors_fail_fast, secret_scope_of
        from airflow_air.hooks import AirHook

        group = self._group()
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
                    for _, _, stage in planned
                ),
            )
            # One submission for the run the stages share; each stage's values under keys
            # of its own (``stage``), in the scope that stage names.
            run = TaskRun(self, context)
            submission = run.open_submission()

            def with_secrets() -> list[Any]:
                from airflow_air._secret_env import resolve_secret_env

                stages = []
                for op, rendered, stage in planned:
                    workload = with_parent_job_env(stage.workload, context)
                    references = rendered["secret_env"] or {}
                    if references:
                        workload = submission.prepare(
                            client,
                            workload,
                            resolve_secret_env(references),
                            scope=secret_scope_of(op, rendered["secret_scope"]),
                            stage=stage.task_key,
                        )
                    stages.append(dataclasses.replace(stage, workload=workload))
                return stages

            record = run.own(client, with_secrets, run_name=group.run_name or group.group_id)
            self._lineage_result = {"run_id": record.run_id, "run_page_url": record.run_page_url}
            return self._lineage_result


__all__: Sequence[str] = ["AirWorkflowSubmitOperator", "AirWorkflowTaskGroup"]
