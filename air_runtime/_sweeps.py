"""GPU-hour budgets across a sweep, and prices: the one place their rules are written.

A *sweep* is every run one orchestrator run asks for: the trials of an Airflow Dag run (every
task and map index of it), the partitions of a Dagster backfill (or of one Dagster run when
it belongs to no backfill). What it spent is counted on the workspace, never in one process:

- *Which runs.* A run's name carries the pipeline and the orchestrator run that made it
  (``_run_names``: ``<experiment>--<pipeline>--<run>--<task>[--<index>]``, the run in its
  short form). The sweep's runs are the runs listed since the sweep began, as the CLI lists
  runs (``runs/list`` with ``run_type=SUBMIT_RUN`` and ``expand_tasks=true``, newest first,
  here from ``start_time_from``), whose name shows the sweep's pipeline right before one of its
  orchestrator runs. An Airflow sweep is one Dag run (``<dag>--<dag run>``); a Dagster
  backfill's runs share the ``dagster/backfill`` tag, and its sweep is every Dagster run of
  that backfill (each run's short id), whatever its job.
- *What they spent.* The sum of their GPU-hours: accelerators x elapsed time of every
  attempt, an attempt still going counted up to now (``SweepSpend``).
- *Spent.* Once that sum reaches the budget no run of the sweep is submitted any more
  (``SweepBudgetSpent`` with ``refused``), and the wait on any of its runs ends with
  ``SweepBudgetSpent``: the caller cancels its run and every other run of the sweep still
  going (``SweepSpend.running``), so spending stops even for a run nobody waits on.
- *The message* names the figure and who spent it, the biggest spenders first::

      sweep air_sweep/manual__2026-12-05T07:00:00+00:00 spent 0.52 of 0.5 GPU-hours
      (USD 50.96): run 12 (trial[3]) 0.4 (USD 39.20), run 13 (trial[4]) 0.12 (USD 11.76)

Between two listings a sweep's spend grows by the accelerators its running runs hold;
``SweepSpend.seconds_to_spent`` says when it reaches the budget at that pace, which is when the
next listing is due (a waiter never waits a whole poll interval past that moment).

Prices (``Prices``) are the user's, per GPU-hour of each accelerator type in one currency; none
are built in. They turn GPU-hours into money in messages, results and estimates.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ._errors import AirError, BudgetExceeded, ConfigurationError
from ._run_names import (
    MAX_RUN_NAME_LENGTH,
    NAME_SEPARATOR,
    decode_name_part,
    name_part,
    short_run,
)
from ._states import RunState
from .platform import GPUS_PER_NODE

# What a sweep's listing asks for (list.go newJobsScanStrategy: submit runs, their tasks).
LIST_PAGE_SIZE = 25
# A listing stops after this many pages (25 runs each): a sweep of more runs than that started
# in its window is counted from its newest runs.
MAX_LIST_PAGES = 200
# A run's start time is the workspace's clock, the sweep's start the orchestrator's: the
# listing starts this much earlier.
CLOCK_SLACK_MS = 5 * 60 * 1000
# The most members a message names; the others are summed up.
MESSAGE_MEMBERS = 10
_DIGEST_CHARACTERS = frozenset("0123456789abcdef")
_SHORTENED_SLACK = 12


def _now_ms() -> int:
    return int(time.time() * 1000)


def _positive(value: Any, path: str, fix: str) -> float:
    """``value`` as a positive, finite number, else a ``ConfigurationError`` naming ``path``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        number = math.nan
    else:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
    if not (number > 0 and math.isfinite(number)):
        raise ConfigurationError(f"{path}: {value!r} is not a positive number. Fix: {fix}")
    return number


def sweep_budget(value: Any, path: str = "sweep_gpu_hours_budget") -> float | None:
    """A sweep's budget as given (None: no budget), checked: a positive number of GPU-hours."""
    if value is None:
        return None
    return _positive(value, path, "give the GPU-hours the whole sweep may use, e.g. 40")


