"""The HTTP surface of the local workspace (docs/spec/rest-api.md), plus `/api/2.0/airo-admin/`."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import re
import secrets as token_source
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from air_runtime.local._errors import ApiError, invalid, not_found
from air_runtime.local._faults import Counters, FaultInjector, RequestLog, normalize_faults
from air_runtime.local._files import VolumeTree, WorkspaceTree
from air_runtime.local._images import ImageRegistry
from air_runtime.local._logs import LogBook
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._runs import RunEngine, run_json, task_json
from air_runtime.local._security import (
    RequestGuard,
    check_int64,
    ensure_token,
    parse_json,
    private_dir,
    token_matches,
)
from air_runtime.local._store import Store, now_ms
from air_runtime.local._validation import validate_config, validate_submit

logger = logging.getLogger("air_runtime.local")

_SCOPE_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")
_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_PERMISSION_LEVELS = ("CAN_VIEW", "CAN_MANAGE_RUN", "IS_OWNER", "CAN_MANAGE")
_PRINCIPALS = ("user_name", "group_name", "service_principal_name")
_MAX_LIST_LIMIT = 25  # as the platform: runs/list pages hold 1..25 runs


class WorkspaceState:
    """Everything one server holds; built by `create_app`, reachable as `app.state.workspace`."""

    def __init__(self, options: WorkspaceOptions, data_dir: Path) -> None:
        private_dir(data_dir)  # state, secrets, logs and the token: nobody else reads them
        if not options.tokens:
            options.tokens = [ensure_token(data_dir)[0]]
        self.options = options
        self.data_dir = data_dir
        self.store = Store(data_dir / "state.sqlite3")
        self.workspace = WorkspaceTree(data_dir / "workspace")
        self.volumes = VolumeTree(data_dir / "volumes")
        self.logbook = LogBook(data_dir / "logs")
        self.counters = Counters()
        self.request_log = RequestLog(data_dir / "request_log.jsonl", options.request_log_size)
        self.images = ImageRegistry(self.store, options, self.secret)
        self.engine = RunEngine(
            self.store,
            self.workspace,
            self.volumes,
            self.logbook,
            options,
            data_dir / "runs",
            self.secret,
            instance_id=self.store.instance_id(),
        )
        self.tokens = set(options.tokens)
        self.revoked = {r["token"] for r in self.store.query("SELECT token FROM revoked_tokens")}
        self.faults: FaultInjector | None = None

    def secret(self, scope: str, key: str) -> bytes | None:
        rows = self.store.query(
            "SELECT value FROM secrets WHERE scope = ? AND key = ?", (scope, key)
        )
        return bytes(rows[0]["value"]) if rows else None

    def close(self) -> None:
        self.request_log.close()
        self.store.close()


def _error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(
        {"error_code": exc.error_code, "message": exc.message}, status_code=exc.status
    )


def _state(request: Request) -> WorkspaceState:
    state: WorkspaceState = request.app.state.workspace
    return state


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def authenticate(request: Request) -> str:
    """The principal of the request's bearer token (user name or OAuth client id)."""
    state = _state(request)
    token = _bearer(request)
    if token is None:
        raise ApiError(
            401,
            "UNAUTHENTICATED",
            "Missing bearer token: send the header 'Authorization: Bearer <token>'.",
        )
    if token_matches(token, state.revoked):
        raise ApiError(403, "PERMISSION_DENIED", "Invalid access token: it was revoked.")
    if token_matches(token, state.tokens):
        return state.options.user_name
    row = state.store.access_token(token)
    if row is not None:
        if row["expires_at"] <= time.time():
            raise ApiError(401, "UNAUTHENTICATED", "The OAuth access token has expired.")
        return str(row["principal"])
    raise ApiError(403, "PERMISSION_DENIED", "Invalid access token.")


def authenticate_admin(request: Request) -> None:
    """Admin calls need one of the workspace's tokens that is not revoked (OAuth access
    tokens are not enough)."""
    state = _state(request)
    token = _bearer(request)
    if not token_matches(token, state.tokens) or token_matches(token, state.revoked):
        raise ApiError(403, "PERMISSION_DENIED", "Admin calls need a valid workspace token.")


async def _json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise ApiError(400, "MALFORMED_REQUEST", "The request body must be a JSON object.")
    return body


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)


async def _get_params(request: Request) -> dict[str, str]:
    """The parameters of a GET: the query string, and a JSON object sent as the body, which
    the real API also reads (the Databricks provider's async hook sends them that way). Body
    values are read as their query-string text; the query string wins when both name one."""
    params = {k: _query_value(v) for k, v in (await _json(request)).items() if v is not None}
    params.update(request.query_params)  # the last value of a repeated name, as .get gives
    return params


