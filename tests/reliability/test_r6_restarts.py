"""R6 restarts.

- ``workspace_restart``: the local workspace (its own process) is stopped (SIGTERM) or
  killed (SIGKILL) while runs are in flight and clients (a polling ``AirClient.wait`` and a
  deferred ``AirRunTrigger``) wait on them, then started again on the same port and data.
  Every run is still known afterwards, ended SUCCESS or reported failed (never lost), and
  every waiter resumes and ends with that state.
- ``triggerer_daemon_restart`` (test_airflow_daemons.py): the ``airflow triggerer`` of a
  real deployment is SIGKILLed or stopped while a task waits in it, and started again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import connection_json, rng_for, trials
from helpers import (
    LoopThread,
    client_for,
    first_event,
    wait_for_state,
    workload,
)

from air_runtime._errors import NotFound
from air_runtime.local import start_local_workspace

pytestmark = [pytest.mark.row("R6"), pytest.mark.timeout(900)]


def test_workspace_restart(tmp_path: Path, airflow_db: Path, tally, monkeypatch) -> None:
    from airflow_air.triggers import AirRunTrigger

    rng = rng_for("R6-workspace")
    ws = start_local_workspace(
        data_dir=tmp_path / "workspace", in_process=False, retry_interval_s=0.05
    )
    monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", connection_json(ws.host, ws.token))
    outcomes: dict[str, int] = {}
    try:
        for trial in range(trials(1, 4)):
            hard = trial % 2 == 1
            # Runs that end before, around and after the restart, some failing.
            specs = [
                (f"r6-{trial}-{i}", rng.uniform(0.2, 4.0), rng.random() < 0.3) for i in range(4)
            ]
            with client_for(ws) as client:
                submitted = [
                    client.submit_workload(
                        workload(name, f"sleep {secs:.2f}" + ("\nexit 3" if fail else ""))
                    )
                    for name, secs, fail in specs
                ]
            waited: dict[int, Any] = {}

            def wait(run_id: int, waited: dict[int, Any] = waited) -> None:
                try:
                    with client_for(ws) as client:
                        waited[run_id] = client.wait(run_id, poll_interval=0.2, timeout=120)
                except Exception as exc:
                    waited[run_id] = exc

            threads = [threading.Thread(target=wait, args=(s.run_id,)) for s in submitted]
            for thread in threads:
                thread.start()
            loop = LoopThread()
            triggered = loop.submit(
                first_event(AirRunTrigger(submitted[-1].run_id, poll_interval=0.2))
            )
            time.sleep(rng.uniform(0.5, 2.0))
            tally.trials += 1
            if hard:
                ws.kill()
            else:
                ws.stop(keep_data=True)
            time.sleep(rng.uniform(0.2, 1.5))
            ws.start()
            for thread in threads:
                thread.join(timeout=150)
            try:
                event = triggered.result(timeout=150)
            finally:
                loop.close()
            with client_for(ws) as client:
                for s, (name, _, fail) in zip(submitted, specs, strict=True):
                    try:
                        state = wait_for_state(client, s.run_id, lambda st: st.is_terminal, 30)
                    except NotFound:
                        tally.orphans += 1
                        tally.fail(f"trial {trial}: run {s.run_id} was lost by the restart")
                        continue
                    result = state.result_state or state.life_cycle_state
                    outcomes[result] = outcomes.get(result, 0) + 1
                    waiter = waited.get(s.run_id)
                    if isinstance(waiter, Exception) or waiter is None:
                        tally.crashes += 1
                        tally.fail(f"trial {trial}: the waiter of {s.run_id} got {waiter!r}")
                    elif waiter.result_state != state.result_state:
                        tally.fail(
                            f"trial {trial}: waiter saw {waiter.describe()}, run is {result}"
                        )
                    if result == "SUCCESS" and fail:
                        tally.fail(f"trial {trial}: failing run {name} ended SUCCESS")
                    if not state.is_terminal:
                        tally.fail(f"trial {trial}: run {s.run_id} is {state.describe()}")
                last = client.get_run(submitted[-1].run_id)
            expected = "success" if last.is_success else "failed"
            if event.get("status") != expected:
                tally.fail(f"trial {trial}: trigger event {event} for a {last.describe()} run")
    finally:
        ws.stop()
    tally.notes.update(results=outcomes)
