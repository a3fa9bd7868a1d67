"""Small readers of what a test run left behind (event log, compute logs, node logs)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from air_runtime import AirClient
from air_runtime.local import LocalWorkspace


def workload(name: str, command: str, **extra: object) -> dict[str, object]:
    return {
        "experiment_name": name,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": command,
        **extra,
    }


def node_log(local_workspace: LocalWorkspace, run_id: int, node: int = 0) -> str:
    with AirClient(local_workspace.host, local_workspace.token) as client:
        return "\n".join(r.body for r in client.iter_logs(run_id, node=node))


def compute_logs(dagster_home: Path, run_id: str) -> str:
    """Everything the run's steps wrote to stdout/stderr (the compute log manager's files)."""
    texts = [
        p.read_text(errors="replace")
        for p in dagster_home.rglob("*")
        if p.is_file() and p.suffix in (".out", ".err") and run_id in str(p)
    ]
    return "\n".join(texts)


def event_log_text(instance: dg.DagsterInstance, run_id: str) -> str:
    return "\n".join(dg.serialize_value(e) for e in instance.all_logs(run_id))


def failure_data(result: dg.ExecuteInProcessResult | dg.ExecutionResult):
    failures = [e for e in result.all_events if e.is_step_failure]
    assert failures, "expected a step failure"
    return failures[-1].step_failure_data


def counters(local_workspace: LocalWorkspace) -> dict:
    return local_workspace.admin.counters()
