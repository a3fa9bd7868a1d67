"""Triggers that wait on AI Runtime runs and image registrations in the triggerer.

``AirRunTrigger`` does not poll on its own: it registers with the process-wide ``RunWatcher``
of its workspace (one per event loop), which refreshes all watched runs with a few coalesced
requests within the ``[air] workspace_request_budget``. A triggerer holding thousands of
deferred tasks therefore sends about as many requests as one holding ten.

Cancellation. ``on_kill()`` cancels the remote run (when ``cancel_on_kill``), and so does the
trigger's own deadline handling (``execution_timeout``), never ``cleanup()``: a triggerer
restart only cancels the coroutine, and a restarted triggerer picks the wait up again. Airflow
3.3 also calls ``on_kill()`` on a triggerer that comes back after missing its heartbeat, for
each trigger another triggerer took over meanwhile (apache/airflow#73454, fixed in 3.4); so
before 3.4 ``on_kill()`` cancels only when the task instance has left DEFERRED
(``airflow_air._failover``).

Finishing in the triggerer. When the operator allows it (``finish_in_triggerer``, see
``AirRunOperator``), a run that succeeded ends the task here: the trigger copies the nodes'
log lines into its own log (the task log shows the trigger's lines), deletes the submission's
secret keys and yields ``TaskSuccessEvent`` with every XCom the worker would have pushed, so
the task takes one worker run instead of two. A run that failed, timed out or could not be
read resumes in a worker as before (the rich failure message, retry rules and fail-fast
errors live there). ``dag.test()`` and ``airflow dags test`` turn a ``TaskSuccessEvent`` into
its bare state, so under their in-process runner the trigger always resumes the task (at once:
they run the trigger inline, with no scheduler to race with).

Resuming too early. Airflow 3.3 can fail a deferred task whose trigger fires within moments of
the deferral: the executor's "success" for the try that just deferred is only read on a later
scheduler loop, and when the trigger has already moved the task back to queued or running by
then, the scheduler takes it for a task killed from outside (apache/airflow#72716, #71580; the
"scheduled" case was fixed by #66431, the "running" one is apache/airflow#72767, not released).
A task the trigger ends itself is already ``success`` when that event is read, which the
scheduler accepts, so a success is yielded as soon as it is seen. An event that resumes the
task waits until ``first_poll_at``, by which the scheduler has processed the deferral's exit:
the worker's supervisor notices that exit only when it next wakes (up to ``[workers]
min_heartbeat_interval`` later), so the default delay is twice that interval. The operators
also look at the run before deferring (a run that has already ended is finished in the worker,
no deferral). After a triggerer restart the time has passed.

Logs. While a run runs, the shared watcher reads its newest node lines within its request
budget (``[air] live_lines``: at most a share of ``workspace_request_budget``, each run every
``live_lines_interval`` seconds, the newest ``live_lines_per_read`` lines of a node per read),
and the trigger writes them to its log, each stamped with the time it was printed. Once the
run has ended, the lines not shown yet (labelled with task, node and attempt, at most ``[air]
completed_log_lines``) are copied: by the trigger when it finishes the task, else by the
operator when it resumes (``AirRunOperator.execute_complete``, told what was shown by the
event). A workflow stage's wait shows its lines at its end only. Every line is written from
the trigger's own task, so it lands in that task instance's log and no other's. A trigger taken
over by another triggerer (or a restarted one) starts after the lines already shown
(``LINES_SHOWN_KEY``).

Outages. A workspace that answered and stops answering (a restart, a dead load balancer) is
waited out by the shared watcher: no wait ends in an error, one request asks for every trigger
until it answers (``air_runtime.RunWatcher``), and each trigger's log says once that the
workspace is unreachable since when and once that it is reachable again. A plan being
submitted (``submit_in_triggerer``) is sent again once the workspace answers, with the same
idempotency token, so it is the same run.

Connections. A trigger performs the hook's lookups with ``run_lookups_in_loop``, which looks a
connection up with the Task SDK's async call and, when that finds nothing, with the synchronous
one in a thread: ``airflow dags test`` runs triggers with an in-process supervisor that only
answers synchronous requests.

Secrets. The event's failure message carries the run's last log lines, and the event is
stored in Airflow's database (and shown in the triggerer's log) before any task code sees it.
So the trigger redacts it itself: its kwargs carry the task's ``secret_env`` *references*
(never values), which it looks up again in the triggerer (connections and variables are
readable there), and the workspace token comes from its client. Its own log lines go through
the same ``air_runtime.Redactor``; the operator redacts the event message once more when the
task resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_air.hooks import DEFAULT_CONN_ID, AirHook, run_lookups_in_loop
from airflow_air.links import RUN_ID_KEY, RUN_PAGE_URL_KEY, LinkXComs

if TYPE_CHECKING:
    from air_runtime import (
        AsyncAirClient,
        CancelCause,
        Prices,
        Redactor,
        RetryDecision,
        RunOutcome,
        RunState,
        RunWatcher,
        TrainingProgress,
        WorkspaceNotice,
    )
    from airflow_air._logs import LiveLines

_ON_KILL_TIMEOUT_S = 20.0
# The node lines a trigger has shown (per stream, the newest line's time), kept while it waits
# as an XCom of its task instance, so that a triggerer taking the wait over (a restart, a
# failover) shows only newer lines. Not in the kwargs: they are fixed at deferral. Not read
# back from the task log: each triggerer writes its own file on its own host (remote logging
# uploads it only at the end), which another triggerer cannot read; XComs are in the metadata
# database every triggerer reaches, and a new try starts without them. Written once a batch
# is in the log, so a kill in between shows that one batch again at most; deleted when the
# wait ends (the event carries ``shown_lines`` on).
LINES_SHOWN_KEY = "air_lines_shown"


def _under_in_process_runner() -> bool:
    """Whether this trigger runs under ``dag.test()`` / ``airflow dags test``: their
    in-process supervisor resumes the task with a ``TaskSuccessEvent``'s bare state and
    drops its XComs, so the trigger must not end the task there."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:  # pragma: no cover - every supported Airflow has both
        return False
    return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)


