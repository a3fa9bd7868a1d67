"""One try of an ``AirRunOperator``: the Airflow side of one ``air_runtime.Submission``.

Only imported from ``execute`` (it pulls in the core client). The life of the submission
(secret keys, submit, outcome, deleting the keys) is the core's; this module adds what is
Airflow's, each step once and in order:

1. the generation to own (``airflow_air._generations``: the task state store, token probing),
   or, for a first try that leaves its submit to the trigger (``submit_in_triggerer``), the
   plan of its first generation;
2. the XComs and links of the run;
3. the wait: in the worker (streaming every node's log lines into the task log) or in the
   triggerer (``AirRunTrigger``), a run that has already ended being finished here without
   deferring (a trigger firing at once is what Airflow 3.3 can mistake for a killed task);
4. the outcome as Airflow shows it: the return value, the MLflow link, the GPU-hours XCom, or
   the exception that fails (or times out) the task.

The workflow group's submit task (``AirWorkflowSubmitOperator``) owns the run its stages
share through the same ``TaskRun``, and each stage is an ``AirTaskRun`` waiting for its own
task; the submit task also tells a stage's try which run that is, repairing it first when
the try was asked for after its stage failed (``airflow_air.workflow.StageRerun``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from air_runtime import (
    AirError,
    BudgetExceeded,
    FailurePolicy,
    MlflowLinkReader,
    RedactingLog,
    RetriesStopped,
    RunOutcome,
    RunStatus,
    Submission,
    Sweep,
    SweepBudgetSpent,
    WaitPolicy,
    checkpoint_volume,
    end_of_try_flow,
    sweep_budget,
)
from airflow_air._deferral import (
    configuration_errors_fail_fast,
    defer_timeout,
    first_poll_at,
    poll_interval_of,
    try_deadline,
)
from airflow_air._deployment import submission_key
from airflow_air._generations import RunRecord, first_try_generation, own_run
from airflow_air._secret_env import (
    redaction_references,
    secret_scope_of,
    submission_scopes,
    try_redactor,
)
from airflow_air.exceptions import AirConfigurationError
from airflow_air.hooks import AirHook, completed_log_lines, submits_in_triggerer
from airflow_air.links import (
    CHECKPOINT_DIR_KEY,
    CHECKPOINT_KEY,
    MLFLOW_URL_KEY,
    RUN_ID_KEY,
    RUN_PAGE_URL_KEY,
    LinkXComs,
    outcome_xcoms,
    return_value,
)

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context

    from air_runtime import (
        AirClient,
        Prices,
        Redactor,
        RunState,
        Stage,
        SubmissionPlan,
        Workload,
    )
    from airflow_air._logs import TaskLog
    from airflow_air.operators import AirRunOperator


T = TypeVar("T")


class StageRunner(Protocol):
    """What a stage's try needs of its group's submit task (``AirWorkflowSubmitOperator``)."""

    def stage_run(self, attempt: AirTaskRun, client: AirClient) -> tuple[RunRecord, bool]: ...


def gpu_budget_of(task: AirRunOperator) -> float | None:
    """The task's ``max_gpu_hours``, checked: a positive number or None."""
    budget = task.max_gpu_hours
    if budget is None:
        return None
    try:
        hours = float(budget)
    except (TypeError, ValueError):
        hours = 0.0
    if not hours > 0 or hours == float("inf"):
        raise AirConfigurationError(
            f"{task.task_id}: max_gpu_hours must be a positive number of GPU-hours, got {budget!r}"
        )
    return hours


