"""The life of one submission, for every orchestrator: the one place it is written.

A *submission* is what one orchestrator task instance (an Airflow task and map index, a
Dagster step and partition) asks of the workspace: one run, possibly one of several
*generations* (a retry after a failed run submits a new generation; a retry after a crashed
worker gets the same one back). Its life:

1. ``prepare``: delete the secret keys earlier runs of the same task left behind once their
   runs ended (the *sweep*), write this submission's orchestrator-held values under keys of
   its own, and rewrite the workload to carry ``scope/key`` references only;
2. ``submit`` a generation (its idempotency token comes from the key), then mark the keys
   with the run that reads them; or ``plan`` it here and send the plan from elsewhere (an
   Airflow trigger), which the token makes as safe to repeat as a submit;
3. read the ``outcome`` of the run, or of one of its tasks (a workflow stage ends before its
   run does);
4. ``finish``: delete the keys, but only once the *whole* run has ended (the platform reads
   them whenever a container starts, platform retries included); or ``cancel`` the run.

The orchestrators keep only what is theirs: where the generation comes from, how a value is
looked up, how an outcome is shown. Housekeeping (sweep, mark, delete) is best effort: a
failure is a warning and the keys are left to the next run's sweep or ``airo secrets
prune``; storing a value is not (the run would start without it).

Every step is a flow of the client core, so ``AirClient`` and ``AsyncAirClient`` drive the
same code: ``finish`` in a worker and ``afinish`` in an Airflow triggerer do the same thing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from ._checkpoints import (
    ENV_CHECKPOINT_DIR,
    Checkpoint,
    CheckpointIdentity,
    checkpoint_volume,
)
from ._errors import AirError, BudgetExceeded, RetriesStopped, RunTimeout
from ._run_names import PartitionRange, compose_run_name, encode_name_part
from ._run_names import short_run as short_run
from ._states import RunState, TaskState, mlflow_ids, mlflow_run_url
from ._sweeps import Prices, Sweep, SweepBudgetSpent
from ._wait_policy import WaitPolicy
from .client import _cancel_causes, _checkpoint_folders, _runs, _secrets, _submit
from .client._cancel_causes import CancelCause
from .client._core import ClientCore, Flow, LogRecord, consume
from .client._secrets import SubmissionSecrets
from .plan import make_idempotency_token

if TYPE_CHECKING:
    from .client import AirClient, AsyncAirClient, SubmittedRun
    from .plan import Stage, SubmissionPlan
    from .workload import Workload

T = TypeVar("T")

# A run whose tasks have all ended is itself ended moments later: ``finish`` waits this long
# for it before leaving the keys to a later look.
RUN_END_WAIT_S = 60.0  # a bound, not a delay: the wait ends when the run does
_RUN_END_POLL_S = 0.5


class SubmissionLog(Protocol):
    """Where housekeeping lines go (one formatted message each): a ``logging.Logger``, an
    Airflow task log, a Dagster step's ``context.log``."""

    def info(self, message: str, /) -> Any: ...

    def warning(self, message: str, /) -> Any: ...


class _Silent:
    def info(self, message: str, /) -> None:
        return None

    def warning(self, message: str, /) -> None:
        return None


SILENT = _Silent()


def _keep(text: str) -> str:
    return text


# --- the key ------------------------------------------------------------------------------

# The orchestrator ids every rank of a submission's run gets (plain variables, next to the
# workload's own: the author's value of the same name wins).
ENV_ORCHESTRATOR = "AIRO_ORCHESTRATOR"
ENV_PIPELINE = "AIRO_PIPELINE"
ENV_ORCHESTRATOR_RUN_ID = "AIRO_ORCHESTRATOR_RUN_ID"
ENV_TASK = "AIRO_TASK"
ENV_MAP_INDEX = "AIRO_MAP_INDEX"
ENV_PARTITION_KEY = "AIRO_PARTITION_KEY"
ENV_STAGE = "AIRO_STAGE"  # a workflow stage's task key (the key's task is the submitting one)


