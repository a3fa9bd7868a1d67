"""Each step's logs (its compute log and its event-log messages) hold its own remote run's
lines only: two steps in one run, concurrent in two step processes (multiprocess executor:
each run prints its lines only once the other has started, so the two overlap; the runs'
times and the steps' start and success events show it) and one after the other in one process sharing its background loop and
run watcher (in-process executor)."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pytest
from routing_jobs import NAMES

from air_runtime import AirClient

RUN_MENTION = re.compile(r"\b[Rr]un (\d+)\b")


def _compute_logs(instance: dg.DagsterInstance, dagster_home: Path, run_id: str) -> dict:
    """Each captured compute log of the run (stdout and stderr) by the steps it covers: one
    per step process under the multiprocess executor, one for all steps in process."""
    logs = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.LOGS_CAPTURED):
        data = entry.dagster_event.logs_captured_data
        files = [
            p
            for p in dagster_home.rglob(f"{data.file_key}.*")
            if p.suffix in (".out", ".err") and run_id in str(p)
        ]
        assert files, f"no compute log for {data.step_keys}"
        logs[tuple(sorted(data.step_keys or []))] = "\n".join(
            p.read_text(errors="replace") for p in files
        )
    return logs


def _step_messages(instance: dg.DagsterInstance, run_id: str, step_key: str) -> str:
    return "\n".join(
        entry.user_message
        for entry in instance.all_logs(run_id)
        if entry.step_key == step_key and entry.user_message
    )


def _step_spans(instance: dg.DagsterInstance, run_id: str) -> dict[str, tuple[float, float, int]]:
    """Each step's start, end (its success) and process, from the run's event log."""
    starts, ends, pids = {}, {}, {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or entry.step_key is None:
            continue
        if event.event_type == dg.DagsterEventType.STEP_START:
            starts[entry.step_key] = entry.timestamp
            pids[entry.step_key] = event.pid
        elif event.event_type == dg.DagsterEventType.STEP_SUCCESS:
            ends[entry.step_key] = entry.timestamp
    return {key: (starts[key], ends.get(key, 0.0), pids[key]) for key in starts}


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["multiprocess", "in_process"])
def test_each_step_logs_only_its_own_run(
    executor, local_workspace, instance, dagster_home, monkeypatch, tmp_path
):
    monkeypatch.setenv("ROUTING_HOST", local_workspace.host)
    monkeypatch.setenv("ROUTING_TOKEN", local_workspace.token)
    if executor == "multiprocess":
        monkeypatch.setenv("ROUTING_MEET", str(tmp_path))
    result = dg.execute_job(
        # The step processes of the multiprocess executor import the job by module and folder.
        dg.build_reconstructable_job(
            "routing_jobs",
            "routing_job",
            reconstructor_working_directory=str(Path(__file__).parent),
        ),
        instance=instance,
        run_config={"execution": {"config": {executor: {}}}},
    )
    failures = [e.step_failure_data.error for e in result.all_events if e.is_step_failure]
    assert result.success, failures  # under multiprocess, a run that never met the other fails

    remote = {}
    for name in NAMES:
        (materialization,) = result.asset_materializations_for_node(name)
        remote[name] = materialization.metadata["dagster-air/run_id"].value
    assert len(set(remote.values())) == 2, remote
    if executor == "multiprocess":  # the two runs, so the two steps waiting on them, overlap
        with AirClient(local_workspace.host, local_workspace.token) as client:
            spans = [client.get_run(run_id) for run_id in remote.values()]
        starts = [run.start_time or 0 for run in spans]
        ends = [run.end_time or 0 for run in spans]
        assert all(starts) and max(starts) < min(ends), (starts, ends)
        # And the steps, as Dagster recorded them: each started before the other ended, each
        # in its own process.
        steps = _step_spans(instance, result.run_id)
        assert len(steps) == 2, steps
        assert max(s for s, _, _ in steps.values()) < min(e for _, e, _ in steps.values()), steps
        assert len({pid for *_, pid in steps.values()}) == 2, steps

    step_keys = {e.step_key for e in result.all_events if e.step_key}
    for name in NAMES:
        other = next(n for n in NAMES if n != name)
        (step,) = (key for key in step_keys if name in key)
        messages = _step_messages(instance, result.run_id, step)
        named = {int(n) for n in RUN_MENTION.findall(messages)}
        assert named == {remote[name]}, (name, named, messages[-3000:])
        assert f"of {other}" not in messages

    compute_logs = _compute_logs(instance, dagster_home, result.run_id)
    if executor == "multiprocess":  # a compute log per step: only its own run's lines
        assert len(compute_logs) == 2, list(compute_logs)
        for steps, text in compute_logs.items():
            (name,) = (n for n in NAMES if n in steps[0])
            other = next(n for n in NAMES if n != name)
            named = {int(n) for n in RUN_MENTION.findall(text)}
            assert named == {remote[name]}, (steps, named, text[-3000:])
            assert f"line 3 of {name}" in text and f"of {other}" not in text, text[-3000:]
    # Every node line names the run it came from, wherever the steps' output is captured.
    node_lines = re.findall(
        r"\[run (\d+) \w+ node 0 attempt 0\] line \d of (\w+)", "\n".join(compute_logs.values())
    )
    assert len(node_lines) == 8, node_lines
    assert all(int(run) == remote[name] for run, name in node_lines), node_lines
