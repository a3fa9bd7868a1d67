"""Reading a request as the platform does: JSON bodies, GET parameters (query string or JSON
body), typed values, the page tokens this workspace issues, and the workspace that serves it."""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING, Any

from fastapi import Request

from air_runtime.local._errors import ApiError, invalid
from air_runtime.local._security import check_int64, parse_json

if TYPE_CHECKING:
    # For the annotation only: the state imports every API family's backend, and each
    # family's routes read their request here.
    from air_runtime.local._workspace_state import WorkspaceState


def workspace_state(request: Request) -> WorkspaceState:
    state: WorkspaceState = request.app.state.workspace
    return state


async def json_body(request: Request) -> dict[str, Any]:
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


async def get_params(request: Request) -> dict[str, str]:
    """The parameters of a GET: the query string, and a JSON object sent as the body, which
    the real API also reads (the Databricks provider's async hook sends them that way). Body
    values are read as their query-string text; the query string wins when both name one."""
    params = {k: _query_value(v) for k, v in (await json_body(request)).items() if v is not None}
    params.update(request.query_params)  # the last value of a repeated name, as .get gives
    return params


def required_str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise invalid(f"{name} is required.")
    return value


def int_param(value: Any, name: str) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise invalid(f"{name} must be an integer, got {value!r}.")
    if isinstance(value, str) and len(value.strip().lstrip("+-")) > 19:
        raise invalid(f"{name} is out of range (a 64-bit integer).")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise invalid(f"{name} must be an integer, got {str(value)[:40]!r}.") from None
    return check_int64(number, name)


def flag(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1", "yes")


def host_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def read_page_token(value: str | None) -> int | None:
    """The number inside a page token of `make_page_token` (None without a token)."""
    if not value:
        return None
    try:
        number = int(base64.urlsafe_b64decode(value.encode()).decode())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        number = None
    if number is None or not 0 <= number < 2**63:
        raise invalid(f"page_token {value[:40]!r} is not a token this workspace issued.")
    return number


def make_page_token(number: int) -> str:
    return base64.urlsafe_b64encode(str(number).encode()).decode()