@dataclass(frozen=True)
class SubmissionKey:
    """What names one submission: the idempotency token of each generation and the secret
    key names derive from it, so two deployments, runs, tasks or map indices / partitions
    never share either.

    ``namespace`` is the deployment's (an Airflow deployment, a Dagster instance): without
    it two deployments sharing a workspace would get each other's runs back."""

    orchestrator: str
    namespace: str
    pipeline: str
    run: str
    task: str
    index: int | str | None = None  # map index (Airflow) or partition (Dagster)
    # The partitions the run trains, when the index is not simply one partition key (a
    # range; a run planned without rows its lineage kept): what its name shows instead.
    partitions: PartitionRange | None = field(default=None, compare=False)

    def idempotency_token(self, generation: int | str) -> str:
        return make_idempotency_token(
            self.orchestrator,
            self.pipeline,
            self.run,
            self.task,
            self.index,
            generation,
            namespace=self.namespace,
        )

    def run_name(self, base: str) -> str:
        """``base`` (the experiment or workflow name) followed by the pipeline, the run (in
        a short form, ``short_run``: each night's run gets a name of its own), the task and
        the index, ``--`` between them: ``sweep--gpu_sweep--manual_20261203T0700--trial--3``.
        A partition key is encoded reversibly and a range named by its first and last keys
        and their count (``_run_names``); other characters the rule refuses become ``_``. A
        name over the length rule is shortened and ends with a digest of the whole identity.
        The name is never part of the idempotency token."""
        parts = [base, self.pipeline, short_run(self.run), self.task]
        if self.partitions is not None:
            index: str | None = self.partitions.name()
        elif isinstance(self.index, int):
            index = str(self.index)
        else:
            index = encode_name_part(self.index) if self.index is not None else None
        identity = [*parts, *([] if self.index is None else [str(self.index)])]
        return compose_run_name(parts, index, [*identity, self.orchestrator])

    def describe(self) -> str:
        """Who this submission is, for the cause of a cancel: ``airflow sweep/manual__...
        /trial[3]``."""
        index = "" if self.index is None else f"[{self.index}]"
        return f"{self.orchestrator} {self.pipeline}/{self.run}/{self.task}{index}"

    def environment(self) -> dict[str, str]:
        """The orchestrator ids as variables for the run's ranks (training code can tag its
        MLflow run with them): an integer index is a map index, any other a partition key.
        Fixed per key, so a retry's plan equals its parent's."""
        env = {
            ENV_ORCHESTRATOR: self.orchestrator,
            ENV_PIPELINE: self.pipeline,
            ENV_ORCHESTRATOR_RUN_ID: self.run,
            ENV_TASK: self.task,
        }
        if isinstance(self.index, int):
            env[ENV_MAP_INDEX] = str(self.index)
        elif self.index is not None:
            env[ENV_PARTITION_KEY] = self.index
        return env

    def checkpoints(
        self, stage: Stage | None = None, epoch: str | None = None, code_version: str | None = None
    ) -> CheckpointIdentity:
        """The logical task whose checkpoints a stage (or the single workload) keeps: a
        stage is its own task's (an Airflow stage's task id) whichever task submits it, so
        a new run of a stage (a refused repair) finds the folder of the run before;
        ``epoch`` is what a user asked to start again from (a cleared group)."""
        task = (stage.orchestrator_task or self.task) if stage is not None else self.task
        return CheckpointIdentity(
            self.orchestrator, self.namespace, self.pipeline, self.run, task, self.index,
            stage.task_key if stage is not None else None, epoch, code_version,
        )  # fmt: skip

    def identify(
        self,
        workload: Workload | Sequence[Stage],
        run_name: str | None,
        checkpoint_volume: str | None = None,
        checkpoint_epoch: str | None = None,
        code_version: str | None = None,
    ) -> tuple[Workload | list[Stage], str]:
        """``workload`` (each stage's, with its task key as ``AIRO_STAGE``) with
        ``environment()`` and the run's name from
        ``run_name`` (else the first experiment name) with ``run_name()``: what every
        submission sends, so the platform, the run page and ``airo list`` tie a run back
        to its orchestrator task. With ``checkpoint_volume``, each stage's checkpoint
        folder in it as ``AIRO_CHECKPOINT_DIR`` (``_checkpoints``)."""
        env = self.environment()
        if checkpoint_volume is not None and not isinstance(workload, Sequence):
            env[ENV_CHECKPOINT_DIR] = self.checkpoints(None, checkpoint_epoch, code_version).folder(
                checkpoint_volume
            )
        if isinstance(workload, Sequence):
            # Each stage says who it is: its own task (an Airflow stage's task id) where the
            # orchestrator has one per stage, else the submitting task's.
            stages = [
                dataclasses.replace(
                    stage,
                    workload=stage.workload.with_env_variables(
                        {
                            **env,
                            ENV_TASK: stage.orchestrator_task or self.task,
                            ENV_STAGE: stage.task_key,
                            **(
                                {
                                    ENV_CHECKPOINT_DIR: self.checkpoints(
                                        stage, checkpoint_epoch, code_version
                                    ).folder(checkpoint_volume)
                                }
                                if checkpoint_volume is not None
                                else {}
                            ),
                        }
                    ),
                )
                for stage in workload
            ]
            base = run_name or (stages[0].workload.experiment_name if stages else "run")
            return stages, self.run_name(base)
        return workload.with_env_variables(env), self.run_name(run_name or workload.experiment_name)

    def secrets(self, scope: str) -> SubmissionSecrets:
        """The secret keys of this submission in ``scope``."""
        return SubmissionSecrets.of(
            scope,
            namespace=self.namespace,
            orchestrator=self.orchestrator,
            pipeline_id=self.pipeline,
            task_key=self.task,
            run_id=self.run,
            map_index=self.index,
        )


