"""R3 error storms: 30% of responses are 429 (with ``Retry-After``) or 5xx, plus dropped
connections, on every endpoint. Every run still ends with its true result (a mix of
succeeding and failing workloads, through the client, real Airflow and real Dagster);
``Retry-After`` is honoured (gaps in the workspace's request log); no 4xx is retried.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import pytest
from conftest import rng_for, trials
from helpers import client_for, reliability_dag, workload, workload_dict

from air_runtime._errors import AirError, NotFound

pytestmark = [pytest.mark.row("R3"), pytest.mark.timeout(1200)]

# Timer resolution and the log's own timestamps (taken after each answer).
GAP_TOLERANCE_S = 0.02


def _storm(rng: Any) -> tuple[dict[str, Any], float]:
    retry_after = rng.choice([0.2, 0.4])
    faults = {
        "seed": rng.randrange(10**6),
        "*": {
            "rate_429": 0.15,
            "retry_after_s": retry_after,
            "rate_5xx": 0.15,
            "status_5xx": rng.choice([500, 502, 503, 504]),
            "rate_drop": 0.05,
        },
    }
    return faults, retry_after


def _key(entry: dict[str, Any]) -> tuple[str, str, str]:
    return entry["method"], entry["path"], entry["query"]


def _analyse(
    entries: list[dict[str, Any]], tally: Any, retry_after: float, single_requester: bool
) -> dict[str, Any]:
    """Gaps after 429s / 503s and repeats after other 4xx, per identical request.

    Only a single requester (the client path) makes "the next identical request" the retry;
    orchestrators also poll and follow logs concurrently, so there a short gap is noted, and
    the client's own retry log (see ``_client_delays``) is the evidence."""
    gaps: list[float] = []
    violations = 0
    for i, entry in enumerate(entries):
        status = entry["status"]
        if status not in (429, 503):
            continue
        floor = retry_after if status == 429 else 1.0
        for later in entries[i + 1 :]:
            if _key(later) == _key(entry):
                gap = later["time"] - entry["time"]
                gaps.append(gap)
                if gap + GAP_TOLERANCE_S < floor:
                    violations += 1
                    if single_requester:
                        tally.fail(
                            f"{entry['method']} {entry['path']}?{entry['query']} retried "
                            f"{gap:.3f}s after {status}"
                        )
                break
    repeats = 0
    for i, entry in enumerate(entries):
        status = entry["status"]
        if isinstance(status, int) and 400 <= status < 500 and status != 429:
            again = [e for e in entries[i + 1 :] if _key(e) == _key(entry)]
            if again:
                repeats += len(again)
                tally.fail(f"{entry['method']} {entry['path']} repeated after HTTP {status}")
    tally.unexpected_retries += repeats
    return {"gaps": gaps, "retry_after_violations": violations, "4xx_repeats": repeats}


def _client_delays(records: list[Any], tally: Any) -> int:
    """Every retry the client logged after a Retry-After waited at least that long."""
    checked = 0
    for record in records:
        if record.name != "air_runtime.client" or "Retry-After" not in str(record.args):
            continue
        delay, suffix = record.args[4], record.args[5]
        asked = float(suffix.split("Retry-After ")[1].rstrip("s)"))
        checked += 1
        if delay + 1e-9 < asked:
            tally.fail(f"client waited {delay:.3f}s after Retry-After {asked}s")
    return checked


def _probe_4xx(ws: Any, client: Any, trial: int) -> None:
    """Requests the workspace refuses with a 4xx (other than 429): each must be sent once."""
    missing = 10_000_000 + trial
    with contextlib.suppress(NotFound):
        client.get_run(missing)
    with contextlib.suppress(AirError):
        client.cancel(missing)
    bad = workload(
        f"r3-unregistered-{trial}",
        "echo never",
        environment={"docker_image": {"url": f"reliability/never-registered-{trial}:1"}},
    )
    with contextlib.suppress(AirError):
        client.submit_workload(bad)