def _required_str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise invalid(f"{name} is required.")
    return value


def _int_param(value: Any, name: str) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise invalid(f"{name} must be an integer, got {value!r}.")
    if isinstance(value, str) and len(value.strip().lstrip("+-")) > 19:
        raise invalid(f"{name} is out of range (a 64-bit integer).")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise invalid(f"{name} must be an integer, got {str(value)[:40]!r}.") from None
    return check_int64(number, name)


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1", "yes")


def _host(request: Request) -> str:
    return str(request.base_url).rstrip("/")


api = APIRouter(dependencies=[Depends(authenticate)])
admin = APIRouter(prefix="/api/2.0/airo-admin", dependencies=[Depends(authenticate_admin)])
public = APIRouter()

# --- identity --------------------------------------------------------------------------


@api.get("/api/2.0/preview/scim/v2/Me")
async def scim_me(request: Request, principal: str = Depends(authenticate)) -> JSONResponse:
    state = _state(request)
    user_id = (
        state.options.user_id
        if principal == state.options.user_name
        else str(abs(hash(principal)) % 10**15)
    )
    body = {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "id": user_id,
        "userName": principal,
        "displayName": principal.split("@")[0],
        "active": True,
        "emails": [{"value": principal, "type": "work", "primary": True}],
    }
    return JSONResponse(body, headers={"X-Databricks-Org-Id": state.options.workspace_id})


@public.get("/.well-known/databricks-config")
async def host_metadata(request: Request) -> dict[str, Any]:
    # databricks-sdk probes this while building its Config; without it every SDK client
    # start-up logs a warning and waits on a failed request.
    state = _state(request)
    return {"oidc_endpoint": f"{_host(request)}/oidc", "workspace_id": state.options.workspace_id}


@public.get("/oidc/.well-known/oauth-authorization-server")
async def oidc_metadata(request: Request) -> dict[str, Any]:
    host = _host(request)
    return {
        "issuer": f"{host}/oidc",
        "authorization_endpoint": f"{host}/oidc/v1/authorize",
        "token_endpoint": f"{host}/oidc/v1/token",
        "grant_types_supported": ["client_credentials"],
    }


@public.post("/oidc/v1/token")
async def oidc_token(request: Request) -> JSONResponse:
    state = _state(request)
    form = dict(await request.form())
    client_id, client_secret = str(form.get("client_id", "")), str(form.get("client_secret", ""))
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            client_id, _, client_secret = base64.b64decode(encoded).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            client_id = client_secret = ""
    if form.get("grant_type") != "client_credentials":
        return JSONResponse(
            {"error": "unsupported_grant_type", "error_description": "Use client_credentials."},
            status_code=400,
        )
    expected = state.options.oauth_clients.get(client_id)
    if expected is None or not hmac.compare_digest(expected.encode(), client_secret.encode()):
        return JSONResponse(
            {"error": "invalid_client", "error_description": "Client authentication failed."},
            status_code=401,
        )
    token = "airo-oauth-" + token_source.token_urlsafe(24)
    lifetime = state.options.oauth_token_lifetime_s
    state.store.add_access_token(token, client_id, time.time() + lifetime)
    return JSONResponse(
        {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": int(lifetime) if lifetime >= 1 else lifetime,
            "scope": str(form.get("scope") or "all-apis"),
        }
    )


# --- workspace files -------------------------------------------------------------------


@api.post("/api/2.0/workspace/mkdirs")
async def workspace_mkdirs(request: Request) -> dict[str, Any]:
    body = await _json(request)
    _state(request).workspace.mkdirs(_required_str(body, "path"))
    return {}


@api.post("/api/2.0/workspace-files/import-file/{path:path}")
async def workspace_import_file(request: Request, path: str) -> dict[str, Any]:
    content = await request.body()
    overwrite = _flag(request.query_params.get("overwrite"))
    _state(request).workspace.import_file("/" + path, content, overwrite)
    return {}


@api.post("/api/2.0/workspace/import")
async def workspace_import(request: Request) -> dict[str, Any]:
    body = await _json(request)
    path = _required_str(body, "path")
    try:
        content = base64.b64decode(body.get("content") or "")
    except binascii.Error:
        raise invalid("content must be base64.") from None
    _state(request).workspace.import_file(path, content, bool(body.get("overwrite")))
    return {}


