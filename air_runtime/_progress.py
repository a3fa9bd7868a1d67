"""Training progress and time left, computed as the ``databricks air`` CLI computes them
(databricks/cli ``cmd/air/eta.go``: computeETA, stepETA, epochETA, coarseDuration).

A run is estimable once it has logged to its MLflow run a total (the ``max_steps`` param when
> 0, else ``num_train_epochs`` when > 0) and an ``epoch`` metric logged repeatedly, each point
carrying the global step as its MLflow step and the fractional epoch as its value: what
HuggingFace Trainer's MLflow callback logs, and what any loop can log by hand. A run that logs
no total shows nothing rather than a misleading estimate.

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
    remaining_seconds: int

    def detailed(self) -> str:
        """``45% · ~2h 15m left`` (the single-run view)."""
        return f"{self.percent_complete}% · ~{coarse_duration(self.remaining_seconds)} left"

    def compact(self) -> str:
        """``45% · ~2h 15m`` (a list's column)."""
        return f"{self.percent_complete}% · ~{coarse_duration(self.remaining_seconds)}"

    def to_dict(self) -> dict[str, int]:
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
    params: Mapping[str, str], history: Iterable[MetricPoint]
) -> TrainingProgress | None:
    """The estimate from a run's params and its ``epoch`` history, or None when there is none
    (no total, fewer than two points, before step 10, no time or progress between the
    window's ends, already at the total). ``max_steps`` wins over ``num_train_epochs``, as in
    HuggingFace Trainer."""
    points = sorted(history, key=lambda p: p.timestamp)  # stable: ties keep their order
    if len(points) < 2:
        return None
    points = points[-WINDOW_POINTS:]
    first, last = points[0], points[-1]
    if last.step < MIN_STEPS:
        return None
    elapsed = (last.timestamp - first.timestamp) / 1000
    if elapsed <= 0:
        return None
    max_steps = _positive_int(params.get("max_steps"))
    if max_steps is not None:
        done_steps = last.step - first.step
        if last.step <= 0 or last.step >= max_steps or done_steps <= 0:
            return None
        remaining = (max_steps - last.step) / (done_steps / elapsed)
        return TrainingProgress(_percent(last.step, max_steps), _go_round(remaining))
    epochs = _positive_float(params.get("num_train_epochs"))
    if epochs is not None:
        done_epochs = last.value - first.value
        if last.value <= 0 or last.value >= epochs or done_epochs <= 0:
            return None
        remaining = (epochs - last.value) / (done_epochs / elapsed)
        return TrainingProgress(_percent(last.value, epochs), _go_round(remaining))
    return None