async def _sleep_until(first_poll_at: float | None, deadline: float | None) -> None:
    """Wait until ``first_poll_at`` (wall clock), never past ``deadline``."""
    if first_poll_at is None:
        return
    until = first_poll_at if deadline is None else min(first_poll_at, deadline)
    pause = until - time.time()
    if pause > 0:
        await asyncio.sleep(pause)


class AirRunTrigger(BaseTrigger):
    """Waits for an AI Runtime run (or one stage of a workflow run) to end.

    Fires exactly one event whose payload has ``status``: ``success``, ``failed`` (with the
    platform's failure message), ``timeout`` (the deadline passed; the run was cancelled when
    ``cancel_on_kill``) or ``error`` (the workspace could not be asked), plus ``run_id``,
    ``run_page_url``, ``result_state`` and the MLflow ids when known.

    :param run_id: the run to wait for; None with ``plan``.
    :param run_page_url: its page, echoed in the event.
    :param plan: an ``air_runtime.SubmissionPlan`` (``to_json``) to submit first, for an
        operator's ``submit_in_triggerer``: its idempotency token makes the submit safe to
        repeat (a restarted trigger submits again and gets the same run). The trigger then
        writes the ``run_id`` and ``run_page_url`` XComs, as a worker does after its submit.
    :param databricks_conn_id: the ``databricks`` connection of the workspace.
    :param poll_interval: seconds between status refreshes (shared watcher interval).
    :param wait: ``air_runtime.WaitPolicy.to_json()``, what ends the wait besides the run's
        end: its ``task_key`` (wait for this task of a multi-task run instead of the whole
        run); its ``deadline`` (wall clock, from the task's ``execution_timeout``), after
        which the event's ``status`` is ``timeout``; its ``max_gpu_hours`` (the run's, the
        stage's budget: once the watcher's states show it passed, the run is cancelled and
        the event's ``status`` is ``budget``); its ``failure_policy`` (each decision on a
        failed attempt is logged; one that stops the platform's retries
        (``air_runtime.RetriesStopped``) cancels the run, and the event's ``status`` is
        ``retries_stopped``, ``failed`` when the orchestrator's retry takes over); its
        ``sweep`` (the run's sweep, its Dag run, when the task has a
        ``sweep_gpu_hours_budget``: the shared watcher lists what the sweep spent once per
        interval for every trigger on it; once spent, the run and the sweep's other runs
        still going are cancelled and the event's ``status`` is ``budget``). A trigger an
        earlier version stored has these keys flat in its kwargs: they are read the same.
    :param cancel_on_kill: cancel the run when the task is killed or times out.
    :param first_poll_at: wall-clock time before which the workspace is not asked (see the
        module docstring); None polls at once.
    :param secret_env: the task's ``secret_env`` references (``conn:...``, ``var:...``),
        looked up in the triggerer to redact their values from the event and the logs.
    :param finish_in_triggerer: end the task here when the run succeeds (``TaskSuccessEvent``)
        instead of resuming it in a worker; set by the operator (see the module docstring).
    :param push_return_value: with ``finish_in_triggerer``, also leave the return value
        (the operator's ``do_xcom_push``).
    :param submission: the task's ``air_runtime.Submission`` (``to_json``) when it wrote
        secret keys: deleted here once the run has succeeded (``finish_in_triggerer``), else
        handed back in the event to the worker that resumes and deletes them.
    :param stream_logs: with ``finish_in_triggerer``, copy the nodes' lines into the log.
    :param cancelled_by: who cancels, kept with the cause of each cancel next to the run
        (``air_runtime.CancelCause``): the task instance.
    :param prices: ``air_runtime.Prices.to_json()`` (the connection's): the event's outcome
        carries what the run cost.
    """

    def __init__(
        self,
        run_id: int | None,
        *,
        run_page_url: str = "",
        plan: dict[str, Any] | None = None,
        databricks_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = 5.0,
        wait: dict[str, Any] | None = None,
        cancel_on_kill: bool = True,
        first_poll_at: float | None = None,
        secret_env: dict[str, str] | None = None,
        finish_in_triggerer: bool = False,
        push_return_value: bool = True,
        submission: dict[str, Any] | None = None,
        stream_logs: bool = True,
        cancelled_by: str = "",
        prices: dict[str, Any] | None = None,
        **flat_wait: Any,
    ) -> None:
        from air_runtime import WaitPolicy

        super().__init__()
        unknown = set(flat_wait) - {f.name for f in dataclasses.fields(WaitPolicy)}
        if unknown:
            raise TypeError(f"AirRunTrigger got unexpected arguments: {sorted(unknown)}")
        if run_id is None and not plan:
            raise ValueError("AirRunTrigger needs a run_id or a plan to submit")
        self.run_id = int(run_id) if run_id is not None else 0  # 0: not submitted yet
        self.run_page_url = run_page_url
        self.plan = dict(plan) if plan else None
        self.databricks_conn_id = databricks_conn_id
        self.poll_interval = float(poll_interval)
        # ``flat_wait``: the policy's keys as an earlier version stored them (and as a
        # caller may give them); ``wait`` when both.
        self.wait_policy = WaitPolicy.from_json(wait if wait is not None else flat_wait)
        self.cancel_on_kill = cancel_on_kill
        self.first_poll_at = None if first_poll_at is None else float(first_poll_at)
        self.secret_env = dict(secret_env) if secret_env else None
        self.finish_in_triggerer = bool(finish_in_triggerer)
        self.push_return_value = bool(push_return_value)
        self.submission = dict(submission) if submission else None
        self.stream_logs = bool(stream_logs)
        self.cancelled_by = cancelled_by
        self.prices = dict(prices) if prices else None
        self._redact: Redactor | None = None
        self._last_seen = ""  # the last state read, for the timeout message
        # The plan's submit, shielded: a kill while it is in flight still learns the run.
        self._submitting: asyncio.Future[Any] | None = None
        # The XComs this trigger wrote (the run's when it submitted, the MLflow link), or
        # could not write (``run_pending``): told to the worker that resumes in the event.
        self._links = LinkXComs()
        self._link_reads: set[asyncio.Future[None]] = set()  # MLflow link reads under way
        self._live: LiveLines | None = None  # the node lines shown while the run ran
        self._shown_to_keep: dict[str, int] | None = None  # not yet in the LINES_SHOWN_KEY XCom
        self._keeping: asyncio.Future[None] | None = None  # writing it
        self._kept_lines_shown = False  # whether this trigger wrote it (or found one)
        self._outage_told: float | None = None  # the outage the log told of (its start)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "run_id": self.run_id or None,
                "run_page_url": self.run_page_url,
                "plan": self.plan,
                "databricks_conn_id": self.databricks_conn_id,
                "poll_interval": self.poll_interval,
                "wait": self.wait_policy.to_json(),
                "cancel_on_kill": self.cancel_on_kill,
                "first_poll_at": self.first_poll_at,
                "secret_env": self.secret_env,
                "finish_in_triggerer": self.finish_in_triggerer,
                "push_return_value": self.push_return_value,
                "submission": self.submission,
                "stream_logs": self.stream_logs,
                "cancelled_by": self.cancelled_by,
                "prices": self.prices,
            },
        )

    @property
    def task_key(self) -> str | None:
        return self.wait_policy.task_key

    @property
    def deadline(self) -> float | None:
        return self.wait_policy.deadline

    def _hook(self) -> AirHook:
        return AirHook(self.databricks_conn_id)

    def redact(self, text: str) -> str:
        return self._redact(text) if self._redact is not None else text

    async def _redactor(self, client: AsyncAirClient) -> Redactor:
        from airflow_air._secret_env import secret_values

        values = await run_lookups_in_loop(secret_values(self.secret_env or {}))
        return client.redactor.with_values(values)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from air_runtime import (
            AirError,
            BudgetExceeded,
            CancelCause,
            RetriesStopped,
            RunOutcome,
            RunStatus,
            RunTimeout,
        )

        # Under dag.test() / `airflow dags test` the trigger runs inline: no scheduler to race
        # with, so no first-poll delay; and no TaskSuccessEvent (the runner drops its XComs).
        inline = _under_in_process_runner()
        finish_here = self.finish_in_triggerer and self.task_key is None and not inline
        refused = False
        try:
            watcher = await self._hook().aget_watcher(interval=self.poll_interval)
            self._redact = await self._redactor(watcher.client)
            if not self.run_id:
                await self._submit(watcher, inline)
            if not finish_here and not inline:
                await _sleep_until(self.first_poll_at, self.deadline)
            live = self._on_lines()
            # No XComs from a trigger under dag.test(), nor from one run without a task.
            if live is not None and not inline and self.task_instance is not None:
                live.shown.update(await self._lines_shown_before())
                live.on_shown = self._keep_lines_shown
            state = await watcher.wait(
                self.run_id,
                self.wait_policy,
                on_update=self._on_update(None if inline else self._mlflow_link(watcher)),
                on_lines=live,
                on_progress=self._on_progress(),
                on_retry=self._on_retry,
                on_workspace=self._on_workspace,
                lines_shown=live.shown if live is not None else None,
            )
            outcome = await self._outcome(watcher.client, state)
            if finish_here and outcome.succeeded:
                ended = await self._end_task(watcher.client, outcome, state)
                if ended is not None:
                    yield ended
                    return
        except RunTimeout:
            # The core's RunTimeout text says the run keeps going; here the trigger decides.
            what = (
                f"stage {self.task_key} of run {self.run_id}"
                if self.task_key
                else (f"run {self.run_id}")
            )
            message = (
                f"execution_timeout reached while {what} was still {self._last_seen}"
                if self._last_seen
                else f"execution_timeout reached before {what} was first read"
            )
            if self.cancel_on_kill:
                why = "the task's execution_timeout passed"
                message += await self._cancel(why, self._cause("timeout", why))
            else:
                message += f"; run {self.run_id} keeps running (cancel_on_kill=False)"
            outcome = RunOutcome.unfinished(
                RunStatus.TIMEOUT, self.run_id, self.run_page_url, message, self.task_key
            )
        except (BudgetExceeded, RetriesStopped) as stopped:
            # Always cancelled (cancel_on_kill or not): the budget is what the user spends,
            # and stopped retries are the ones the user asked not to pay for.
            over = isinstance(stopped, BudgetExceeded)
            note = await self._cancel(
                "it passed its GPU-hour budget"
                if over
                else "an attempt failed in a way retries will not change",
                CancelCause.of_stop(stopped, self.cancelled_by),
            )
            cancelled = note == f"; run {self.run_id} was cancelled"
            outcome = RunOutcome.stopped(
                stopped,
                self.run_id,
                self.run_page_url,
                "; cancelled" if cancelled else note,
                self.task_key,
            ).priced(self._prices())
        except (AirError, OSError) as exc:
            what = f"follow run {self.run_id}" if self.run_id else "submit the planned run"
            outcome = RunOutcome.unfinished(
                RunStatus.ERROR,
                self.run_id,
                self.run_page_url,
                f"could not {what}: {exc}",
                self.task_key,
            )
            # A workspace that refuses the submit fails the task as a worker's refusal would.
            refused = not self.run_id and isinstance(exc, AirError) and not exc.retryable
        except Exception as exc:  # e.g. the connection vanished: still one event, never a hang
            outcome = RunOutcome.unfinished(
                RunStatus.ERROR,
                self.run_id,
                self.run_page_url,
                f"{type(exc).__name__}: {exc}",
                self.task_key,
            )
        for read in list(self._link_reads):  # the worker that resumes writes what they did not
            read.cancel()
        from airflow_air._run_event import RunEvent

        event = RunEvent(
            dataclasses.replace(outcome, message=self.redact(outcome.message)),
            links=self._links,  # the worker that resumes writes the rest
            refused=refused,
            submission=self.submission,  # the worker that resumes deletes its keys
            shown_lines=self._live.shown if self._live is not None else None,
        )
        await self._forget_lines_shown()
        if finish_here:  # the task resumes in a worker: not before the deferral's exit is read
            await _sleep_until(self.first_poll_at, None)
        if not inline and self.task_instance is not None:
            handover = f"Run {self.run_id}: the task resumes in a worker"
            self.log.info("%s", handover)
            await self._until_logged(handover)
        yield TriggerEvent(event.to_payload())

    async def _until_logged(self, line: str) -> None:
        """Until ``line``, the last this trigger logs, is in the task's trigger log (so are
        the lines before it): the triggerer closes that file as the trigger ends."""
        if self.task_instance is None or _under_in_process_runner():
            return
        from airflow_air._logs import wait_until_in_trigger_log

        if not await wait_until_in_trigger_log(self.task_instance, self.redact(line)):
            self.log.debug("%r not seen in this try's trigger log", line)

    async def _lines_shown_before(self) -> dict[str, int]:
        """What an earlier trigger of this wait showed (``LINES_SHOWN_KEY``); empty for a
        first trigger, or when it cannot be read (lines may then show twice, never fail)."""
        from airflow.sdk.bases.xcom import BaseXCom
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import GetXCom, XComResult

        ti = self.task_instance
        if ti is None:
            return {}
        map_index = getattr(ti, "map_index", -1)
        try:
            found = await task_runner.SUPERVISOR_COMMS.asend(
                GetXCom(
                    key=LINES_SHOWN_KEY,
                    dag_id=ti.dag_id,
                    task_id=ti.task_id,
                    run_id=ti.run_id,
                    map_index=map_index if map_index is not None else -1,
                )
            )
            value = (
                BaseXCom.deserialize_value(found)
                if isinstance(found, XComResult) and found.value is not None
                else None
            )
        except Exception as exc:
            self.log.info("Could not read which lines were shown: %s", self.redact(f"{exc!r}"))
            return {}
        if not isinstance(value, dict) or value.get("run_id") != self.run_id:
            return {}
        self._kept_lines_shown = True
        streams = value.get("streams") or {}
        shown = {str(k): int(v) for k, v in streams.items() if isinstance(v, int)}
        if shown and value.get("host") == socket.gethostname():
            shown = await self._still_in_trigger_logs(shown)
        return shown

    async def _still_in_trigger_logs(self, shown: dict[str, int]) -> dict[str, int]:
        """The streams whose newest shown line is still in a trigger log of this try on this
        machine. A triggerer that takes back a trigger it held before opens its file for the
        try afresh (truncating what it wrote then): the lines it showed are shown again."""
        from airflow_air._logs import lines_in_trigger_logs

        resumed = f"Run {self.run_id}: live lines go on after those already shown"
        self.log.info("%s", resumed)
        await self._until_logged(resumed)  # this trigger's file is open (and truncated) by now
        kept = await lines_in_trigger_logs(self.task_instance, shown)
        if kept != shown:
            self.log.info(
                "Run %s: lines shown by an earlier trigger are no longer in this try's trigger "
                "log; they are shown again",
                self.run_id,
            )
        return kept

    def _keep_lines_shown(self, shown: dict[str, int]) -> None:
        """After a batch of lines is in the log: write ``shown`` as ``LINES_SHOWN_KEY``, one
        write at a time, the newest batch's winning."""
        self._shown_to_keep = shown
        if self._keeping is None or self._keeping.done():
            self._keeping = asyncio.ensure_future(self._write_lines_shown())

    async def _write_lines_shown(self) -> None:
        while self._shown_to_keep is not None:
            streams, self._shown_to_keep = self._shown_to_keep, None
            try:
                await self._push_xcoms(
                    {
                        LINES_SHOWN_KEY: {
                            "run_id": self.run_id,
                            "streams": streams,
                            "host": socket.gethostname(),
                        }
                    }
                )
            except Exception as exc:  # a takeover may then show some lines again
                self.log.info(
                    "Could not keep which lines were shown (a takeover may show them again): %s",
                    self.redact(f"{exc!r}"),
                )
                if self._live is not None:
                    self._live.on_shown = None  # once: not one line per batch
                return
            self._kept_lines_shown = True

    async def _forget_lines_shown(self) -> None:
        """The wait is over: no takeover will need ``LINES_SHOWN_KEY`` (and the task's XComs
        stay those of a task that never deferred)."""
        self._shown_to_keep = None
        if self._keeping is not None:
            with contextlib.suppress(Exception):
                await self._keeping
        if not self._kept_lines_shown or self.task_instance is None:
            return
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import DeleteXCom

        ti = self.task_instance
        map_index = getattr(ti, "map_index", -1)
        try:
            await task_runner.SUPERVISOR_COMMS.asend(
                DeleteXCom(
                    key=LINES_SHOWN_KEY,
                    dag_id=ti.dag_id,
                    task_id=ti.task_id,
                    run_id=ti.run_id,
                    map_index=map_index if map_index is not None else -1,
                )
            )
        except Exception as exc:
            self.log.info("Could not delete the %s XCom: %s", LINES_SHOWN_KEY, exc)
        self._kept_lines_shown = False

    async def _submit(self, watcher: RunWatcher, inline: bool) -> None:
        """Submit the plan (shielded: a kill meanwhile waits for the run to cancel it), then
        write the run's XComs as a worker does after its submit (under the in-process runner
        the resumed task writes them). A workspace that does not answer is waited out and
        the plan sent again: its idempotency token makes the same run of every send."""
        from air_runtime import SubmissionPlan

        assert self.plan is not None
        if self._submitting is None:
            plan = SubmissionPlan.from_json(self.plan)
            self._submitting = asyncio.ensure_future(
                watcher.through_outages(
                    lambda: watcher.client.submit(plan),
                    on_workspace=self._on_workspace,
                    deadline=self.deadline,
                )
            )
        submitted = await asyncio.shield(self._submitting)
        self.run_id, self.run_page_url = submitted.run_id, submitted.run_page_url
        self.log.info("Submitted run %s: %s", self.run_id, self.run_page_url)
        if inline:
            self._links.run_pending = True
            return
        xcoms = {RUN_ID_KEY: self.run_id, RUN_PAGE_URL_KEY: self.run_page_url}
        try:
            await self._push_xcoms(xcoms)
        except Exception as exc:  # the task writes them when it ends (here or in a worker)
            self.log.warning("Could not write the run's XComs: %s", self.redact(f"{exc!r}"))
            self._links.run_pending = True
        else:
            self._links.wrote(xcoms)

    async def _end_task(
        self, client: AsyncAirClient, outcome: RunOutcome, state: RunState
    ) -> TriggerEvent | None:
        """What ``execute_complete`` does for a success, here: the logs, the secret keys,
        the XComs; then the event that ends the task without a worker (None: resume it in
        a worker after all, which finishes it there)."""
        try:
            from airflow.triggers.base import TaskSuccessEvent

            from airflow_air.links import success_xcoms

            xcoms = success_xcoms(outcome, push_return_value=self.push_return_value)
            if self._links.run_pending:
                xcoms = {RUN_ID_KEY: self.run_id, RUN_PAGE_URL_KEY: self.run_page_url, **xcoms}
            xcoms = self._links.unwritten(xcoms)  # the MLflow link, when it did not change
        except Exception as exc:  # never fail a run that succeeded
            self.log.warning("Resuming in a worker: %s", self.redact(f"{exc!r}"))
            return None

        from air_runtime import RedactingLog, Submission, end_of_try_flow
        from airflow_air._logs import LogCopy
        from airflow_air.hooks import completed_log_lines

        log = RedactingLog(self.log, self.redact)
        shown = self._live.shown if self._live is not None else None
        copy = (
            LogCopy(log, self.run_id, self.task_key, completed_log_lines(), shown)
            if self.stream_logs
            else None
        )
        submission = (
            Submission.from_json(self.submission, log=log, redact=self.redact)
            if self.submission
            else None
        )
        # The same end of a try as a worker's (``AirTaskRun._end_try``), on this loop.
        ended = await client.run_flow(
            lambda core: end_of_try_flow(
                core,
                outcome,
                state=state,
                task_key=self.task_key,
                lines=copy.add if copy is not None else None,
                submission=submission,
            )
        )
        if ended.lines_error is not None:
            log.info("Could not copy the logs of run %s: %s", self.run_id, ended.lines_error)
        try:
            await self._push_xcoms(xcoms)
        except Exception as exc:  # the worker pushes them instead
            self.log.warning("Resuming in a worker: %s", self.redact(f"{exc!r}"))
            return None
        summary = outcome.summary()
        log.info("%s", summary)
        await self._forget_lines_shown()
        await self._until_logged(summary)
        return TaskSuccessEvent()

    async def _push_xcoms(self, xcoms: Mapping[str, Any]) -> None:
        """Write the XComs through the execution API, as a worker does, and not as the
        event's ``xcoms``: Airflow 3.3 stores those JSON-encoded once more
        (``TaskInstance.xcom_push`` -> ``XComModel.set(serialize=True)``), so a downstream
        task would pull ``'{"run_id": ...}'``, a string, instead of the dict."""
        from airflow.sdk.bases.xcom import BaseXCom
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import SetXCom

        ti = self.task_instance
        if ti is None:
            raise RuntimeError("the trigger knows no task instance to leave XComs for")
        map_index = getattr(ti, "map_index", -1)
        for key, value in xcoms.items():
            await task_runner.SUPERVISOR_COMMS.asend(
                SetXCom(
                    key=key,
                    value=BaseXCom.serialize_value(value),
                    dag_id=ti.dag_id,
                    task_id=ti.task_id,
                    run_id=ti.run_id,
                    map_index=map_index if map_index is not None else -1,
                )
            )

    def _on_update(
        self, on_state: Callable[[RunState], None] | None = None
    ) -> Callable[[RunState], None]:
        """Each state change into the triggerer's log (redacted), remembered for the
        timeout message (a stage's line says its task's state too), then to ``on_state``."""
        from air_runtime import RedactingLog
        from airflow_air._logs import StateLogger

        logger = StateLogger(RedactingLog(self.log, self.redact), self.run_id, self.task_key)

        def on_update(state: RunState) -> None:
            self._seen(state)
            logger(state)
            if on_state is not None:
                on_state(state)

        return on_update

    def _on_retry(self, decision: RetryDecision) -> None:
        """What the failure policy made of a failed attempt, as the task log's line."""
        self.log.warning("%s", self.redact(decision.line()))

    def _on_workspace(self, notice: WorkspaceNotice) -> None:
        """The workspace stopped answering, or answers again: once each per outage in the
        task's log (the submit's wait and the run's may both hear one outage)."""
        if not notice.reachable:
            if self._outage_told != notice.since:
                self._outage_told = notice.since
                self.log.warning("%s", self.redact(notice.message))
        elif self._outage_told is not None:
            self._outage_told = None
            self.log.info("%s", self.redact(notice.message))

    def _mlflow_link(self, watcher: RunWatcher) -> Callable[[RunState], None]:
        """The MLflow link as soon as the run has one (``air_runtime.MlflowLinkReader``): its XCom
        written from here, with no worker, each read within the shared watcher's request
        budget. Not under the in-process runner (no XCom writes from a trigger there)."""
        from air_runtime import MlflowLinkReader
        from airflow_air.links import MLFLOW_URL_KEY

        reader = MlflowLinkReader(self.task_key)

        async def write(task_run: int) -> None:
            async with watcher.aside():
                url = await reader.aread(watcher.client, task_run)
            if not url or not self._links.unwritten({MLFLOW_URL_KEY: url}):
                return
            try:
                await self._push_xcoms({MLFLOW_URL_KEY: url})
            except Exception as exc:  # the task writes it when it ends
                self.log.info("Could not write the MLflow link: %s", self.redact(f"{exc!r}"))
                return
            self._links.wrote({MLFLOW_URL_KEY: url})

        def on_state(state: RunState) -> None:
            task_run = reader.due(state)
            if task_run is not None:
                read = asyncio.ensure_future(write(task_run))
                self._link_reads.add(read)
                read.add_done_callback(self._link_reads.discard)

        return on_state

    def _on_lines(self) -> LiveLines | None:
        """The run's (the stage's) node lines into the triggerer's log (redacted) while it
        runs, when ``[air] live_lines`` is on."""
        from air_runtime import RedactingLog
        from airflow_air._logs import LiveLines
        from airflow_air.hooks import live_lines

        if not self.stream_logs or live_lines() is None:
            return None
        self._live = LiveLines(RedactingLog(self.log, self.redact), self.run_id)
        return self._live

    def _on_progress(self) -> Callable[[TrainingProgress], None] | None:
        """A line when the run's training progress changes (``databricks air get``'s
        percentage and time left, from what the run logs to MLflow), with the live lines."""
        if self._live is None:
            return None
        log = self._live.log

        def on_progress(progress: TrainingProgress) -> None:
            log.info("Run %s: training %s", self.run_id, progress.detailed())

        return on_progress

    def _seen(self, state: RunState) -> None:
        task = state.task(self.task_key) if self.task_key else None
        if task is None:
            self._last_seen = state.describe()
        else:
            self._last_seen = task.life_cycle_state + (
                f"/{task.result_state}" if task.result_state else ""
            )

    def _prices(self) -> Prices | None:
        from air_runtime import Prices

        return Prices.from_json(self.prices)

    def _cause(self, kind: str, message: str) -> CancelCause:
        from air_runtime import CancelCause

        return CancelCause(kind, message, self.cancelled_by)

    async def _outcome(self, client: AsyncAirClient, state: RunState) -> RunOutcome:
        from air_runtime import RunOutcome

        outcome = (await RunOutcome.aread(client, state, self.task_key)).priced(self._prices())
        if outcome.run_page_url:
            return outcome
        return dataclasses.replace(outcome, run_page_url=self.run_page_url)

    async def _cancel(self, why: str, cause: CancelCause | None = None) -> str:
        """Cancel the run with a client of its own (the shared one may be closing), keeping
        ``cause`` next to it first (a spent sweep's cancels its other runs still going)."""
        from air_runtime import AsyncAirClient

        try:
            client = await run_lookups_in_loop(self._hook().client_lookup(AsyncAirClient))
            async with client:
                await asyncio.wait_for(
                    client.cancel(self.run_id, cause=cause),
                    _ON_KILL_TIMEOUT_S * (2 if cause is not None and cause.sweep else 1),
                )
        except Exception as exc:
            error = self.redact(str(exc))
            self.log.warning("Could not cancel run %s (%s): %s", self.run_id, why, error)
            return f"; cancelling run {self.run_id} failed: {error}"
        self.log.info("Cancelled run %s: %s", self.run_id, why)
        return f"; run {self.run_id} was cancelled"

    async def on_kill(self) -> None:
        """The user killed the deferred task (mark failed/success, clear): cancel the run
        (one still being submitted once the submit has answered)."""
        if not self.cancel_on_kill:
            return
        from airflow_air._failover import KillVerdict, read_kill_verdict

        verdict = await read_kill_verdict(self.task_instance)
        if verdict is not KillVerdict.KILLED:
            self.log.warning(
                "Run %s keeps running: %s",
                self.run_id or "(being submitted)",
                "the task is still deferred, so another triggerer took this trigger over "
                "(apache/airflow#73454)"
                if verdict is KillVerdict.MOVED
                else "could not tell whether the task was killed or its trigger moved to "
                "another triggerer; if the task was killed, cancel the run with `airo cancel`",
            )
            return
        if not self.run_id and self._submitting is not None:
            try:
                submitted = await asyncio.wait_for(
                    asyncio.shield(self._submitting), _ON_KILL_TIMEOUT_S
                )
                self.run_id = submitted.run_id
            except Exception as exc:
                self.log.warning("Could not learn the run to cancel: %s", self.redact(str(exc)))
        if self.run_id:
            why = "the deferred task was killed"
            await self._cancel(why, self._cause("orchestrator", f"{why} in Airflow"))

    async def cleanup(self) -> None:
        """Nothing remote: cleanup also runs when the triggerer restarts, and the run must
        keep going then. The shared watcher outlives this trigger."""