def sweep_of(task: BaseOperator, context: Context, prices: Prices | None) -> Sweep | None:
    """The sweep the task's runs belong to when it has a ``sweep_gpu_hours_budget``: every
    run of its Dag run (``<dag>--<dag run>`` in their names, ``air_runtime._sweeps``),
    counted from the Dag run's start (a cleared Dag run starts again from its clear); the
    budget checked first (a bad one fails the try before any request)."""
    given = getattr(task, "sweep_gpu_hours_budget", None)
    try:
        budget = sweep_budget(given, f"{task.task_id}: sweep_gpu_hours_budget")
    except AirError as error:
        raise AirConfigurationError(str(error)) from None
    if budget is None:
        return None
    ti, dag_run = context["ti"], context.get("dag_run")
    started = None
    for name in ("start_date", "queued_at", "run_after"):
        started = started or getattr(dag_run, name, None)
    return Sweep(
        label=f"{ti.dag_id}/{ti.run_id}",
        pipeline=ti.dag_id,
        runs=(ti.run_id,),
        budget=budget,
        since_ms=int(started.timestamp() * 1000) if started is not None else None,
        prices=prices,
    )


def failure_policy_of(task: AirRunOperator) -> FailurePolicy:
    """The task's ``failure_policy`` (``stop_deterministic_retries`` setting its
    deterministic action), checked: a bad class or action fails the try before submit."""
    try:
        return FailurePolicy.of(task.failure_policy, task.stop_deterministic_retries)
    except (TypeError, ValueError) as error:
        raise AirConfigurationError(f"{task.task_id}: {error}") from None


def checkpoint_volume_of(task: BaseOperator) -> str | None:
    """The task's ``checkpoint_volume`` (``""``: none), else its connection's; checked."""
    volume = getattr(task, "checkpoint_volume", None)
    if volume is None:
        volume = AirHook(task.databricks_conn_id).checkpoint_volume()  # type: ignore[attr-defined]
    if not volume:
        return None
    try:
        return checkpoint_volume(volume)
    except AirError as error:
        raise AirConfigurationError(f"{task.task_id}: {error}") from None


def checkpoint_code_version_of(task: BaseOperator, context: Context) -> str | None:
    """The code version that names the task's checkpoint folders: the operator's
    ``checkpoint_code_version`` (``""``: none, the folders outlive code changes), else the
    version of its Dag (Airflow 3 makes a new one when the Dag's code changes)."""
    version = getattr(task, "checkpoint_code_version", None)
    if version is None:
        version = getattr(context["ti"], "dag_version_id", None)
    return str(version) if version else None


