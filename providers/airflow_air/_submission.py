"""One logical submission per task instance: which run a try should own, and waiting on it.

Only imported from ``execute`` (it pulls in the core client).

Generations (docs/spec/workload.md §6). The idempotency token is
``make_idempotency_token("airflow", dag_id, run_id, task_id, map_index, "<clear>.<failure>",
namespace=<deployment namespace>)`` (``airflow_air._deployment``: without it two deployments
sharing a workspace would get each other's runs back):

- ``clear`` is ``ti.max_tries - task.retries``. Airflow's ``clear_task_instances`` sets
  ``max_tries = try_number + retries`` when a human clears a finished task, while automatic
  retries only bump ``try_number``; so this number changes exactly when a human clears the task
  (it is how Airflow itself finds a try's first try number, ``get_first_reschedule_date``).
  ``dag_run.clear_number`` was not used: it counts clears of *any* task of the Dag run, so a
  retry of this task after a sibling was cleared would wrongly start a second run.
- ``failure`` starts at 0 for each clear generation and goes up by one each time the run of the
  previous generation ended unsuccessfully, so a retry after a failed run starts a new run while
  a retry after a worker crash gets the same token, hence the same run.

Finding the previous run. Airflow 3.3's ``task_state_store`` (kept across the tries of one task
instance) records ``{run_id, clear, failure}`` right after each submit. A retry reads it and
reattaches when that run is still in flight or succeeded. If a worker died between the submit
and that write, resubmitting with the same token returns the same run (the platform dedupes
tokens forever), and if the run we get back already ended unsuccessfully *before this try
started*, it belongs to an earlier try: the failure generation goes up and we submit again.
Without a task state store the same token probing alone gives the same result, one submit
request per earlier generation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from airflow_air.links import MLFLOW_URL_KEY, RUN_ID_KEY, RUN_PAGE_URL_KEY

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context

    from air_runtime import AirClient, AsyncAirClient, RunState, SubmittedRun

RUN_RECORD_KEY = "airflow_air.run"
_MAX_FAILURE_GENERATIONS = 1000  # a guard against a logic error, not a real limit


class TaskLog(Protocol):
    """What these helpers need of a logger: the stdlib's and Airflow's task logger both fit."""

    def info(self, event: str, *args: Any) -> Any: ...

    def warning(self, event: str, *args: Any) -> Any: ...


class RedactingLog:
    """A ``TaskLog`` that formats each line and removes secret values before logging it:
    Airflow's masker only knows plain values, and the triggerer's log has no masker at all
    for values it never looked up."""

    def __init__(self, log: TaskLog, redact: Callable[[str], str]) -> None:
        self._log = log
        self._redact = redact

    def _text(self, event: str, args: tuple[Any, ...]) -> str:
        try:
            text = event % args if args else event
        except (TypeError, ValueError):
            text = " ".join([event, *map(str, args)])
        return self._redact(text)

    def info(self, event: str, *args: Any) -> Any:
        return self._log.info("%s", self._text(event, args))

    def warning(self, event: str, *args: Any) -> Any:
        return self._log.warning("%s", self._text(event, args))


@dataclass(frozen=True)
class RunRecord:
    """What a try remembers about the run it owns (stored in the task state store)."""

    run_id: int
    run_page_url: str
    clear_generation: int
    failure_generation: int

    @property
    def generation(self) -> str:
        return f"{self.clear_generation}.{self.failure_generation}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Any) -> RunRecord | None:
        if not isinstance(raw, Mapping):
            return None
        try:
            return cls(
                run_id=int(raw["run_id"]),
                run_page_url=str(raw.get("run_page_url") or ""),
                clear_generation=int(raw["clear_generation"]),
                failure_generation=int(raw["failure_generation"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


def clear_generation(context: Context, task: BaseOperator) -> int:
    ti = context["ti"]
    max_tries = getattr(ti, "max_tries", None) or 0
    return max(int(max_tries) - int(task.retries or 0), 0)


def map_index_of(context: Context) -> int | None:
    map_index = getattr(context["ti"], "map_index", -1)
    return None if map_index is None or map_index < 0 else int(map_index)


def idempotency_token(
    context: Context, task_key: str, generation: str, *, namespace: str | None = None
) -> str:
    from air_runtime import make_idempotency_token

    ti = context["ti"]
    return make_idempotency_token(
        "airflow",
        ti.dag_id,
        ti.run_id,
        task_key,
        map_index_of(context),
        generation,
        namespace=namespace,
    )


def _task_state_store(context: Context) -> Any:
    try:
        return context.get("task_state_store")
    except Exception:  # older runtimes: no store, token probing alone
        return None


def push_run_xcoms(context: Context, run_id: int, run_page_url: str) -> None:
    """Make the run id and page visible at once (also as the live "AI Runtime run" link)."""
    from airflow_air.links import AirRunLink, remember_url

    ti = context["ti"]
    ti.xcom_push(key=RUN_ID_KEY, value=run_id)
    ti.xcom_push(key=RUN_PAGE_URL_KEY, value=run_page_url)
    ti.xcom_push(key=AirRunLink().xcom_key, value=run_page_url)
    remember_url(context["task"], RUN_PAGE_URL_KEY, run_page_url)
    # An empty MLflow link until the ids are known (the UI shows it disabled).
    ti.xcom_push(key=MLFLOW_URL_KEY, value="")


def remember_run_page(context: Context, run_page_url: str) -> None:
    """A resumed (deferred) try's operator is new: it learns the run page from the event."""
    from airflow_air.links import remember_url

    remember_url(context["task"], RUN_PAGE_URL_KEY, run_page_url)


