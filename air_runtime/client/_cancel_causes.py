"""Why our code cancelled a run, kept where the workspace can hold it.

The Jobs API's ``runs/cancel`` takes a run id and nothing else (docs.databricks.com/api/
workspace/jobs/cancelrun), and a cancelled run reads the same whoever asked: ``result_state``
``CANCELED``, ``status.termination_details`` ``{"code": "USER_CANCELED", "type": "SUCCESS",
"message": "Run cancelled by user"}``. So the reason cannot travel with the cancel. The
canceller writes it first, as a small JSON file (``CAUSE_FILE``) next to the command of the
run's first task, in its launch folder in the workspace files (where ``env_vars.json`` and
``command.sh`` were uploaded at submit, runupload.go), and the run's readers (``airo get``,
the failure message of a cancelled run) show it beside the API's own termination code and
message. Writing it is best effort: a run is cancelled even when its cause cannot be kept.

The causes: ``budget`` (a run's ``max_gpu_hours``, a sweep's budget), ``retries`` (the failure
policy stopped retries that could not help), ``timeout`` (the orchestrator's deadline),
``orchestrator`` (the task or run that owned it was killed or terminated), ``user`` (``airo
cancel``). A cause for a spent sweep also cancels the sweep's other runs still going, each
with the same cause.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from .._errors import AirError, BudgetExceeded, RetriesStopped
from .._states import RunState
from .._sweeps import SweepBudgetSpent, SweepSpend
from ._checkpoint_folders import read_workspace_json
from ._core import ClientCore, Flow
from ._runs import RUNS_API, get_run
from ._submit import upload_file

logger = logging.getLogger("air_runtime.client")

CAUSE_FILE = "cancel_cause.json"
CAUSES = ("budget", "retries", "timeout", "orchestrator", "user")


@dataclass(frozen=True)
class CancelCause:
    """Why a run was cancelled (``kind``, one of ``CAUSES``), in words (``message``), by
    whom (``by``: the orchestrator task or the user) and when (``at_ms``). ``sweep``: the
    sweep whose spent budget this is; its other runs still going are cancelled too."""

    kind: str
    message: str
    by: str = ""
    at_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    sweep: SweepSpend | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in CAUSES:
            raise ValueError(f"unknown cancel cause {self.kind!r}: one of {', '.join(CAUSES)}")

    @classmethod
    def of_stop(cls, stopped: BudgetExceeded | RetriesStopped, by: str) -> CancelCause:
        """The cause of a cancel a wait asked for: a budget passed, or retries stopped."""
        if isinstance(stopped, RetriesStopped):
            return cls("retries", str(stopped), by)
        sweep = stopped.spend if isinstance(stopped, SweepBudgetSpent) else None
        return cls("budget", str(stopped), by, sweep=sweep)

    def describe(self) -> str:
        """``budget: sweep ... spent ... (by Airflow task ... at 2026-12-05 07:00:00 UTC)``."""
        when = datetime.fromtimestamp(self.at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        who = f"by {self.by}, " if self.by else ""
        return f"{self.kind}: {self.message} ({who}{when})"

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.kind, "message": self.message, "by": self.by, "at_ms": self.at_ms}

    @classmethod
    def from_json(cls, raw: Any) -> CancelCause | None:
        """The cause a file holds; None for anything else (a file of another version)."""
        if not isinstance(raw, Mapping) or raw.get("cause") not in CAUSES:
            return None
        at = raw.get("at_ms")
        return cls(
            str(raw["cause"]),
            str(raw.get("message") or ""),
            str(raw.get("by") or ""),
            int(at) if isinstance(at, int) and not isinstance(at, bool) else 0,
        )


def cause_path(state: RunState) -> str | None:
    """Where a run's cause is kept: next to its first task's command, in its launch folder
    (None when the run shows no command path)."""
    for task in state.tasks:
        if task.command_path:
            return str(PurePosixPath(task.command_path).parent / CAUSE_FILE)
    return None


def write_cause(core: ClientCore, state: RunState, cause: CancelCause) -> Flow[bool]:
    """Keep ``cause`` next to the run's command; whether it could be (best effort)."""
    path = cause_path(state)
    if path is None:
        return False
    content = json.dumps(cause.to_json(), indent=2).encode("utf-8")
    try:
        yield from upload_file(core, path, content)
    except AirError as error:
        logger.warning("could not keep why run %s was cancelled: %s", state.run_id, error)
        return False
    return True


def read_cause(core: ClientCore, state: RunState) -> Flow[CancelCause | None]:
    """The cause kept for a cancelled run; None when none was (or it cannot be read)."""
    path = cause_path(state)
    if path is None:
        return None
    kept = yield from read_workspace_json(core, path)
    return CancelCause.from_json(kept)


def cancel_with_cause(
    core: ClientCore, run_id: int, cause: CancelCause | None, state: RunState | None = None
) -> Flow[None]:
    """Cancel run ``run_id``, keeping ``cause`` first (``state``: the run as listed, with its
    tasks, else read here); a sweep's cause also cancels the sweep's other runs still going.
    A failure to cancel ``run_id`` raises; the others are best effort."""
    if cause is not None:
        if state is None or state.run_id != run_id or not state.tasks:
            try:
                state = yield from get_run(core, run_id)
            except AirError as error:
                logger.warning("could not read run %s to keep its cause: %s", run_id, error)
                state = None
        if state is not None and not state.is_terminal:
            yield from write_cause(core, state, cause)
    yield from core.call("POST", f"{RUNS_API}/cancel", json={"run_id": run_id})
    if cause is None or cause.sweep is None:
        return
    for member in cause.sweep.running:
        if member.run_id == run_id:
            continue
        try:
            yield from cancel_with_cause(
                core, member.run_id, replace(cause, sweep=None), member.state
            )
        except AirError as error:
            logger.warning("could not cancel run %s of the spent sweep: %s", member.run_id, error)


__all__ = ["CAUSES", "CAUSE_FILE", "CancelCause", "cancel_with_cause", "cause_path", "read_cause"]
