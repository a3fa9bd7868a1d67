"""Who may read the run pages: the API's bearer header, or a browser session cookie got by
logging in once with one of the workspace's tokens.

The cookie never holds the token itself but a keyed digest of it (HMAC-SHA256), so a cookie
that leaks cannot call the API, and revoking the token ends its sessions. It is HttpOnly,
SameSite=Strict, host-only (no Domain), Secure when the page was reached over HTTPS, and
named after the port: cookies do not tell ports apart, and two workspaces of one machine
must not log each other out. The login form is CSRF-safe twice over: a cross-site POST
carries an `Origin` (or `Sec-Fetch-Site`) naming another site and is refused, and it lacks
the SameSite=Strict login cookie whose random value the form must echo back.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from fastapi import Request, Response

from air_runtime.local._request_params import workspace_state
from air_runtime.local._security import token_matches
from air_runtime.local._workspace_state import WorkspaceState
from air_runtime.local.identity.auth import authenticate

_SESSION_PURPOSE = b"air-orchestration local workspace: run pages session"
LOGIN_PATH = "/login"
# A login form is good for this long (its CSRF cookie expires with it).
LOGIN_FORM_SECONDS = 900


def _port(request: Request) -> int:
    return request.url.port or (443 if request.url.scheme == "https" else 80)


def session_cookie_name(request: Request) -> str:
    return f"airo_session_{_port(request)}"


def login_cookie_name(request: Request) -> str:
    return f"airo_login_{_port(request)}"


def session_value(token: str) -> str:
    return hmac.new(token.encode(), _SESSION_PURPOSE, hashlib.sha256).hexdigest()


def _valid_tokens(state: WorkspaceState) -> list[str]:
    return state.tokens.valid_workspace_tokens()


def page_user(request: Request) -> str | None:
    """The user of a page request, or None when it carries no credentials at all.

    A request with an `Authorization` header is checked exactly as the API checks it (a
    bad one raises the API's 401/403); otherwise the session cookie decides."""
    if request.headers.get("authorization"):
        return authenticate(request)
    state = workspace_state(request)
    cookie = request.cookies.get(session_cookie_name(request))
    if cookie and token_matches(cookie, [session_value(t) for t in _valid_tokens(state)]):
        return state.options.user_name
    return None


def token_is_valid(state: WorkspaceState, token: str) -> bool:
    """Constant-time check of a token typed into the login form (workspace tokens only:
    OAuth access tokens are for machines)."""
    return bool(token) and token_matches(token, _valid_tokens(state))


def _set_cookie(request: Request, response: Response, name: str, value: str, **extra: int) -> None:
    response.set_cookie(
        name,
        value,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
        **extra,  # type: ignore[arg-type]
    )


def start_session(request: Request, response: Response, token: str) -> None:
    """Keep the session (until the browser closes) and forget the login form's cookie."""
    _set_cookie(request, response, session_cookie_name(request), session_value(token))
    response.delete_cookie(login_cookie_name(request), path="/")


def end_session(request: Request, response: Response) -> None:
    response.delete_cookie(session_cookie_name(request), path="/")


def new_csrf_value() -> str:
    return secrets.token_urlsafe(32)


def remember_login_form(request: Request, response: Response, csrf: str) -> None:
    """Set the login cookie whose value the form (rendered with `csrf`) must echo back."""
    _set_cookie(request, response, login_cookie_name(request), csrf, max_age=LOGIN_FORM_SECONDS)


def same_origin(request: Request) -> bool:
    """False for a request a page of another site made the browser send: `Sec-Fetch-Site`
    decides where the browser sends it, else `Origin` (an opaque "null" origin, or neither
    header as from a terminal browser, leaves it to the login cookie)."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True
    parts = urlsplit(origin)
    return (
        parts.scheme == request.url.scheme
        and parts.netloc.lower() == (request.headers.get("host") or "").lower()
    )


def login_form_echoed(request: Request, echoed: str) -> bool:
    cookie = request.cookies.get(login_cookie_name(request)) or ""
    return bool(cookie) and bool(echoed) and hmac.compare_digest(cookie, echoed)


def safe_next(value: str | None) -> str:
    """Where to go after logging in: a path of this workspace only (never another site)."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/jobs/runs"
    if any(c in value for c in "\r\n\\") or urlsplit(value).netloc:
        return "/jobs/runs"
    return value