class TaskRun:
    """What every try that submits shares (an ``AirRunOperator``'s, the workflow group's
    submit task's): its submission, in this deployment's namespace, the run it owns, and
    what the operator reads of the try (its ``try_run``): the run to cancel when killed,
    the lineage, the links' XComs."""

    def __init__(
        self, task: BaseOperator, context: Context, submit_task_id: str | None = None
    ) -> None:
        self.task = task
        self.context = context
        # The submission is the submitting task's (a workflow stage shares its group's).
        self.submit_task_id = submit_task_id or task.task_id
        self.log: TaskLog = task.log
        self.submission: Submission | None = None
        # The run was submitted by this try (not an earlier try's, reattached): it has just
        # started, so there is no point asking whether it has already ended.
        self.own_run = False
        # The run this try follows, once known (``run_to_cancel``).
        self.run_id: int | None = None
        # What this try knows of its run (the return value's fields), for OpenLineage.
        self.lineage: dict[str, Any] | None = None
        # No URL yet: Airflow writes none of our links (``links.LinkXComs``).
        self.links = LinkXComs()
        # The sweep whose budget its runs share (``sweep_of``), once the try has read it.
        self.sweep: Sweep | None = None
        self._prices: Prices | None = None
        self._prices_read = False

    def redact(self, text: str) -> str:
        return text

    def submission_key_text(self) -> str:
        """Who cancels when this try cancels its run (the cause kept next to the run)."""
        submission = self.submission or self.open_submission()
        return submission.key.describe()

    def run_to_cancel(self) -> int | None:
        """The run a kill cancels: the one this try follows, or the one its submission
        knows from the submit's answer on (a kill in between still cancels it)."""
        if self.run_id is not None:
            return self.run_id
        return self.submission.run_id if self.submission is not None else None

    @property
    def prices(self) -> Prices | None:
        """The connection's prices (``AirHook.prices``), read once per try."""
        if not self._prices_read:
            self._prices = AirHook(self.task.databricks_conn_id).prices()  # type: ignore[attr-defined]
            self._prices_read = True
        return self._prices

    def read_sweep(self) -> Sweep | None:
        """The try's sweep (``sweep_of``), checked before any request to the workspace."""
        self.sweep = sweep_of(self.task, self.context, self.prices)
        return self.sweep

    def open_submission(self) -> Submission:
        key = submission_key(self.context, self.submit_task_id)
        volume = checkpoint_volume_of(self.task)
        self.submission = Submission(
            key,
            log=self.log,
            redact=self.redact,
            checkpoint_volume=volume,
            code_version=checkpoint_code_version_of(self.task, self.context) if volume else None,
            sweep=self.sweep,
        )
        return self.submission

    def use_submission_of(
        self,
        submit_task_id: str,
        submission: Submission | None = None,
        *,
        own_run: bool | None = None,
    ) -> None:
        """Follow the submission of ``submit_task_id`` from now on (``submission``: already
        open): a stage re-run in a new run, whose secret keys are that task's."""
        self.submit_task_id, self.submission = submit_task_id, submission
        if own_run is not None:
            self.own_run = own_run

    def own(
        self,
        client: AirClient,
        prepare: Callable[[], Workload | Sequence[Stage]],
        *,
        run_name: str | None = None,
    ) -> RunRecord:
        """The run this try owns: an earlier try's (reattached), or a new generation's,
        submitted with what ``prepare`` gives (secrets are resolved only when a run is
        submitted)."""
        submission = self.submission or self.open_submission()
        found, self.own_run = own_run(
            self.context, self.task, client, submission, prepare, log=self.log, run_name=run_name
        )
        submission.attach(found.run_id, found.run_page_url)
        self.push_run_xcoms(found.run_id, found.run_page_url)
        self.follow(found)
        return found

    def follow(self, record: RunRecord, task_key: str | None = None) -> None:
        """``record``'s run (``task_key``: a stage of it) is the one this try waits on, and
        cancels when killed."""
        self.run_id = record.run_id
        self.lineage = {"run_id": record.run_id, "run_page_url": record.run_page_url}
        if task_key is not None:
            self.lineage["task_key"] = task_key

    # The XComs a try pushes (``airflow_air.links`` names them and says what they hold).

    def push_run_xcoms(self, run_id: int, run_page_url: str) -> None:
        """Make the run id and page visible at once (also as the live "AI Runtime run" link).
        A worker run that ends within moments (it defers, or finishes a run that has ended)
        leaves the page to Airflow's end-of-try link write: writing it here as well would be
        a second request for the same value. The MLflow link's XCom is written once its URL
        is known."""
        ti = self.context["ti"]
        if self.worker_run_ends_soon:
            self.links.push(ti, {RUN_ID_KEY: run_id})
            self.links.leave(RUN_PAGE_URL_KEY, run_page_url)
        else:  # the page's XCom is also the link's xcom_key
            self.links.push(ti, {RUN_ID_KEY: run_id, RUN_PAGE_URL_KEY: run_page_url})

    def push_outcome_xcoms(self, outcome: RunOutcome) -> dict[str, Any]:
        """Push ``links.outcome_xcoms`` from a worker; returns the return value."""
        self.links.push(self.context["ti"], outcome_xcoms(outcome))
        return return_value(outcome)

    @property
    def worker_run_ends_soon(self) -> bool:
        """Whether this worker run ends right after the submit (so Airflow writes the
        links' XComs within moments) rather than waiting for the run here."""
        return False