def _client_trial(ws: Any, trial: int, fails: bool) -> str | None:
    command = "echo ok" if not fails else "echo failing\nexit 3"
    with client_for(ws) as client:
        submitted = client.submit_workload(
            workload(f"r3-client-{trial}", command), idempotency_token=f"r3-client-{trial}"
        )
        state = client.wait(submitted.run_id, poll_interval=0.2, timeout=120)
        _probe_4xx(ws, client, trial)
    return state.result_state


def _airflow_trial(ws: Any, trial: int, fails: bool, deferred: bool) -> str | None:
    dag = reliability_dag("reliability_deferred" if deferred else "reliability_sync")
    run = dag.test(run_conf={"command": "echo ok" if not fails else "exit 3"})
    return "SUCCESS" if str(run.state) == "success" else "FAILED"


def _dagster_trial(ws: Any, trial: int, fails: bool) -> str | None:
    import dagster as dg

    from dagster_air import AirStage, AirWorkspace, build_air_assets

    assets = build_air_assets(
        AirStage(
            key=f"r3_dagster_{trial}",
            workload=workload_dict(f"r3-dagster-{trial}", "exit 3" if fails else "echo ok"),
        )
    )
    resource = AirWorkspace(host=ws.host, token=ws.token, poll_interval=0.2, request_budget=50)
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize(
            [assets], resources={"air_workspace": resource}, instance=instance, raise_on_error=False
        )
    return "SUCCESS" if result.success else "FAILED"


def test_storms(airflow_workspace, tally, caplog) -> None:
    caplog.set_level(logging.INFO, logger="air_runtime.client")
    ws = airflow_workspace
    rng = rng_for("R3")
    plan = (
        [("client", i) for i in range(trials(2, 16))]
        + [("airflow_sync", i) for i in range(trials(0, 3))]
        + [("airflow_deferred", i) for i in range(trials(1, 3))]
        + [("dagster", i) for i in range(trials(1, 3))]
    )
    rng.shuffle(plan)
    gaps: list[float] = []
    concurrent_short_gaps = 0
    per_path: dict[str, dict[str, int]] = {}
    wrong = 0
    for trial, (path, _) in enumerate(plan):
        tally.trials += 1
        fails = rng.random() < 0.4
        faults, retry_after = _storm(rng)
        ws.admin.set_faults(faults)
        started = time.time()
        try:
            if path == "client":
                result = _client_trial(ws, trial, fails)
            elif path == "dagster":
                result = _dagster_trial(ws, trial, fails)
            else:
                result = _airflow_trial(ws, trial, fails, path == "airflow_deferred")
        except Exception as exc:
            tally.crashes += 1
            tally.fail(f"trial {trial} ({path}): {type(exc).__name__}: {exc}")
            result = None
        finally:
            ws.admin.set_faults({})
        expected = "FAILED" if fails else "SUCCESS"
        stats = per_path.setdefault(path, {"trials": 0, "wrong_result": 0})
        stats["trials"] += 1
        if result != expected:
            wrong += 1
            stats["wrong_result"] += 1
            tally.fail(f"trial {trial} ({path}): ended {result}, expected {expected}")
        entries = [e for e in ws.admin.request_log(limit=10_000) if e["time"] >= started]
        found = _analyse(entries, tally, retry_after, single_requester=path == "client")
        gaps.extend(found["gaps"])
        concurrent_short_gaps += found["retry_after_violations"] if path != "client" else 0
        injected = [e for e in entries if e["status"] in (429, 500, 502, 503, 504, "dropped")]
        stats["requests"] = stats.get("requests", 0) + len(entries)
        stats["injected_faults"] = stats.get("injected_faults", 0) + len(injected)
    tally.notes.update(
        wrong_results=wrong,
        paths=per_path,
        retry_after_gaps=len(gaps),
        client_retry_after_waits=_client_delays(caplog.records, tally),
        orchestrator_short_gaps_same_request=concurrent_short_gaps,
        min_gap_s=round(min(gaps), 3) if gaps else None,
    )