def push_mlflow_link(context: Context, url: str | None) -> None:
    if not url:
        return
    from airflow_air.links import AirMlflowRunLink, remember_url

    ti = context["ti"]
    ti.xcom_push(key=MLFLOW_URL_KEY, value=url)
    ti.xcom_push(key=AirMlflowRunLink().xcom_key, value=url)
    remember_url(context["task"], MLFLOW_URL_KEY, url)


def own_run(
    context: Context,
    task: BaseOperator,
    client: AirClient,
    submit: Callable[[str], SubmittedRun],
    *,
    log: TaskLog,
    namespace: str | None = None,
) -> tuple[RunRecord, bool]:
    """Return the run this try owns and whether it reattached to an existing one.

    ``submit(token)`` submits the workload with that idempotency token; ``namespace`` is the
    deployment's (``airflow_air._deployment``).
    """
    from air_runtime import NotFound

    clear = clear_generation(context, task)
    failure = 0
    store = _task_state_store(context)
    previous = RunRecord.from_json(store.get(RUN_RECORD_KEY)) if store is not None else None
    if previous is not None and previous.clear_generation == clear:
        try:
            state = client.get_run(previous.run_id)
        except NotFound:
            state = None
        if state is not None and (not state.is_terminal or state.is_success):
            log.info(
                "Reattaching to run %s started by an earlier try (%s): %s",
                previous.run_id,
                previous.run_page_url,
                state.describe(),
            )
            return previous, True
        failure = previous.failure_generation + 1
        ended = state.describe() if state is not None else "no longer exists"
        log.info("Previous run %s %s; submitting a new run", previous.run_id, ended)
    elif previous is not None:
        log.info("The task was cleared since run %s; submitting a new run", previous.run_id)

    try_started_ms = int(time.time() * 1000)
    for _ in range(_MAX_FAILURE_GENERATIONS):
        record_generation = f"{clear}.{failure}"
        token = idempotency_token(context, task.task_id, record_generation, namespace=namespace)
        submitted = submit(token)
        record = RunRecord(submitted.run_id, submitted.run_page_url, clear, failure)
        if store is not None:
            store.set(RUN_RECORD_KEY, record.to_json())
        state = client.get_run(submitted.run_id)
        started = state.start_time or try_started_ms
        if state.is_terminal and not state.is_success and started < try_started_ms:
            # Same token, an earlier try's run that already failed: next generation.
            log.info(
                "Run %s of an earlier try already ended %s; submitting a new run",
                submitted.run_id,
                state.describe(),
            )
            failure += 1
            continue
        reattached = started < try_started_ms
        log.info(
            "%s run %s: %s",
            "Reattached to" if reattached else "Submitted",
            submitted.run_id,
            submitted.run_page_url,
        )
        return record, reattached
    raise RuntimeError("too many failed generations")  # pragma: no cover