class AirTaskRun(TaskRun):
    """One try of ``task`` (an ``AirRunOperator``): own a run, wait for it (or for its stage),
    and report how it ended."""

    task: AirRunOperator

    def __init__(self, task: AirRunOperator, context: Context) -> None:
        super().__init__(task, context, task.workflow_submit_task_id)
        self.stage = task.workflow_task_key if task.workflow_submit_task_id else None
        # This try's redactor (``redactor``); it holds the resolved secret values, so it
        # lives on the try, never on a field of the operator that could be rendered or pushed.
        self._redactor: Redactor | None = None

    @property
    def worker_run_ends_soon(self) -> bool:
        task = self.task
        return bool(task.deferrable or not task.wait_for_termination)

    def push_run_xcoms(self, run_id: int, run_page_url: str) -> None:
        """The run's XComs and, with a checkpoint volume, where this task's checkpoints are
        (``checkpoint_dir``, also in the log): the same folder for every try."""
        super().push_run_xcoms(run_id, run_page_url)
        submission = self.submission
        # A stage's folder is its group's to tell (the submit task logs each).
        folder = submission.checkpoint_dir() if submission and self.stage is None else None
        if folder is None:
            return
        self.links.push(self.context["ti"], {CHECKPOINT_DIR_KEY: folder})
        self.log.info("Checkpoints of this task: %s (AIRO_CHECKPOINT_DIR)", folder)

    def redactor(self, client: AirClient | None = None, *, check: bool = False) -> Redactor:
        """Every secret value this try may see (``_secret_env.try_redactor``), looked up on
        first use: a try about to submit checks its references (``check``); a resumed try
        looks them up again."""
        if self._redactor is None:
            self._redactor = try_redactor(self.task, client, check=check)
        return self._redactor

    def redact(self, text: str) -> str:
        return self.redactor()(text)

    # --- entry points -------------------------------------------------------------------

    def execute(self) -> Any:
        task = self.task
        with (
            configuration_errors_fail_fast(self.redact),
            AirHook(task.databricks_conn_id).get_client() as client,
        ):
            gpu_budget_of(task)  # refused before any request to the workspace
            failure_policy_of(task)
            self.read_sweep()
            if self.stage is not None:
                self._open(client)
                record = self._stage_run(client)
            else:
                workload = self._workload()  # refused before any request to the workspace
                # The submit's first request goes out while the deployment namespace is read.
                client.prefetch_identity()
                self._open(client)
                plan, why = self._refused_if_spent(lambda: self._trigger_plan(client, workload))
                if plan is not None:
                    self.log.info(
                        "Deferring before the submit: the triggerer submits run %s", plan.run_name
                    )
                    self._defer(poll_interval_of(task, client), plan=plan)
                if why:
                    self.log.info("Submitting in the worker: %s", why)
                record = self._refused_if_spent(
                    lambda: self.own(client, lambda: self._with_secrets(client, workload))
                )
            self.follow(record, self.stage)
            if self.stage is None and not task.wait_for_termination:
                return {"run_id": record.run_id, "run_page_url": record.run_page_url}
            return self._wait(client, record)

    def resume(self, payload: Mapping[str, Any] | None) -> Any:
        """``execute_complete``: the trigger's event (``RunEvent``; a stored event of an
        earlier version reads the same)."""
        from airflow.sdk.exceptions import AirflowException

        from airflow_air._run_event import RunEvent

        if not payload:
            raise AirflowException("the trigger ended without an event")
        event = RunEvent.from_payload(payload)
        outcome = event.outcome
        if outcome.cost is None and outcome.gpu_hours_by_type:
            outcome = outcome.priced(self.prices)
        if not outcome.run_id:  # the trigger's submit made no run (submit_in_triggerer)
            message = self.redact(outcome.message or "the trigger made no run")
            if event.refused:  # as a refusal in a worker: no retry can fix it
                raise AirConfigurationError(message)
            raise AirflowException(message)
        self.links = event.links  # what the trigger wrote itself
        if self.links.run_pending:  # the trigger submitted but could not write them
            self.push_run_xcoms(outcome.run_id, outcome.run_page_url)
        if event.submission:  # the one the deferring try wrote keys for
            self.submission = Submission.from_json(
                event.submission, log=self.log, redact=self.redact
            )
        # The run's lines were not streamed here: copied now (but those the trigger showed),
        # unless the trigger could not ask the workspace at all.
        return self._complete(
            outcome,
            copy_lines=outcome.status is not RunStatus.ERROR,
            shown=dict(event.shown_lines) if event.shown_lines else None,
        )

    def cancel_deferred(self, why: str) -> None:
        """Airflow ended this try's deferral without an event (``__fail__``: the trigger
        timed out or crashed): cancel the run it deferred on, unless it has ended."""
        try:  # pushed by this task instance right after the submit (a stage's too)
            pulled = self.context["ti"].xcom_pull(task_ids=self.task.task_id, key=RUN_ID_KEY)
            run_id = int(pulled) if pulled is not None else None
        except Exception as exc:
            self.task.log.warning("Could not find the run to cancel: %s", exc)
            return
        try:
            with AirHook(self.task.databricks_conn_id).get_client() as client:
                if run_id is None:
                    run_id = self._trigger_submitted_run(client)
                if run_id is None:
                    return
                if client.get_run(run_id).is_terminal:
                    return
                submission = self.submission or self.open_submission()
                submission.attach(run_id).cancel(
                    client,
                    cause=submission.cause(
                        "orchestrator", f"the task's deferral ended without an event: {why}"
                    ),
                )
            self.task.log.warning("Cancelled run %s: the deferral ended with %s", run_id, why)
        except Exception as exc:
            self.task.log.warning("Could not cancel run %s: %s", run_id, self.redact(str(exc)))

    def _trigger_submitted_run(self, client: AirClient) -> int | None:
        """The run of a try that left its submit to the trigger and knows no run id (the
        trigger never wrote it): sending the same plan again returns that run, or makes it
        now, so it is cancelled either way and no late submit can start it unseen."""
        plan, _ = self._trigger_plan(client, self._workload())
        if plan is None:
            return None
        submitted = client.submit(plan)
        self.push_run_xcoms(submitted.run_id, submitted.run_page_url)
        return submitted.run_id

    # --- 1. the run -------------------------------------------------------------------------

    def _trigger_plan(
        self, client: AirClient, workload: Workload
    ) -> tuple[SubmissionPlan | None, str]:
        """The first generation's plan when this try leaves the submit to the trigger
        (``submit_in_triggerer``); else None and why not ("" when the option is off)."""
        task = self.task
        if not (
            task.deferrable
            and task.wait_for_termination
            and self.stage is None
            and submits_in_triggerer(task.submit_in_triggerer)
        ):
            return None, ""
        generation = first_try_generation(self.context, task)
        if generation is None:
            return None, "a retry looks for the run of an earlier try first"
        if task.secret_env:
            return None, "its secret_env values are stored from the worker"
        submission = self.submission or self.open_submission()
        plan = submission.plan(client, workload, generation)
        if plan.code_snapshots:
            return None, "its code snapshot is packed on this machine"
        if plan.required_images():
            return None, "its Docker image is registered from this machine"
        return plan, ""

    def _refused_if_spent(self, submitting: Callable[[], T]) -> T:
        """``submitting()``, unless the sweep's budget is spent: then nothing is submitted
        and the try fails without retries, saying what was spent and by whom (the core has
        cancelled the sweep's runs still going)."""
        try:
            return submitting()
        except SweepBudgetSpent as refused:
            message = self.redact(str(refused))
            self.log.warning("%s", message)
            raise AirConfigurationError(message) from None

    def _open(self, client: AirClient) -> None:
        """This try's redaction (every secret value it may see), log and submission."""
        self.log = RedactingLog(self.task.log, self.redactor(client, check=True))
        self.open_submission()

    def _workload(self) -> Workload:
        from airflow_air._openlineage import with_parent_job_env
        from airflow_air._workload_source import load_task_workload

        return with_parent_job_env(load_task_workload(self.task), self.context)

    def _with_secrets(self, client: AirClient, workload: Workload) -> Workload:
        """``secret_env`` values under keys of this submission alone; the workload gets
        ``scope/key`` only."""
        from airflow_air._secret_env import resolve_secret_env

        if not self.task.secret_env:
            return workload
        assert self.submission is not None
        values = resolve_secret_env(self.task.secret_env)
        self.redactor().add(*values.values())
        return self.submission.prepare(client, workload, values, scope=secret_scope_of(self.task))

    def _stage_run(self, client: AirClient) -> RunRecord:
        """A workflow stage follows the run its group's submit task started, or the one its
        stage was re-run in; a try asked for after its stage failed re-runs it first
        (``airflow_air.workflow.StageRerun``)."""
        # The group's submit task knows its stages (``AirWorkflowSubmitOperator.stage_run``).
        submit = cast("StageRunner", self.task.dag.get_task(str(self.task.workflow_submit_task_id)))
        record, pushed = submit.stage_run(self, client)
        if not pushed:
            self.push_run_xcoms(record.run_id, record.run_page_url)
        self.log.info("Stage %s of run %s: %s", self.stage, record.run_id, record.run_page_url)
        return record

    # --- 3. the wait ------------------------------------------------------------------------

    def _wait(self, client: AirClient, record: RunRecord) -> Any:
        """Wait for the run (or stage): in the triggerer when deferrable, else in the worker."""
        if self.task.deferrable:
            # A run this try has just submitted is waited on in the triggerer at once; one
            # reattached (or a stage's) may have ended already.
            state = None if self.own_run else client.get_run(record.run_id)
            if state is not None and state.has_ended(self.stage):
                self.task.log.info(
                    "Run %s%s has already ended; finishing without deferring",
                    record.run_id,
                    f" (stage {self.stage})" if self.stage else "",
                )
                outcome = self._outcome(client, state, record)
                return self._complete(outcome, client, state, copy_lines=True)
            self._defer(poll_interval_of(self.task, client), record)
        return self._wait_in_worker(client, record)

    def _wait_in_worker(self, client: AirClient, record: RunRecord) -> Any:
        from airflow_air._logs import wait_logging

        notes: list[str] = []
        try:
            state = wait_logging(
                client,
                record.run_id,
                self.log,
                self.wait_policy(),
                poll_interval=self.task.poll_interval,  # None: the client's (``[air]``)
                stream=self.task.stream_logs,
                on_stop=lambda stopped: notes.append(
                    self._cancel_stopped_run(client, record, stopped)
                ),
                on_update=self._mlflow_link(client),
            )
        except (BudgetExceeded, RetriesStopped) as stopped:
            note = notes[0] if notes else self._cancel_stopped_run(client, record, stopped)
            return self._complete(self._stopped_outcome(record, stopped, note), client)
        return self._complete(self._outcome(client, state, record), client, state)

    def wait_policy(self, deadline: float | None = None) -> WaitPolicy:
        """What ends this try's wait besides the run's end: its stage, the task's budget and
        failure policy, its sweep (``read_sweep``), the try's ``deadline`` (a trigger's)."""
        return WaitPolicy(
            task_key=self.stage,
            deadline=deadline,
            max_gpu_hours=gpu_budget_of(self.task),
            failure_policy=failure_policy_of(self.task),
            sweep=self.sweep,
        )

    def _mlflow_link(self, client: AirClient) -> Callable[[RunState], None]:
        """The MLflow link as soon as the run has one (``air_runtime.MlflowLinkReader``), read on
        the state changes this wait sees anyway; never fails the wait."""
        reader = MlflowLinkReader(self.stage)
        ti = self.context["ti"]

        def on_update(state: RunState) -> None:
            task_run = reader.due(state)
            if task_run is None:
                return
            try:
                url = reader.read(client, task_run)
                if url:
                    self.links.push(ti, {MLFLOW_URL_KEY: url})
            except Exception as exc:  # a convenience link: the wait goes on
                self.task.log.info(
                    "Could not write the MLflow link of run %s: %s", state.run_id, exc
                )

        return on_update

    def _cancel_stopped_run(
        self, client: AirClient, record: RunRecord, stopped: BudgetExceeded | RetriesStopped
    ) -> str:
        """Cancel the run that passed its ``max_gpu_hours`` or its sweep's budget, or whose
        retries were stopped (a stage's cancels its whole run: the platform cancels runs, not
        tasks; a spent sweep's cancels the sweep's other runs still going too), keeping why;
        how that went, for the message."""
        submission = self.submission or self.open_submission()
        try:
            submission.attach(record.run_id, record.run_page_url).cancel(
                client, cause=submission.stop_cause(stopped)
            )
        except AirError as error:
            return f"; cancelling run {record.run_id} failed: {self.redact(str(error))}"
        return "; cancelled"

    def _stopped_outcome(
        self, record: RunRecord, stopped: BudgetExceeded | RetriesStopped, note: str
    ) -> RunOutcome:
        """The outcome of a run cancelled over its budget, or because its retries could not
        help."""
        self.log.warning("%s%s", stopped, note)
        return RunOutcome.stopped(
            stopped, record.run_id, record.run_page_url, note, self.stage
        ).priced(self.prices)

    def _defer(
        self,
        poll_interval: float,
        record: RunRecord | None = None,
        *,
        plan: SubmissionPlan | None = None,
    ) -> None:
        """Defer on ``record``'s run, or on ``plan``, which the trigger submits first."""
        from airflow_air.triggers import AirRunTrigger

        task = self.task
        deadline = try_deadline(task, self.context)
        # A success may end the task in the triggerer (one worker run instead of two). The
        # submission goes with the trigger when it has secret keys: a trigger that ends the
        # task deletes them itself (``Submission.afinish``), and a resume event hands it back
        # to the worker that does, so the keys deleted are the ones this try wrote, whatever
        # the namespace reads later.
        why_worker = task.worker_finish_reason(self.stage)
        if why_worker is not None:
            self.log.info("A success resumes in a worker: %s", why_worker)
        # A planned run stores no secret keys (``_trigger_plan``).
        with_keys = (
            self._submission_with_keys(record.run_id, record.run_page_url) if record else None
        )
        submission = with_keys.to_json() if with_keys is not None else None
        task.defer(
            trigger=AirRunTrigger(
                record.run_id if record is not None else None,
                run_page_url=record.run_page_url if record is not None else "",
                plan=plan.to_json() if plan is not None else None,
                databricks_conn_id=task.databricks_conn_id,
                poll_interval=poll_interval,
                wait=self.wait_policy(deadline).to_json(),
                cancel_on_kill=task.cancel_on_kill,
                first_poll_at=first_poll_at(),
                # References only: the triggerer looks the values up itself to redact them.
                secret_env=redaction_references(task) or None,
                finish_in_triggerer=why_worker is None,
                push_return_value=bool(task.do_xcom_push),
                submission=submission,
                stream_logs=task.stream_logs,
                cancelled_by=self.submission_key_text(),
                prices=self.prices.to_json() if self.prices is not None else None,
            ),
            method_name="execute_complete",
            timeout=defer_timeout(deadline),
        )

    # --- 4. the outcome ---------------------------------------------------------------------

    def _outcome(self, client: AirClient, state: RunState, record: RunRecord) -> RunOutcome:
        outcome = RunOutcome.read(client, state, self.stage)
        return dataclasses.replace(
            outcome, run_page_url=record.run_page_url or outcome.run_page_url
        ).priced(self.prices)

    def _complete(
        self,
        outcome: RunOutcome,
        client: AirClient | None = None,
        state: RunState | None = None,
        *,
        copy_lines: bool = False,
        shown: dict[str, int] | None = None,
    ) -> Any:
        """The end of the try: the core's (``_end_try``), then the outcome as Airflow shows
        it (XComs, the newest checkpoint, the return value or the exception)."""
        from airflow.sdk.exceptions import (
            AirflowException,
            AirflowFailException,
            AirflowTaskTimeout,
        )

        from airflow_air.exceptions import AirRunFailedError

        task = self.task
        self.run_id = outcome.run_id
        self._end_try(outcome, client, state, copy_lines and task.stream_logs, shown)
        result = self.push_outcome_xcoms(outcome)
        if outcome.ended:
            self._show_newest_checkpoint(client)
        self.lineage = {**result, "mlflow_run_url": outcome.mlflow_run_url}
        outcome = dataclasses.replace(outcome, message=self.redact(outcome.message))
        if outcome.status is RunStatus.SUCCESS:
            task.log.info("%s", outcome.summary())
            return result
        if outcome.status is RunStatus.FAILED:
            raise AirRunFailedError(
                outcome.message,
                run_id=outcome.run_id,
                result_state=outcome.result_state,
                run_page_url=outcome.run_page_url,
            )
        if outcome.status is RunStatus.TIMEOUT:
            raise AirflowTaskTimeout(outcome.message)
        if outcome.status in RunOutcome.STOPPED_STATUSES:  # a retry would spend again, for nothing
            raise AirflowFailException(outcome.message)
        raise AirflowException(outcome.message or f"waiting on run {outcome.run_id} failed")

    def _show_newest_checkpoint(self, client: AirClient | None) -> None:
        """Where the next run of this task resumes: the newest checkpoint in its folder, in
        the log and as the ``checkpoint`` XCom (a stage's group tells its stages' folders).
        Best effort; never fails the task."""
        if self.stage is not None:
            return
        submission = self.submission or self.open_submission()
        if submission.checkpoint_volume is None:
            return
        try:
            if client is not None:
                checkpoint = submission.newest_checkpoint(client)
            else:
                with AirHook(self.task.databricks_conn_id).get_client() as own:
                    checkpoint = submission.newest_checkpoint(own)
        except Exception as exc:
            self.task.log.warning("Could not list this task's checkpoints: %s", exc)
            return
        if checkpoint is None:
            self.task.log.info("No checkpoint in %s yet", submission.checkpoint_dir())
            return
        self.links.push(self.context["ti"], {CHECKPOINT_KEY: checkpoint.to_dict()})
        self.task.log.info(
            "Newest checkpoint of this task: %s (%s)", checkpoint.describe(), checkpoint.path
        )

    def _submission_with_keys(self, run_id: int, run_page_url: str) -> Submission | None:
        """This try's submission of ``run_id`` with every scope its run's stages write secret
        keys to (a reattached or resumed try wrote nothing itself); None when there are none."""
        scopes = submission_scopes(self.task, self.context)
        if not scopes:
            return None
        submission = self.submission or self.open_submission()
        submission.scopes.extend(s for s in scopes if s not in submission.scopes)
        return submission.attach(run_id, run_page_url)

    def _end_try(
        self,
        outcome: RunOutcome,
        client: AirClient | None,
        state: RunState | None,
        copy_lines: bool,
        shown: dict[str, int] | None,
    ) -> None:
        """The core's end of a try (``air_runtime.end_of_try_flow``): the run's lines into
        the task log when asked (``LogCopy``), then, once the run (for a stage: its whole
        run) ended, the keys its ``secret_env`` values were written to deleted. Best effort;
        never fails the task."""
        from airflow_air._logs import LogCopy

        try:
            submission = (
                self._submission_with_keys(outcome.run_id, outcome.run_page_url)
                if outcome.ended
                else None
            )
            if not copy_lines and submission is None:
                return
            with contextlib.ExitStack() as stack:
                if client is None:  # a resumed try: its own client
                    client = stack.enter_context(AirHook(self.task.databricks_conn_id).get_client())
                    self.log = RedactingLog(self.task.log, self.redactor(client))
                copy = (
                    LogCopy(self.log, outcome.run_id, self.stage, completed_log_lines(), shown)
                    if copy_lines
                    else None
                )
                ended = client.run_flow(
                    lambda core: end_of_try_flow(
                        core,
                        outcome,
                        state=state,
                        task_key=self.stage,
                        lines=copy.add if copy is not None else None,
                        submission=submission,
                    )
                )
        except Exception as exc:
            self.task.log.warning("Could not end the try on run %s: %s", outcome.run_id, exc)
            return
        if ended.lines_error is not None:
            self.log.info(
                "Could not copy the logs of run %s: %s", outcome.run_id, ended.lines_error
            )
