"""Sweep budgets through the core against a local workspace: a worker's wait stops once its
sweep's budget is spent, the cancel keeps its cause (``airo get`` shows it beside the API's
termination), the next submit is refused; the waits of one process on one sweep share one
listing per interval; ``airo run --dry-run`` with prices estimates the money."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from air_runtime import (
    AirClient,
    AsyncAirClient,
    RunWatcher,
    Submission,
    SubmissionKey,
    Sweep,
    SweepBudgetSpent,
    load_workload,
)
from air_runtime.cli import main as airo
from air_runtime.local import LocalWorkspace

DAG_RUN = "manual__2026-12-05T07:00:00+00:00"


def _held(gate: Path, accelerators: int = 16):
    """A trial of 2 H100 nodes that runs until ``gate`` exists."""
    return load_workload(
        {
            "experiment_name": "trial",
            "compute": {"accelerator_type": "GPU_8xH100", "num_accelerators": accelerators},
            "max_retries": 0,
            "timeout_minutes": 1,
            "command": f'until [ -e "{gate}" ]; do sleep 0.05; done',
        }
    )


def _trial(index: int, sweep: Sweep) -> Submission:
    return Submission(SubmissionKey("airflow", "ns", "sweep", DAG_RUN, "trial", index), sweep=sweep)


def _sweep(budget: float) -> Sweep:
    return Sweep("sweep/x", "sweep", (DAG_RUN,), budget, since_ms=int(time.time() * 1000))


def _auth(ws: LocalWorkspace, tmp_path: Path) -> list[str]:
    token_file = tmp_path / "token"
    token_file.write_text(ws.token)
    return ["--host", ws.host, "--token-file", str(token_file)]


def test_a_wait_stops_at_the_spent_budget_and_airo_get_shows_why(
    local_workspace: LocalWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = _sweep(budget=0.01)  # 32 accelerators spend it in about a second
    workload = _held(tmp_path / "never")
    with AirClient(local_workspace.host, local_workspace.token) as client:
        trials = [_trial(i, sweep) for i in range(2)]
        runs = [t.submit(client, workload, "0.0").run_id for t in trials]
        with pytest.raises(SweepBudgetSpent) as spent:
            client.wait(runs[0], poll_interval=5.0, sweep=sweep)  # stops before a 2nd poll
        assert spent.value.spend.spent and spent.value.run_id == runs[0]
        assert {m.run_id for m in spent.value.spend.running} == set(runs)
        trials[0].cancel(client, cause=trials[0].stop_cause(spent.value))
        # The other trial of the sweep is cancelled with it, with the same cause.
        ended = [client.wait(r, timeout=60) for r in runs]
        assert [e.result_state for e in ended] == ["CANCELED", "CANCELED"]
        # The wait stopped on the listing due when the budget would be spent, not at its
        # next poll 5 s on (32 accelerators spend 0.044 GPU-hours in 5 s): what the listing
        # it stopped on counted. (What the runs used in all also counts how long the cancel
        # took to reach their processes, which is the machine's, not the wait's.)
        assert spent.value.spend.total < 0.01 + 32 * 2.5 / 3600, spent.value.spend.total
        with pytest.raises(SweepBudgetSpent, match=r"; not submitted \(sweep_gpu_hours_budget\)"):
            _trial(2, sweep).submit(client, workload, "0.0")
        assert len(client.list_runs(active_only=False)[0]) == 2  # nothing more submitted

    auth = _auth(local_workspace, tmp_path)
    assert airo(["get", str(runs[1]), *auth]) == 0
    shown = capsys.readouterr().out
    assert "Termination:   USER_CANCELED (SUCCESS): Run cancelled by user" in shown, shown
    assert (
        "Cause:         budget: sweep sweep/x spent 0.01" in shown
        and "(trial[0])" in shown
        and f"by airflow sweep/{DAG_RUN}/trial[0]" in shown
    ), shown
    page = httpx.get(
        f"{local_workspace.host}/jobs/runs/{runs[1]}",
        headers={"Authorization": f"Bearer {local_workspace.token}"},
    ).text
    assert "<dt>Termination</dt><dd>USER_CANCELED (SUCCESS)</dd>" in page, page
    assert airo(["get", str(runs[1]), "--json", *auth]) == 0
    cause = json.loads(capsys.readouterr().out)["cause"]
    assert cause["cause"] == "budget" and cause["message"].startswith("sweep sweep/x spent")


def test_waits_on_one_sweep_share_one_listing_per_interval(
    local_workspace: LocalWorkspace, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    sweep = _sweep(budget=1000.0)
    workload = _held(gate, accelerators=1 * 8)
    with AirClient(local_workspace.host, local_workspace.token) as client:
        runs = [_trial(i, sweep).submit(client, workload, "0.0").run_id for i in range(8)]

    async def wait_all() -> tuple[int, float]:
        async with AsyncAirClient(local_workspace.host, local_workspace.token) as client:
            watcher = RunWatcher(client, interval=0.3)
            started = time.monotonic()
            waits = [asyncio.ensure_future(watcher.wait(r, sweep=sweep)) for r in runs]
            while watcher.sweep_listings < 6:  # the rounds we mean to count
                await asyncio.sleep(0.05)
            gate.touch()
            states = await asyncio.gather(*waits)
            assert all(s.is_success for s in states)
            return watcher.sweep_listings, time.monotonic() - started

    listings, elapsed = asyncio.run(wait_all())
    # One listing per interval for the eight waits together, not one per wait.
    assert listings <= elapsed / 0.3 + 2, (listings, elapsed)


def test_a_shared_wait_ends_when_the_budget_is_spent_not_an_interval_later(
    local_workspace: LocalWorkspace, tmp_path: Path
) -> None:
    sweep = _sweep(budget=0.01)  # 32 accelerators spend it in about a second
    with AirClient(local_workspace.host, local_workspace.token) as client:
        trial = _trial(0, sweep)
        run_id = trial.submit(client, _held(tmp_path / "never", accelerators=32), "0.0").run_id

    async def wait() -> SweepBudgetSpent:
        async with AsyncAirClient(local_workspace.host, local_workspace.token) as client:
            watcher = RunWatcher(client, interval=5.0)
            with pytest.raises(SweepBudgetSpent) as spent:
                await watcher.wait(run_id, sweep=sweep)
            return spent.value

    spent = asyncio.run(wait())
    # Listed again at the moment the last listing said the budget would be spent, not a
    # whole interval (5 s: 0.044 GPU-hours) later.
    assert 0.01 <= spent.spend.total <= 0.01 + 32 * 0.5 / 3600, spent.spend.total
    with AirClient(local_workspace.host, local_workspace.token) as client:
        trial.cancel(client, cause=trial.stop_cause(spent))


def test_a_dry_run_with_prices_estimates_the_most_a_run_costs(
    local_workspace: LocalWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(
        "experiment_name: train\n"
        "compute: {accelerator_type: GPU_8xH100, num_accelerators: 16}\n"
        "timeout_minutes: 90\n"
        "max_retries: 1\n"
        "command: python train.py\n"
    )
    auth = _auth(local_workspace, tmp_path)
    prices = ["--price", "GPU_8xH100=98", "--price", "GPU_1xA10=1.2", "--currency", "USD"]
    assert airo(["run", str(path), "--dry-run", *prices, *auth]) == 0
    assert (
        "estimate: 16 GPU_8xH100 accelerators x 1.5 h (timeout_minutes) = 24 GPU-hours x "
        "USD 98.00 = USD 2,352.00 per attempt; up to USD 4,704.00 for 2 attempts (max_retries 1)"
    ) in capsys.readouterr().out
    assert airo(["run", str(path), "--dry-run", "--json", *prices, *auth]) == 0
    estimate = json.loads(capsys.readouterr().out)["estimate"]
    assert estimate["per_attempt"] == 2352.0 and estimate["currency"] == "USD"
    # A bad price is named with its fix, before anything is asked of the workspace.
    assert airo(["run", str(path), "--dry-run", "--price", "GPU_8xH100=free", *auth]) != 0
    error = capsys.readouterr().err
    assert "--price.GPU_8xH100: 'free' is not a positive number. Fix:" in error, error
    assert local_workspace.admin.counters().get("runs_created", 0) == 0
