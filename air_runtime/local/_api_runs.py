"""One-time runs of the Jobs API (`/api/2.1|2.2/jobs/runs/*`): submit, get, get-output,
cancel, list and repair, run by the `RunEngine`."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._errors import invalid, not_found
from air_runtime.local._execution import topology
from air_runtime.local._request_params import (
    flag,
    get_params,
    host_url,
    int_param,
    json_body,
    make_page_token,
    read_page_token,
)
from air_runtime.local._runs import run_json, task_json
from air_runtime.local._uc_images import check_unity_catalog_images
from air_runtime.local._validation import validate_submit
from air_runtime.local._workspace_state import WorkspaceState, workspace_state

router = APIRouter()

_MAX_LIST_LIMIT = 25  # as the platform: runs/list pages hold 1..25 runs


def _check_runnable(state: WorkspaceState, body: dict[str, Any]) -> None:
    problems = [
        f"{e['path']}: {e['message']}" for e in validate_submit(body, state.options.gpu_pools)
    ]
    if problems:
        raise invalid("; ".join(problems))
    for i, task in enumerate(body["tasks"]):
        ai = task["ai_runtime_task"]
        image = ai.get("docker_image_url")
        if image:
            registration = state.images.get(image)
            if registration is None or registration["state"] != "AVAILABLE":
                now = registration["state"] if registration else "not registered"
                raise invalid(
                    f"tasks[{i}]: Docker image {image} is {now} in this workspace; register it "
                    "first (`airo images register` or POST /api/2.0/ai-compute-manager/images) "
                    "and wait until it is AVAILABLE."
                )
        nodes, _, _ = topology(task)
        limit = state.options.max_local_ranks
        if state.options.mode == "execute" and nodes > limit:
            raise invalid(
                f"tasks[{i}]: {nodes} node ranks exceed the {limit} this local workspace runs "
                "on one machine (option max_local_ranks); use fewer accelerators or simulate mode."
            )


@router.post("/api/2.2/jobs/runs/submit")
@router.post("/api/2.1/jobs/runs/submit")
async def runs_submit(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    body = await json_body(request)
    token = body.get("idempotency_token")
    token = token.strip() if isinstance(token, str) and token.strip() else None
    _check_runnable(state, body)
    await check_unity_catalog_images(state, body)
    run_id, created = state.store.create_run(body, token, state.options.mode)
    state.counters.count_submit(token, created)
    if created:
        state.engine.tracking_host = host_url(request)
        state.engine.start(run_id)
    return {"run_id": run_id}


def _run_id_param(params: dict[str, str]) -> int:
    value = params.get("run_id")
    if value is None:
        raise invalid("run_id is required.")
    return int_param(value, "run_id")


@router.get("/api/2.2/jobs/runs/get")
@router.get("/api/2.1/jobs/runs/get")
async def runs_get(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    run_id = _run_id_param(params)
    row = state.store.run_row(run_id)
    host = host_url(request)
    if row is None:
        task = state.store.task_row(run_id)
        if task is None:
            raise not_found(f"Run {run_id} does not exist.")
        parent = state.store.run_row(task["run_id"])
        assert parent is not None
        specs = {t["task_key"]: t for t in json.loads(parent["body"])["tasks"]}
        return task_json(task, specs.get(task["task_key"], {}), host)
    offset = int_param(params.get("page_token") or 0, "page_token")
    history = flag(params.get("include_history"))
    return {
        **run_json(state.store, row, host, task_offset=offset, with_history=history),
        "creator_user_name": state.options.user_name,
    }


@router.post("/api/2.2/jobs/runs/repair")
@router.post("/api/2.1/jobs/runs/repair")
async def runs_repair(request: Request) -> dict[str, Any]:
    # Jobs API "Repair a job run" (docs.databricks.com/api/workspace/jobs/repairrun).
    state = workspace_state(request)
    body = await json_body(request)
    run_id = int_param(body.get("run_id"), "run_id")
    rerun = body.get("rerun_tasks") or []
    if not isinstance(rerun, list) or not all(isinstance(k, str) for k in rerun):
        raise invalid("rerun_tasks must be a list of task keys.")
    latest = body.get("latest_repair_id")
    repair_id = state.engine.repair(
        run_id,
        rerun,
        all_failed=bool(body.get("rerun_all_failed_tasks")),
        dependents=bool(body.get("rerun_dependent_tasks")),
        latest_repair_id=None if latest is None else int_param(latest, "latest_repair_id"),
    )
    return {"repair_id": repair_id}


@router.get("/api/2.2/jobs/runs/get-output")
@router.get("/api/2.1/jobs/runs/get-output")
async def runs_get_output(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    run_id = _run_id_param(await get_params(request))
    task = state.store.task_row(run_id)
    if task is None:
        row = state.store.run_row(run_id)
        if row is None:
            raise not_found(f"Run {run_id} does not exist.")
        tasks = state.store.task_rows(run_id)
        if len({t["task_key"] for t in tasks}) != 1:
            raise invalid(
                "Retrieving the output of runs with multiple tasks is not supported. "
                "Retrieve the output of each task run (tasks[].run_id) instead."
            )
        task = tasks[-1]
    parent = state.store.run_row(task["run_id"])
    assert parent is not None
    specs = {t["task_key"]: t for t in json.loads(parent["body"])["tasks"]}
    output: dict[str, Any] = json.loads(task["output"])
    output["metadata"] = task_json(task, specs.get(task["task_key"], {}), host_url(request))
    return output


@router.post("/api/2.2/jobs/runs/cancel")
@router.post("/api/2.1/jobs/runs/cancel")
async def runs_cancel(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    body = await json_body(request)
    run_id = int_param(body.get("run_id"), "run_id")
    row = state.store.run_row(run_id)
    if row is None:
        task = state.store.task_row(run_id)
        if task is None:
            raise invalid(f"Run {run_id} does not exist.")
        run_id = int(task["run_id"])
    state.engine.cancel(run_id)
    return {}


@router.get("/api/2.2/jobs/runs/list")
@router.get("/api/2.1/jobs/runs/list")
async def runs_list(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    active_only = flag(params.get("active_only"))
    completed_only = flag(params.get("completed_only"))
    if active_only and completed_only:
        raise invalid("active_only and completed_only cannot both be true.")
    limit = int_param(params.get("limit") or 25, "limit")
    if not 1 <= limit <= _MAX_LIST_LIMIT:
        raise invalid(f"limit must be between 1 and {_MAX_LIST_LIMIT}, got {limit}.")
    run_type = params.get("run_type")
    if run_type and run_type != "SUBMIT_RUN":
        return {"runs": [], "has_more": False}
    before = read_page_token(params.get("page_token"))
    start_times = [
        int_param(params[name], name) if params.get(name) else None
        for name in ("start_time_from", "start_time_to")
    ]
    rows, has_more = state.store.list_runs(
        active_only=active_only,
        completed_only=completed_only,
        before_run_id=before,
        start_time_from=start_times[0],
        start_time_to=start_times[1],
        limit=limit,
    )
    host = host_url(request)
    expand = flag(params.get("expand_tasks"))
    result: dict[str, Any] = {
        "runs": [
            {
                **run_json(state.store, r, host, with_tasks=expand),
                "creator_user_name": state.options.user_name,
            }
            for r in rows
        ],
        "has_more": has_more,
    }
    if has_more:
        result["next_page_token"] = make_page_token(rows[-1]["run_id"])
    return result
