"""Driving submitted runs: the task graph, `run_if`, retries, cancel, timeouts, and the
two ways an attempt happens (real processes, or a scripted timeline in simulate mode).
What may be submitted or repaired is decided before (`backend`); this only runs it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from air_runtime.local._errors import ApiError
from air_runtime.local._logs import LogBook
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._store import ACTIVE_LIFE_CYCLES, Store, now_ms
from air_runtime.local.files.backend import VolumeTree, WorkspaceTree
from air_runtime.local.mlflow.backend import rank_tracking_env
from air_runtime.local.mlflow.log_artifacts import publish_to_volume
from air_runtime.local.pools.backend import WAITING_FOR_CAPACITY, PoolLedger, pool_request
from air_runtime.local.runs.execution import (
    CANCELLED_BY_USER,
    RANK_MARKER,
    WORKSPACE_MARKER,
    AttemptContext,
    AttemptOutcome,
    run_attempt,
)
from air_runtime.local.runs.validation import run_if_verdict

logger = logging.getLogger("air_runtime.local")

RESTART_MESSAGE = (
    "The local workspace stopped while this run was active; its processes were stopped "
    "and the run cannot continue. Submit it again."
)
SUCCESSFUL = ("SUCCESS", "EXCLUDED")  # results a task needs no repair for


def _read_simulation(workspace: WorkspaceTree, command_path: str | None) -> dict[str, str]:
    """`AIRO_SIMULATE=running_s=5,result=FAILED` from the env_vars.json beside the command."""
    if not command_path:
        return {}
    try:
        env_file = workspace.local_path(str(PurePosixPath(command_path).parent / "env_vars.json"))
        items = json.loads(env_file.read_text()) if env_file.is_file() else []
    except (OSError, ValueError, Exception):
        return {}
    for item in items:
        if isinstance(item, dict) and item.get("name") == "AIRO_SIMULATE":
            pairs = (p.split("=", 1) for p in str(item.get("value", "")).split(",") if "=" in p)
            return {k.strip(): v.strip() for k, v in pairs}
    return {}


class RunEngine:
    def __init__(
        self,
        store: Store,
        workspace: WorkspaceTree,
        volumes: VolumeTree,
        logbook: LogBook,
        options: WorkspaceOptions,
        runs_dir: Path,
        secret_lookup: Callable[[str, str], bytes | None],
        *,
        instance_id: str = "",
    ) -> None:
        self.instance_id = instance_id
        self.store = store
        self.workspace = workspace
        self.volumes = volumes
        self.logbook = logbook
        self.options = options
        self.runs_dir = runs_dir
        self.secret_lookup = secret_lookup
        self._drivers: dict[int, asyncio.Task[None]] = {}
        self._cancel: dict[int, asyncio.Event] = {}
        # The running attempts of each run (execute mode), for a simulated node loss.
        self._running: dict[int, dict[int, AttemptContext]] = {}
        self.pools = PoolLedger(options.gpu_pools)
        # The address clients reach this workspace at (set by runs/submit): ranks log to
        # MLflow there. Empty until a run is submitted.
        self.tracking_host = ""

    # --- lifecycle --------------------------------------------------------------------

    def recover(self) -> None:
        """Runs that were active when the server stopped: their processes are gone (or
        orphaned: stop those), so they are marked failed; history stays."""
        active = self.store.runs.active_ids()
        if not active:
            return
        orphan_ids: set[str] = set()
        for run_id in active:
            for task in self.store.runs.tasks(run_id):
                if task.life_cycle_state in ACTIVE_LIFE_CYCLES:
                    orphan_ids.add(str(task.task_run_id))
                    self.store.runs.update_task(
                        task.task_run_id,
                        life_cycle_state="INTERNAL_ERROR",
                        result_state="FAILED",
                        state_message=RESTART_MESSAGE,
                        end_time=now_ms(),
                    )
            ended = {
                "life_cycle_state": "INTERNAL_ERROR",
                "result_state": "FAILED",
                "state_message": RESTART_MESSAGE,
                "end_time": now_ms(),
            }
            repair_id = self.store.runs.latest_repair_id(run_id)
            if repair_id is not None:  # the repair under way ended with it
                self.store.runs.update_repair(repair_id, **ended)
            self.store.runs.update_run(run_id, **ended, active=0)
        _kill_orphans(orphan_ids, self.instance_id)

    def start(self, run_id: int) -> None:
        self._cancel[run_id] = asyncio.Event()
        driver = asyncio.get_running_loop().create_task(self._drive(run_id))
        self._drivers[run_id] = driver
        driver.add_done_callback(lambda _: self._forget(run_id))

    def _forget(self, run_id: int) -> None:
        self._drivers.pop(run_id, None)
        self._cancel.pop(run_id, None)

    def cancel(self, run_id: int) -> None:
        run = self.store.runs.get(run_id)
        if run is None or not run.active:
            return
        self.store.runs.update_run(
            run_id,
            cancel_requested=1,
            life_cycle_state="TERMINATING",
            state_message="Cancelling the run.",
        )
        event = self._cancel.get(run_id)
        if event is not None:
            event.set()

    async def shutdown(self) -> None:
        drivers = list(self._drivers.values())
        for driver in drivers:
            driver.cancel()
        await asyncio.gather(*drivers, return_exceptions=True)

    @property
    def active_drivers(self) -> int:
        return len(self._drivers)

    # --- the task graph ---------------------------------------------------------------

    async def _drive(self, run_id: int) -> None:
        try:
            await self._drive_graph(run_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not leave the run active forever
            logger.exception("run %s failed inside the local workspace", run_id)
            self.store.runs.update_run(
                run_id,
                life_cycle_state="INTERNAL_ERROR",
                result_state="FAILED",
                state_message=f"Internal error of the local workspace: {exc}",
                end_time=now_ms(),
                active=0,
            )

    async def _drive_graph(self, run_id: int) -> None:
        run = self.store.runs.get(run_id)
        assert run is not None
        body = run.body
        specs: dict[str, tuple[int, dict[str, Any]]] = {
            t["task_key"]: (i, t) for i, t in enumerate(body["tasks"])
        }
        # The task runs this drive starts: every task's first, or those a repair added;
        # a task a repair leaves alone keeps the result of its newest task run.
        repair_id = self.store.runs.latest_repair_id(run_id) or 0
        first_attempt: dict[str, int] = {}
        results: dict[str, str] = {}
        messages: dict[str, str] = {}
        for task in self.store.runs.tasks(run_id):
            if task.repair_id == repair_id and task.attempt_number == 0:
                first_attempt[task.task_key] = task.task_run_id
            elif task.task_key not in first_attempt:
                results[task.task_key] = task.result_state or "CANCELED"
                messages[task.task_key] = task.state_message
        for key in first_attempt:
            results.pop(key, None)
            messages.pop(key, None)
        cancel = self._cancel[run_id]
        running: dict[asyncio.Task[tuple[str, str]], str] = {}
        while True:
            if not cancel.is_set():
                started = set(running.values())
                for key, (position, spec) in specs.items():
                    if key in results or key in started:
                        continue
                    deps = [d["task_key"] for d in spec.get("depends_on") or []]
                    if any(d not in results for d in deps):
                        continue
                    verdict = run_if_verdict(
                        spec.get("run_if", "ALL_SUCCESS"), [results[d] for d in deps]
                    )
                    if verdict is None:
                        attempt = self._run_task(
                            run_id, body, spec, position, first_attempt[key], cancel
                        )
                        running[asyncio.create_task(attempt)] = key
                        continue
                    results[key] = verdict
                    messages[key] = (
                        "Upstream task(s) failed."
                        if verdict == "UPSTREAM_FAILED"
                        else f"Not run: its run_if condition {spec.get('run_if')} was not met."
                    )
                    self.store.runs.update_task(
                        first_attempt[key],
                        life_cycle_state="SKIPPED",
                        result_state=verdict,
                        state_message=messages[key],
                        end_time=now_ms(),
                    )
            if not running:
                break
            waiters: list[asyncio.Future[Any]] = list(running)
            cancel_wait = None
            if not cancel.is_set():
                cancel_wait = asyncio.ensure_future(cancel.wait())
                waiters.append(cancel_wait)
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if cancel_wait is not None:
                cancel_wait.cancel()
            for finished in done:
                if finished in running:
                    key = running.pop(finished)
                    results[key], messages[key] = finished.result()
        for key in specs:
            if key not in results:
                results[key] = "CANCELED"
                messages[key] = "Run was cancelled before this task started."
                self.store.runs.update_task(
                    first_attempt[key],
                    life_cycle_state="SKIPPED",
                    result_state="CANCELED",
                    state_message=messages[key],
                    end_time=now_ms(),
                )
        self._finish(run_id, body, results, messages, cancel.is_set())

    def _finish(
        self,
        run_id: int,
        body: dict[str, Any],
        results: dict[str, str],
        messages: dict[str, str],
        cancelled: bool,
    ) -> None:
        self.store.runs.update_run(run_id, life_cycle_state="TERMINATING")
        # As on the platform, the leaf tasks decide the run's result, so a failed stage
        # followed by an ALL_DONE clean-up stage that succeeds still counts as handled.
        upstream = {d["task_key"] for t in body["tasks"] for d in t.get("depends_on") or []}
        leaves = [t["task_key"] for t in body["tasks"] if t["task_key"] not in upstream]
        failed = [k for k in leaves if results[k] not in SUCCESSFUL]
        life_cycle = "TERMINATED"
        if cancelled:
            result, message = "CANCELED", CANCELLED_BY_USER
        elif not failed:
            result, message = "SUCCESS", ""
        else:
            first = next(
                (k for k in results if results[k] not in (*SUCCESSFUL, "UPSTREAM_FAILED")),
                failed[0],
            )
            result = "TIMEDOUT" if results[first] == "TIMEDOUT" else "FAILED"
            message = f"Task {first} failed with message: {messages[first]}"
            last = [t for t in self.store.runs.tasks(run_id) if t.task_key == first][-1:]
            if last and last[0].life_cycle_state == "INTERNAL_ERROR":
                life_cycle = "INTERNAL_ERROR"
            if any(results[k] == "UPSTREAM_FAILED" for k in results):
                message += " This caused all downstream tasks to get skipped."
        ended = {
            "life_cycle_state": life_cycle,
            "result_state": result,
            "state_message": message,
            "end_time": now_ms(),
        }
        repair_id = self.store.runs.latest_repair_id(run_id)
        if repair_id is not None:
            self.store.runs.update_repair(repair_id, **ended)
        self.store.runs.update_run(run_id, **ended, active=0)

    # --- attempts and retries ---------------------------------------------------------

    async def _run_task(
        self,
        run_id: int,
        body: dict[str, Any],
        spec: dict[str, Any],
        position: int,
        task_run_id: int,
        cancel: asyncio.Event,
    ) -> tuple[str, str]:
        max_retries = int(spec.get("max_retries", 0))
        retry_on_timeout = bool(spec.get("retry_on_timeout", False))
        interval_ms = spec.get("min_retry_interval_millis")
        interval = interval_ms / 1000 if interval_ms is not None else self.options.retry_interval_s
        timeout = spec.get("timeout_seconds") or body.get("timeout_seconds") or None
        attempt = 0
        first = self.store.runs.task(task_run_id)
        repair_id = first.repair_id if first is not None else 0
        while True:
            outcome = await self._attempt(run_id, body, spec, task_run_id, cancel, timeout)
            output = self._output(spec, task_run_id, outcome)
            # Before the attempt reads as ended: whoever sees the end finds its artifacts.
            await asyncio.to_thread(
                publish_to_volume, self.volumes, self.logbook, spec, task_run_id, output
            )
            self.store.runs.update_task(
                task_run_id,
                life_cycle_state=outcome.life_cycle_state,
                result_state=outcome.result_state,
                state_message=outcome.message,
                end_time=now_ms(),
                output=output,
            )
            retryable = (
                outcome.result_state == "FAILED" and outcome.life_cycle_state == "TERMINATED"
            ) or (outcome.result_state == "TIMEDOUT" and retry_on_timeout)
            if not retryable or cancel.is_set() or (0 <= max_retries <= attempt):
                return outcome.result_state, outcome.message
            attempt += 1
            task_run_id = self.store.runs.add_attempt(
                run_id,
                spec["task_key"],
                position,
                attempt,
                f"Waiting {interval:g}s before retry {attempt}; the previous attempt ended "
                f"with {outcome.result_state}: {outcome.message}",
                repair_id=repair_id,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cancel.wait(), timeout=interval)
            if cancel.is_set():
                self.store.runs.update_task(
                    task_run_id,
                    life_cycle_state="SKIPPED",
                    result_state="CANCELED",
                    state_message="Run was cancelled before this retry started.",
                    end_time=now_ms(),
                )
                return "CANCELED", CANCELLED_BY_USER

    def _experiment_path(self, spec: dict[str, Any]) -> str:
        ai = spec.get("ai_runtime_task", {})
        experiment = str(ai.get("experiment") or spec["task_key"])
        folder = str(ai.get("mlflow_experiment_directory") or f"/Users/{self.options.user_name}")
        folder = folder.removeprefix("/Workspace").rstrip("/") or ""
        return f"{folder}/{experiment}"

    def _mlflow_ids(self, spec: dict[str, Any], task_run_id: int) -> dict[str, str]:
        digest = hashlib.sha256(self._experiment_path(spec).encode()).digest()
        return {
            "mlflow_experiment_id": str(int.from_bytes(digest[:6], "big")),
            "mlflow_run_id": uuid.uuid5(uuid.NAMESPACE_URL, f"airo/{task_run_id}").hex,
        }

    def _start_experiment(self, spec: dict[str, Any], task_run_id: int) -> AttemptOutcome | None:
        """Create (or find) the task's MLflow experiment and publish its ids in the task's
        output at once: the CLI reads them from runs/get-output right after the submit to
        grant experiment permissions (runpermissions.go). A missing
        `mlflow_experiment_directory` fails the task with INTERNAL_ERROR, which is what the
        platform answers ("a missing parent surfaces only as a server-side INTERNAL_ERROR
        after the run is wasted", ensureExperimentDirectory in runlaunch.go)."""
        folder = spec.get("ai_runtime_task", {}).get("mlflow_experiment_directory")
        if folder:
            try:
                status = self.workspace.status(str(folder))
            except ApiError:
                status = None
            if status is None or status.get("object_type") != "DIRECTORY":
                what = "does not exist" if status is None else "is not a directory"
                return AttemptOutcome(
                    "FAILED",
                    f"Internal error: the MLflow experiment directory {folder} {what}; "
                    "create it (workspace/mkdirs) before submitting.",
                    life_cycle_state="INTERNAL_ERROR",
                )
        ids = self._mlflow_ids(spec, task_run_id)
        self.store.mlflow.add_experiment(ids["mlflow_experiment_id"], self._experiment_path(spec))
        self.store.runs.update_task(task_run_id, output={"ai_runtime_task_output": ids})
        return None

    def _output(
        self, spec: dict[str, Any], task_run_id: int, outcome: AttemptOutcome
    ) -> dict[str, Any]:
        started = outcome.life_cycle_state != "INTERNAL_ERROR"  # else no experiment exists
        output: dict[str, Any] = {
            "ai_runtime_task_output": {
                **(self._mlflow_ids(spec, task_run_id) if started else {}),
                "status_message": outcome.message or "Succeeded",
            }
        }
        if outcome.result_state != "SUCCESS":
            output["error"] = outcome.message
            if outcome.error_trace:
                output["error_trace"] = outcome.error_trace
        return output

    def _mark_running(self, run_id: int, task_run_id: int, pids: list[int]) -> None:
        self.store.runs.update_task(
            task_run_id, life_cycle_state="RUNNING", state_message="", pgids=pids
        )
        self.store.runs.update_pending_run(run_id, life_cycle_state="RUNNING", state_message="")

    async def _attempt(
        self,
        run_id: int,
        body: dict[str, Any],
        spec: dict[str, Any],
        task_run_id: int,
        cancel: asyncio.Event,
        timeout: float | None,
    ) -> AttemptOutcome:
        request = pool_request(spec)
        if not self.pools.manages(request):
            return await self._start_attempt(run_id, body, spec, task_run_id, cancel, timeout)
        assert request is not None
        if not self.pools.has_room(*request):
            self.store.runs.update_task(
                task_run_id, life_cycle_state="PENDING", state_message=WAITING_FOR_CAPACITY
            )
            self.store.runs.update_pending_run(run_id, state_message=WAITING_FOR_CAPACITY)
        if not await self.pools.acquire(*request, cancel):
            return AttemptOutcome("CANCELED", CANCELLED_BY_USER)
        try:
            return await self._start_attempt(run_id, body, spec, task_run_id, cancel, timeout)
        finally:
            self.pools.release(*request)

    async def _start_attempt(
        self,
        run_id: int,
        body: dict[str, Any],
        spec: dict[str, Any],
        task_run_id: int,
        cancel: asyncio.Event,
        timeout: float | None,
    ) -> AttemptOutcome:
        self.store.runs.update_task(
            task_run_id,
            life_cycle_state="PENDING",
            state_message="Starting on the local workspace.",
            start_time=now_ms(),
        )
        refused = self._start_experiment(spec, task_run_id)
        if refused is not None:
            return refused
        if self.options.mode == "simulate":
            return await self._simulate(run_id, spec, task_run_id, cancel, timeout)
        context = AttemptContext(
            task_run_id=task_run_id,
            task=spec,
            timeout_s=timeout,
            work_dir=self.runs_dir / str(run_id) / str(task_run_id),
            cancel_event=cancel,
            on_running=lambda pids: self._mark_running(run_id, task_run_id, pids),
            kill_grace_s=self.options.kill_grace_s,
            secret_lookup=self.secret_lookup,
            workspace=self.workspace,
            volumes=self.volumes,
            logbook=self.logbook,
            instance_id=self.instance_id,
        )
        attempts = self._running.setdefault(run_id, {})
        attempts[task_run_id] = context
        try:
            return await self._run_tracked(context, spec, task_run_id, timeout)
        finally:
            attempts.pop(task_run_id, None)
            if not attempts:
                self._running.pop(run_id, None)

    def lose_node(self, run_id: int, node: int) -> list[int]:
        """A simulated node loss: node ``node`` of each running attempt of the run dies as
        a lost host would (``AttemptContext.lose_node``); the task runs it hit."""
        return [
            task_run_id
            for task_run_id, context in list(self._running.get(run_id, {}).items())
            if context.lose_node(node)
        ]

    async def _run_tracked(
        self, context: AttemptContext, spec: dict[str, Any], task_run_id: int, timeout: float | None
    ) -> AttemptOutcome:
        if not self.tracking_host:
            return await run_attempt(context)
        context.tracking_env, token = rank_tracking_env(
            self.store.tokens,
            self.tracking_host,
            self.options.user_name,
            self._mlflow_ids(spec, task_run_id),
            lifetime_s=(timeout or 7 * 86400) + 60,
            folder=context.work_dir,
        )
        try:
            return await run_attempt(context)
        finally:
            self.store.tokens.remove_access_token(token)

    async def _simulate(
        self,
        run_id: int,
        spec: dict[str, Any],
        task_run_id: int,
        cancel: asyncio.Event,
        timeout: float | None,
    ) -> AttemptOutcome:
        deployment = spec["ai_runtime_task"]["deployments"][0]
        timeline: dict[str, Any] = dict(self.options.simulate)
        timeline.update(_read_simulation(self.workspace, deployment.get("command_path")))
        pending_s = float(timeline.get("pending_s", 0))
        running_s = float(timeline.get("running_s", 0))
        result = str(timeline.get("result", "SUCCESS")).upper()
        log = self.logbook.open(task_run_id, 0)
        try:
            log.write(
                f"INFO: simulated run: pending {pending_s:g}s, running {running_s:g}s, "
                f"result {result}; no process is started"
            )
            if await _wait_or_cancel(cancel, pending_s):
                return AttemptOutcome("CANCELED", CANCELLED_BY_USER)
            self._mark_running(run_id, task_run_id, [])
            limit = running_s if not timeout else min(running_s, float(timeout))
            if await _wait_or_cancel(cancel, limit):
                return AttemptOutcome("CANCELED", CANCELLED_BY_USER)
            if timeout and running_s > float(timeout):
                return AttemptOutcome("TIMEDOUT", f"Task timed out after {int(timeout)}s.")
            if result == "SUCCESS":
                return AttemptOutcome("SUCCESS", "")
            log.write(f"ERROR: Script failed with exit code 1 after {round(running_s)}s")
            return AttemptOutcome(result, f"Simulated {result.lower()} (AIRO_SIMULATE).")
        finally:
            log.close()


async def _wait_or_cancel(cancel: asyncio.Event, seconds: float) -> bool:
    """Sleep `seconds`; True when the run was cancelled meanwhile."""
    if seconds <= 0:
        return cancel.is_set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(cancel.wait(), timeout=seconds)
    return cancel.is_set()


def _kill_orphans(task_run_ids: set[str], instance_id: str) -> None:
    """SIGKILL processes left by a previous server of this workspace: both markers of
    their environment must match (the task run id, and the workspace's own id, since
    another workspace on this machine numbers its task runs the same way), so a reused pid
    or a process of another workspace is never touched."""
    if not task_run_ids or not instance_id:
        return
    workspace_item = f"{WORKSPACE_MARKER}={instance_id}".encode()
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if workspace_item not in environ:
            continue
        for item in environ:
            if item.startswith(RANK_MARKER.encode() + b"="):
                if item.split(b"=", 1)[1].decode(errors="replace") in task_run_ids:
                    with contextlib.suppress(OSError):
                        os.kill(int(entry.name), signal.SIGKILL)
                break
