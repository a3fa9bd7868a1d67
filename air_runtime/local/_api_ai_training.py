"""AI Runtime services: workload validation (`ai-training/config:validate`) and the log
records of a run's tasks (`ai-training/workflows/by-run-id/{run_id}/logs`)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._errors import invalid, not_found
from air_runtime.local._request_params import get_params, int_param, json_body
from air_runtime.local._validation import validate_config
from air_runtime.local._workspace_state import workspace_state

router = APIRouter()


@router.post("/api/2.0/ai-training/config:validate")
async def config_validate(request: Request) -> dict[str, Any]:
    return {"errors": validate_config(await json_body(request))}


@router.get("/api/2.0/ai-training/workflows/by-run-id/{run_id}/logs")
async def workflow_logs(request: Request, run_id: str) -> dict[str, Any]:
    state = workspace_state(request)
    ident = int_param(run_id, "run_id")
    params = await get_params(request)
    if state.store.run_row(ident) is not None:
        tasks = state.store.task_rows(ident)
    else:
        task = state.store.task_row(ident)
        if task is None:
            raise not_found(f"Run {ident} does not exist.")
        tasks = [task]
    if params.get("ref.attempt_number"):
        # The CLI asks for one retry attempt with ref.attempt_number (logbricklens.go).
        attempt = int_param(params["ref.attempt_number"], "ref.attempt_number")
        tasks = [t for t in tasks if int(t["attempt_number"]) == attempt]
    task_run_ids = [int(t["task_run_id"]) for t in tasks]
    node = int_param(params.get("filter.node_index") or 0, "filter.node_index")
    # `from` and `to` are Unix epoch SECONDS: the CLI sends the run's start second, or
    # time_unix_nano / 1e9 of the last record it printed when following a run, and caps a
    # finished run at the ceiling of its end second (logstream.go, logbricklens.go). A
    # record counts from the first nanosecond of `from` through the last one of `to`.
    start_ns = end_ns = None
    if params.get("from"):
        start_ns = int_param(params["from"], "from") * 1_000_000_000
    if params.get("to"):
        end_ns = (int_param(params["to"], "to") + 1) * 1_000_000_000 - 1
    # A bound past the int64 nanoseconds (e.g. nanoseconds sent as seconds) is the far
    # future: no record is that late (docs/cli-conformance.md item 4).
    start_ns = None if start_ns is None else max(0, min(start_ns, 2**63 - 1))
    end_ns = None if end_ns is None else max(-1, min(end_ns, 2**63 - 1))
    ascending = params.get("ascending", "true").lower() != "false"
    size = int_param(params.get("page_size") or 1000, "page_size")
    if not 1 <= size <= 10_000:
        raise invalid(f"page_size must be between 1 and 10000, got {size}.")
    try:
        # Reading files blocks: never on the event loop.
        page, next_token = await asyncio.to_thread(
            state.logbook.page,
            task_run_ids,
            node,
            start_ns=start_ns,
            end_ns=end_ns,
            ascending=ascending,
            size=size,
            token=params.get("page_token") or None,
        )
    except ValueError as exc:
        raise invalid(str(exc)) from None
    result: dict[str, Any] = {"log_records": page}
    if next_token:
        result["next_page_token"] = next_token
    return result