# --- the outcome --------------------------------------------------------------------------


class RunStatus(enum.StrEnum):
    """How a wait on a run ended: the run's own end (``SUCCESS``, ``FAILED``), the wait's
    (``TIMEOUT``, ``ERROR``), or our stop of it (``BUDGET``, ``RETRIES_STOPPED``). Its values
    are the plain strings stored in trigger events, so a stored event reads back the same."""

    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    ERROR = "error"
    BUDGET = "budget"  # over its max_gpu_hours, or its sweep's
    RETRIES_STOPPED = "retries_stopped"  # a deterministic failure: retries would not change it

    @classmethod
    def read(cls, value: str) -> RunStatus:
        """A stored status; one a newer version wrote and this one does not know reads as
        ``ERROR`` (never a success)."""
        try:
            return cls(value)
        except ValueError:
            return cls.ERROR


@dataclass(frozen=True)
class RunOutcome:
    """How a run, or one task of it, ended; what both orchestrators render.

    ``to_event``/``from_event`` are its stable form (an Airflow trigger event is stored in
    Airflow's database and may be read by a newer version): fields are only ever added, a
    missing one reads as its default, an unknown one is ignored."""

    # The statuses of ``stopped``: no retry helps (the run was cancelled on purpose).
    STOPPED_STATUSES: ClassVar[tuple[RunStatus, RunStatus]] = (
        RunStatus.BUDGET,
        RunStatus.RETRIES_STOPPED,
    )

    status: RunStatus
    run_id: int
    run_page_url: str
    # None (no result yet: timeout, error) is left out of events, so it must be optional.
    result_state: str | None = None
    message: str = ""
    task_key: str | None = None
    # 0 for the first attempt of the task: the platform's and the CLI's count (get.go).
    attempt_number: int | None = None
    mlflow_experiment_id: str | None = None
    mlflow_run_id: str | None = None
    mlflow_run_url: str | None = None
    # Accelerator-hours of every attempt of the run (of the task), retries included.
    gpu_hours: float | None = None
    duration_s: float | None = None
    # The task's own run id in a multi-task run.
    task_run_id: int | None = None
    # ``gpu_hours`` by accelerator type, and what they cost at the user's prices (``priced``).
    gpu_hours_by_type: dict[str, float] | None = None
    cost: float | None = None
    currency: str | None = None
    # Why our code cancelled the run, when it did (``CancelCause.describe``).
    cancel_cause: str | None = None

    def __post_init__(self) -> None:
        # A plain string (a stored event, a caller's literal) becomes its RunStatus.
        if not isinstance(self.status, RunStatus):
            object.__setattr__(self, "status", RunStatus.read(self.status))

    @property
    def succeeded(self) -> bool:
        return self.status is RunStatus.SUCCESS

    @property
    def ended(self) -> bool:
        """Whether the run (the stage) itself ended: its logs and keys are done with. A
        wait that timed out or could not ask left it going."""
        return self.status not in (RunStatus.TIMEOUT, RunStatus.ERROR)

    def priced(self, prices: Prices | None) -> RunOutcome:
        """The outcome with what its GPU-hours cost at ``prices`` (unchanged without prices,
        or when a type it used has none)."""
        if prices is None or self.gpu_hours_by_type is None:
            return self
        cost = prices.cost(self.gpu_hours_by_type)
        if cost is None:
            return self
        return dataclasses.replace(self, cost=cost, currency=prices.currency)

    def summary(self) -> str:
        """One line for a log: a success with its GPU-hours (and cost) and run page;
        otherwise the message (which says how the run failed)."""
        if not self.succeeded:
            return self.message or f"Run {self.run_id} ended: {self.status}"
        money = f", {self.currency} {self.cost:,.2f}" if self.cost is not None else ""
        used = f" ({self.gpu_hours:g} GPU-hours{money})" if self.gpu_hours is not None else ""
        what = (
            f"Stage {self.task_key} of run {self.run_id}" if self.task_key else f"Run {self.run_id}"
        )
        return f"{what} succeeded{used}: {self.run_page_url}"

    def to_event(self) -> dict[str, Any]:
        event = {k: v for k, v in asdict(self).items() if v is not None}
        event["status"] = self.status.value  # plain JSON for Airflow's trigger table
        return event

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> RunOutcome:
        known = {f.name for f in fields(cls)}
        read = {k: v for k, v in event.items() if k in known}
        if "attempt" in event and "attempt_number" not in event:
            # Events stored before attempts were counted from 0 said ``attempt`` (1 first).
            read["attempt_number"] = event["attempt"] - 1
        return cls(**read)

    @classmethod
    def read(cls, client: AirClient, state: RunState, task_key: str | None = None) -> RunOutcome:
        """The outcome of the ended run ``state`` (or of its task ``task_key``)."""
        return client.run_flow(lambda core: outcome_flow(core, state, task_key))

    @classmethod
    async def aread(
        cls, client: AsyncAirClient, state: RunState, task_key: str | None = None
    ) -> RunOutcome:
        return await client.run_flow(lambda core: outcome_flow(core, state, task_key))

    @classmethod
    def unfinished(
        cls, status: RunStatus, run_id: int, run_page_url: str, message: str, task_key: str | None
    ) -> RunOutcome:
        """A wait that ended without the run ending (``timeout``, ``error``)."""
        return cls(status, run_id, run_page_url, None, message, task_key)

    @classmethod
    def stopped(
        cls,
        stopped: BudgetExceeded | RetriesStopped,
        run_id: int,
        run_page_url: str,
        note: str,
        task_key: str | None,
    ) -> RunOutcome:
        """A wait that stopped the run: over its ``max_gpu_hours`` (status ``budget``, with
        the GPU-hours it used) or its retries stopped (``retries_stopped``; ``failed``, which
        an orchestrator retries, when the failure policy hands the retry to it); ``note``
        says how cancelling it went."""
        over, retries = cls.STOPPED_STATUSES
        if isinstance(stopped, BudgetExceeded):
            outcome = cls(over, run_id, run_page_url, None, f"{stopped}{note}", task_key)
            by_type = None
            if isinstance(stopped, SweepBudgetSpent):
                member = next((m for m in stopped.spend.members if m.run_id == run_id), None)
                if member is not None:
                    by_type = member.state.gpu_hours_by_type(now_ms=stopped.spend.now_ms)
            return dataclasses.replace(
                outcome, gpu_hours=round(stopped.used, 6), gpu_hours_by_type=by_type
            )
        status = RunStatus.FAILED if stopped.retryable else retries
        return cls(status, run_id, run_page_url, None, f"{stopped}{note}", task_key)


