"""The local workspace's run pages, at the addresses its answers hand out: `run_page_url`
(`/jobs/runs/<run id>`, also a task run's `/jobs/runs/<task run id>`, as the CLI's
`dashboardURL` in cmd/air/format.go forms them, `?o=<workspace id>` ignored) and the
MLflow run (`/ml/experiments/<id>/runs/<run id>`, `mlflow_run_url` in the core), which leads
to the task run that logged to it.

| path | shows |
| --- | --- |
| `/jobs/runs` | the runs, newest first |
| `/jobs/runs/{id}` | a run (every task, its containers, each node's state, exit code, last log lines), or a task run |
| `/jobs/runs/{task run id}/logs/{node}` | one node's whole log, as text |
| `/jobs/runs/{id}/tail` | the new log lines of a page (its live tail, JSON) |
| `/login`, `/logout` | the browser session (`session`) |

Server-rendered with Jinja2 (autoescaped: names and log lines come from workloads); the
only script is the page's live tail, inline and allowed by its per-response CSP nonce.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from jinja2 import Environment, PackageLoader, StrictUndefined

from air_runtime.local._request_params import workspace_state
from air_runtime.local._workspace_state import WorkspaceState
from air_runtime.local.pages import session
from air_runtime.local.pages.views import (
    AttemptView,
    RunView,
    new_lines,
    run_view,
    task_run_view,
)

router = APIRouter(include_in_schema=False)

_templates = Environment(
    loader=PackageLoader("air_runtime.local.pages", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
RUNS_PER_PAGE = 25
TAIL_BATCH = 500  # lines per node and poll; a busy node catches up over a few polls
_MAX_TAILED_NODES = 256
_LOG_CHUNK = 64 * 1024


def _headers(nonce: str) -> dict[str, str]:
    return {
        # Nothing but this page's own style and script, and its own origin to poll.
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; "
            "connect-src 'self'; img-src data:; form-action 'self'; base-uri 'none'; "
            "frame-ancestors 'none'"
        ),
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "same-origin",
        "Cache-Control": "no-store",
    }


def _plain_headers() -> dict[str, str]:
    return {
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
        "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    }


def _render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    context.setdefault("user", None)
    context.setdefault("refresh", False)
    context.setdefault("live", False)
    context.setdefault("reload", False)
    html = _templates.get_template(template).render(nonce=nonce, **context)
    return HTMLResponse(html, status_code=status, headers=_headers(nonce))


def _error(request: Request, status: int, heading: str, message: str, user: str | None) -> Response:
    return _render(request, "error.html", status, heading=heading, message=message, user=user)


def _to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{session.LOGIN_PATH}?next={quote(target, safe='/')}", 303)


def _ident(value: str) -> int | None:
    return int(value) if value.isdigit() and len(value) <= 19 else None


def _signature(run: RunView, attempts: list[AttemptView]) -> str:
    """What decides the page besides its logs: when it changes, the page reloads."""
    shape: list[Any] = [run.life_cycle_state, run.result_state]
    for attempt in attempts:
        shape.append([attempt.task_run_id, attempt.life_cycle_state, attempt.result_state])
        shape.extend(n.state for c in attempt.containers for n in c.nodes)
    return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:24]


def _run_signature(view: RunView) -> str:
    return _signature(view, [a for t in view.tasks for a in t.attempts])


# --- session -----------------------------------------------------------------------------


@router.get("/login")
async def login_form(request: Request) -> Response:
    target = session.safe_next(request.query_params.get("next"))
    if session.page_user(request) is not None:
        return RedirectResponse(target, 303)
    return _login_page(request, target, error=None, status=200)


def _login_page(request: Request, target: str, *, error: str | None, status: int) -> Response:
    csrf = session.new_csrf_value()
    response = _render(request, "login.html", status, csrf=csrf, next=target, error=error)
    session.remember_login_form(request, response, csrf)
    return response


async def _form(request: Request) -> dict[str, str]:
    raw = (await request.body()).decode("utf-8", errors="replace")
    fields = parse_qs(raw, keep_blank_values=True, max_num_fields=10)
    return {name: values[0] for name, values in fields.items() if values}


@router.post("/login")
async def login(request: Request) -> Response:
    state = workspace_state(request)
    form = await _form(request)
    target = session.safe_next(form.get("next"))
    if not session.same_origin(request) or not session.login_form_echoed(
        request, form.get("csrf", "")
    ):
        return _login_page(
            request,
            target,
            error="This login form expired or was not sent from this workspace: try again.",
            status=403,
        )
    token = form.get("token", "").strip()
    if not session.token_is_valid(state, token):
        return _login_page(
            request, target, error="That token is not valid for this workspace.", status=403
        )
    response = RedirectResponse(target, 303)
    session.start_session(request, response, token)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    if not session.same_origin(request):
        return _error(
            request, 403, "Not logged out", "Log out from the workspace's own page.", None
        )
    response = RedirectResponse(session.LOGIN_PATH, 303)
    session.end_session(request, response)
    return response


# --- pages -------------------------------------------------------------------------------


@router.get("/jobs/runs")
async def runs_page(request: Request) -> Response:
    user = session.page_user(request)
    if user is None:
        return _to_login(request)
    state = workspace_state(request)
    before = _ident(request.query_params.get("before", ""))
    runs, more = state.runs.newest(before_run_id=before, limit=RUNS_PER_PAGE)
    views = await asyncio.to_thread(lambda: [run_view(state, r, with_logs=False) for r in runs])
    older = views[-1].run_id if more and views else None
    live = any(v.active for v in views)
    # No script on the list: while a run is going it reloads itself every few seconds.
    return _render(request, "runs.html", user=user, runs=views, older=older, reload=live)


@router.get("/jobs/runs/{ident}")
async def run_page(request: Request, ident: str) -> Response:
    user = session.page_user(request)
    if user is None:
        return _to_login(request)
    state = workspace_state(request)
    number = _ident(ident)
    run = state.runs.find_run(number) if number is not None else None
    if run is not None:
        view = await asyncio.to_thread(run_view, state, run)
        return _render(
            request,
            "run.html",
            user=user,
            run=view,
            signature=_run_signature(view),
            live=view.active,
            refresh=view.active,
        )
    task = state.runs.find_task(number) if number is not None else None
    if task is None:
        return _error(
            request, 404, "No such run", f"Run {ident} does not exist in this workspace.", user
        )
    parent, attempt, attempts = await asyncio.to_thread(task_run_view, state, task)
    shown = [attempt if a.task_run_id == attempt.task_run_id else a for a in attempts]
    return _render(
        request,
        "task_run.html",
        user=user,
        run=parent,
        attempt=attempt,
        attempts=attempts,
        signature=_signature(parent, shown),
        live=parent.active,
        refresh=parent.active,
    )


def _whole_log(state: WorkspaceState, task_run_id: int, node: int) -> Iterator[bytes]:
    """The bodies of a node's log, a line each, in chunks of about 64 KiB (each chunk is one
    hop to the threadpool of the streaming response, so never one per line)."""
    path = state.logbook.path(task_run_id, node)
    try:
        handle = path.open("rb")
    except OSError:
        return
    chunk: list[bytes] = []
    size = 0
    with handle:
        for line in handle:
            if not line.endswith(b"\n"):
                break  # a record still being written
            body = str(json.loads(line).get("body", ""))
            chunk.append((body + "\n").encode("utf-8", errors="replace"))
            size += len(chunk[-1])
            if size >= _LOG_CHUNK:
                yield b"".join(chunk)
                chunk, size = [], 0
    if chunk:
        yield b"".join(chunk)


@router.get("/jobs/runs/{ident}/logs/{node}")
async def node_log(request: Request, ident: str, node: str) -> Response:
    user = session.page_user(request)
    if user is None:
        return _to_login(request)
    state = workspace_state(request)
    task_run_id, index = _ident(ident), _ident(node)
    task = state.runs.find_task(task_run_id) if task_run_id is not None else None
    if task is None or index is None:
        return _error(request, 404, "No such log", f"Task run {ident} has no node {node}.", user)
    # Plain text, never HTML: a log line cannot become markup.
    return StreamingResponse(
        _whole_log(state, task.task_run_id, index),
        media_type="text/plain; charset=utf-8",
        headers=_plain_headers(),
    )


def _tailed(values: list[str]) -> list[tuple[int, int, int]]:
    """(task run id, node, after ns) of each `n=<task run>.<node>.<ns>` of a tail poll."""
    wanted = []
    for value in values[:_MAX_TAILED_NODES]:
        parts = value.split(".")
        if len(parts) == 3 and all(p.isdigit() and len(p) <= 19 for p in parts):
            wanted.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return wanted


@router.get("/jobs/runs/{ident}/tail")
async def tail(request: Request, ident: str) -> Response:
    """New lines of the nodes a page shows, whether the run is still going, and whether the
    page changed otherwise (a node ended, a retry started: the page reloads)."""
    if session.page_user(request) is None:
        return JSONResponse({"error_code": "UNAUTHENTICATED", "message": "Log in."}, 401)
    state = workspace_state(request)
    number = _ident(ident)
    run = state.runs.find_run(number) if number is not None else None
    task = None if run is not None or number is None else state.runs.find_task(number)
    if run is None and task is None:
        return JSONResponse({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "No run."}, 404)
    if run is not None:
        view = await asyncio.to_thread(run_view, state, run, with_logs=False)
        signature = _run_signature(view)
        allowed = {a.task_run_id for t in view.tasks for a in t.attempts}
    else:
        assert task is not None
        view, attempt, attempts = await asyncio.to_thread(task_run_view, state, task)
        shown = [attempt if a.task_run_id == attempt.task_run_id else a for a in attempts]
        signature = _signature(view, shown)
        allowed = {attempt.task_run_id}
    wanted = [w for w in _tailed(request.query_params.getlist("n")) if w[0] in allowed]

    def read() -> list[dict[str, Any]]:
        logs = []
        for task_run_id, node, after in wanted:
            records = new_lines(state, task_run_id, node, after, TAIL_BATCH)
            logs.append(
                {
                    "node": f"{task_run_id}.{node}",
                    "lines": [str(r.get("body", "")) for r in records],
                    "after": int(records[-1]["time_unix_nano"]) if records else after,
                }
            )
        return logs

    answer = {
        "logs": await asyncio.to_thread(read),
        "active": view.active,
        "changed": signature != request.query_params.get("signature"),
    }
    return JSONResponse(answer, headers=_plain_headers())


@router.get("/ml/experiments/{experiment_id}/runs/{mlflow_run_id}")
async def mlflow_run(request: Request, experiment_id: str, mlflow_run_id: str) -> Response:
    """The MLflow link of a task leads to the task run that logged to that MLflow run."""
    user = session.page_user(request)
    if user is None:
        return _to_login(request)
    state = workspace_state(request)
    task = state.mlflow.find_task(mlflow_run_id)
    if task is not None and str(task.mlflow_ids.get("mlflow_experiment_id")) == experiment_id:
        task_run_id = task.task_run_id
        return RedirectResponse(f"/jobs/runs/{task_run_id}#mlflow-{task_run_id}", 303)
    return _error(
        request,
        404,
        "No such MLflow run",
        f"No task run of this workspace logged to MLflow run {mlflow_run_id}.",
        user,
    )