@api.get("/api/2.0/workspace/get-status")
async def workspace_get_status(request: Request) -> dict[str, Any]:
    path = (await _get_params(request)).get("path") or ""
    return _state(request).workspace.status(path)


@api.get("/api/2.0/workspace/export", response_model=None)
async def workspace_export(request: Request) -> Response | dict[str, Any]:
    params = await _get_params(request)
    path = params.get("path") or ""
    content = _state(request).workspace.read(path)
    if _flag(params.get("direct_download")):
        return Response(content, media_type="application/octet-stream")
    return {
        "content": base64.b64encode(content).decode(),
        "file_type": Path(path).suffix.lstrip("."),
    }


@api.get("/api/2.0/workspace/list")
async def workspace_list(request: Request) -> dict[str, Any]:
    path = (await _get_params(request)).get("path") or ""
    return {"objects": _state(request).workspace.list(path)}


@api.post("/api/2.0/workspace/delete")
async def workspace_delete(request: Request) -> dict[str, Any]:
    body = await _json(request)
    _state(request).workspace.delete(_required_str(body, "path"), bool(body.get("recursive")))
    return {}


@api.put("/api/2.0/fs/files/{path:path}")
async def files_put(request: Request, path: str) -> Response:
    content = await request.body()
    overwrite = _flag(request.query_params.get("overwrite"))
    _state(request).volumes.put("/" + path, content, overwrite)
    return Response(status_code=204)


@api.get("/api/2.0/fs/files/{path:path}")
async def files_get(request: Request, path: str) -> Response:
    content = _state(request).volumes.read("/" + path)
    return Response(content, media_type="application/octet-stream")


@api.put("/api/2.0/fs/directories/{path:path}")
async def directories_put(request: Request, path: str) -> Response:
    _state(request).volumes.mkdirs("/" + path)
    return Response(status_code=204)


# --- secrets ---------------------------------------------------------------------------


def _scope_exists(state: WorkspaceState, scope: str) -> None:
    if not state.store.query("SELECT 1 FROM scopes WHERE name = ?", (scope,)):
        raise not_found(f"Scope {scope} does not exist!")


@api.get("/api/2.0/secrets/scopes/list")
async def secret_scopes_list(request: Request) -> dict[str, Any]:
    rows = _state(request).store.query("SELECT name FROM scopes ORDER BY name")
    return {"scopes": [{"name": r["name"], "backend_type": "DATABRICKS"} for r in rows]}


@api.post("/api/2.0/secrets/scopes/create")
async def secret_scopes_create(request: Request) -> dict[str, Any]:
    state = _state(request)
    scope = _required_str(await _json(request), "scope")
    if not _SCOPE_RE.match(scope):
        raise invalid(
            f"Scope name {scope!r} is invalid: use letters, digits, '_', '-', '.', '@' "
            "(at most 128 characters)."
        )
    with state.store.transaction() as db:
        if db.execute("SELECT 1 FROM scopes WHERE name = ?", (scope,)).fetchone():
            raise ApiError(400, "RESOURCE_ALREADY_EXISTS", f"Scope {scope} already exists!")
        db.execute("INSERT INTO scopes (name, created) VALUES (?, ?)", (scope, now_ms()))
    return {}


@api.post("/api/2.0/secrets/scopes/delete")
async def secret_scopes_delete(request: Request) -> dict[str, Any]:
    state = _state(request)
    scope = _required_str(await _json(request), "scope")
    _scope_exists(state, scope)
    with state.store.transaction() as db:
        db.execute("DELETE FROM secrets WHERE scope = ?", (scope,))
        db.execute("DELETE FROM scopes WHERE name = ?", (scope,))
    return {}


@api.post("/api/2.0/secrets/put")
async def secrets_put(request: Request) -> dict[str, Any]:
    state = _state(request)
    body = await _json(request)
    scope, key = _required_str(body, "scope"), _required_str(body, "key")
    if not _KEY_RE.match(key):
        raise invalid(
            f"Secret key {key!r} is invalid: use letters, digits, '_', '-', '.' "
            "(at most 128 characters)."
        )
    if "string_value" in body:
        value = str(body["string_value"]).encode()
    elif "bytes_value" in body:
        try:
            value = base64.b64decode(str(body["bytes_value"]))
        except binascii.Error:
            raise invalid("bytes_value must be base64.") from None
    else:
        raise invalid("string_value or bytes_value is required.")
    _scope_exists(state, scope)
    state.store.execute(
        "INSERT OR REPLACE INTO secrets (scope, key, value, updated) VALUES (?, ?, ?, ?)",
        (scope, key, value, now_ms()),
    )
    return {}