class AirImageTrigger(BaseTrigger):
    """Waits until a Docker Hub image registration is ``AVAILABLE`` (or ``FAILED``).

    Event payload: ``status`` (``success`` | ``failed`` | ``timeout`` | ``error``), ``image``
    (normal form), ``state``, ``digest`` and ``message``. ``first_poll_at`` as for
    ``AirRunTrigger``.
    """

    def __init__(
        self,
        image: str,
        *,
        databricks_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = 5.0,
        deadline: float | None = None,
        first_poll_at: float | None = None,
    ) -> None:
        super().__init__()
        self.image = image
        self.databricks_conn_id = databricks_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = None if deadline is None else float(deadline)
        self.first_poll_at = None if first_poll_at is None else float(first_poll_at)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "image": self.image,
                "databricks_conn_id": self.databricks_conn_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "first_poll_at": self.first_poll_at,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from air_runtime import AirError, AsyncAirClient

        payload: dict[str, Any] = {"image": self.image}
        try:
            await _sleep_until(self.first_poll_at, self.deadline)
            hook = AirHook(self.databricks_conn_id)
            client = await run_lookups_in_loop(hook.client_lookup(AsyncAirClient))
            async with client:
                payload.update(await self._poll(client))
        except (AirError, OSError) as exc:
            payload.update(status="error", message=str(exc))
        except Exception as exc:
            payload.update(status="error", message=f"{type(exc).__name__}: {exc}")
        yield TriggerEvent(payload)

    async def _poll(self, client: AsyncAirClient) -> dict[str, Any]:
        """The client's own wait (``wait_for_image``), its outcome as the event's status."""
        from air_runtime import ConfigurationError, RunTimeout

        last: list[Any] = []

        def note(registration: Any) -> None:
            if not last or registration.state != last[0].state:
                self.log.info(
                    "Image %s: %s %s", self.image, registration.state, registration.status_message
                )
            last[:] = [registration]

        def found() -> dict[str, Any]:
            return {"state": last[0].state, "digest": last[0].digest} if last else {}

        timeout = math.inf if self.deadline is None else self.deadline - time.time()
        try:
            done = await client.wait_for_image(
                self.image, timeout=timeout, poll_interval=self.poll_interval, on_update=note
            )
        except RunTimeout as exc:
            return {"status": "timeout", "message": str(exc), **found()}
        except ConfigurationError as exc:  # not registered, or FAILED
            return {"status": "failed", "message": str(exc), **found()}
        return {"status": "success", "state": done.state, "digest": done.digest}
