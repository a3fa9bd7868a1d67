"""One Dagster step: its plan of rows (``_plan``) submitted as remote runs, waited on, and
recorded one result per row.

- *Submission* turns rows into workloads (``_workloads``), adds the orchestrator secrets and
  submits each planned run through ``air_runtime.Submission``, whose key and generation say
  which remote run is the step's (``_identity``, ``_lineage``): a retry adopts a run its
  lineage started that is still going, and cancels one it cannot adopt before submitting.
- *The wait* turns state changes and node log lines into the step's log lines, one
  observation per ended attempt, and reads Pipes messages (``_pipes``) and blocking checks.
- *The results* are one loop over rows (trained, kept from the lineage, or failed), turned
  into materializations and check results by ``_record.record`` (the plan's row scope says
  how rows map to outputs); then the failure, if any row failed.

Every line about a run goes through this step's own ``context.log``: the background loop
that watches runs for every step of the process only puts what it sees into the queue of
the step that waits (``_watch``), and this step's thread logs it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import queue
import re
import sys
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterExecutionInterruptedError

from air_runtime import (
    AirClient,
    AirError,
    AuthError,
    BudgetExceeded,
    CancelCause,
    ConfigurationError,
    EarlierLaunch,
    FailurePolicy,
    MlflowLinkReader,
    Redactor,
    RetriesStopped,
    RunFailed,
    RunOutcome,
    RunState,
    RunStatus,
    Stage,
    Submission,
    SubmittedRun,
    Sweep,
    SweepBudgetSpent,
    WaitPolicy,
    Workload,
    decide_ownership,
)

from ._accelerators import AcceleratorClaim, gpu_pools_of, lanes_of, step_accelerators
from ._blocking import AttemptReports, BlockingChecks, RunTask, blocking_check_keys
from ._config import AirRunConfig
from ._identity import submission_key, sweep_of, terminal_failure_observation
from ._interrupts import deferred_interrupts
from ._lineage import Launch, Lineage, record_launch
from ._own_run import DagsterRunEnded, OwnRun
from ._pipes import (
    StepPipes,
    earlier_attempt_observation,
    open_step_pipes,
)
from ._plan import KeptRow, PlannedRun, TaskRow, plan_step
from ._record import AirEvent, IgnoredCheck, PartitionMetadata, RowResult, record, row_name
from ._resource import AirWorkspace
from ._secrets import resolve_secret_env
from ._translator import GPU_HOURS_KEY, META_PREFIX, DagsterAirTranslator
from ._watch import (
    ProgressSeen,
    StateSeen,
    WatchEvent,
    WatchEvents,
    WatchWarning,
    watch_in_background,
)
from ._workflow import AirWorkflow, LoadedStage
from ._workloads import OUTPUT_URI_KEY, RowWorkloads, config_failure

KEPT_FROM_KEY = f"{META_PREFIX}kept_from_run"
# The newest checkpoint in the row's folder when its run ended: where a later run resumes.
CHECKPOINT_KEY = f"{META_PREFIX}checkpoint"
CHECKPOINT_STEP_KEY = f"{META_PREFIX}checkpoint_step"
_LOCATION = re.compile(r"^(/|[a-zA-Z][a-zA-Z0-9+.-]*:/)")


def _refusal(error: AirError, otherwise: str) -> str:
    """What a non-retryable error is about: the credentials, the setup, or the request."""
    if isinstance(error, AuthError):
        return "the workspace refused the credentials of the air_workspace resource"
    if isinstance(error, ConfigurationError):
        return "the workspace setup needs a change"
    return otherwise


@dataclass
class RemoteRun:
    """One planned run of the step and the core's submission behind it."""

    planned: PlannedRun
    submission: Submission
    submitted: SubmittedRun | None = None
    state: RunState | None = None  # once the step saw it end