def _duration_s(state: RunState, task: TaskState | None) -> float | None:
    """The task's (newest attempt's) time when known, else the run's."""
    start = (task.start_time if task else None) or state.start_time
    end = (task.end_time if task else None) or state.end_time
    if start and end and end >= start:
        return round((end - start) / 1000.0, 3)
    return None


def outcome_flow(
    core: ClientCore, state: RunState, task_key: str | None, run_page_url: str = ""
) -> Flow[RunOutcome]:
    """The outcome of an ended run (or of its task ``task_key``): the failure with its full
    message (error, log tail, trace) or the MLflow ids of the task's output."""
    view = state.stage(task_key)
    result = yield from _runs.run_result(core, view)
    experiment, mlflow_run = mlflow_ids(result.output)
    task = view.tasks[0] if len(view.tasks) == 1 else None
    status = RunStatus.SUCCESS if result.failure is None else RunStatus.FAILED
    message = "" if result.failure is None else str(result.failure)
    cause = None
    if view.result_state == "CANCELED" or state.result_state == "CANCELED":
        # Cancelled by our code (this process's or another's: a spent sweep cancels all of
        # its runs): why, as the canceller kept it. A budget's cancel is no failure a retry
        # could mend.
        cause = yield from _cancel_causes.read_cause(core, state)
        if cause is not None:
            message = f"{message}\nCause: {cause.describe()}" if message else cause.describe()
            if cause.kind == "budget":
                status = RunStatus.BUDGET
    return RunOutcome(
        status=status,
        run_id=state.run_id,
        run_page_url=state.run_page_url or run_page_url,
        result_state=view.result_state,
        message=message,
        task_key=task_key,
        attempt_number=task.attempt_number if task is not None else None,
        mlflow_experiment_id=experiment,
        mlflow_run_id=mlflow_run,
        mlflow_run_url=mlflow_run_url(core.host, experiment, mlflow_run),
        gpu_hours=result.gpu_hours,
        duration_s=_duration_s(state, task),
        task_run_id=task.run_id if task is not None and task_key is not None else None,
        gpu_hours_by_type={k: round(v, 6) for k, v in view.gpu_hours_by_type().items()},
        cancel_cause=cause.describe() if cause is not None else None,
    )


