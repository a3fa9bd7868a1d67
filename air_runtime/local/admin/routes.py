"""The workspace's own admin API under `/api/2.0/airo-admin/` (not part of the Databricks
API): health, injected faults, outages, request counters and log, tokens, usage policies and
the simulate-mode script. `AdminClient` (`_server.py`) is its client."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.background import BackgroundTask

from air_runtime.local._errors import invalid, not_found
from air_runtime.local._faults import FaultInjector, normalize_faults
from air_runtime.local._request_params import (
    get_params,
    int_param,
    json_body,
    required_str,
    workspace_state,
)

ADMIN_PREFIX = "/api/2.0/airo-admin"
router = APIRouter(prefix=ADMIN_PREFIX)
public_router = APIRouter()


@public_router.get(f"{ADMIN_PREFIX}/health")
async def admin_health(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    return {"status": "ok", "mode": state.options.mode, "active_runs": state.engine.active_drivers}


def _injector(request: Request) -> FaultInjector:
    injector = workspace_state(request).faults
    assert injector is not None
    return injector


@router.get("/faults")
async def admin_faults_get(request: Request) -> dict[str, Any]:
    return _injector(request).faults


@router.put("/faults")
@router.post("/faults")
async def admin_faults_set(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    try:
        normalize_faults(body)
    except (TypeError, ValueError) as exc:
        raise invalid(str(exc)) from None
    injector = _injector(request)
    injector.set_faults(body)
    return injector.faults


@router.get("/outage")
async def admin_outage_get(request: Request) -> dict[str, Any]:
    return _injector(request).outage.status()


@router.post("/outage")
async def admin_outage_start(request: Request) -> JSONResponse:
    """`{"seconds": N, "mode": "hang" | "refuse"}` (see `_faults.Outage`). A `refuse` outage
    closes the listening socket once this answer has been sent."""
    body = await json_body(request)
    outage = _injector(request).outage
    seconds = body.get("seconds")
    try:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError(f"outage seconds must be a number, got {seconds!r}")
        outage.start(float(seconds), str(body.get("mode") or "hang"))
    except ValueError as exc:
        raise invalid(str(exc)) from None
    refusing = BackgroundTask(outage.begin_refusing) if outage.mode == "refuse" else None
    return JSONResponse(outage.status(), background=refusing)


@router.delete("/outage")
async def admin_outage_end(request: Request) -> dict[str, Any]:
    outage = _injector(request).outage
    await outage.end()
    return outage.status()


@router.post("/node-loss")
async def admin_node_loss(request: Request) -> dict[str, Any]:
    """`{"run_id": N, "node": K}`: node K of the run's running attempt is lost as a host
    would be (its ranks killed, no launcher line) and the attempt fails with the platform's
    state message for it, which the client's diagnosis classes as infrastructure. The
    platform then retries it as the task's `max_retries` allows. Answers the task runs hit;
    404 when the run has no running node K."""
    body = await json_body(request)
    run_id, node = body.get("run_id"), body.get("node", 0)
    if not isinstance(run_id, int) or isinstance(run_id, bool) or not isinstance(node, int):
        raise invalid("node-loss needs an integer run_id and node")
    hit = workspace_state(request).engine.lose_node(run_id, node)
    if not hit:
        raise not_found(f"run {run_id} has no running node {node}")
    return {"task_run_ids": hit}


@router.get("/counters")
async def admin_counters(request: Request) -> dict[str, Any]:
    return workspace_state(request).counters.snapshot()


@router.get("/pool-ledger")
async def admin_pool_ledger(request: Request) -> dict[str, Any]:
    """Per GPU pool: the accelerators reserved, used, most asked for at once, and waits."""
    return workspace_state(request).engine.pools.snapshot()


@router.post("/counters/reset")
async def admin_counters_reset(request: Request) -> dict[str, Any]:
    workspace_state(request).counters.reset()
    return {}


@router.post("/tokens/revoke")
async def admin_revoke(request: Request) -> dict[str, Any]:
    token = required_str(await json_body(request), "token")
    workspace_state(request).tokens.revoke(token)
    return {}


@router.post("/tokens/add")
async def admin_add_token(request: Request) -> dict[str, Any]:
    token = required_str(await json_body(request), "token")
    workspace_state(request).tokens.add(token)
    return {}


@router.get("/request-log")
async def admin_request_log(request: Request) -> dict[str, Any]:
    limit = int_param((await get_params(request)).get("limit") or 1000, "limit")
    entries = list(workspace_state(request).request_log.entries)
    return {"entries": entries[-limit:]}


@router.post("/usage-policies")
async def admin_add_usage_policy(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    policy = workspace_state(request).usage_policies.add(
        body.get("policy_name"), body.get("policy_id")
    )
    return {"policy_id": policy.policy_id, "policy_name": policy.policy_name}


@router.get("/simulate")
async def admin_simulate_get(request: Request) -> dict[str, Any]:
    return dict(workspace_state(request).options.simulate)


@router.put("/simulate")
async def admin_simulate_set(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    state.options.simulate.update(await json_body(request))
    return dict(state.options.simulate)


@router.get("/artifact-registry")
async def admin_artifact_registry_get(request: Request) -> dict[str, Any]:
    return {"host": workspace_state(request).options.artifact_registry_host}


@router.put("/artifact-registry")
async def admin_artifact_registry_set(request: Request) -> dict[str, Any]:
    """Pair the workspace with an Artifact Registry started after it (its port is known
    only then): submitted Unity Catalog images are checked there from now on."""
    body = await json_body(request)
    host = body.get("host")
    if not isinstance(host, str):
        raise invalid("host must be a string (host:port, or empty to stop checking)")
    workspace_state(request).options.artifact_registry_host = host.strip()
    return {"host": host.strip()}