# --- prices -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prices:
    """What one GPU-hour of each accelerator type costs, in ``currency`` (the user's figures:
    nothing is built in). A run's cost is the sum over its attempts of GPU-hours x the price
    of their type; unknown when a type it used has no price."""

    per_gpu_hour: tuple[tuple[str, float], ...]
    currency: str

    @classmethod
    def of(cls, prices: Any, currency: Any, *, where: str = "gpu_hour_prices") -> Prices | None:
        """Checked prices (None when none are given): ``prices`` maps accelerator types to a
        positive price per GPU-hour; ``currency`` names their currency. ``where`` is how the
        error names the setting (``ConfigurationError`` naming the bad entry and the fix)."""
        if prices is None or prices == {}:
            return None
        if not isinstance(prices, Mapping):
            raise ConfigurationError(
                f"{where}: {prices!r} is not a mapping. Fix: give the price of one GPU-hour per "
                'accelerator type, e.g. {"GPU_1xA10": 1.2, "GPU_8xH100": 98.0}'
            )
        known = ", ".join(sorted(GPUS_PER_NODE))
        rates: list[tuple[str, float]] = []
        for kind, price in prices.items():
            if kind not in GPUS_PER_NODE:
                raise ConfigurationError(
                    f"{where}.{kind}: unknown accelerator type. Fix: use one of {known}"
                )
            rates.append(
                (kind, _positive(price, f"{where}.{kind}", "give the price of one GPU-hour"))
            )
        if not isinstance(currency, str) or not currency.strip():
            raise ConfigurationError(
                f"{where}: prices without a currency. Fix: set the currency next to them, "
                'e.g. "USD"'
            )
        return cls(tuple(sorted(rates)), currency.strip())

    def rate(self, accelerator_type: str) -> float | None:
        return dict(self.per_gpu_hour).get(accelerator_type)

    def cost(self, hours_by_type: Mapping[str, float]) -> float | None:
        """The money ``hours_by_type`` (GPU-hours by accelerator type) cost; None when a type
        used has no price."""
        total = 0.0
        for kind, hours in hours_by_type.items():
            if not hours:
                continue
            rate = self.rate(kind)
            if rate is None:
                return None
            total += hours * rate
        return round(total, 2)

    def text(self, amount: float) -> str:
        return f"{self.currency} {amount:,.2f}"

    def to_json(self) -> dict[str, Any]:
        return {"gpu_hour_prices": dict(self.per_gpu_hour), "currency": self.currency}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> Prices | None:
        if not raw:
            return None
        return cls.of(raw.get("gpu_hour_prices"), raw.get("currency"))


@dataclass(frozen=True)
class CostEstimate:
    """What one run may cost at most: its accelerators for its whole timeout, at the price
    of their type, per attempt and for every attempt its retries allow."""

    accelerator_type: str
    accelerators: int
    timeout_hours: float | None  # None: the run has no timeout
    attempts: int  # 1 + max_retries
    prices: Prices

    @property
    def rate(self) -> float | None:
        return self.prices.rate(self.accelerator_type)

    @property
    def gpu_hours(self) -> float | None:
        """GPU-hours of one attempt that runs until its timeout."""
        return None if self.timeout_hours is None else self.accelerators * self.timeout_hours

    @property
    def per_attempt(self) -> float | None:
        hours, rate = self.gpu_hours, self.rate
        return None if hours is None or rate is None else round(hours * rate, 2)

    def text(self) -> str:
        what = f"{self.accelerators} {self.accelerator_type} accelerators"
        rate = self.rate
        if rate is None:
            return (
                f"estimate: no price for {self.accelerator_type} (prices are given for "
                f"{', '.join(k for k, _ in self.prices.per_gpu_hour)})"
            )
        hourly = self.prices.text(self.accelerators * rate)
        if self.timeout_hours is None or self.per_attempt is None or self.gpu_hours is None:
            return (
                f"estimate: {what} cost {hourly} per hour; the workload has no "
                "timeout_minutes, so nothing bounds what a run costs"
            )
        text = (
            f"estimate: {what} x {self.timeout_hours:g} h (timeout_minutes) = "
            f"{self.gpu_hours:g} GPU-hours x {self.prices.text(rate)} = "
            f"{self.prices.text(self.per_attempt)} per attempt"
        )
        if self.attempts > 1:
            text += (
                f"; up to {self.prices.text(self.per_attempt * self.attempts)} for "
                f"{self.attempts} attempts (max_retries {self.attempts - 1})"
            )
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "accelerator_type": self.accelerator_type,
            "accelerators": self.accelerators,
            "timeout_hours": self.timeout_hours,
            "gpu_hours": self.gpu_hours,
            "price_per_gpu_hour": self.rate,
            "currency": self.prices.currency,
            "per_attempt": self.per_attempt,
            "attempts": self.attempts,
            "at_most": None if self.per_attempt is None else self.per_attempt * self.attempts,
        }


def estimate_cost(
    accelerator_type: str,
    accelerators: int,
    timeout_minutes: int | None,
    max_retries: int,
    prices: Prices,
) -> CostEstimate:
    """The most one run costs: accelerators x timeout hours x price, per attempt (and for
    every attempt its ``max_retries`` allow; -1, unlimited, counts one)."""
    hours = None if not timeout_minutes else timeout_minutes / 60.0
    attempts = 1 + max(max_retries, 0)
    return CostEstimate(accelerator_type, accelerators, hours, attempts, prices)


