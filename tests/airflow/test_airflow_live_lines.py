"""A deferred task's log shows its run's node lines while the run runs ([air] live_lines),
each line once: the copy at the end (the resumed worker's, told by the trigger's event what
was shown) adds only what was not shown."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from mlflow_ranks import progress_command

from air_runtime import AirClient, load_workload


def _held_run(workspace, release: Path) -> int:
    workload = load_workload(
        {
            "experiment_name": "live_lines",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 2},
            "max_retries": 0,
            "command": (
                'echo "rank $POD_RANK first"\n'
                f'while [ ! -e "{release}" ]; do sleep 0.2; done\n'
                'echo "rank $POD_RANK last"\n'
            ),
        }
    )
    with AirClient(workspace.host, workspace.token) as client:
        return client.submit_workload(workload).run_id


def test_a_deferred_task_shows_node_lines_while_its_run_runs(
    workspace, task_log, monkeypatch, tmp_path
):
    from airflow_air._logs import LogCopy
    from airflow_air.triggers import AirRunTrigger

    from air_runtime import RunOutcome, end_of_try_flow

    monkeypatch.setenv("AIRFLOW__AIR__LIVE_LINES_INTERVAL", "0.3")
    release = tmp_path / "release"
    run_id = _held_run(workspace, release)
    trigger = AirRunTrigger(run_id, poll_interval=0.2, cancel_on_kill=False)

    async def scenario() -> dict:
        events = trigger.run()
        waiting = asyncio.ensure_future(anext(events))
        # Both nodes' first lines reach the log while the run is held RUNNING.
        deadline = time.monotonic() + 120
        while not all(f"node {n} attempt 0] rank {n} first" in _text(task_log) for n in (0, 1)):
            assert not waiting.done(), waiting.result()
            assert time.monotonic() < deadline, _text(task_log)
            await asyncio.sleep(0.1)
        with AirClient(workspace.host, workspace.token) as client:
            assert client.get_run(run_id).life_cycle_state == "RUNNING"
        release.touch()
        event = await waiting
        await events.aclose()
        return event.payload

    payload = asyncio.run(scenario())
    assert payload["status"] == "success", payload
    # The worker that resumes is told what was shown, per node stream.
    assert set(payload["shown_lines"]) == {"live_lines/0/0", "live_lines/0/1"}, payload
    live = _text(task_log)
    for node in (0, 1):
        assert live.count(f"rank {node} first") == 1, live
    # The copy the resumed worker makes (AirRunOperator.execute_complete) with what the event
    # says was shown: together, every line of every node once.
    copied = _Lines()
    copy = LogCopy(copied, run_id, None, 1000, payload["shown_lines"])
    with AirClient(workspace.host, workspace.token) as client:
        ended = client.run_flow(
            lambda core: end_of_try_flow(core, RunOutcome.from_event(payload), lines=copy.add)
        )
    assert ended.lines_error is None and ended.keys_deleted is None  # no keys written
    both = live + "\n" + "\n".join(copied.lines)
    for node in (0, 1):
        for line in (f"rank {node} first", f"rank {node} last"):
            assert both.count(line) == 1, both


class _Lines:
    """A task log that keeps its lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, event: str, *args: object) -> None:
        self.lines.append(event % args)

    warning = info


def _text(task_log) -> str:
    return task_log.text()


def test_a_deferred_workflow_stage_shows_its_own_lines_while_it_runs(
    workspace, task_log, monkeypatch, tmp_path
):
    """A stage's trigger (``task_key``) shows its task's lines live, and only its task's: the
    two stages of one run run side by side, each held until released, and the other stage's
    line is in the run's logs while this stage's trigger reads lines, yet not in its log."""
    from airflow_air.triggers import AirRunTrigger

    from air_runtime import Stage

    monkeypatch.setenv("AIRFLOW__AIR__LIVE_LINES_INTERVAL", "0.3")
    release = tmp_path / "release"

    def stage(name: str) -> Stage:
        command = (
            f'echo "{name} rank $POD_RANK first"\n'
            f'while [ ! -e "{release}" ]; do sleep 0.2; done\n'
            f'echo "{name} rank $POD_RANK last"\n'
        )
        workload = load_workload(
            {
                "experiment_name": "live_stages",
                "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                "max_retries": 0,
                "command": command,
            }
        )
        return Stage(name, workload)

    with AirClient(workspace.host, workspace.token) as client:
        run_id = client.submit_workload([stage("train"), stage("judge")]).run_id
    trigger = AirRunTrigger(run_id, poll_interval=0.2, cancel_on_kill=False, task_key="train")

    async def scenario() -> dict:
        events = trigger.run()
        waiting = asyncio.ensure_future(anext(events))
        deadline = time.monotonic() + 120
        with AirClient(workspace.host, workspace.token) as client:
            while not (
                "train node 0 attempt 0] train rank 0 first" in _text(task_log)
                and "judge rank 0 first" in _judge_lines(client, run_id)
            ):
                assert not waiting.done(), waiting.result()
                assert time.monotonic() < deadline, _text(task_log)
                await asyncio.sleep(0.1)
            # Side by side, each held: both stages run, the judge's line already printed.
            state = client.get_run(run_id)
            assert state.task("train").life_cycle_state == "RUNNING", state
            assert state.task("judge").life_cycle_state == "RUNNING", state
        release.touch()
        event = await waiting
        await events.aclose()
        return event.payload

    payload = asyncio.run(scenario())
    assert payload["status"] == "success", payload
    assert set(payload["shown_lines"]) == {"train/0/0"}, payload
    log = _text(task_log)
    assert log.count("train rank 0 first") == 1 and "judge rank" not in log, log


