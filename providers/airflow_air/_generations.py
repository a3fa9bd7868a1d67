"""Which run a try of a task instance should own: generations and the task state store.

Only imported from ``execute`` (it pulls in the core client).

A task instance is one submission (``air_runtime.SubmissionKey("airflow", <deployment
namespace>, dag_id, run_id, task_id, map_index)``; ``airflow_air._deployment``: without the
namespace two deployments sharing a workspace would get each other's runs back). Its
generation (docs/spec/workload.md §6) is ``"<clear>.<failure>"``:

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
reattaches when that run is still in flight or succeeded (``reattach``). If a worker died
between the submit and that write, resubmitting with the same token returns the same run (the
platform dedupes tokens forever), and if the run we get back already ended unsuccessfully
*before this try started*, it belongs to an earlier try: the failure generation goes up and we
submit again (``submit_generations``). Without a task state store the same token probing alone
gives the same result, one submit request per earlier generation.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context

    from air_runtime import AirClient, Stage, Submission, Workload
    from airflow_air._logs import TaskLog

RUN_RECORD_KEY = "airflow_air.run"
_MAX_FAILURE_GENERATIONS = 1000  # a guard against a logic error, not a real limit


@dataclass(frozen=True)
class RunRecord:
    """What a try remembers about the run it owns (stored in the task state store)."""

    run_id: int
    run_page_url: str
    clear_generation: int
    failure_generation: int
    # The deployment namespace the task instance submitted under ("" in older records).
    namespace: str = ""

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
                namespace=str(raw.get("namespace") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class FirstGeneration:
    """No run to reattach to: submit from this generation on (``namespace``: the one an
    earlier try recorded, if any)."""

    clear: int
    failure: int
    namespace: str = ""


def clear_generation(context: Context, task: BaseOperator) -> int:
    ti = context["ti"]
    max_tries = getattr(ti, "max_tries", None) or 0
    return max(int(max_tries) - int(task.retries or 0), 0)


def is_first_try(context: Context) -> bool:
    """Whether no earlier try of this task instance can exist: try 1 (a clear or a retry
    runs a higher try number), so there is no run to find and nothing to check about it."""
    return int(getattr(context["ti"], "try_number", 0) or 0) == 1


def first_try_generation(context: Context, task: BaseOperator) -> str | None:
    """The generation a first try submits (``<clear>.0``, as ``submit_generations`` names
    it); None for a later try, which looks for an earlier try's run first (``reattach``)."""
    if not is_first_try(context):
        return None
    return f"{clear_generation(context, task)}.0"


def _task_state_store(context: Context) -> Any:
    try:
        return context.get("task_state_store")
    except Exception:  # older runtimes: no store, token probing alone
        return None


def reattach(
    context: Context, task: BaseOperator, client: AirClient, *, log: TaskLog
) -> RunRecord | FirstGeneration:
    """The run an earlier try of this generation started, when it is still in flight or
    succeeded; else the generation to submit first."""
    from air_runtime import EarlierLaunch, NotFound, decide_ownership

    clear = clear_generation(context, task)
    if is_first_try(context):
        return FirstGeneration(clear, 0)
    store = _task_state_store(context)
    previous = RunRecord.from_json(store.get(RUN_RECORD_KEY)) if store is not None else None
    if previous is None:
        return FirstGeneration(clear, 0)
    if previous.clear_generation != clear:
        log.info("The task was cleared since run %s; submitting a new run", previous.run_id)
        return FirstGeneration(clear, 0, previous.namespace)
    try:
        state = client.get_run(previous.run_id)
    except NotFound:
        state = None  # no longer exists: ended, for what it owns
    # Every generation before the recorded one ended unsuccessfully (that is why it was made).
    decided = decide_ownership(
        [EarlierLaunch(previous.run_id, previous.failure_generation)],
        {previous.run_id: state},
        failed=range(previous.failure_generation),
    )
    if previous.run_id in decided.adopt:
        assert state is not None  # a run that no longer exists is never adopted
        log.info(
            "Reattaching to run %s started by an earlier try (%s): %s",
            previous.run_id,
            previous.run_page_url,
            state.describe(),
        )
        return previous
    ended = state.describe() if state is not None else "no longer exists"
    log.info("Previous run %s %s; submitting a new run", previous.run_id, ended)
    return FirstGeneration(clear, decided.generation, previous.namespace)


def submit_generations(
    context: Context,
    client: AirClient,
    submission: Submission,
    workload: Workload | Sequence[Stage],
    first: FirstGeneration,
    *,
    log: TaskLog,
    run_name: str | None = None,
) -> tuple[RunRecord, bool]:
    """Submit ``first`` and, while the run handed back is an earlier try's that already
    failed, the next generations; record each run in the task state store. The record's
    second element: whether the run is this try's own (not an earlier try's, reattached)."""
    from air_runtime import EarlierLaunch, decide_ownership

    store = _task_state_store(context)
    try_started_ms = int(time.time() * 1000)
    failure = first.failure
    first_try = is_first_try(context)
    for _ in range(_MAX_FAILURE_GENERATIONS):
        generation = f"{first.clear}.{failure}"
        submitted = submission.submit(client, workload, generation, run_name=run_name)
        record = RunRecord(
            submitted.run_id, submitted.run_page_url, first.clear, failure, submission.key.namespace
        )
        if store is not None:
            store.set(RUN_RECORD_KEY, record.to_json())
        if first_try:  # no earlier try could have made a run with this token
            log.info("Submitted run %s: %s", submitted.run_id, submitted.run_page_url)
            return record, True
        state = client.get_run(submitted.run_id)
        started = state.start_time or try_started_ms
        # Same token: an earlier try's run (started before this try) when it ended
        # unsuccessfully says the generation failed; a run this try started says nothing.
        earlier = {submitted.run_id: state} if started < try_started_ms else {}
        decided = decide_ownership(
            [EarlierLaunch(submitted.run_id, failure)], earlier, first=failure
        )
        if decided.generation != failure:
            log.info(
                "Run %s of an earlier try already ended %s; submitting a new run",
                submitted.run_id,
                state.describe(),
            )
            failure = decided.generation
            continue
        reattached = started < try_started_ms
        log.info(
            "%s run %s: %s",
            "Reattached to" if reattached else "Submitted",
            submitted.run_id,
            submitted.run_page_url,
        )
        return record, not reattached
    raise RuntimeError("too many failed generations")  # pragma: no cover


def own_run(
    context: Context,
    task: BaseOperator,
    client: AirClient,
    submission: Submission,
    prepare: Callable[[], Workload | Sequence[Stage]],
    *,
    log: TaskLog,
    run_name: str | None = None,
) -> tuple[RunRecord, bool]:
    """The run this try owns: an earlier try's (reattached), or a new generation's,
    submitted with what ``prepare`` gives (so secrets are resolved only when a run is
    submitted). The second element: whether this try submitted it."""
    found = reattach(context, task, client, log=log)
    if found.namespace and found.namespace != submission.key.namespace:
        # Every try of a task instance keeps the namespace its first submit used: the first
        # tasks of a new deployment may read another value before the namespace settles
        # (``_deployment``), and the tokens and secret keys derive from it.
        submission.key = dataclasses.replace(submission.key, namespace=found.namespace)
    if isinstance(found, RunRecord):
        return found, False
    return submit_generations(
        context, client, submission, prepare(), found, log=log, run_name=run_name
    )