# --- the submission -----------------------------------------------------------------------


@dataclass
class Submission:
    """One submission's life (see the module docstring). ``log`` receives the housekeeping
    lines, ``redact`` cleans the text of errors in them (an error may echo a value).

    The keys of every scope ``prepare`` wrote to are remembered; ``to_json``/``from_json``
    carry the submission (key, scopes, run) to another process, e.g. an Airflow trigger
    that finishes the run (``afinish``)."""

    key: SubmissionKey
    log: SubmissionLog = field(default=SILENT, repr=False, compare=False)
    redact: Callable[[str], str] = field(default=_keep, repr=False, compare=False)
    scopes: list[str] = field(default_factory=list)
    run_id: int | None = None
    run_page_url: str = ""
    # Where each stage keeps its checkpoints (``_checkpoints``); None: no checkpoint folder.
    checkpoint_volume: str | None = None
    # What a user asked to start again from (a cleared Airflow workflow group): part of each
    # folder's identity. None: nothing.
    checkpoint_epoch: str | None = None
    # The code's version (``CheckpointIdentity.code_version``); None: folders outlive code.
    code_version: str | None = None
    # The sweep this submission's run belongs to: no run is submitted once its budget is
    # spent (``SweepBudgetSpent``, refused), and the sweep's runs still going are cancelled.
    sweep: Sweep | None = None

    def __post_init__(self) -> None:
        if self.checkpoint_volume is not None:
            self.checkpoint_volume = checkpoint_volume(self.checkpoint_volume)

    @property
    def secrets(self) -> list[SubmissionSecrets]:
        return [self.key.secrets(scope) for scope in self.scopes]

    def _warning(self, what: str, error: AirError) -> None:
        self.log.warning(f"could not {what}: {self.redact(str(error))}")

    # --- 1. prepare ---------------------------------------------------------------------

    def store_flow(
        self,
        core: ClientCore,
        values: Mapping[str, str],
        *,
        scope: str,
        stage: str | None = None,
    ) -> Flow[dict[str, str]]:
        if not values:
            return {}
        secrets = self.key.secrets(scope)
        if scope not in self.scopes:  # the first write to a scope sweeps it
            try:
                swept = yield from _secrets.sweep_ended_submissions(core, secrets)
                if swept:
                    self.log.info(f"deleted {swept} secret keys left by earlier runs that ended")
            except AirError as error:
                self._warning("delete the secret keys earlier runs left behind", error)
        refs = yield from _secrets.store_submission_secrets(core, secrets, values, stage)
        if scope not in self.scopes:
            self.scopes.append(scope)
        return refs

    def store(
        self,
        client: AirClient,
        values: Mapping[str, str],
        *,
        scope: str,
        stage: str | None = None,
    ) -> dict[str, str]:
        """Sweep ``scope`` (once), store ``values`` under this submission's keys (of one
        ``stage`` of a multi-task run); ``{NAME: "scope/key"}`` for ``Workload.with_secrets``.
        A failure to store raises (``AirError``); the sweep only warns."""
        return client.run_flow(lambda core: self.store_flow(core, values, scope=scope, stage=stage))

    def prepare(
        self,
        client: AirClient,
        workload: Workload,
        values: Mapping[str, str],
        *,
        scope: str,
        stage: str | None = None,
    ) -> Workload:
        """``store`` the values and return ``workload`` carrying their references."""
        if not values:
            return workload
        return workload.with_secrets(self.store(client, values, scope=scope, stage=stage))

    # --- 2. submit ----------------------------------------------------------------------

    def refuse_if_spent_flow(self, core: ClientCore) -> Flow[None]:
        """Before anything is uploaded: when the sweep's budget is spent, cancel its runs
        still going (they spend past it) and refuse (``SweepBudgetSpent``, ``refused``)."""
        if self.sweep is None:
            return
        spend = yield from _runs.sweep_spend(core, self.sweep)
        if not spend.spent:
            return
        refused = SweepBudgetSpent(spend, refused=True)
        cause = CancelCause("budget", spend.message(), self.key.describe())
        for member in spend.running:
            try:
                yield from _cancel_causes.cancel_with_cause(
                    core, member.run_id, cause, member.state
                )
            except AirError as error:
                self._warning(f"cancel run {member.run_id} of the spent sweep", error)
        raise refused

    def submit_flow(
        self,
        core: ClientCore,
        workload: Workload | Sequence[Stage],
        generation: int | str,
        run_name: str | None = None,
    ) -> Flow[SubmittedRun]:
        yield from self.refuse_if_spent_flow(core)
        identified, name = self.key.identify(
            workload, run_name, self.checkpoint_volume, self.checkpoint_epoch, self.code_version
        )
        identified = yield from self.checkpoint_flow(core, identified)
        submitted = yield from _submit.submit_workload(
            core,
            identified,
            idempotency_token=self.key.idempotency_token(generation),
            run_name=name,
        )
        self.run_id = submitted.run_id
        self.run_page_url = submitted.run_page_url
        yield from self.record_run_flow(core, identified)
        for secrets in self.secrets:
            try:
                yield from _secrets.mark_submission_run(core, secrets, submitted.run_id)
            except AirError as error:
                self._warning(f"record run {submitted.run_id} next to its secret keys", error)
        return submitted

    def submit(
        self,
        client: AirClient,
        workload: Workload | Sequence[Stage],
        generation: int | str,
        *,
        run_name: str | None = None,
    ) -> SubmittedRun:
        """Submit generation ``generation`` (the same generation gives the same run back)
        and mark the keys with its run."""
        return client.run_flow(lambda core: self.submit_flow(core, workload, generation, run_name))

    def plan(
        self,
        client: AirClient,
        workload: Workload | Sequence[Stage],
        generation: int | str,
        *,
        run_name: str | None = None,
    ) -> SubmissionPlan:
        """What ``submit`` would send for generation ``generation``, to be sent elsewhere
        with ``client.submit(plan)`` (an Airflow trigger): the token is the generation's, so
        sending it again, from anywhere, gives the same run back. Only for a submission that
        stores no secret keys (nothing would mark them with the run)."""
        if self.secrets:
            raise RuntimeError("a submission with secret keys is submitted with submit()")
        client.run_flow(self.refuse_if_spent_flow)
        identified, name = self.key.identify(
            workload, run_name, self.checkpoint_volume, self.checkpoint_epoch, self.code_version
        )
        resumed = client.run_flow(lambda core: self.checkpoint_flow(core, identified))
        return client.run_flow(
            lambda core: _submit.plan_workload(
                core,
                resumed,
                idempotency_token=self.key.idempotency_token(generation),
                run_name=name,
            )
        )

    def checkpoint_flow(
        self, core: ClientCore, identified: Workload | Sequence[Stage]
    ) -> Flow[Workload | list[Stage]]:
        """Make each stage's checkpoint folder (its marker file), which proves the volume
        exists and is writable before anything else is uploaded, after reading what it holds:
        the workloads with the resume variables (``FolderContents.environment``). A folder
        the author set themselves (their own ``AIRO_CHECKPOINT_DIR``) is theirs to make."""
        volume = self.checkpoint_volume
        if volume is None:
            return identified if not isinstance(identified, Sequence) else list(identified)
        stages: list[tuple[Stage | None, Workload]] = (
            [(s, s.workload) for s in identified]
            if isinstance(identified, Sequence)
            else [(None, identified)]
        )
        resumed: list[Workload] = []
        for stage, workload in stages:
            identity = self.key.checkpoints(stage, self.checkpoint_epoch, self.code_version)
            folder = identity.folder(volume)
            if workload.env_variables.get(ENV_CHECKPOINT_DIR) != folder:
                resumed.append(workload)
                continue
            resumed.append(
                (yield from _checkpoint_folders.prepare_folder(core, identity, volume, workload))
            )
        if not isinstance(identified, Sequence):
            return resumed[0]
        return [
            dataclasses.replace(stage, workload=workload)
            for stage, workload in zip(identified, resumed, strict=True)
        ]

    def record_run_flow(
        self, core: ClientCore, identified: Workload | Sequence[Stage]
    ) -> Flow[None]:
        """Note the run in each checkpoint folder it uses (a later run of the task learns
        which run it resumes from); best effort."""
        if self.checkpoint_volume is None or self.run_id is None:
            return
        workloads = (
            [s.workload for s in identified] if isinstance(identified, Sequence) else [identified]
        )
        folders = {w.env_variables.get(ENV_CHECKPOINT_DIR) or "" for w in workloads}
        for folder in sorted(f for f in folders if f.startswith("/Volumes/")):
            try:
                yield from _checkpoint_folders.record_run(core, folder, self.run_id)
            except AirError as error:
                self._warning(f"note run {self.run_id} in its checkpoint folder", error)

    def newest_checkpoint(self, client: AirClient, stage: Stage | None = None) -> Checkpoint | None:
        """The newest checkpoint in the single workload's (or ``stage``'s) folder; None
        without a folder, an empty one or when it cannot be read."""
        folder = self.checkpoint_dir(stage)
        if folder is None:
            return None
        try:
            return client.run_flow(
                lambda core: _checkpoint_folders.folder_contents(core, folder)
            ).newest
        except AirError as error:
            self._warning(f"list the checkpoint folder {folder}", error)
            return None

    def checkpoint_dir(self, stage: Stage | None = None) -> str | None:
        """Where the single workload's (or ``stage``'s) ranks keep checkpoints; None without
        a checkpoint volume."""
        if self.checkpoint_volume is None:
            return None
        return self.key.checkpoints(stage, self.checkpoint_epoch, self.code_version).folder(
            self.checkpoint_volume
        )

    def attach(self, run_id: int, run_page_url: str = "") -> Submission:
        """Follow a run submitted earlier (a reattaching retry, a workflow stage)."""
        self.run_id = int(run_id)
        self.run_page_url = run_page_url or self.run_page_url
        return self

    # --- 3. the outcome -----------------------------------------------------------------

    def _run(self) -> int:
        if self.run_id is None:
            raise RuntimeError("the submission has no run yet")
        return self.run_id

    def outcome(
        self, client: AirClient, state: RunState, task_key: str | None = None
    ) -> RunOutcome:
        """The outcome of the ended run (or of its task ``task_key``)."""
        return client.run_flow(lambda core: outcome_flow(core, state, task_key, self.run_page_url))

    async def aoutcome(
        self, client: AsyncAirClient, state: RunState, task_key: str | None = None
    ) -> RunOutcome:
        return await client.run_flow(
            lambda core: outcome_flow(core, state, task_key, self.run_page_url)
        )

    # --- 4. finish or cancel ------------------------------------------------------------

    def finish_flow(self, core: ClientCore, state: RunState | None = None) -> Flow[bool]:
        if self.run_id is None or not self.scopes:
            return True
        run_id = self.run_id
        try:
            if state is None or state.run_id != run_id or not state.is_terminal:
                state = yield from _runs.get_run(core, run_id)
            if not state.is_terminal and state.tasks and all(t.is_terminal for t in state.tasks):
                # Every task has ended: the run ends within moments.
                with contextlib.suppress(RunTimeout):
                    state = yield from _runs.wait(
                        core,
                        run_id,
                        WaitPolicy.until_end(RUN_END_WAIT_S),
                        poll_interval=_RUN_END_POLL_S,
                    )
        except AirError as error:
            self._warning(f"tell whether run {run_id} has ended", error)
            return False
        if not state.is_terminal:
            return False  # other tasks may still start containers; a later finish deletes
        deleted = True
        for secrets in self.secrets:
            try:
                count = yield from _secrets.delete_submission_secrets(core, secrets)
            except AirError as error:
                deleted = False
                self._warning(
                    f"delete the secret keys of run {run_id} from scope {secrets.scope} (the "
                    "next run of the task retries)",
                    error,
                )
                continue
            if count:
                self.log.info(
                    f"deleted {count} secret keys of the ended run {run_id} from scope {secrets.scope}"
                )
        return deleted

    def finish(self, client: AirClient, state: RunState | None = None) -> bool:
        """Delete this submission's keys once its whole run has ended; True when nothing of
        it is left (or nothing was written). ``state``: the run as last read, if known."""
        return client.run_flow(lambda core: self.finish_flow(core, state))

    async def afinish(self, client: AsyncAirClient, state: RunState | None = None) -> bool:
        """``finish`` from async code (an Airflow trigger)."""
        return await client.run_flow(lambda core: self.finish_flow(core, state))

    def cancel_flow(
        self,
        core: ClientCore,
        wait_s: float,
        poll_interval: float,
        cause: CancelCause | None = None,
    ) -> Flow[RunState | None]:
        run_id = self._run()
        yield from _cancel_causes.cancel_with_cause(core, run_id, cause)
        if wait_s <= 0:
            return None
        try:
            state = yield from _runs.wait(
                core, run_id, WaitPolicy.until_end(wait_s), poll_interval=poll_interval
            )
        except RunTimeout:
            return None
        return state

    def cancel(
        self,
        client: AirClient,
        *,
        wait_s: float = 0.0,
        poll_interval: float = 1.0,
        cause: CancelCause | None = None,
    ) -> RunState | None:
        """Cancel the whole run, keeping ``cause`` first (``client/_cancel_causes``: a spent
        sweep's also cancels the sweep's other runs still going); with ``wait_s``, wait that
        long for it to end and return its final state (None when it is still ending)."""
        return client.run_flow(lambda core: self.cancel_flow(core, wait_s, poll_interval, cause))

    async def acancel(
        self,
        client: AsyncAirClient,
        *,
        wait_s: float = 0.0,
        poll_interval: float = 1.0,
        cause: CancelCause | None = None,
    ) -> RunState | None:
        return await client.run_flow(
            lambda core: self.cancel_flow(core, wait_s, poll_interval, cause)
        )

    def cause(self, kind: str, message: str) -> CancelCause:
        """A cause of a cancel by this submission's orchestrator task."""
        return CancelCause(kind, message, self.key.describe())

    def stop_cause(self, stopped: BudgetExceeded | RetriesStopped) -> CancelCause:
        """The cause of cancelling a run a wait stopped (a budget passed, retries stopped)."""
        return CancelCause.of_stop(stopped, self.key.describe())

    # --- carrying it elsewhere ----------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        key = asdict(self.key)
        if key["partitions"] is None:
            del key["partitions"]  # what a release without it can read back
        return {
            "key": key,
            "scopes": list(self.scopes),
            "run_id": self.run_id,
            "run_page_url": self.run_page_url,
            "checkpoint_volume": self.checkpoint_volume,
            "checkpoint_epoch": self.checkpoint_epoch,
            "code_version": self.code_version,
            "sweep": self.sweep.to_json() if self.sweep is not None else None,
        }

    @classmethod
    def from_json(
        cls,
        raw: Mapping[str, Any],
        *,
        log: SubmissionLog = SILENT,
        redact: Callable[[str], str] = _keep,
    ) -> Submission:
        run_id = raw.get("run_id")
        key = dict(raw["key"])
        if key.get("partitions") is not None:
            key["partitions"] = PartitionRange(**key["partitions"])
        return cls(
            key=SubmissionKey(**key),
            log=log,
            redact=redact,
            scopes=list(raw.get("scopes") or []),
            run_id=None if run_id is None else int(run_id),
            run_page_url=str(raw.get("run_page_url") or ""),
            checkpoint_volume=raw.get("checkpoint_volume") or None,
            checkpoint_epoch=raw.get("checkpoint_epoch") or None,
            code_version=raw.get("code_version") or None,
            sweep=Sweep.from_json(raw["sweep"]) if raw.get("sweep") else None,
        )