def _judge_lines(client: AirClient, run_id: int) -> str:
    return "\n".join(r.body for r in client.iter_run_logs(run_id, task_key="judge"))


def test_a_deferred_task_logs_its_run_s_training_progress(
    workspace, task_log, monkeypatch, tmp_path
):
    """With live lines on, the trigger logs the run's progress and time left once MLflow has
    them (eta.go's rules), in its own task's log, once per change: read twice more while it
    stays at 10%, it is still logged once."""
    pytest.importorskip("mlflow")
    from airflow_air.triggers import AirRunTrigger

    monkeypatch.setenv("AIRFLOW__AIR__LIVE_LINES_INTERVAL", "0.3")
    monkeypatch.setenv("AIRFLOW__AIR__LIVE_PROGRESS_INTERVAL", "0.3")
    # A share of the request budget that allows a progress read (3 requests) every 0.6 s.
    monkeypatch.setenv("AIRFLOW__AIR__LIVE_PROGRESS_SHARE", "0.5")
    release = tmp_path / "release"
    workload = load_workload(
        {
            "experiment_name": "live_progress",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": progress_command(release),
        }
    )
    with AirClient(workspace.host, workspace.token) as client:
        run_id = client.submit_workload(workload).run_id
    trigger = AirRunTrigger(run_id, poll_interval=0.2, cancel_on_kill=False)

    async def scenario() -> dict:
        events = trigger.run()
        waiting = asyncio.ensure_future(anext(events))
        deadline = time.monotonic() + 120
        while f"Run {run_id}: training 10% · ~2m left" not in _text(task_log):
            assert not waiting.done(), waiting.result()
            assert time.monotonic() < deadline, _text(task_log)
            await asyncio.sleep(0.1)
        # Two more progress reads (each ends with the run's MLflow history) of the same 10%:
        # the second one asked means the first one's answer was handled.
        seen = _history_reads(workspace)
        while _history_reads(workspace) < seen + 2:
            assert not waiting.done(), waiting.result()
            assert time.monotonic() < deadline, _text(task_log)
            await asyncio.sleep(0.1)
        release.touch()
        event = await waiting
        await events.aclose()
        return event.payload

    assert asyncio.run(scenario())["status"] == "success"
    assert _text(task_log).count("training 10%") == 1  # logged when it changes, once


def _history_reads(workspace) -> int:
    return workspace.admin.counters()["requests"].get("mlflow/metrics/get-history", 0)


def test_a_65_s_trial_shows_its_progress_at_least_twice_with_the_defaults(workspace, task_log):
    """With the defaults ([air] live_lines_interval 15 s, live_progress_interval 60 s) a trial
    of 12 epochs of 5 s shows its progress more than once, rising, once per change, and
    before step 10 (the CLI's step-10 rule is `airo get`'s, not the task log's): progress is
    read with every line read of a run's first minute, then every minute. Counted in the task
    log, not timed."""
    pytest.importorskip("mlflow")
    from airflow_air.triggers import AirRunTrigger
    from mlflow_ranks import epochs_command

    workload = load_workload(
        {
            "experiment_name": "trial_progress",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": epochs_command(),
        }
    )
    with AirClient(workspace.host, workspace.token) as client:
        run_id = client.submit_workload(workload).run_id
    trigger = AirRunTrigger(run_id, cancel_on_kill=False)

    async def scenario() -> dict:
        events = trigger.run()
        event = await anext(events)
        await events.aclose()
        return event.payload

    assert asyncio.run(scenario())["status"] == "success"
    log = _text(task_log)
    shown = [line for line in log.splitlines() if f"Run {run_id}: training " in line]
    assert len(shown) >= 2, log
    # From the first logged epochs: a percentage the CLI's rule (step 10 = epoch 10 of 12,
    # 83%) withholds.
    percents = [int(line.split("training ")[1].split("%")[0]) for line in shown]
    assert min(percents) < 83, shown
    assert percents == sorted(percents) and len(set(percents)) == len(percents), shown