class StateLogger:
    """Logs each state change once, with the platform's message ("waiting for GPU capacity")."""

    def __init__(self, log: TaskLog, run_id: int, task_key: str | None = None) -> None:
        self.log = log
        self.run_id = run_id
        self.task_key = task_key
        self._seen: tuple[Any, ...] | None = None

    def __call__(self, state: RunState) -> None:
        task = state.task(self.task_key) if self.task_key else None
        key: tuple[Any, ...] = (state.life_cycle_state, state.result_state, state.state_message)
        if task is not None:
            key += (task.life_cycle_state, task.result_state, task.state_message)
        if key == self._seen:
            return
        self._seen = key
        text = f"Run {self.run_id}: {state.describe()}"
        if task is not None:
            stage = task.life_cycle_state + (f"/{task.result_state}" if task.result_state else "")
            text += f"; stage {self.task_key}: {stage}"
            if task.state_message and task.state_message != state.state_message:
                text += f" ({task.state_message})"
        if state.is_waiting_for_capacity:
            text += " [waiting for GPU capacity]"
        if state.unknown_state:
            self.log.warning("%s (state unknown to this version; still waiting)", text)
        else:
            self.log.info("%s", text)


def _log_record(log: TaskLog, record: Any) -> None:
    """One node's record in the task log, each line labelled ``[<task> node N attempt A]``."""
    for line in record.body.splitlines() or [""]:
        log.info("[%s] %s", record.label, line)


class LogStreamer:
    """Copies every node's log lines of the run (or of one stage's task), every attempt,
    into the task log while a synchronous wait polls the run."""

    def __init__(
        self, client: AirClient, run_id: int, log: TaskLog, task_key: str | None = None
    ) -> None:
        # Set when the wait has seen the run (stage) end: the follower then reads one last
        # time instead of asking runs/get between reads.
        self._ended = threading.Event()
        self._thread = threading.Thread(
            target=self._follow,
            args=(client, run_id, task_key, log, self._ended),
            name=f"air-logs-{run_id}",
            daemon=True,
        )

    @staticmethod
    def _follow(
        client: AirClient,
        run_id: int,
        task_key: str | None,
        log: TaskLog,
        ended: threading.Event,
    ) -> None:
        try:
            for record in client.iter_run_logs(
                run_id, task_key=task_key, follow=True, until=ended.is_set
            ):
                _log_record(log, record)
        except Exception as exc:  # logs are a convenience: never fail the task for them
            log.info("Log streaming of run %s stopped: %s", run_id, exc)

    def __enter__(self) -> LogStreamer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ended.set()
        self._thread.join(timeout=30)


class _BoundedLogCopy:
    """Writes whole node records into a log until ``max_lines`` would be passed, then one
    line that says where the rest is."""

    def __init__(self, log: TaskLog, run_id: int, task_key: str | None, max_lines: int) -> None:
        self.log = log
        self.run_id = run_id
        self.task_key = task_key
        self.max_lines = max_lines
        self.written = 0

    def add(self, record: Any) -> bool:
        """Log ``record``; False once the budget is spent (stop reading)."""
        lines = record.body.count("\n") + 1
        if self.written + lines > self.max_lines:
            where = f" --task {self.task_key}" if self.task_key else ""
            self.log.info(
                "Log copy stopped after %d lines ([air] completed_log_lines): the rest "
                "with `airo logs %s%s`",
                self.written,
                self.run_id,
                where,
            )
            return False
        _log_record(self.log, record)
        self.written += lines
        return True


def copy_run_logs(
    client: AirClient,
    run_id: int,
    log: TaskLog,
    task_key: str | None = None,
    *,
    max_lines: int,
) -> None:
    """Every node's lines of an ended run (or stage), every attempt, into the task log at
    once: how a try that waited in the triggerer gets them (see ``AirRunOperator``). At most
    ``max_lines`` lines; the rest are left to ``airo logs``."""
    copy = _BoundedLogCopy(log, run_id, task_key, max_lines)
    try:
        for record in client.iter_run_logs(run_id, task_key=task_key):
            if not copy.add(record):
                return
    except Exception as exc:  # logs are a convenience: never fail the task for them
        log.info("Could not copy the logs of run %s: %s", run_id, exc)


async def acopy_run_logs(
    client: AsyncAirClient,
    run_id: int,
    log: TaskLog,
    task_key: str | None = None,
    *,
    max_lines: int,
) -> None:
    """``copy_run_logs`` from a trigger's event loop (a run finished in the triggerer)."""
    copy = _BoundedLogCopy(log, run_id, task_key, max_lines)
    try:
        async for record in client.iter_run_logs(run_id, task_key=task_key):
            if not copy.add(record):
                return
    except Exception as exc:  # logs are a convenience: never fail the task for them
        log.info("Could not copy the logs of run %s: %s", run_id, exc)


def wait_sync(
    client: AirClient,
    record: RunRecord,
    *,
    poll_interval: float,
    log: TaskLog,
    task_key: str | None = None,
) -> RunState:
    """Poll in the worker until the run (or, for a workflow stage, its task) ends."""
    on_update = StateLogger(log, record.run_id, task_key)
    if task_key is None:
        return client.wait(record.run_id, poll_interval=poll_interval, on_update=on_update)
    while True:
        state = client.get_run(record.run_id)
        on_update(state)
        if state.has_ended(task_key):
            return state
        time.sleep(poll_interval)