# --- the end of a try ----------------------------------------------------------------------


@dataclass(frozen=True)
class TryEnd:
    """What the end of one try on a run did, for its driver to render (an Airflow worker's
    return value or exception and XComs, a trigger's event): the ``outcome``; why the run's
    lines could not all be copied (``lines_error``, None when they were or none were asked
    for); whether the submission's secret keys are gone (``keys_deleted``: None when there
    were none to delete or the run goes on)."""

    outcome: RunOutcome
    lines_error: str | None = None
    keys_deleted: bool | None = None


def end_of_try_flow(
    core: ClientCore,
    outcome: RunOutcome,
    *,
    state: RunState | None = None,
    task_key: str | None = None,
    lines: Callable[[LogRecord], bool] | None = None,
    submission: Submission | None = None,
) -> Flow[TryEnd]:
    """The end of a try, written once for every driver (``client.run_flow`` in a worker,
    ``await aclient.run_flow`` in a trigger): every node's lines of the run (of the stage
    ``task_key``), every attempt, handed to ``lines`` (False: stop, as a copy that reached
    its cap), when asked; then, once the run ended, the keys ``submission`` wrote deleted
    (``Submission.finish_flow``; ``state``: the run as last read). Neither ever fails the
    try: the outcome is known."""
    lines_error = None
    if lines is not None:
        reading = _runs.iter_run_logs(
            core, outcome.run_id, task_key=task_key, node=None, follow=False
        )
        try:
            yield from consume(reading, lines)
        except Exception as error:  # logs are a convenience
            lines_error = str(error)
    deleted = None
    if submission is not None and outcome.ended:
        try:
            deleted = yield from submission.finish_flow(core, state)
        except Exception as error:
            submission.log.warning(
                f"could not delete the secret keys of run {outcome.run_id}: "
                f"{submission.redact(str(error))}"
            )
            deleted = False
    return TryEnd(outcome, lines_error, deleted)


__all__ = [
    "RunOutcome",
    "RunStatus",
    "Submission",
    "SubmissionKey",
    "TryEnd",
    "end_of_try_flow",
    "outcome_flow",
]