@api.get("/api/2.0/secrets/list")
async def secrets_list(request: Request) -> dict[str, Any]:
    state = _state(request)
    scope = (await _get_params(request)).get("scope") or ""
    _scope_exists(state, scope)
    rows = state.store.query(
        "SELECT key, updated FROM secrets WHERE scope = ? ORDER BY key", (scope,)
    )
    return {"secrets": [{"key": r["key"], "last_updated_timestamp": r["updated"]} for r in rows]}


@api.post("/api/2.0/secrets/delete")
async def secrets_delete(request: Request) -> dict[str, Any]:
    state = _state(request)
    body = await _json(request)
    scope, key = _required_str(body, "scope"), _required_str(body, "key")
    _scope_exists(state, scope)
    if not state.store.execute("DELETE FROM secrets WHERE scope = ? AND key = ?", (scope, key)):
        raise not_found(f"Secret {key} does not exist in scope {scope}.")
    return {}


# --- images ----------------------------------------------------------------------------


@api.post("/api/2.0/ai-compute-manager/images")
async def images_register(request: Request) -> dict[str, Any]:
    body = await _json(request)
    return _state(request).images.register(
        body.get("docker_image_url"), body.get("credentials_scope"), body.get("credentials_key")
    )


@api.get("/api/2.0/ai-compute-manager/images:get")
async def images_get(request: Request) -> dict[str, Any]:
    url = (await _get_params(request)).get("docker_image_url")
    registration = _state(request).images.get(url)
    if registration is None:
        raise not_found(f"Image {url} is not registered.")
    return registration


@api.get("/api/2.0/ai-compute-manager/images:checkImageAccess")
async def images_check_access(request: Request) -> dict[str, Any]:
    url = (await _get_params(request)).get("docker_image_url")
    return {"publicly_accessible": _state(request).images.is_public(url)}


# --- jobs ------------------------------------------------------------------------------


def _check_runnable(state: WorkspaceState, body: dict[str, Any]) -> None:
    problems = [f"{e['path']}: {e['message']}" for e in validate_submit(body)]
    if problems:
        raise invalid("; ".join(problems))
    from air_runtime.local._execution import topology

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


@api.post("/api/2.2/jobs/runs/submit")
@api.post("/api/2.1/jobs/runs/submit")
async def runs_submit(request: Request) -> dict[str, Any]:
    state = _state(request)
    body = await _json(request)
    token = body.get("idempotency_token")
    token = token.strip() if isinstance(token, str) and token.strip() else None
    _check_runnable(state, body)
    run_id, created = state.store.create_run(body, token, state.options.mode)
    state.counters.count_submit(token, created)
    if created:
        state.engine.start(run_id)
    return {"run_id": run_id}


def _run_id_param(params: dict[str, str]) -> int:
    value = params.get("run_id")
    if value is None:
        raise invalid("run_id is required.")
    return _int_param(value, "run_id")


@api.get("/api/2.2/jobs/runs/get")
@api.get("/api/2.1/jobs/runs/get")
async def runs_get(request: Request) -> dict[str, Any]:
    state = _state(request)
    params = await _get_params(request)
    run_id = _run_id_param(params)
    row = state.store.run_row(run_id)
    host = _host(request)
    if row is None:
        task = state.store.task_row(run_id)
        if task is None:
            raise not_found(f"Run {run_id} does not exist.")
        parent = state.store.run_row(task["run_id"])
        assert parent is not None
        specs = {t["task_key"]: t for t in json.loads(parent["body"])["tasks"]}
        return task_json(task, specs.get(task["task_key"], {}), host)
    offset = _int_param(params.get("page_token") or 0, "page_token")
    return run_json(state.store, row, host, task_offset=offset)


@api.get("/api/2.2/jobs/runs/get-output")
@api.get("/api/2.1/jobs/runs/get-output")
async def runs_get_output(request: Request) -> dict[str, Any]:
    state = _state(request)
    run_id = _run_id_param(await _get_params(request))
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
    output["metadata"] = task_json(task, specs.get(task["task_key"], {}), _host(request))
    return output


@api.post("/api/2.2/jobs/runs/cancel")
@api.post("/api/2.1/jobs/runs/cancel")
async def runs_cancel(request: Request) -> dict[str, Any]:
    state = _state(request)
    body = await _json(request)
    run_id = _int_param(body.get("run_id"), "run_id")
    row = state.store.run_row(run_id)
    if row is None:
        task = state.store.task_row(run_id)
        if task is None:
            raise invalid(f"Run {run_id} does not exist.")
        run_id = int(task["run_id"])
    state.engine.cancel(run_id)
    return {}


