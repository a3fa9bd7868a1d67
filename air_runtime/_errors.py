"""Typed errors, so orchestrators can tell what is worth retrying.

Configuration problems (``WorkloadError``, ``ConfigurationError``, ``AuthError``) are never
retryable; platform hiccups (``RateLimited``, ``PlatformError`` with a 5xx) and a lack of
capacity (``CapacityError``, whatever its status: a 400 ``CAPACITY_UNAVAILABLE`` says "try
later") are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class AirError(Exception):
    """Base class of every error raised by air-orchestration."""

    retryable: bool = False


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a workload: where it is and what to do about it."""

    path: str
    message: str
    hint: str | None = None
    line: int | None = None
    column: int | None = None
    # The override key that set this value, when the value came from an override rather
    # than from a line of the workload.
    override: str | None = None

    def location(self) -> str:
        if self.override is not None:
            return f"{self.path or '<workload>'} (set by override {self.override!r})"
        if self.line is None:
            return self.path or "<workload>"
        col = f":{self.column}" if self.column is not None else ""
        return f"{self.path or '<workload>'} (line {self.line}{col})"

    def __str__(self) -> str:
        text = f"{self.location()}: {self.message}"
        return f"{text} Fix: {self.hint}" if self.hint else text

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "hint": self.hint,
            "override": self.override,
        }


class WorkloadError(AirError, ValueError):
    """The workload is invalid. ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        head = f"invalid workload{f' {source}' if source else ''}: {len(self.problems)} problem(s)"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]))


class ConfigurationError(AirError):
    """Something the user must change outside the workload (connection, image registration...)."""


class AuthError(AirError):
    """The workspace refused the credentials. Never contains the token itself."""


class NotFound(AirError):
    """The workspace says the object does not exist (404 / RESOURCE_DOES_NOT_EXIST)."""


def retryable_status(status_code: int) -> bool:
    """Whether an error answer's status says the server may answer differently later."""
    return status_code == 429 or status_code >= 500


class PlatformError(AirError):
    """An error answer from the workspace that is not one of the more specific ones.

    A subclass that is retryable on its class (``RateLimited``, ``CapacityError``) is
    retryable on every instance; otherwise the status decides (no status: the workspace
    was not reached)."""

    def __init__(
        self, message: str, *, status_code: int | None = None, error_code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_code = error_code
        self.retryable = (
            type(self).retryable or status_code is None or retryable_status(status_code)
        )


class InvalidResponse(PlatformError):
    """An answer the client cannot use: a redirect, a body that is not the JSON the API
    returns, or a body cut short. Usually a proxy, a login page or a wrong host; a truncated
    body (``truncated``) is a network fault and worth a retry."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        truncated: bool = False,
    ) -> None:
        super().__init__(message, status_code=status_code)
        self.truncated = truncated
        self.retryable = truncated


class WorkspaceUnreachable(PlatformError):
    """The workspace host has never answered this process and cannot be reached: its name
    is not found, nothing listens on its port, the TLS handshake fails, or nothing answers
    within a few seconds. Usually a mistyped or wrong host; ``host`` names it and ``cause``
    says which of these it was (``"dns"``, ``"refused"``, ``"tls"``, ``"connect timeout"``,
    ``"no answer"`` or ``"connection"``). Retryable like any failure to reach the
    workspace: a workspace that is down when a process starts looks the same."""

    def __init__(self, message: str, *, host: str, cause: str) -> None:
        super().__init__(message)
        self.host = host
        self.cause = cause


class RateLimited(PlatformError):
    """429 or 503 beyond the retry budget."""

    retryable = True


class CapacityError(PlatformError):
    """The platform reports it has no GPU capacity for the request: worth a later try,
    whatever the status it came with."""

    retryable = True


class RunFailed(AirError):
    """A run ended in any state other than SUCCESS. ``output`` is the failed task's
    ``runs/get-output`` when it could be read (its MLflow ids name the run's MLflow page)."""

    def __init__(
        self,
        message: str,
        *,
        run_id: int | None = None,
        result_state: str | None = None,
        run_page_url: str | None = None,
        output: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.result_state = result_state
        self.run_page_url = run_page_url
        self.output: dict[str, Any] = dict(output or {})


class RunTimeout(AirError):
    """The caller's deadline passed before the run (or an image registration) ended."""

    def __init__(self, message: str, *, run_id: int | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


def _used_text(used: float, budget: float) -> str:
    """``used`` with as few significant digits as still show it over ``budget``."""
    for digits in range(2, 10):
        text = f"{used:.{digits}g}"
        if float(text) > budget:
            return text
    return repr(used)


class RetriesStopped(AirError):
    """An attempt of the run failed while the platform was about to retry it, and the wait's
    retry policy (``FailurePolicy``) says that class of failure gets no platform retry: ``stop``
    (a deterministic diagnosis by default: CUDA out of memory, a missing command, ...) or
    ``orchestrator`` (then ``retryable``: the orchestrator's own retry takes over). The wait
    ends with this error; the run goes on until it is cancelled (the orchestrators cancel
    it)."""

    def __init__(
        self,
        run_id: int,
        line: str,
        *,
        task_key: str | None = None,
        failure_class: str = "deterministic",
        action: str = "stop",
    ) -> None:
        super().__init__(
            f"{line}; further retries of run {run_id} stopped "
            f"(failure_policy: {failure_class} -> {action})"
        )
        self.run_id = run_id
        self.headline = line
        self.task_key = task_key
        self.failure_class = failure_class
        self.action = action
        self.retryable = action == "orchestrator"


class BudgetExceeded(AirError):
    """A run (or a workflow stage) used more GPU-hours (accelerators x elapsed, every
    attempt) than its ``max_gpu_hours``. The wait that saw it ends with this error; the run
    itself keeps going until it is cancelled (the orchestrators cancel it)."""

    def __init__(
        self, run_id: int, used: float, budget: float, *, task_key: str | None = None
    ) -> None:
        what = f"stage {task_key} of run {run_id}" if task_key else f"run {run_id}"
        super().__init__(
            f"{what} used {_used_text(used, budget)} GPU-hours, over its budget of "
            f"{budget:g} (max_gpu_hours)"
        )
        self.run_id = run_id
        self.used = used
        self.budget = budget
        self.task_key = task_key
