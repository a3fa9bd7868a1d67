"""Which remote run an attempt owns: one pure decision for every orchestrator.

An attempt of a task (an Airflow try, a Dagster step of a run retry or a re-execution) may find
remote runs that earlier attempts of the same task submitted (*launches*). Each launch has a
*generation*: the number the submission's idempotency token is made from, so resubmitting a
generation hands its run back (the platform dedupes tokens). What the attempt does with them is
decided here, once, from what is known (the launches, their states, whether this attempt's plan
holds the same tasks); the orchestrators only map their records onto it
(``airflow_air._generations``, ``dagster_air._step``):

- a generation whose run ended unsuccessfully (or no longer exists) is never submitted again:
  the attempt moves to the next one;
- so is a generation whose run, for an index this attempt plans, holds other tasks than the
  plan's (the code changed): its token would give that run back;
- the launches of the generation chosen are *adopted*: submitting it gives them back, still
  going or ended well;
- any other launch still going is *cancelled first*: a task never runs two.

A state that could not be read is left out of ``states``: nothing is concluded from it (the
same token gives the run back when it is of the chosen generation; it is not cancelled).
``None`` says the run no longer exists, which counts as ended unsuccessfully.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from air_runtime._states import RunState


@dataclass(frozen=True)
class EarlierLaunch:
    """A remote run an earlier attempt of the same task submitted."""

    run_id: int
    generation: int
    # Whether this attempt plans a run for the launch's index at all, and whether its plan
    # holds the launch's tasks there (False also when the index is not planned).
    planned: bool = True
    same_plan: bool = True


@dataclass(frozen=True)
class Ownership:
    """What an attempt does: submit ``generation`` (the runs in ``adopt`` come back from that
    submit, so it submits nothing new for them) after cancelling ``cancel_first``."""

    generation: int
    adopt: tuple[int, ...] = ()
    cancel_first: tuple[int, ...] = ()


def _ended_badly(run_id: int, states: Mapping[int, RunState | None]) -> bool:
    if run_id not in states:
        return False  # not read: nothing is concluded from it
    state = states[run_id]
    return state is None or (state.is_terminal and not state.is_success)


def _going(run_id: int, states: Mapping[int, RunState | None]) -> bool:
    state = states.get(run_id)
    return state is not None and not state.is_terminal


def decide_ownership(
    launches: Sequence[EarlierLaunch],
    states: Mapping[int, RunState | None],
    *,
    failed: Iterable[int] = (),
    first: int = 0,
) -> Ownership:
    """The generation an attempt submits, the launches that submit gives back and those to
    cancel before it (see the module docstring). ``failed``: generations already known to have
    ended unsuccessfully; ``first``: the lowest generation this attempt may submit."""
    generation = max(first, max(failed, default=-1) + 1)
    for launch in sorted(launches, key=lambda x: x.generation):
        if launch.generation == generation and _ended_badly(launch.run_id, states):
            generation += 1  # its attempt ended before it could record the failure
    while any(x.generation == generation and x.planned and not x.same_plan for x in launches):
        generation += 1
    adopt = [x.run_id for x in launches if x.generation == generation and x.same_plan]
    cancel = [
        x.run_id
        for x in launches
        if (x.generation != generation or not x.same_plan) and _going(x.run_id, states)
    ]
    return Ownership(generation, tuple(dict.fromkeys(adopt)), tuple(dict.fromkeys(cancel)))