def _page_token(value: str | None) -> int | None:
    if not value:
        return None
    try:
        number = int(base64.urlsafe_b64decode(value.encode()).decode())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        number = None
    if number is None or not 0 <= number < 2**63:
        raise invalid(f"page_token {value[:40]!r} is not a token this workspace issued.")
    return number


def _make_page_token(run_id: int) -> str:
    return base64.urlsafe_b64encode(str(run_id).encode()).decode()


@api.get("/api/2.2/jobs/runs/list")
@api.get("/api/2.1/jobs/runs/list")
async def runs_list(request: Request) -> dict[str, Any]:
    state = _state(request)
    params = await _get_params(request)
    active_only = _flag(params.get("active_only"))
    completed_only = _flag(params.get("completed_only"))
    if active_only and completed_only:
        raise invalid("active_only and completed_only cannot both be true.")
    limit = _int_param(params.get("limit") or 25, "limit")
    if not 1 <= limit <= _MAX_LIST_LIMIT:
        raise invalid(f"limit must be between 1 and {_MAX_LIST_LIMIT}, got {limit}.")
    run_type = params.get("run_type")
    if run_type and run_type != "SUBMIT_RUN":
        return {"runs": [], "has_more": False}
    clauses, values = [], []
    if active_only:
        clauses.append("active = 1")
    elif completed_only:
        clauses.append("active = 0")
    before = _page_token(params.get("page_token"))
    if before is not None:
        clauses.append("run_id < ?")
        values.append(before)
    for name, op in (("start_time_from", ">="), ("start_time_to", "<=")):
        if params.get(name):
            clauses.append(f"start_time {op} ?")
            values.append(_int_param(params[name], name))
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = state.store.query(
        f"SELECT * FROM runs {where} ORDER BY run_id DESC LIMIT ?", (*values, limit + 1)
    )
    has_more = len(rows) > limit
    rows = rows[:limit]
    host = _host(request)
    expand = _flag(params.get("expand_tasks"))
    result: dict[str, Any] = {
        "runs": [run_json(state.store, r, host, with_tasks=expand) for r in rows],
        "has_more": has_more,
    }
    if has_more:
        result["next_page_token"] = _make_page_token(rows[-1]["run_id"])
    return result


@api.patch("/api/2.0/permissions/jobs/{job_id}")
@api.put("/api/2.0/permissions/jobs/{job_id}")
async def permissions_update(request: Request, job_id: str) -> dict[str, Any]:
    state = _state(request)
    run_id = _int_param(job_id, "job_id")
    if state.store.run_row(run_id) is None:
        raise not_found(f"Job {job_id} does not exist.")
    entries = (await _json(request)).get("access_control_list")
    if not isinstance(entries, list):
        raise invalid("access_control_list must be a list.")
    for i, entry in enumerate(entries):
        principals = [p for p in _PRINCIPALS if isinstance(entry, dict) and entry.get(p)]
        if len(principals) != 1:
            raise invalid(
                f"access_control_list[{i}] needs exactly one of {', '.join(_PRINCIPALS)}."
            )
        if entry.get("permission_level") not in _PERMISSION_LEVELS:
            raise invalid(
                f"access_control_list[{i}].permission_level must be one of "
                f"{', '.join(_PERMISSION_LEVELS)}, got {entry.get('permission_level')!r}."
            )
    with state.store.transaction() as db:
        row = db.execute("SELECT acl FROM permissions WHERE job_id = ?", (run_id,)).fetchone()
        acl: list[dict[str, Any]] = json.loads(row["acl"]) if row else []
        for entry in entries:
            principal = next(p for p in _PRINCIPALS if entry.get(p))
            acl = [a for a in acl if a.get(principal) != entry[principal]]
            acl.append(entry)
        db.execute(
            "INSERT OR REPLACE INTO permissions (job_id, acl) VALUES (?, ?)",
            (run_id, json.dumps(acl)),
        )
    return _acl_json(run_id, acl)


@api.get("/api/2.0/permissions/jobs/{job_id}")
async def permissions_get(request: Request, job_id: str) -> dict[str, Any]:
    state = _state(request)
    run_id = _int_param(job_id, "job_id")
    if state.store.run_row(run_id) is None:
        raise not_found(f"Job {job_id} does not exist.")
    rows = state.store.query("SELECT acl FROM permissions WHERE job_id = ?", (run_id,))
    return _acl_json(run_id, json.loads(rows[0]["acl"]) if rows else [])


