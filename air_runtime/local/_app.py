"""The local workspace's FastAPI app (docs/spec/rest-api.md): the API families' routers, each
behind the authentication it needs, the platform's error shape, and the ASGI layers around it.

| router | serves |
| --- | --- |
| `identity.routes` | SCIM `Me`, host metadata, OIDC discovery and the OAuth token endpoint |
| `files.routes` | workspace files and Unity Catalog volumes |
| `secrets.routes` | secret scopes and secrets (`secrets.backend`) |
| `images.routes` | Docker image registrations |
| `runs.routes` | Jobs API one-time runs: submit, get, get-output, cancel, list |
| `permissions.routes` | permissions of runs and of their MLflow experiments |
| `usage_policies.routes` | usage (serverless budget) policies |
| `ai_training.routes` | workload validation and task log records |
| `pools.routes` | GPU pools (provisioned capacities) and their usage |
| `mlflow.routes` | MLflow runs and log artifacts (the log fallback), pre-signed downloads |
| `admin.routes` | the workspace's own admin API (`/api/2.0/airo-admin/`) |
| `unity_catalog.routes` | the metastore summary (the region of the Artifact Registry host) |
| `registry_tokens.routes` | the token service of the Artifact Registry stand-in |
| `pages.routes` | the run pages (HTML) and their browser login (`/jobs/runs`, `/login`) |
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

from air_runtime.local._errors import ApiError
from air_runtime.local._faults import FaultInjector
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._security import RequestGuard
from air_runtime.local._workspace_state import WorkspaceState
from air_runtime.local.admin import routes as admin_routes
from air_runtime.local.ai_training import routes as ai_training_routes
from air_runtime.local.files import routes as files_routes
from air_runtime.local.identity import routes as identity_routes
from air_runtime.local.identity.auth import authenticate, authenticate_admin
from air_runtime.local.images import routes as images_routes
from air_runtime.local.mlflow import routes as mlflow_routes
from air_runtime.local.pages import routes as pages_routes
from air_runtime.local.permissions import routes as permissions_routes
from air_runtime.local.pools import routes as pools_routes
from air_runtime.local.registry_tokens import routes as registry_tokens_routes
from air_runtime.local.runs import routes as runs_routes
from air_runtime.local.secrets import routes as secrets_routes
from air_runtime.local.unity_catalog import routes as unity_catalog_routes
from air_runtime.local.usage_policies import routes as usage_policies_routes

logger = logging.getLogger("air_runtime.local")

# Databricks API routers: every call needs a bearer token of the workspace (or an OAuth
# access token it issued).
_API_ROUTERS = (
    identity_routes.router,
    files_routes.router,
    secrets_routes.router,
    images_routes.router,
    runs_routes.router,
    permissions_routes.router,
    usage_policies_routes.router,
    ai_training_routes.router,
    pools_routes.router,
    mlflow_routes.router,
    unity_catalog_routes.router,
)
# Answered without a token: what a client reads before it has one, and the health check.
# The run pages check their own credentials (a browser without a session is sent to the
# login form instead of getting the API's JSON error).
_PUBLIC_ROUTERS = (
    identity_routes.public_router,
    admin_routes.public_router,
    mlflow_routes.public_router,  # pre-signed artifact URLs: the signature is the credential
    pages_routes.router,
    registry_tokens_routes.public_router,  # Basic oauthtoken:<workspace token> is the credential
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
    app.include_router(admin_routes.router, dependencies=[Depends(authenticate_admin)])
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
