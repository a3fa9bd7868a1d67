"""Waiting on a run's state in tests: the event, never a time."""

from __future__ import annotations

import time


def wait_for_state(host: str, token: str, run_id: int, wanted: str) -> None:
    """Until the run reaches the life-cycle state ``wanted`` (the event waited on, never a
    time); fails if it ends first."""
    from air_runtime import AirClient

    with AirClient(host, token) as client:
        while True:
            state = client.get_run(run_id)
            if state.life_cycle_state == wanted:
                return
            assert not state.is_terminal, state.describe()
            time.sleep(0.05)