def _acl_json(
    job_id: int | str, acl: list[dict[str, Any]], kind: str = "jobs", object_type: str = "job"
) -> dict[str, Any]:
    entries = []
    for entry in acl:
        principal = {p: entry[p] for p in _PRINCIPALS if entry.get(p)}
        level = entry["permission_level"]
        entries.append(
            {**principal, "all_permissions": [{"permission_level": level, "inherited": False}]}
        )
    return {
        "object_id": f"/{kind}/{job_id}",
        "object_type": object_type,
        "access_control_list": entries,
    }


def _checked_acl(body: dict[str, Any], levels: tuple[str, ...]) -> list[dict[str, Any]]:
    entries = body.get("access_control_list")
    if not isinstance(entries, list):
        raise invalid("access_control_list must be a list.")
    for i, entry in enumerate(entries):
        principals = [p for p in _PRINCIPALS if isinstance(entry, dict) and entry.get(p)]
        if len(principals) != 1 or not all(isinstance(entry[p], str) for p in principals):
            raise invalid(
                f"access_control_list[{i}] needs exactly one of {', '.join(_PRINCIPALS)}."
            )
        if entry.get("permission_level") not in levels:
            raise invalid(
                f"access_control_list[{i}].permission_level must be one of "
                f"{', '.join(levels)}, got {str(entry.get('permission_level'))[:40]!r}."
            )
    return entries


def _merge_acl(acl: list[dict[str, Any]], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for entry in entries:
        principal = next(p for p in _PRINCIPALS if entry.get(p))
        acl = [a for a in acl if a.get(principal) != entry[principal]]
        acl.append({principal: entry[principal], "permission_level": entry["permission_level"]})
    return acl


# MLflow experiments: the CLI grants the workload's principals on the run's experiment
# (CAN_VIEW -> CAN_READ, CAN_MANAGE_RUN -> CAN_EDIT, CAN_MANAGE/IS_OWNER -> CAN_MANAGE) with
# PATCH /api/2.0/permissions/experiments/{id}, the id read from runs/get-output
# (runpermissions.go). Experiments exist once a task of theirs started.
_EXPERIMENT_LEVELS = ("CAN_READ", "CAN_EDIT", "CAN_MANAGE")


def _experiment_row(state: WorkspaceState, experiment_id: str) -> Any:
    rows = state.store.query(
        "SELECT * FROM experiments WHERE experiment_id = ?", (experiment_id[:64],)
    )
    if not rows:
        raise not_found(f"Node ID {experiment_id[:64]} does not exist.")
    return rows[0]


@api.patch("/api/2.0/permissions/experiments/{experiment_id}")
@api.put("/api/2.0/permissions/experiments/{experiment_id}")
async def experiment_permissions_update(request: Request, experiment_id: str) -> dict[str, Any]:
    state = _state(request)
    _experiment_row(state, experiment_id)
    entries = _checked_acl(await _json(request), _EXPERIMENT_LEVELS)
    with state.store.transaction() as db:
        row = db.execute(
            "SELECT acl FROM experiments WHERE experiment_id = ?", (experiment_id,)
        ).fetchone()
        # PUT replaces the list, PATCH adds to it.
        current = [] if request.method == "PUT" else json.loads(row["acl"])
        acl = _merge_acl(current, entries)
        db.execute(
            "UPDATE experiments SET acl = ? WHERE experiment_id = ?",
            (json.dumps(acl), experiment_id),
        )
    return _acl_json(experiment_id, acl, "experiments", "mlflow-experiment")


@api.get("/api/2.0/permissions/experiments/{experiment_id}")
async def experiment_permissions_get(request: Request, experiment_id: str) -> dict[str, Any]:
    row = _experiment_row(_state(request), experiment_id)
    return _acl_json(experiment_id, json.loads(row["acl"]), "experiments", "mlflow-experiment")


# --- usage (serverless budget) policies ---------------------------------------------------

# The workspace-scoped list the CLI resolves `usage_policy_name` with (usagepolicy.go):
# `filter_by.policy_name` is a partial, case-insensitive server-side filter; `page_size` is
# capped at 1000 (larger values are coerced down); paging with `page_token` /
# `next_page_token`; each policy carries `policy_id` and `policy_name`.
_MAX_POLICY_PAGE = 1000
_DEFAULT_POLICY_PAGE = 100


def _policy_json(row: Any) -> dict[str, Any]:
    return {
        "policy_id": row["policy_id"],
        "policy_name": row["policy_name"],
        "display_name": row["policy_name"],
        "custom_tags": [],
    }


def add_usage_policy(state: WorkspaceState, name: Any, policy_id: Any = None) -> dict[str, Any]:
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise invalid("policy_name must be a non-empty string of at most 255 characters.")
    if policy_id is None:
        policy_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"airo-usage-policy/{name}"))
    try:
        policy_id = str(uuid.UUID(str(policy_id)))
    except ValueError:
        raise invalid("policy_id must be a UUID.") from None
    with state.store.transaction() as db:
        db.execute(
            "INSERT OR REPLACE INTO usage_policies (policy_id, policy_name, created)"
            " VALUES (?, ?, ?)",
            (policy_id, name, now_ms()),
        )
    return {"policy_id": policy_id, "policy_name": name}


