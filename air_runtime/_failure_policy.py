"""What a failed attempt gets next, by the class of its failure: one frozen value that every
wait on a run takes (and a trigger serializes whole).

The platform retries a failed task up to the workload's ``max_retries`` (the CLI's default is
3, runconfig_launch.go), whatever the cause. That is right when the hosts failed (a node lost,
preempted, an NCCL or Xid fault: another attempt on other hosts resumes and finishes) and
wasted when the code did (CUDA out of memory, an import error: every retry fails the same way,
on the same number of GPUs). So the wait diagnoses each attempt that failed while a retry
follows (its nodes' last lines and the platform's state message, a few requests, only then)
and the policy says what each class gets:

- ``platform``: let the platform's retry run (the wait says so in the task log);
- ``stop``: cancel the run now and fail the task for good (an orchestrator retry would
  spend again, for nothing);
- ``orchestrator``: cancel the run now and fail the task as retryable, so that the
  orchestrator's own retry (its delay, its alerting, a repair of the stage) takes over.

The default is the one a GPU platform team sets: a deterministic failure stops (a retry
costs the same GPU-hours and fails the same way), an infrastructure failure and an unknown
one are retried by the platform (the cheapest retry: no new submission, and the checkpoint
location is the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from air_runtime._diagnosis import Diagnosis, FailureClass

__all__ = ["FailureClass", "FailurePolicy", "RetryAction", "RetryDecision"]


class RetryAction(StrEnum):
    """What a failed attempt of one failure class gets (see the module docstring)."""

    PLATFORM = "platform"
    STOP = "stop"
    ORCHESTRATOR = "orchestrator"


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """The policy's decision on one failed attempt: its class, what it gets and why."""

    failure_class: FailureClass
    action: RetryAction
    diagnosis: Diagnosis | None

    @property
    def stops(self) -> bool:
        """Whether the wait ends here (the caller cancels the run)."""
        return self.action is not RetryAction.PLATFORM

    def line(self) -> str:
        """The first line of the task log about this failure: ``NCCL collective operation
        timed out on node 3 (infrastructure): retry 2 of 3 resumes from checkpoint step 4,000
        (...)`` when the platform retries (``follows`` when the task has no checkpoint), else the diagnosis' headline (``CUDA out of memory on node 0
        (deterministic, task train, retry 0 of 3): reduce the batch size ...``)."""
        d = self.diagnosis
        if d is None:
            text = f"the attempt failed and its logs do not say why ({self.failure_class.value})"
            if self.action is RetryAction.PLATFORM:
                return text + ": the platform retries it"
            return text
        if self.action is not RetryAction.PLATFORM:
            return d.headline()
        text = d.cause + (f" on node {d.node}" if d.node is not None else "")
        text += f" ({self.failure_class.value}): "
        if d.attempt_number is not None:
            of = f" of {d.max_retries}" if d.max_retries is not None else ""
            text += f"retry {d.attempt_number + 1}{of}"
            then = "follows"
        else:
            text += "the platform"
            then = "retries it"
        if d.checkpoint is not None:
            then = f"resumes from checkpoint {d.checkpoint.describe()}"
        return f"{text} {then} ({d.advice})"


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """What each failure class gets (``RetryAction``). The default stops deterministic
    failures and lets the platform retry the others."""

    infrastructure: RetryAction = RetryAction.PLATFORM
    deterministic: RetryAction = RetryAction.STOP
    unknown: RetryAction = RetryAction.PLATFORM

    def __post_init__(self) -> None:
        for name in ("infrastructure", "deterministic", "unknown"):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, RetryAction(value))
            except ValueError:
                choices = ", ".join(a.value for a in RetryAction)
                raise ValueError(
                    f"failure_policy.{name}: {value!r} is not an action; use one of {choices}"
                ) from None

    @classmethod
    def platform_only(cls) -> FailurePolicy:
        """Every failure retried by the platform as the workload asks (no diagnosis read)."""
        return cls(deterministic=RetryAction.PLATFORM)

    @classmethod
    def of(
        cls,
        policy: FailurePolicy | Mapping[str, str] | None = None,
        stop_deterministic_retries: bool | None = None,
    ) -> FailurePolicy:
        """The policy a caller asked for: ``policy`` (a mapping as in YAML or a trigger's
        kwargs), the default when None; ``stop_deterministic_retries`` (the former
        switch) sets its deterministic action."""
        if policy is None:
            chosen = cls()
        elif isinstance(policy, FailurePolicy):
            chosen = policy
        else:
            chosen = cls.from_json(policy)
        if stop_deterministic_retries is None:
            return chosen
        action = RetryAction.STOP if stop_deterministic_retries else RetryAction.PLATFORM
        return cls(chosen.infrastructure, action, chosen.unknown)

    def action(self, failure_class: FailureClass) -> RetryAction:
        return RetryAction(getattr(self, failure_class.value))

    @property
    def examines(self) -> bool:
        """Whether a failed attempt needs a diagnosis at all: not when every class gets the
        platform's retry. (A wait that tells what it decides examines anyway.)"""
        return any(self.action(c) is not RetryAction.PLATFORM for c in FailureClass)

    def decide(self, diagnosis: Diagnosis | None) -> RetryDecision:
        failure_class = diagnosis.failure_class if diagnosis is not None else FailureClass.UNKNOWN
        return RetryDecision(failure_class, self.action(failure_class), diagnosis)

    def to_json(self) -> dict[str, str]:
        return {
            "infrastructure": self.infrastructure.value,
            "deterministic": self.deterministic.value,
            "unknown": self.unknown.value,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FailurePolicy:
        unknown_keys = sorted(set(data) - {"infrastructure", "deterministic", "unknown"})
        if unknown_keys:
            raise ValueError(
                f"failure_policy: unknown failure class {unknown_keys[0]!r}; the classes are "
                "infrastructure, deterministic and unknown"
            )
        return cls(**dict(data))
