"""The local workspace's FastAPI app (docs/spec/rest-api.md): the API families' routers, each
behind the authentication it needs, the platform's error shape, and the ASGI layers around it.

| router | serves |
| --- | --- |
| `_api_identity` | SCIM `Me`, host metadata, OIDC discovery and the OAuth token endpoint |
| `_api_files` | workspace files and Unity Catalog volumes |
| `_api_secrets` | secret scopes and secrets (`_secret_store`) |
| `_api_images` | Docker image registrations |
| `_api_runs` | Jobs API one-time runs: submit, get, get-output, cancel, list |
| `_api_permissions` | permissions of runs and of their MLflow experiments |
| `_api_usage_policies` | usage (serverless budget) policies |
| `_api_ai_training` | workload validation and task log records |
| `_api_pools` | GPU pools (provisioned capacities) and their usage |
| `_api_mlflow` | MLflow runs and log artifacts (the log fallback), pre-signed downloads |
| `_api_admin` | the workspace's own admin API (`/api/2.0/airo-admin/`) |
| `_api_unity_catalog` | the metastore summary (the region of the Artifact Registry host) |
| `_api_registry_tokens` | the token service of the Artifact Registry stand-in |
| `_pages` | the run pages (HTML) and their browser login (`/jobs/runs`, `/login`) |
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from air_runtime.local import (
    _api_admin,
    _api_ai_training,
    _api_files,
    _api_identity,
    _api_images,
    _api_mlflow,
    _api_permissions,
    _api_pools,
    _api_registry_tokens,
    _api_runs,
    _api_secrets,
    _api_unity_catalog,
    _api_usage_policies,
    _pages,
)
from air_runtime.local._auth import authenticate, authenticate_admin
from air_runtime.local._errors import ApiError
from air_runtime.local._faults import FaultInjector
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._security import RequestGuard
from air_runtime.local._workspace_state import WorkspaceState

logger = logging.getLogger("air_runtime.local")

# Databricks API routers: every call needs a bearer token of the workspace (or an OAuth
# access token it issued).
_API_ROUTERS = (
    _api_identity.router,
    _api_files.router,
    _api_secrets.router,
    _api_images.router,
    _api_runs.router,
    _api_permissions.router,
    _api_usage_policies.router,
    _api_ai_training.router,
    _api_pools.router,
    _api_mlflow.router,
    _api_unity_catalog.router,
)
# Answered without a token: what a client reads before it has one, and the health check.
# The run pages check their own credentials (a browser without a session is sent to the
# login form instead of getting the API's JSON error).
_PUBLIC_ROUTERS = (
    _api_identity.public_router,
    _api_admin.public_router,
    _api_mlflow.public_router,  # pre-signed artifact URLs: the signature is the credential
    _pages.router,
    _api_registry_tokens.public_router,  # Basic oauthtoken:<workspace token> is the credential
)


def _add_error_handlers(app: FastAPI) -> None:
    """Every answer, a bug's included, in the platform's `{"error_code", "message"}` shape."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            {"error_code": exc.error_code, "message": exc.message}, status_code=exc.status
        )

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
    _add_error_handlers(app)
    for router in _PUBLIC_ROUTERS:
        app.include_router(router)
    app.include_router(_api_admin.router, dependencies=[Depends(authenticate_admin)])
    for router in _API_ROUTERS:
        app.include_router(router, dependencies=[Depends(authenticate)])
    # Served as the outermost ASGI layer (see `asgi_app`), so a dropped connection really
    # closes the socket and injected answers bypass the handlers entirely.
    state.faults = FaultInjector(app, options.faults, state.counters, state.request_log)
    for policy in options.usage_policies:
        state.usage_policies.add(policy.get("policy_name"), policy.get("policy_id"))
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