@api.get("/api/2.0/serverless-policies")
async def serverless_policies_list(request: Request) -> dict[str, Any]:
    state = _state(request)
    params = await _get_params(request)
    size = _int_param(params.get("page_size") or _DEFAULT_POLICY_PAGE, "page_size")
    if size < 0:
        raise invalid(f"page_size must not be negative, got {size}.")
    size = min(size or _DEFAULT_POLICY_PAGE, _MAX_POLICY_PAGE)
    offset = _offset_token(params.get("page_token"))
    wanted = (params.get("filter_by.policy_name") or "").strip().casefold()
    rows = [
        r
        for r in state.store.query(
            "SELECT * FROM usage_policies ORDER BY policy_name COLLATE NOCASE, policy_id"
        )
        if wanted in str(r["policy_name"]).casefold()
    ]
    page = rows[offset : offset + size]
    result: dict[str, Any] = {"policies": [_policy_json(r) for r in page]}
    if offset + size < len(rows):
        result["next_page_token"] = _make_page_token(offset + size)
    return result


def _offset_token(value: str | None) -> int:
    offset = _page_token(value)
    if offset is None:
        return 0
    if offset < 0:
        raise invalid(f"page_token {value!r} is not a token this workspace issued.")
    return offset


# --- AI Runtime services ---------------------------------------------------------------


@api.post("/api/2.0/ai-training/config:validate")
async def config_validate(request: Request) -> dict[str, Any]:
    return {"errors": validate_config(await _json(request))}


@api.get("/api/2.0/ai-training/workflows/by-run-id/{run_id}/logs")
async def workflow_logs(request: Request, run_id: str) -> dict[str, Any]:
    state = _state(request)
    ident = _int_param(run_id, "run_id")
    params = await _get_params(request)
    if state.store.run_row(ident) is not None:
        tasks = state.store.task_rows(ident)
    else:
        task = state.store.task_row(ident)
        if task is None:
            raise not_found(f"Run {ident} does not exist.")
        tasks = [task]
    if params.get("ref.attempt_number"):
        # The CLI asks for one retry attempt with ref.attempt_number (logbricklens.go).
        attempt = _int_param(params["ref.attempt_number"], "ref.attempt_number")
        tasks = [t for t in tasks if int(t["attempt_number"]) == attempt]
    task_run_ids = [int(t["task_run_id"]) for t in tasks]
    node = _int_param(params.get("filter.node_index") or 0, "filter.node_index")
    # `from` and `to` are Unix epoch SECONDS: the CLI sends the run's start second, or
    # time_unix_nano / 1e9 of the last record it printed when following a run, and caps a
    # finished run at the ceiling of its end second (logstream.go, logbricklens.go). A
    # record counts from the first nanosecond of `from` through the last one of `to`.
    start_ns = end_ns = None
    if params.get("from"):
        start_ns = _int_param(params["from"], "from") * 1_000_000_000
    if params.get("to"):
        end_ns = (_int_param(params["to"], "to") + 1) * 1_000_000_000 - 1
    # A bound past the int64 nanoseconds (e.g. nanoseconds sent as seconds) is the far
    # future: no record is that late (docs/cli-conformance.md item 4).
    start_ns = None if start_ns is None else max(0, min(start_ns, 2**63 - 1))
    end_ns = None if end_ns is None else max(-1, min(end_ns, 2**63 - 1))
    ascending = params.get("ascending", "true").lower() != "false"
    size = _int_param(params.get("page_size") or 1000, "page_size")
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


# --- admin (not part of the Databricks API) --------------------------------------------


@public.get("/api/2.0/airo-admin/health")
async def admin_health(request: Request) -> dict[str, Any]:
    state = _state(request)
    return {"status": "ok", "mode": state.options.mode, "active_runs": state.engine.active_drivers}