# --- the sweep ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sweep:
    """Which runs belong to one sweep and what they may spend together (see the module
    docstring). ``label`` is how messages name it; ``pipeline`` the pipeline part every run's
    name has (None: any); ``runs`` the orchestrator runs whose runs belong to it (as given:
    they are compared in the short form names carry); ``since_ms`` when the sweep began
    (no run of it started earlier: the listing starts there); ``budget`` in GPU-hours."""

    label: str
    pipeline: str | None
    runs: tuple[str, ...]
    budget: float
    since_ms: int | None = None
    prices: Prices | None = None
    _short: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("a sweep names at least one orchestrator run")
        object.__setattr__(self, "_short", frozenset(name_part(short_run(r)) for r in self.runs))

    @property
    def key(self) -> tuple[Any, ...]:
        """What tells two sweeps apart (waits on one sweep share its listings)."""
        return (self.pipeline, self._short, self.since_ms)

    def member_label(self, run_name: str | None) -> str | None:
        """The task (and index or partition) a run of this sweep was made for, as messages
        name it (``trial[3]``); None when the run is not the sweep's."""
        if not run_name:
            return None
        parts = run_name.split(NAME_SEPARATOR)
        # A shortened name ends with a digest of 8 hex digits and is within a few characters
        # of the limit (a cut part loses its trailing ``_`` and ``-``).
        shortened = (
            len(run_name) > MAX_RUN_NAME_LENGTH - _SHORTENED_SLACK
            and len(parts[-1]) == 8
            and set(parts[-1]) <= _DIGEST_CHARACTERS
        )
        if shortened:
            parts = parts[:-1]
        # <base>--<pipeline>--<run>--<task>[--<index>]: the run part is never first, and a
        # task follows it (a base may itself hold the separator).
        for i in range(2, len(parts) - 1):
            if parts[i] in self._short and self._pipeline_is(parts[i - 1], shortened):
                task, rest = parts[i + 1], parts[i + 2 :]
                return f"{task}[{decode_name_part(rest[0])}]" if rest else task
        return None

    def _pipeline_is(self, part: str, shortened: bool) -> bool:
        if self.pipeline is None:
            return True
        whole = name_part(self.pipeline)
        # A shortened name cuts the pipeline first (``compose_run_name``).
        return part == whole or (shortened and bool(part) and whole.startswith(part))

    def list_params(self) -> dict[str, Any]:
        """The ``runs/list`` query of one page of the sweep's window."""
        params: dict[str, Any] = {
            "run_type": "SUBMIT_RUN",
            "expand_tasks": "true",
            "limit": LIST_PAGE_SIZE,
        }
        if self.since_ms is not None:
            params["start_time_from"] = max(0, self.since_ms - CLOCK_SLACK_MS)
        return params

    def tally(self, listed: Iterable[Mapping[str, Any]], now_ms: int | None = None) -> SweepSpend:
        """What the sweep spent, from listed runs (``runs/list`` entries with their tasks, or
        ``runs/get`` answers): those that are its members, each once."""
        members: dict[int, SweepMember] = {}
        for body in listed:
            label = self.member_label(body.get("run_name"))
            if label is None:
                continue
            state = RunState.from_api(body)
            if state.run_id and state.run_id not in members:
                members[state.run_id] = SweepMember(state.run_id, label, state)
        ordered = tuple(sorted(members.values(), key=lambda m: m.run_id))
        return SweepSpend(self, ordered, _now_ms() if now_ms is None else now_ms)

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "pipeline": self.pipeline,
            "runs": list(self.runs),
            "budget": self.budget,
            "since_ms": self.since_ms,
            "prices": self.prices.to_json() if self.prices is not None else None,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Sweep:
        since = raw.get("since_ms")
        return cls(
            label=str(raw["label"]),
            pipeline=raw.get("pipeline"),
            runs=tuple(str(r) for r in raw["runs"]),
            budget=float(raw["budget"]),
            since_ms=int(since) if since is not None else None,
            prices=Prices.from_json(raw.get("prices")),
        )


@dataclass(frozen=True)
class SweepMember:
    """One run of a sweep, as last listed."""

    run_id: int
    label: str
    state: RunState

    @property
    def running(self) -> bool:
        return not self.state.is_terminal

    def gpu_hours(self, now_ms: int) -> float:
        return self.state.gpu_hours(now_ms=now_ms)

    def accelerators_held(self) -> int:
        """Accelerators its attempts hold now (those started and not ended)."""
        if self.state.is_terminal:
            return 0
        return sum(
            a.num_accelerators or 0 for a in self.state.attempts if a.start_time and not a.end_time
        )