class AirStep:
    """One Dagster step materializing the selected stages (see the module docstring)."""

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        workflow: AirWorkflow,
        workspace: AirWorkspace,
        config: AirRunConfig,
        extra_overrides: Mapping[str, Any] | Sequence[str] | None = None,
        translator: DagsterAirTranslator | None = None,
    ) -> None:
        self.context = context
        self.workflow = workflow
        self.options = workflow.options
        self.workspace = workspace
        self.config = config
        self.extra_overrides = extra_overrides
        self.translator = translator or workflow.translator
        self.redact: Redactor = Redactor(())
        self.pipes: StepPipes | None = None
        self.blocking: BlockingChecks | None = None
        # task key -> why a row of a later wave was not submitted
        self.skipped: dict[str, str] = {}
        self.runs: list[RemoteRun] = []
        self.generation = 0
        self._client: AirClient | None = None
        self._attempts_seen: set[tuple[str, int]] = set()
        self._last_state: RunState | None = None
        self.accelerators: AcceleratorClaim | None = None
        # task key -> the tasks of the partition it is queued behind in its lane
        self.lane_deps: dict[str, tuple[str, ...]] = {}
        self._mlflow_readers: dict[str, MlflowLinkReader] = {}
        # run id -> why it was cancelled: it passed its (or a task's) max_gpu_hours, or its
        # sweep's budget is spent
        self._over_budget: dict[int, str] = {}
        # The sweep whose budget the step's runs share (``_identity.sweep_of``).
        self.sweep: Sweep | None = None
        # asset -> partition -> (Dagster run, metadata) its lineage materialized
        self._materialized: dict[dg.AssetKey, dict[str | None, tuple[str, dict[str, Any]]]] = {}
        # asset -> the partitions whose blocking check the lineage saw fail
        self._refused: dict[dg.AssetKey, set[str | None]] = {}

    @classmethod
    def run(cls, *args: Any, **kwargs: Any) -> Iterator[AirEvent]:
        """Run one step (the arguments are the constructor's)."""
        yield from cls(*args, **kwargs).execute()

    # --- the whole step -------------------------------------------------------------

    def execute(self) -> Iterator[AirEvent]:
        try:
            yield from self._execute()
        except DagsterRunEnded as ended:
            # Whoever continues the run records the result; a failure of an ended run
            # changes nothing and must not ask for a retry.
            self.context.log.warning(str(ended))
            raise dg.Failure(description=str(ended), allow_retries=False) from None

    def _execute(self) -> Iterator[AirEvent]:
        self.own_run = OwnRun(self.context)
        self.lineage = Lineage.of(self.context)
        # A run that continues others, or a retry of this step: earlier work may be reused.
        self.recovering = (
            self.lineage.continued
            or self.context.retry_number > 0
            or self.lineage.backfill_since is not None
        )
        self.step_key = str(self.context.op_handle)
        self.sweep = sweep_of(self.context, self.workspace, self.lineage)
        self.prices = self.workspace.prices()
        self.plan = plan_step(self.context, self.workflow, self._kept)
        if not self.plan.selected:
            return
        self.row_workloads = RowWorkloads(
            self.context, self.workflow, self.plan, self.config, self.extra_overrides
        )
        self._tell_recovery()
        with contextlib.ExitStack() as stack:
            self._client = client = stack.enter_context(self.workspace.get_client())
            workloads: dict[str, Workload] = {}
            if self.plan.runs:
                try:
                    built, values, adoptable = self._prepare(client)
                    if self.workspace.pipes:  # open while the step waits and records
                        writers = sum(w.num_nodes for w in built.values())  # one per node
                        self.pipes = stack.enter_context(open_step_pipes(self.context, writers))
                    for number, wave in enumerate(self.plan.waves):
                        if number:  # only what the checks upstream let through
                            self.own_run.check(now=True)  # an ended run starts nothing more
                            wave = self._let_through(wave)
                        runs = self._submit(client, wave, built, values, adoptable)
                        workloads.update(runs)
                        for run in self.runs[len(self.runs) - len(wave) :]:
                            run.state = yield from self._wait(run)
                            self._follow_blocking(run.state)
                    self._tell_runs()
                    self.own_run.check(now=True)  # the run still wants what the step records
                except DagsterExecutionInterruptedError:
                    yield from self._interrupted(client)
                    raise
                finally:  # the runs have ended (or were cancelled): their accelerators too
                    if self.accelerators is not None:
                        self.accelerators.release()
                for run in self.runs:
                    run.submission.finish(client, run.state)
            results = list(self._results(client, workloads))
            yield from self._record(results)
            yield from self._fail_if_any(client, results)

    # --- recovery -------------------------------------------------------------------

    def _kept(self, loaded: LoadedStage, partition: str | None) -> KeptRow | None:
        """The row as its lineage materialized it, when this run continues one."""
        if not self.recovering:
            return None
        by_asset = self._materialized
        if loaded.asset_key not in by_asset:
            version = self.context.assets_def.code_versions_by_key.get(loaded.asset_key)
            by_asset[loaded.asset_key] = self.lineage.materialized(loaded.asset_key, version)
        found = by_asset[loaded.asset_key].get(partition)
        if found is None:
            return None
        if loaded.asset_key not in self._refused:
            self._refused[loaded.asset_key] = self.lineage.refused(loaded.asset_key)
        if partition in self._refused[loaded.asset_key]:
            return None  # its blocking check failed: train it again, checks and all
        return KeptRow(loaded, partition, found[0], found[1])

    def _tell_recovery(self) -> None:
        log, plan = self.context.log, self.plan
        if plan.kept:
            rows = ", ".join(row_name(k.stage, k.partition) for k in plan.kept)
            runs = ", ".join(sorted({k.dagster_run_id for k in plan.kept}))
            log.info(
                f"already materialized by run {runs} with the same code version, recorded as "
                f"done and not trained again: {rows}"
            )
        parent = self.lineage.whole_reexecution_of
        if parent is not None:
            rows = ", ".join(row_name(r.stage, r.partition) for r in plan.rows.values())
            log.info(
                f"re-executing everything of run {parent} as asked (not from failure): "
                f"training again {rows}"
            )

    def _generation(self, client: AirClient) -> tuple[int, list[Launch], dict[int, Launch]]:
        """The generation this attempt submits, the launches of the lineage it must cancel
        before submitting, and those it may adopt (by run id). A generation whose run ended
        unsuccessfully is never submitted again, nor one whose run holds other tasks than the
        plan's; an earlier attempt's run of this generation and plan that is still going (or
        ended well, unrecorded) is adopted: the same token gives it back. Any other run of
        the lineage still going is cancelled first: a step never runs two."""
        if not self.recovering:
            return 0, [], {}
        launches = self.lineage.launches(self.step_key)
        states = {
            x.run_id: state
            for x in launches
            if (state := self._state_of(client, x.run_id)) is not None  # unread: no conclusion
        }
        plan = self.plan
        indices = {r.index for r in plan.runs}
        decided = decide_ownership(
            [
                EarlierLaunch(
                    x.run_id,
                    x.generation,
                    planned=x.index in indices,
                    same_plan=plan.holds(x.index, x.task_keys),
                )
                for x in launches
            ],
            states,
            failed=self.lineage.failed_generations(self.step_key),
        )
        by_id = {x.run_id: x for x in launches}
        adoptable = {x.run_id: x for x in launches if x.generation == decided.generation}
        return decided.generation, [by_id[r] for r in decided.cancel_first], adoptable

    def _state_of(self, client: AirClient, run_id: int) -> RunState | None:
        try:
            return client.get_run(run_id)
        except AirError as error:
            self.context.log.warning(f"could not read run {run_id}: {self.redact(str(error))}")
            return None

    # --- launch: the submission -----------------------------------------------------

    def _prepare(
        self, client: AirClient
    ) -> tuple[dict[str, Workload], dict[str, str], dict[int, Launch]]:
        """Build the rows' workloads, wait for the step's accelerators, resolve the secret
        values and cancel what the step cannot adopt: the workloads, the values and the
        launches it may adopt."""
        context = self.context
        workloads = self.row_workloads.of_rows()
        self.redact = client.redactor.with_values(())
        self._hold_accelerators(client, workloads)
        values = self._secret_values(client)
        self.generation, stale, adoptable = self._generation(client)
        for launch in stale:
            why = (
                "it runs other tasks than this attempt plans"
                if not self.plan.holds(launch.index, launch.task_keys)
                else "a run of this step ended unsuccessfully after it started"
            )
            context.log.warning(
                f"cancelling run {launch.run_id} ({launch.run_page_url}), started by Dagster run "
                f"{launch.dagster_run_id} and still going: this attempt cannot adopt it ({why}) "
                "and never runs both"
            )
            key = submission_key(context, self.workspace, self.lineage, launch.index)
            try:
                earlier = Submission(key).attach(launch.run_id)
                self._cancel(
                    client,
                    earlier,
                    earlier.cause(
                        "orchestrator",
                        f"Dagster run {context.run_id} cannot adopt it ({why}) and never runs both",
                    ),
                )
            except AirError as error:
                raise dg.Failure(  # submitting now would run both
                    description=f"could not cancel run {launch.run_id}: {self.redact(str(error))}"
                ) from None
        return workloads, values, adoptable

    def _submit(
        self,
        client: AirClient,
        wave: Sequence[int],
        workloads: Mapping[str, Workload],
        values: Mapping[str, str],
        adoptable: Mapping[int, Launch],
    ) -> dict[str, Workload]:
        """Submit the planned runs ``wave`` (an interrupt during a submit is held until the
        run id is known). Returns the workloads as submitted, secrets included, without the
        Pipes env."""
        context = self.context
        stored: dict[str, Workload] = {}
        for number in wave:
            planned = self.plan.runs[number]
            key = submission_key(
                context, self.workspace, self.lineage, planned.index, planned.partitions
            )
            run = RemoteRun(
                planned,
                Submission(
                    key,
                    log=context.log,
                    redact=self._redact_text,
                    checkpoint_volume=self.workspace.checkpoint_volume,
                    code_version=self._code_version(planned),
                    sweep=self.sweep,
                ),
            )
            self.runs.append(run)
            mine = self._with_secrets(client, run.submission, values, planned.task_keys, workloads)
            stored.update(mine)
            with deferred_interrupts():
                run.submitted = submitted = self._send(client, run, self._pipes_ready(mine))
            record_launch(
                context,
                Launch(
                    context.run_id,
                    submitted.run_id,
                    submitted.run_page_url,
                    planned.index,
                    self.generation,
                    planned.task_keys,
                ),
            )
            earlier = adoptable.get(submitted.run_id)
            if earlier is not None and earlier.dagster_run_id != context.run_id:
                how = f" (continued: started by Dagster run {earlier.dagster_run_id})"
            elif self.generation:
                how = " (a new run: this step's earlier run ended unsuccessfully)"
            else:
                how = ""
            after = " once the blocking checks upstream passed" if planned.wave else ""
            context.log.info(
                f"run {submitted.run_id} for {planned.label}{after}: {submitted.run_page_url}{how}"
            )
        return stored

    def _tell_runs(self) -> None:
        summary = self.plan.scope.summary(self.plan, len(self.runs), self.options.max_tasks_per_run)
        if summary is not None:
            self.context.log.info(summary)

    def _let_through(self, wave: Sequence[int]) -> list[int]:
        """The runs of a later wave with only the rows the runs before let through: a row
        downstream of a failed blocking check, or whose upstream row did not succeed, is
        never submitted (``self.skipped`` says why); a run left with no row is not either."""
        blocked = self.blocking.blocked if self.blocking is not None else {}
        ended = {
            row.task_key: run.state
            for run in self.runs
            for row in self.plan.rows_of(run.planned)
            if run.state is not None
        }
        let: list[int] = []
        for number in wave:
            planned = self.plan.runs[number]
            keys = []
            for row in self.plan.rows_of(planned):
                why = blocked.get(row.task_key)
                for upstream in row.after:
                    if why is not None:
                        break
                    state = ended.get(upstream)
                    task = state.task(upstream) if state is not None else None
                    if upstream in self.skipped or task is None or not task.is_success:
                        why = f"not run: its upstream {upstream} did not succeed"
                if why is None:
                    keys.append(row.task_key)
                else:
                    self.skipped[row.task_key] = why
                    self.context.log.warning(f"{row.task_key} is not submitted: {why}")
            if keys:
                if len(keys) < len(planned.task_keys):
                    self.plan.let_through(number, tuple(keys))
                let.append(number)
        return let

    def _code_version(self, planned: PlannedRun) -> str | None:
        """The code version that names the run's checkpoint folders: its assets' (several
        stages: each asset's, in order), None when none has one or it is not asked for."""
        if not self.workspace.checkpoint_per_code_version:
            return None
        versions = self.context.assets_def.code_versions_by_key
        keys = sorted({self.plan.rows[k].stage.asset_key for k in planned.task_keys})
        found = [f"{k.to_user_string()}={versions[k]}" for k in keys if versions.get(k)]
        return ",".join(found) or None

    def _redact_text(self, text: str) -> str:
        return self.redact(text)

    def _hold_accelerators(self, client: AirClient, workloads: Mapping[str, Workload]) -> None:
        """Wait for the step's accelerators in its ``accelerator_pool`` (``_accelerators``):
        one slot per accelerator its runs hold at once, before anything is submitted."""
        pool = self.options.accelerator_pool
        if pool is None:
            return
        instance = self.context.instance
        if not instance.event_log_storage.supports_global_concurrency_limits:
            self.context.log.warning(
                f"accelerator_pool {pool}: this Dagster instance keeps no concurrency slots "
                "(an ephemeral instance): the step is not capped"
            )
            return
        gpu_pools = gpu_pools_of(workloads.values())

        def size() -> tuple[int, str]:
            if len(gpu_pools) != 1:
                named = ", ".join(sorted(p or "(the workspace's only pool)" for p in gpu_pools))
                raise dg.Failure(
                    description=(
                        f"accelerator pool {pool} has no limit and this step's workloads use "
                        f"several GPU pools ({named}): set it with dagster instance "
                        f"concurrency set {pool} <accelerators>"
                    ),
                    allow_retries=False,
                )
            (gpu_pool_id,) = gpu_pools
            try:
                gpu_pool = client.get_gpu_pool(gpu_pool_id)
            except AirError as error:
                raise dg.Failure(
                    description=f"cannot size accelerator pool {pool} from its GPU pool: "
                    f"{self.redact(str(error))}",
                    allow_retries=error.retryable,
                ) from None
            return gpu_pool.reserved_accelerators, f"GPU pool {gpu_pool.pool_id}"

        claim = AcceleratorClaim(
            instance, pool, self.context.run_id, self.step_key, 0, self.context.log
        )
        limit = claim.limit(size)
        self.lane_deps, queued = lanes_of(self.plan, workloads, limit)
        for run, lanes in queued:
            described = "; ".join(", ".join(lane) for lane in lanes)
            self.context.log.info(
                f"{run.label} ask for more accelerators at once than the {limit} slots of "
                f"accelerator pool {pool}: queued within the run in {len(lanes)} lane(s), "
                f"one partition after another: {described}"
            )
        claim.count = step_accelerators(self.plan, workloads, self.lane_deps)
        self.accelerators = claim
        claim.acquire(limit)

    def _secret_values(self, client: AirClient) -> dict[str, str]:
        """The secret_env values (resolved where the step runs), redacted from then on."""
        secret_env = {**self.workspace.secret_env, **(self.options.secret_env or {})}
        if not secret_env:
            return {}
        values = resolve_secret_env(secret_env)
        self.redact = client.redactor.with_values(values.values())
        if self.redact.ignored:
            self.context.log.warning(
                f"{self.redact.ignored} secret_env value(s) are shorter than 4 characters: they "
                "are not redacted from messages and logs (too short to tell from ordinary text)"
            )
        return values

    def _with_secrets(
        self,
        client: AirClient,
        submission: Submission,
        values: Mapping[str, str],
        keys: Sequence[str],
        workloads: Mapping[str, Workload],
    ) -> dict[str, Workload]:
        """The workloads ``keys`` with the secret_env values written under keys of this
        submission alone (the core deletes first what earlier runs of the step left behind
        once their runs ended)."""
        mine = {key: workloads[key] for key in keys}
        if not values:
            return mine
        try:
            refs = submission.store(client, values, scope=self.workspace.secret_scope)
        except AirError as error:
            if error.retryable:
                raise
            raise config_failure(
                self.redact(str(error)), _refusal(error, "cannot store the orchestrator secrets")
            ) from None
        return {key: w.with_secrets(refs) for key, w in mine.items()}

    def _pipes_ready(self, workloads: dict[str, Workload]) -> dict[str, Workload]:
        """The workloads with their Pipes environment, when the resource enables Pipes."""
        return self.row_workloads.with_pipes(workloads) if self.workspace.pipes else workloads

    def _send(
        self, client: AirClient, run: RemoteRun, workloads: dict[str, Workload]
    ) -> SubmittedRun:
        planned = run.planned
        payload: Workload | list[Stage]
        rows = self.plan.rows_of(planned)
        if planned.multi_task:
            present = set(planned.task_keys)
            payload = [self._stage(r, workloads[r.task_key], present) for r in rows]
        else:
            (payload,) = workloads.values()
        run_name = self.workflow.name if planned.multi_task else None
        if planned.wave:  # named apart from the run before: after which stages it started
            upstream = sorted({self.plan.rows[a].stage.key for r in rows for a in r.after})
            run_name = f"{self.workflow.name}_after_{'_'.join(upstream)}"
        try:
            return run.submission.submit(client, payload, self.generation, run_name=run_name)
        except SweepBudgetSpent as refused:
            # Nothing submitted; the sweep's runs still going were cancelled (the core's).
            message = self.redact(str(refused))
            self.context.log.error(message)
            for other in self.runs:
                if other.submitted is not None and other.submitted.run_id not in self._over_budget:
                    self._over_budget[other.submitted.run_id] = message
            raise dg.Failure(description=message, allow_retries=False) from None
        except AirError as error:
            if not error.retryable:  # the workload, the setup or a refusal: a retry cannot help
                raise config_failure(
                    self.redact(str(error)), _refusal(error, "the workspace refused the workload")
                ) from None
            raise dg.Failure(
                description=f"submitting the run failed: {self.redact(str(error))}"
            ) from None

    def _stage(self, row: TaskRow, workload: Workload, present: set[str]) -> Stage:
        """A row as a task of a multi-task run (of the tasks ``present``); a partition queued
        behind another in its lane starts once that one ended, however it ended
        (``ALL_DONE``)."""
        queued_behind = tuple(k for k in self.lane_deps.get(row.task_key, ()) if k in present)
        if queued_behind:
            return Stage(row.task_key, workload, queued_behind, run_if="ALL_DONE")
        run_if = row.stage.stage.run_if if row.depends_on else "ALL_SUCCESS"
        return Stage(row.task_key, workload, row.depends_on, run_if=run_if)

    def _interrupted(self, client: AirClient) -> Iterator[AirEvent]:
        """The Dagster run was terminated: stop the GPU runs too; a retry of this step
        (Dagster retries interrupted steps that have a retry policy) must not reattach to
        the runs just cancelled."""
        for run in self.runs:
            if run.submitted is None:
                continue
            ended = run.state or self._cancel_remote(client, run)
            if ended is not None:
                run.submission.finish(client, ended)
            first = self.plan.rows_of(run.planned)[0].stage.asset_key
            yield terminal_failure_observation(
                self.context, first, run.submitted, ended, self.generation
            )

    def _cancel(
        self, client: AirClient, submission: Submission, cause: CancelCause
    ) -> RunState | None:
        """The one way the step cancels a remote run (one it cannot adopt, one of a
        terminated Dagster run, one over budget): ask with its cause, then wait up to
        ``cancel_wait`` for it to end. Returns its final state when it ended by then."""
        return submission.cancel(
            client,
            wait_s=self.workspace.cancel_wait,
            poll_interval=min(1.0, self.workspace.poll_interval),
            cause=cause,
        )

    def _cancel_remote(self, client: AirClient, run: RemoteRun) -> RunState | None:
        """Cancel one remote run and wait a little for it to end, so the event log says how
        it ended. Returns the final state when it ended within ``cancel_wait``."""
        log = self.context.log
        submitted = run.submitted
        assert submitted is not None
        log.warning(
            f"Dagster run terminated: cancelling run {submitted.run_id} ({submitted.run_page_url})"
        )
        try:
            state = self._cancel(
                client,
                run.submission,
                run.submission.cause(
                    "orchestrator", f"Dagster run {self.context.run_id} was terminated"
                ),
            )
        except AirError as error:
            log.error(f"could not cancel run {submitted.run_id}: {self.redact(str(error))}")
            return None
        if state is not None:
            log.warning(f"run {submitted.run_id} ended {state.describe()}")
        elif self.workspace.cancel_wait > 0:
            log.warning(
                f"run {submitted.run_id} is still ending after {self.workspace.cancel_wait:g}s"
            )
        return state

    # --- watch: the wait ------------------------------------------------------------

    def _wait(self, run: RemoteRun, budgets: bool = True) -> Generator[AirEvent, None, RunState]:
        submitted = run.submitted
        assert submitted is not None
        events: WatchEvents = queue.SimpleQueue()
        # Every node is followed (Pipes messages may come from any rank); log_node only
        # narrows what is printed. The queue is this step's alone: whichever step's wait
        # the shared watcher serves, what it sees of this run lands here. After a cancel
        # over budget the wait only waits for the end, and the rest of the logs is not read
        # again.
        future = watch_in_background(
            self.workspace,
            submitted.run_id,
            events,
            self._wait_policy(run) if budgets else WaitPolicy.until_end(),
            follow_logs=budgets and (self.workspace.stream_logs or self.pipes is not None),
        )
        try:
            while True:
                yield from self._drain(events, submitted.run_id)
                try:
                    state = future.result(timeout=0.5)
                    break
                except concurrent.futures.TimeoutError:
                    self.own_run.check()
                except (BudgetExceeded, RetriesStopped) as exceeded:
                    future.cancel()
                    yield from self._drain(events, submitted.run_id)
                    self._cancel_over_budget(run, exceeded)
                    return (yield from self._wait(run, budgets=False))
            yield from self._drain(events, submitted.run_id)
            # The end as any state the wait shows.
            self._last_state = state
            yield from self._attempt_ends(state)
            return state
        except BaseException:
            future.cancel()  # stop following this run on the background loop
            raise

    def _wait_policy(self, run: RemoteRun) -> WaitPolicy:
        """What ends the wait on ``run`` besides its end: the step's failure policy, its
        sweep, the run's ``max_gpu_hours`` and its tasks' (all checked by the shared watcher,
        from the states it reads): each stage's own; in a range run the asset's bounds each
        partition's task instead of the whole run, otherwise the whole step (all its runs)."""
        scope, asset = self.plan.scope, self.options.max_gpu_hours
        tasks: dict[str, float] = {}
        for row in self.plan.rows_of(run.planned):
            task = scope.task_budget(row.stage.stage.max_gpu_hours, asset)
            if task is not None:
                tasks[row.task_key] = float(task)
        step = scope.step_budget(asset)
        run_budget = None
        if step is not None:
            # The asset's budget bounds the step: a run after a blocking check gets what the
            # runs before it left (they have ended: their GPU-hours are final).
            used = sum(
                r.state.gpu_hours() for r in self.runs if r is not run and r.state is not None
            )
            run_budget = max(float(step) - used, 1e-9)
        return WaitPolicy(
            max_gpu_hours=run_budget,
            task_budgets=tasks,
            failure_policy=FailurePolicy.of(
                self.options.failure_policy, self.options.stop_deterministic_retries
            ),
            sweep=self.sweep,
        )

    def _cancel_over_budget(
        self, run: RemoteRun, exceeded: BudgetExceeded | RetriesStopped
    ) -> None:
        """Cancel a run that passed its budget (a task's budget cancels its whole run: the
        platform cancels runs, not tasks), or whose retries cannot help; the step fails
        saying so once the run ended."""
        submitted = run.submitted
        assert submitted is not None and self._client is not None
        try:
            self._cancel(self._client, run.submission, run.submission.stop_cause(exceeded))
        except AirError as error:
            message = (
                f"{exceeded}; cancelling run {submitted.run_id} failed: {self.redact(str(error))}"
            )
            self.context.log.error(message)
            raise dg.Failure(description=message, allow_retries=False) from None
        message = f"{exceeded}; cancelled"
        self.context.log.warning(message)
        self._over_budget[submitted.run_id] = message
        if isinstance(exceeded, SweepBudgetSpent):  # its other runs still going too
            stopped = {m.run_id for m in exceeded.spend.running}
            for other in self.runs:
                if other.submitted is not None and other.submitted.run_id in stopped:
                    self._over_budget.setdefault(other.submitted.run_id, message)

    def _drain(self, events: WatchEvents, run_id: int) -> Iterator[AirEvent]:
        while True:
            try:
                event = events.get_nowait()
            except queue.Empty:
                return
            yield from self._show(event, run_id)

    def _show(self, event: WatchEvent, run_id: int) -> Iterator[AirEvent]:
        if isinstance(event, StateSeen):
            state = event.state
            text = f"run {run_id}: {state.describe()}"
            if state.is_waiting_for_capacity:
                text += " (waiting for GPU capacity)"
            self.context.log.info(self.redact(text))
            self._last_state = state
            yield from self._mlflow_links(state)
            yield from self._attempt_ends(state)
        elif isinstance(event, ProgressSeen):
            # Read for a run of one task only (eta.go reads one MLflow run): that row's.
            progress = event.progress
            self.context.log.info(f"run {run_id}: training {progress.detailed()}")
            tasks = self._last_state.tasks if self._last_state is not None else ()
            for task in tasks:
                row = self.plan.rows.get(task.task_key)
                if row is not None:
                    yield dg.AssetObservation(
                        asset_key=row.stage.asset_key,
                        partition=row.partition,
                        metadata={
                            "dagster-air/run_id": run_id,
                            "dagster-air/progress_percent": progress.percent_complete,
                            "dagster-air/remaining_s": progress.remaining_seconds,
                        },
                    )
        elif isinstance(event, WatchWarning):
            self.context.log.warning(self.redact(event.text))
        else:
            record, line = event.record, self.redact(event.line)
            # Pipes messages of every node; printed lines of every node or the chosen one.
            if self.pipes is not None and self.pipes.reader.handle_line(
                line, record.task_key, record.attempt
            ):
                return
            node = self.options.log_node
            node = node if node is not None else self.workspace.log_node
            if self.workspace.stream_logs and (node is None or record.node_index == node):
                sys.stdout.write(f"[run {run_id} {record.label}] {line}\n")
                sys.stdout.flush()

    def _mlflow_links(self, state: RunState) -> Iterator[AirEvent]:
        """Each row's MLflow run as soon as its attempt has one (the core's
        ``MlflowLinkReader``: one read per attempt, once RUNNING), logged and recorded as an
        observation of the row's asset (``dagster-air/mlflow_run``) while the run trains."""
        if self._client is None:
            return
        run = next(
            (r for r in self.runs if r.submitted and r.submitted.run_id == state.run_id), None
        )
        if run is None:
            return
        for row in self.plan.rows_of(run.planned):
            reader = self._mlflow_readers.setdefault(
                row.task_key, MlflowLinkReader(row.task_key if run.planned.multi_task else None)
            )
            task_run = reader.due(state)
            url = reader.read(self._client, task_run) if task_run is not None else None
            if url is None:
                continue
            self.context.log.info(f"run {state.run_id}: {row.task_key} MLflow run {url}")
            yield dg.AssetObservation(
                asset_key=row.stage.asset_key,
                partition=row.partition,
                metadata={
                    f"{META_PREFIX}run_id": state.run_id,
                    f"{META_PREFIX}mlflow_run": dg.MetadataValue.url(url),
                },
            )

    def _run_tasks(self) -> dict[str, RunTask]:
        """The rows as the blocking checks see them."""
        return {
            key: RunTask(
                key,
                row.stage.asset_key,
                self.plan.scope.check_partition(row.partition),
                row.depends_on + row.after,
            )
            for key, row in self.plan.rows.items()
        }

    def _follow_blocking(self, state: RunState) -> None:
        """The blocking checks of an ended run: what they block of the waves after it."""
        if self.blocking is None:
            self.blocking = BlockingChecks(self._run_tasks(), blocking_check_keys(self.context))
        reports = self.pipes.reports() if self.pipes is not None else []
        self.blocking.update(state, reports)

    def _attempt_ends(self, state: RunState) -> Iterator[AirEvent]:
        """One observation per attempt of a row that ended (platform retries included), on
        that row's asset, as soon as the step sees it."""
        for attempt in state.attempts:
            key = (attempt.task_key, attempt.attempt_number)
            if not attempt.is_terminal or key in self._attempts_seen:
                continue
            self._attempts_seen.add(key)
            row = self.plan.rows.get(attempt.task_key)
            if row is None:
                continue
            final = attempt.result_state or attempt.life_cycle_state
            shown = dataclasses.replace(attempt, state_message=self.redact(attempt.state_message))
            self.context.log.info(
                f"run {state.run_id}: {attempt.task_key} attempt {attempt.attempt_number} "
                f"ended {final}"
            )
            yield dg.AssetObservation(
                asset_key=row.stage.asset_key,
                partition=row.partition,
                metadata=self.translator.get_attempt_metadata(
                    row.stage.stage, row.stage.workload, state.run_id, shown
                ),
            )

    # --- the results: one per row ---------------------------------------------------

    def _results(self, client: AirClient, workloads: Mapping[str, Workload]) -> Iterator[RowResult]:
        for kept in self.plan.kept:
            yield RowResult.kept(kept, self._kept_metadata(kept))
        blocked = self.blocking.blocked if self.blocking is not None else {}
        for run in self.runs:
            submitted, state = run.submitted, run.state
            assert submitted is not None and state is not None
            reported: dict[str, AttemptReports] = {}
            # What earlier (retried) attempts of a row reported, by task key.
            superseded: dict[str, list[dg.AssetObservation]] = {}
            if self.pipes is not None:  # each run's wait followed its blocking checks
                final, earlier = self.pipes.final_reports(state)
                for reports in earlier:
                    row = self.plan.rows.get(reports.task_key)
                    if row is not None:
                        superseded.setdefault(row.task_key, []).append(
                            earlier_attempt_observation(
                                reports, row.stage.asset_key, row.partition, submitted.run_id
                            )
                        )
                reported = {r.task_key: r for r in final}
                if not run.planned.multi_task:  # a plain run's one task reports for its row
                    reported = {run.planned.task_keys[0]: _merged(final)} if final else {}
            for row in self.plan.rows_of(run.planned):
                result = self._row_result(
                    client, row, workloads[row.task_key], submitted, state, reported, blocked
                )
                yield dataclasses.replace(
                    result, observations=tuple(superseded.get(row.task_key, ()))
                )
        submitted_rows = {key for run in self.runs for key in run.planned.task_keys}
        for key, row in self.plan.rows.items():
            if key not in submitted_rows:  # a later wave's row its checks did not let through
                why = blocked.get(key) or self.skipped.get(key) or "not submitted"
                yield RowResult.of(row, failure=why)

    def _row_result(
        self,
        client: AirClient,
        row: TaskRow,
        workload: Workload,
        submitted: SubmittedRun,
        state: RunState,
        reported: Mapping[str, AttemptReports],
        blocked: Mapping[str, str],
    ) -> RowResult:
        reports = reported.get(row.task_key)
        checks = tuple(reports.checks) if reports is not None else ()
        if row.task_key in blocked:
            return RowResult.of(row, checks=checks, failure=blocked[row.task_key])
        if submitted.run_id in self._over_budget:
            return RowResult.of(row, checks=checks, failure=self._over_budget[submitted.run_id])
        task = state.task(row.task_key)
        succeeded = task.is_success if task is not None else state.is_success
        try:
            outcome: RunOutcome | None = RunOutcome.read(client, state, row.task_key).priced(
                self.prices
            )
        except AirError:
            outcome = None
        if outcome is not None and outcome.status is RunStatus.BUDGET:
            # Cancelled for a budget elsewhere (a spent sweep's other wait): no retry.
            self._over_budget[submitted.run_id] = outcome.message
            return RowResult.of(row, checks=checks, failure=self.redact(outcome.message))
        if not succeeded or outcome is None:
            why = outcome.message if outcome is not None and outcome.message else None
            why = why or state.stage(row.task_key).describe()
            return RowResult.of(row, checks=checks, failure=self.redact(why))
        outcome = dataclasses.replace(outcome, run_page_url=submitted.run_page_url)
        metadata = self.translator.get_materialization_metadata(
            row.stage.stage,
            workload,
            outcome,
            state=state,
            idempotency_token=submitted.idempotency_token,
        )
        metadata.update(self._output_metadata(workload))
        metadata.update(self._checkpoint_metadata(client, state, row))
        metadata.update(self.plan.scope.partition_metadata(row.partition))
        from_pipes = reports.materializations.get(row.stage.asset_key) if reports else None
        # What the workload reports adds to, never replaces, what the run says.
        metadata = {**((from_pipes.metadata or {}) if from_pipes else {}), **metadata}
        return RowResult.of(
            row,
            metadata=metadata,
            data_version=from_pipes.data_version if from_pipes else None,
            checks=checks,
        )

    def _checkpoint_metadata(
        self, client: AirClient, state: RunState, row: TaskRow
    ) -> dict[str, Any]:
        """With a checkpoint volume: the newest checkpoint of the row's task (also in the
        step log); nothing when there is none or it cannot be read."""
        if self.workspace.checkpoint_volume is None:
            return {}
        try:
            checkpoint = client.newest_checkpoint(state, row.task_key)
        except AirError as error:
            self.context.log.warning(
                f"could not list the checkpoints of {row.task_key}: {self.redact(str(error))}"
            )
            return {}
        if checkpoint is None:
            return {}
        self.context.log.info(
            f"newest checkpoint of {row_name(row.stage, row.partition)}: {checkpoint.describe()} "
            f"({checkpoint.path})"
        )
        metadata: dict[str, Any] = {CHECKPOINT_KEY: dg.MetadataValue.path(checkpoint.path)}
        if checkpoint.step is not None:
            metadata[CHECKPOINT_STEP_KEY] = dg.MetadataValue.int(checkpoint.step)
        return metadata

    def _kept_metadata(self, kept: KeptRow) -> dict[str, Any]:
        """A kept row's materialization says where it came from and costs nothing here."""
        metadata: dict[str, Any] = {
            KEPT_FROM_KEY: kept.dagster_run_id,
            GPU_HOURS_KEY: dg.MetadataValue.float(0.0),
        }
        for name in (f"{META_PREFIX}run_id", f"{META_PREFIX}run_url", OUTPUT_URI_KEY):
            if name in kept.metadata:
                metadata[name] = kept.metadata[name]
        metadata.update(self.plan.scope.partition_metadata(kept.partition))
        return metadata

    def _output_metadata(self, workload: Workload) -> dict[str, Any]:
        name = self.options.output_env
        value = workload.env_variables.get(name) if name else None
        if not value:
            return {}
        metadata: dict[str, Any] = {f"{META_PREFIX}output/{name}": value}
        if _LOCATION.match(value):  # a path or a URL, not some other kind of value
            metadata[OUTPUT_URI_KEY] = value
        return metadata

    # --- the record -----------------------------------------------------------------

    def _record(self, results: list[RowResult]) -> Iterator[AirEvent]:
        """The events ``record`` makes of the results: a range's partition metadata goes to
        the context, an ignored check to the log."""
        context = self.context
        recorded = record(
            self.plan,
            results,
            self.plan.scope,
            context.assets_def,
            context.selected_asset_check_keys,
        )
        for event in recorded:
            if isinstance(event, PartitionMetadata):
                context.add_asset_metadata(
                    dict(event.metadata), asset_key=event.asset_key, partition_key=event.partition
                )
            elif isinstance(event, IgnoredCheck):
                context.log.warning(event.message)
            else:
                yield event

    # --- the failure ----------------------------------------------------------------

    def _fail_if_any(self, client: AirClient, results: list[RowResult]) -> Iterator[AirEvent]:
        failed = [r for r in results if r.failure is not None and r.trained]
        if not failed:
            return
        blocked = self.blocking.blocked if self.blocking is not None else {}
        failed_keys = {r.task_key for r in failed}
        # The runs that ended badly (or over budget); a later wave's row that was never
        # submitted has no run of its own.
        failing = [
            run
            for run in self.runs
            if failed_keys & set(run.planned.task_keys)
            and run.state is not None
            and run.submitted is not None
            and (not run.state.is_success or run.submitted.run_id in self._over_budget)
        ]
        for run in failing:
            # A retry of the step starts a new generation (see ``_identity``).
            assert run.submitted is not None and run.state is not None
            yield terminal_failure_observation(
                self.context, self._failed_asset(run, failed), run.submitted, run.state,
                self.generation,
            )  # fmt: skip
        first = failing[0] if failing else self.runs[0]
        assert first.submitted is not None and first.state is not None
        metadata = self.translator.get_run_metadata(
            first.submitted.run_id, first.submitted.run_page_url, first.state
        )
        range_failure = self.plan.scope.failure(failed, metadata)
        if range_failure is not None:
            message = range_failure
        elif not failing and failed_keys & set(blocked):
            for r in failed:
                if r.task_key in blocked:
                    self.context.log.warning(
                        f"stage {r.stage.key} is not recorded as materialized: {r.failure}"
                    )
            message = "downstream of a failed blocking check (never started):\n" + "\n".join(
                f"{key}: not materialized, {reason}"
                for key, reason in sorted(blocked.items())
                if key in failed_keys
            )
        elif first.submitted.run_id in self._over_budget:
            message = self._over_budget[first.submitted.run_id]
        else:
            state = first.state
            try:
                client.raise_for_failure(state)
                message = f"run {first.submitted.run_id} ended {state.describe()}"
            except RunFailed as error:
                message = str(error)
            except AirError as error:
                message = f"run {first.submitted.run_id} ended {state.describe()} ({error})"
        # A run cancelled over its budget is not retried: a retry would spend as much again.
        retry = not any(
            run.submitted.run_id in self._over_budget for run in failing if run.submitted
        )
        raise dg.Failure(description=self.redact(message), metadata=metadata, allow_retries=retry)

    def _failed_asset(self, run: RemoteRun, failed: list[RowResult]) -> dg.AssetKey:
        """The asset of the run's failed task (the first failed row's otherwise)."""
        assert run.state is not None
        failed_task = run.state.failed_task
        rows = self.plan.rows_of(run.planned)
        if failed_task is not None:
            for row in rows:
                if row.task_key == failed_task.task_key:
                    return row.stage.asset_key
        mine = [r for r in failed if r.task_key in run.planned.task_keys]
        return (mine[0].stage if mine else rows[0].stage).asset_key


def _merged(reports: Sequence[AttemptReports]) -> AttemptReports:
    """The reports of a plain run's final attempt as one (its logs may name its task
    differently from the row)."""
    materializations: dict[dg.AssetKey, dg.MaterializeResult] = {}
    checks: list[dg.AssetCheckResult] = []
    for reports_of_task in reports:
        materializations.update(reports_of_task.materializations)
        checks.extend(reports_of_task.checks)
    return AttemptReports(reports[0].task_key, reports[0].attempt, materializations, checks)
