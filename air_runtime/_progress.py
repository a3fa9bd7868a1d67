"""Training progress and time left, computed as the ``databricks air`` CLI computes them
(databricks/cli ``cmd/air/eta.go``: computeETA, stepETA, epochETA, coarseDuration).

A run is estimable once it has logged to its MLflow run a total (the ``max_steps`` param when
> 0, else ``num_train_epochs`` when > 0) and an ``epoch`` metric logged repeatedly, each point
carrying the global step as its MLflow step and the fractional epoch as its value: what
HuggingFace Trainer's MLflow callback logs, and what any loop can log by hand. A run that logs
no total shows nothing rather than a misleading estimate.

Two readings of one history. ``airo get`` and ``airo list`` keep the CLI's rules exactly
(``databricks air get`` shows nothing before step 10, ``minStepsForETA``). What a waiting task
logs while the run runs (``live=True``) starts from the first logged step instead: the
percentage from one point, the time left once two points are a step and some time apart, so a
trainer that logs a few epochs shows progress from its first.

Pure functions of the params and the metric history: the client reads them
(``AirClient.training_progress``), the orchestrators and ``airo`` show the result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# eta.go etaProgressMetric: one history drives both the step- and the epoch-based estimate.
PROGRESS_METRIC = "epoch"
# eta.go etaWindowPoints: the rate of the last points, not a warm-up-skewed average.
WINDOW_POINTS = 10
# eta.go minStepsForETA: no estimate before step 10 (compilation, data loader warm-up).
MIN_STEPS = 10


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One point of a metric history: its value, MLflow step and timestamp (epoch ms)."""

    value: float
    step: int
    timestamp: int

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> MetricPoint | None:
        """A point of ``metrics/get-history``; None when a field is missing or unreadable."""
        try:
            return cls(float(body["value"]), int(body.get("step") or 0), int(body["timestamp"]))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class TrainingProgress:
    """How far a running training has come and how long it has left (eta.go trainingETA)."""

    percent_complete: int  # 0-99: a running run is never shown 100% complete
    # None: not known yet (a live reading of one logged point, see the module docstring).
    remaining_seconds: int | None

    def detailed(self) -> str:
        """``45% · ~2h 15m left`` (the single-run view)."""
        if self.remaining_seconds is None:
            return f"{self.percent_complete}% · time left after the next logged step"
        return f"{self.percent_complete}% · ~{coarse_duration(self.remaining_seconds)} left"

    def compact(self) -> str:
        """``45% · ~2h 15m`` (a list's column)."""
        if self.remaining_seconds is None:
            return f"{self.percent_complete}%"
        return f"{self.percent_complete}% · ~{coarse_duration(self.remaining_seconds)}"

    def to_dict(self) -> dict[str, int | None]:
        """The CLI's JSON fields (acceptance/air/get: est_remaining_seconds, est_percent_complete)."""
        return {
            "est_remaining_seconds": self.remaining_seconds,
            "est_percent_complete": self.percent_complete,
        }


def _go_round(value: float) -> int:
    """Go's math.Round: halves away from zero (Python's round() goes to even)."""
    return math.floor(abs(value) + 0.5) * (1 if value >= 0 else -1)


def coarse_duration(seconds: int) -> str:
    """Seconds to the nearest minute: 80 -> ``1m``, 8100 -> ``2h 15m``, under 30 s -> ``<1m``."""
    minutes = _go_round(seconds / 60)
    if minutes <= 0:
        return "<1m"
    hours, minutes = divmod(minutes, 60)
    parts = ([f"{hours}h"] if hours else []) + ([f"{minutes}m"] if minutes else [])
    return " ".join(parts)


def _positive_int(text: str | None) -> int | None:
    try:
        number = int(str(text).strip()) if text is not None else 0
    except ValueError:
        return None
    return number if number > 0 else None


def _positive_float(text: str | None) -> float | None:
    try:
        number = float(str(text).strip()) if text is not None else 0.0
    except ValueError:
        return None
    return number if number > 0 and math.isfinite(number) else None


def has_total(params: Mapping[str, str]) -> bool:
    """Whether the run logged a total to estimate against (else its history is not read)."""
    return bool(
        _positive_int(params.get("max_steps")) or _positive_float(params.get("num_train_epochs"))
    )


def _percent(current: float, total: float) -> int:
    return min(99, max(0, _go_round(current / total * 100)))


def compute_progress(
    params: Mapping[str, str], history: Iterable[MetricPoint], *, live: bool = False
) -> TrainingProgress | None:
    """The estimate from a run's params and its ``epoch`` history, or None when there is none
    (no total, fewer than two points, before step 10, no time or progress between the
    window's ends, already at the total). ``max_steps`` wins over ``num_train_epochs``, as in
    HuggingFace Trainer.

    ``live``: from the first logged step (no step-10 wait): one point gives the percentage
    alone, and a window without time or progress between its ends too."""
    points = sorted(history, key=lambda p: p.timestamp)  # stable: ties keep their order
    if len(points) < (1 if live else 2):
        return None
    points = points[-WINDOW_POINTS:]
    first, last = points[0], points[-1]
    if last.step < MIN_STEPS and not live:
        return None
    elapsed = (last.timestamp - first.timestamp) / 1000
    if elapsed <= 0 and not live:
        return None
    max_steps = _positive_int(params.get("max_steps"))
    if max_steps is not None:
        return _estimate(last.step, last.step - first.step, elapsed, max_steps, live)
    epochs = _positive_float(params.get("num_train_epochs"))
    if epochs is not None:
        return _estimate(last.value, last.value - first.value, elapsed, epochs, live)
    return None


def _estimate(
    current: float, done: float, elapsed: float, total: float, live: bool
) -> TrainingProgress | None:
    """eta.go stepETA and epochETA (one shape: ``current`` of ``total``, ``done`` of them in
    ``elapsed`` seconds); ``live``: the percentage alone when there is no rate yet."""
    if current <= 0 or current >= total:
        return None
    if done <= 0 or elapsed <= 0:
        return TrainingProgress(_percent(current, total), None) if live else None
    remaining = (total - current) / (done / elapsed)
    return TrainingProgress(_percent(current, total), _go_round(remaining))