@dataclass(frozen=True)
class Outcome:
    """How a run (or one stage of it) ended, in the form operators return and triggers emit."""

    status: str  # success | failed | timeout | error
    run_id: int
    run_page_url: str
    # None (no result yet: timeout, error) is left out of events, so it must be optional.
    result_state: str | None = None
    message: str = ""
    task_key: str | None = None
    mlflow_experiment_id: str | None = None
    mlflow_run_id: str | None = None
    mlflow_run_url: str | None = None
    # Accelerator-hours of every attempt of the run (of the stage's task for a stage).
    gpu_hours: float | None = None

    def to_event(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Outcome:
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in event.items() if k in fields})

    def success_text(self) -> str:
        """The task log's line for a run (stage) that succeeded."""
        used = f" ({self.gpu_hours:g} GPU-hours)" if self.gpu_hours is not None else ""
        if self.task_key:  # the other stages of the run may still be going
            return (
                f"Stage {self.task_key} of run {self.run_id} succeeded{used}: {self.run_page_url}"
            )
        return f"Run {self.run_id} succeeded{used}: {self.run_page_url}"

    def success_xcoms(self, *, return_value: bool = True) -> dict[str, Any]:
        """Every XCom a successful try leaves, for a trigger that ends the task itself
        (``airflow_air.triggers``): what ``push_run_xcoms``, ``push_mlflow_link``, the GPU-hours
        push and the return value leave when the task ends in a worker."""
        from airflow.sdk.bases.xcom import BaseXCom

        from airflow_air.links import GPU_HOURS_KEY, AirMlflowRunLink, AirRunLink

        xcoms: dict[str, Any] = {
            RUN_ID_KEY: self.run_id,
            RUN_PAGE_URL_KEY: self.run_page_url,
            AirRunLink().xcom_key: self.run_page_url,
            MLFLOW_URL_KEY: self.mlflow_run_url or "",
        }
        if self.mlflow_run_url:
            xcoms[AirMlflowRunLink().xcom_key] = self.mlflow_run_url
        if self.gpu_hours is not None:
            xcoms[GPU_HOURS_KEY] = self.gpu_hours
        if return_value:
            xcoms[BaseXCom.XCOM_RETURN_KEY] = self.result()
        return xcoms

    def result(self) -> dict[str, Any]:
        """The operator's return value (XCom ``return_value``)."""
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "run_page_url": self.run_page_url,
            "result_state": self.result_state,
            "mlflow_experiment_id": self.mlflow_experiment_id,
            "mlflow_run_id": self.mlflow_run_id,
            "gpu_hours": self.gpu_hours,
        }
        if self.task_key:
            out["task_key"] = self.task_key
        return out


def make_outcome(
    view: RunState,
    *,
    run_id: int,
    run_page_url: str,
    task_key: str | None,
    failure: Exception | None,
    output: Mapping[str, Any],
    host: str,
    gpu_hours: float | None = None,
) -> Outcome:
    """``failure`` is the core's ``RunFailed`` (its message has the error, log tail, trace and
    MLflow ids) or ``None``; ``output`` is ``runs/get-output`` of the task, or empty;
    ``gpu_hours`` the core's ``RunResult.gpu_hours``."""
    from air_runtime import mlflow_ids, mlflow_run_url

    exp, mlflow_run = mlflow_ids(output)
    return Outcome(
        status="success" if failure is None else "failed",
        run_id=run_id,
        run_page_url=run_page_url,
        result_state=view.result_state,
        message="" if failure is None else str(failure),
        task_key=task_key,
        mlflow_experiment_id=exp,
        mlflow_run_id=mlflow_run,
        mlflow_run_url=mlflow_run_url(host, exp, mlflow_run),
        gpu_hours=gpu_hours,
    )


def finish_sync(
    client: AirClient, state: RunState, record: RunRecord, task_key: str | None
) -> Outcome:
    """The outcome of a terminal run (or stage), with the failure message or MLflow ids."""
    view = state.stage(task_key)
    result = client.run_result(view)
    return make_outcome(
        view,
        run_id=record.run_id,
        run_page_url=record.run_page_url,
        task_key=task_key,
        failure=result.failure,
        output=result.output,
        host=client.host,
        gpu_hours=result.gpu_hours,
    )
