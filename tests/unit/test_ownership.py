"""The one ownership decision, table-tested with the cases each orchestrator maps onto it.

Airflow (``airflow_air._generations``) knows one launch, the run its last try recorded, and
that every generation before it failed; it also probes a token: a run handed back that started
before the try is an earlier try's. Dagster (``dagster_air._step``) knows every launch of the
step's lineage, the generations whose failure it recorded, and whether its plan holds each
launch's tasks.
"""

from __future__ import annotations

import pytest

from air_runtime import EarlierLaunch, Ownership, RunState, decide_ownership

RUNNING = RunState(1, "RUNNING")
SUCCEEDED = RunState(1, "TERMINATED", "SUCCESS")
FAILED = RunState(1, "TERMINATED", "FAILED")
CANCELED = RunState(1, "TERMINATED", "CANCELED")
GONE = None

CASES = [
    # --- Airflow: the last try's record (generation <clear>.<failure>, failure = 2 here) ---
    pytest.param(
        [EarlierLaunch(7, 2)],
        {7: RUNNING},
        {"failed": range(2)},
        Ownership(2, (7,)),
        id="airflow: a retry after a worker crash reattaches to the run still going",
    ),
    pytest.param(
        [EarlierLaunch(7, 2)],
        {7: SUCCEEDED},
        {"failed": range(2)},
        Ownership(2, (7,)),
        id="airflow: a retry adopts a run that succeeded after its worker died",
    ),
    pytest.param(
        [EarlierLaunch(7, 2)],
        {7: FAILED},
        {"failed": range(2)},
        Ownership(3),
        id="airflow: a retry after a failed run submits the next generation",
    ),
    pytest.param(
        [EarlierLaunch(7, 2)],
        {7: GONE},
        {"failed": range(2)},
        Ownership(3),
        id="airflow: a run that no longer exists counts as ended",
    ),
    pytest.param(
        [],
        {},
        {},
        Ownership(0),
        id="airflow: a first try (or a clear) starts at generation 0",
    ),
    # --- Airflow: the token probe (the run a submit of generation 1 handed back) ---
    pytest.param(
        [EarlierLaunch(9, 1)],
        {9: FAILED},
        {"first": 1},
        Ownership(2),
        id="airflow probe: an earlier try's failed run moves to the next generation",
    ),
    pytest.param(
        [EarlierLaunch(9, 1)],
        {},
        {"first": 1},
        Ownership(1, (9,)),
        id="airflow probe: a run this try started is its own",
    ),
    pytest.param(
        [EarlierLaunch(9, 1)],
        {9: RUNNING},
        {"first": 1},
        Ownership(1, (9,)),
        id="airflow probe: an earlier try's run still going is reattached",
    ),
    # --- Dagster: the lineage's launches and recorded failures ---
    pytest.param(
        [EarlierLaunch(1, 0)],
        {1: RUNNING},
        {},
        Ownership(0, (1,)),
        id="dagster: a run retry after a SIGKILLed worker adopts the run",
    ),
    pytest.param(
        [EarlierLaunch(1, 0)],
        {1: FAILED},
        {"failed": {0}},
        Ownership(1),
        id="dagster: a re-execution from failure after a recorded failure starts generation 1",
    ),
    pytest.param(
        [EarlierLaunch(1, 0), EarlierLaunch(2, 1)],
        {1: FAILED, 2: FAILED},
        {},
        Ownership(2),
        id="dagster: unrecorded failures (the worker died first) are found from the states",
    ),
    pytest.param(
        [EarlierLaunch(1, 0)],
        {1: RUNNING},
        {"failed": {0}},
        Ownership(1, (), (1,)),
        id="dagster: a run of a failed generation still going is cancelled first",
    ),
    pytest.param(
        [EarlierLaunch(1, 0, same_plan=False)],
        {1: RUNNING},
        {},
        Ownership(1, (), (1,)),
        id="dagster: a run with other tasks (the code changed) is cancelled, its token skipped",
    ),
    pytest.param(
        [EarlierLaunch(1, 0, planned=False, same_plan=False)],
        {1: RUNNING},
        {},
        Ownership(0, (), (1,)),
        id="dagster: a run of an index no longer planned is cancelled, its token kept",
    ),
    pytest.param(
        [EarlierLaunch(1, 0, same_plan=False)],
        {1: SUCCEEDED},
        {},
        Ownership(1),
        id="dagster: an ended run with other tasks is not cancelled, its token still skipped",
    ),
    pytest.param(
        [EarlierLaunch(1, 0)],
        {},
        {"failed": {0}},
        Ownership(1),
        id="dagster: a run that could not be read is neither adopted nor cancelled",
    ),
    pytest.param(
        [EarlierLaunch(1, 0)],
        {},
        {},
        Ownership(0, (1,)),
        id="dagster: an unread run of the generation chosen comes back from its token",
    ),
    pytest.param(
        [EarlierLaunch(1, 0), EarlierLaunch(1, 0), EarlierLaunch(2, 1)],
        {1: FAILED, 2: RUNNING},
        {},
        Ownership(1, (2,)),
        id="dagster: a launch recorded twice counts once",
    ),
    pytest.param(
        [EarlierLaunch(3, 1), EarlierLaunch(1, 0)],
        {3: CANCELED, 1: CANCELED},
        {},
        Ownership(2),
        id="dagster: launches are taken in generation order, whatever order they came in",
    ),
]


@pytest.mark.parametrize(("launches", "states", "known", "expected"), CASES)
def test_ownership(
    launches: list[EarlierLaunch],
    states: dict[int, RunState | None],
    known: dict[str, object],
    expected: Ownership,
) -> None:
    assert decide_ownership(launches, states, **known) == expected  # type: ignore[arg-type]


def test_a_task_never_runs_two() -> None:
    """Whatever is known, no launch is both adopted and cancelled, and every launch still
    going that is not adopted is cancelled."""
    states_of = [RUNNING, SUCCEEDED, FAILED, GONE]
    for generation in range(3):
        for state in states_of:
            for same_plan in (True, False):
                launches = [
                    EarlierLaunch(1, 0, same_plan=same_plan),
                    EarlierLaunch(2, generation),
                ]
                decided = decide_ownership(launches, {1: state, 2: RUNNING})
                assert not set(decided.adopt) & set(decided.cancel_first)
                going = {1} if state is RUNNING else set()
                assert going | {2} <= set(decided.adopt) | set(decided.cancel_first)