def _injector(request: Request) -> FaultInjector:
    injector = _state(request).faults
    assert injector is not None
    return injector


@admin.get("/faults")
async def admin_faults_get(request: Request) -> dict[str, Any]:
    return _injector(request).faults


@admin.put("/faults")
@admin.post("/faults")
async def admin_faults_set(request: Request) -> dict[str, Any]:
    body = await _json(request)
    try:
        normalize_faults(body)
    except (TypeError, ValueError) as exc:
        raise invalid(str(exc)) from None
    injector = _injector(request)
    injector.set_faults(body)
    return injector.faults


@admin.get("/counters")
async def admin_counters(request: Request) -> dict[str, Any]:
    return _state(request).counters.snapshot()


@admin.post("/counters/reset")
async def admin_counters_reset(request: Request) -> dict[str, Any]:
    _state(request).counters.reset()
    return {}


@admin.post("/tokens/revoke")
async def admin_revoke(request: Request) -> dict[str, Any]:
    state = _state(request)
    token = _required_str(await _json(request), "token")
    state.store.revoke(token)
    state.revoked.add(token)
    return {}


@admin.post("/tokens/add")
async def admin_add_token(request: Request) -> dict[str, Any]:
    state = _state(request)
    token = _required_str(await _json(request), "token")
    state.tokens.add(token)
    state.revoked.discard(token)
    state.store.execute("DELETE FROM revoked_tokens WHERE token = ?", (token,))
    return {}


@admin.get("/request-log")
async def admin_request_log(request: Request) -> dict[str, Any]:
    limit = _int_param((await _get_params(request)).get("limit") or 1000, "limit")
    entries = list(_state(request).request_log.entries)
    return {"entries": entries[-limit:]}


@admin.post("/usage-policies")
async def admin_add_usage_policy(request: Request) -> dict[str, Any]:
    body = await _json(request)
    return add_usage_policy(_state(request), body.get("policy_name"), body.get("policy_id"))


@admin.get("/simulate")
async def admin_simulate_get(request: Request) -> dict[str, Any]:
    return dict(_state(request).options.simulate)


@admin.put("/simulate")
async def admin_simulate_set(request: Request) -> dict[str, Any]:
    state = _state(request)
    state.options.simulate.update(await _json(request))
    return dict(state.options.simulate)


# --- the application -------------------------------------------------------------------


def create_app(options: WorkspaceOptions, data_dir: Path) -> FastAPI:
    """A FastAPI app serving one local workspace whose state lives in `data_dir`."""
    state = WorkspaceState(options, data_dir)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.engine.recover()
        try:
            yield
        finally:
            await state.engine.shutdown()
            state.close()

    app = FastAPI(
        title="air-orchestration local workspace",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.workspace = state

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "ENDPOINT_NOT_FOUND", 405: "BAD_REQUEST"}.get(exc.status_code, "BAD_REQUEST")
        message = "No API found for this path." if exc.status_code == 404 else str(exc.detail)
        return JSONResponse({"error_code": code, "message": message}, status_code=exc.status_code)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(_: Request, exc: ClientDisconnect) -> Response:
        # The caller hung up (a killed worker) before its body was read: nobody to answer.
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        # A bug must still answer in the platform's error shape (and never echo internals).
        logger.exception("unexpected error in the local workspace", exc_info=exc)
        return JSONResponse(
            {"error_code": "INTERNAL_ERROR", "message": "Internal error of the local workspace."},
            status_code=500,
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {"error_code": "INVALID_PARAMETER_VALUE", "message": str(exc)}, status_code=400
        )

    app.include_router(public)
    app.include_router(admin)
    app.include_router(api)
    # Served as the outermost ASGI layer (see `asgi_app`), so a dropped connection really
    # closes the socket and injected answers bypass the handlers entirely.
    state.faults = FaultInjector(app, options.faults, state.counters, state.request_log)
    for policy in options.usage_policies:
        add_usage_policy(state, policy.get("policy_name"), policy.get("policy_id"))
    return app


def asgi_app(app: FastAPI) -> RequestGuard:
    """The app to serve: `app` behind its fault injector, counters and request log, behind
    the guard that checks the Host header and the request size limits."""
    state: WorkspaceState = app.state.workspace
    injector = state.faults
    assert isinstance(injector, FaultInjector)
    options = state.options
    return RequestGuard(
        injector,
        allowed_hosts=lambda: options.allowed_hosts,
        max_request_bytes=options.max_request_bytes,
        max_upload_bytes=options.max_upload_bytes,
    )