@dataclass(frozen=True)
class SweepSpend:
    """What a sweep's runs spent as of ``now_ms`` (from one listing: a run still going is
    counted up to ``now_ms``; ``at`` moves that moment without a new listing)."""

    sweep: Sweep
    members: tuple[SweepMember, ...]
    now_ms: int

    def at(self, now_ms: int) -> SweepSpend:
        """The same listing counted up to ``now_ms`` (its running runs still running)."""
        return replace(self, now_ms=now_ms)

    def of_run(self, run_id: int | None) -> float:
        for member in self.members:
            if member.run_id == run_id:
                return member.gpu_hours(self.now_ms)
        return 0.0

    @property
    def total(self) -> float:
        return sum(m.gpu_hours(self.now_ms) for m in self.members)

    @property
    def spent(self) -> bool:
        """Whether the budget is spent: no run of the sweep may go on or start."""
        return self.total >= self.sweep.budget

    @property
    def running(self) -> tuple[SweepMember, ...]:
        return tuple(m for m in self.members if m.running)

    def seconds_to_spent(self) -> float:
        """When the budget is spent at the pace of the runs going now (0: it is; ``inf``:
        nothing runs)."""
        left = self.sweep.budget - self.total
        if left <= 0:
            return 0.0
        held = sum(m.accelerators_held() for m in self.members)
        return math.inf if held == 0 else left / held * 3600.0

    def hours_by_type(self) -> dict[str, float]:
        hours: dict[str, float] = {}
        for member in self.members:
            for kind, used in member.state.gpu_hours_by_type(now_ms=self.now_ms).items():
                hours[kind] = hours.get(kind, 0.0) + used
        return hours

    def cost(self) -> float | None:
        prices = self.sweep.prices
        return None if prices is None else prices.cost(self.hours_by_type())

    def _money(self, hours_by_type: Mapping[str, float]) -> str:
        prices = self.sweep.prices
        cost = None if prices is None else prices.cost(hours_by_type)
        return "" if prices is None or cost is None else f" ({prices.text(cost)})"

    def message(self) -> str:
        """``sweep <label> spent A of B GPU-hours (money): run 12 (trial[3]) 0.4 (money), ...``:
        the biggest spenders first, at most ``MESSAGE_MEMBERS`` of them named."""
        now = self.now_ms
        ranked = sorted(self.members, key=lambda m: (-m.gpu_hours(now), m.run_id))
        named = [
            f"run {m.run_id} ({m.label}) {m.gpu_hours(now):.3g}"
            + self._money(m.state.gpu_hours_by_type(now_ms=now))
            for m in ranked[:MESSAGE_MEMBERS]
        ]
        rest = ranked[MESSAGE_MEMBERS:]
        if rest:
            named.append(f"{len(rest)} more runs {sum(m.gpu_hours(now) for m in rest):.3g}")
        by_whom = ", ".join(named) if named else "no run yet"
        return (
            f"sweep {self.sweep.label} spent {self.total:.4g} of {self.sweep.budget:g} "
            f"GPU-hours{self._money(self.hours_by_type())}: {by_whom}"
        )


class SweepBudgetSpent(BudgetExceeded):
    """The budget of the sweep a run belongs to is spent (``spend`` says what, by whom).
    Raised before a submit (``refused``: nothing was submitted) and by a wait on one of its
    runs (that run and the sweep's other runs still going are the caller's to cancel:
    ``spend.running``). ``used`` is the run's own share, ``budget`` the sweep's."""

    def __init__(
        self,
        spend: SweepSpend,
        *,
        run_id: int | None = None,
        task_key: str | None = None,
        refused: bool = False,
    ) -> None:
        text = spend.message()
        if refused:
            text += "; not submitted (sweep_gpu_hours_budget)"
        AirError.__init__(self, text)
        self.spend = spend
        self.run_id = run_id or 0
        self.used = spend.of_run(run_id)
        self.budget = spend.sweep.budget
        self.task_key = task_key
        self.refused = refused


def spent_error(
    spend: SweepSpend, run_id: int | None = None, task_key: str | None = None
) -> SweepBudgetSpent | None:
    """The error that stops a wait on run ``run_id`` once its sweep's budget is spent; None
    while it is not, or when the listing shows that run ended (its wait ends as it did)."""
    if not spend.spent:
        return None
    if any(m.run_id == run_id and not m.running for m in spend.members):
        return None
    return SweepBudgetSpent(spend, run_id=run_id, task_key=task_key)


__all__ = [
    "CostEstimate",
    "Prices",
    "Sweep",
    "SweepBudgetSpent",
    "SweepMember",
    "SweepSpend",
    "estimate_cost",
    "spent_error",
    "sweep_budget",
]
