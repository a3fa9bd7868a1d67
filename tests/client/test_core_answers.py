"""Answers the client cannot use are errors of its own types, never a success and never a raw
httpx or json exception: redirects (not followed: they would carry the token elsewhere),
bodies that are not JSON (a login page, a proxy), and bodies cut short (retried like a
dropped connection). And a token sent over plain http to another machine is warned about,
once per client.

These answers are awkward to get from a real server, so most cases use
``httpx.MockTransport``; the redirect case also runs against the real local workspace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest

from air_runtime import AirClient, AsyncAirClient, InvalidResponse, RetryPolicy, RunState

TOKEN = "dapi-token-never-shown-0123"
RUN = b'{"run_id": 7, "state": {"life_cycle_state": "RUNNING"}}'
FAST = RetryPolicy(max_attempts=3, initial_backoff_s=0.0, max_backoff_s=0.0)


@dataclass
class Case:
    name: str
    answer: Callable[[int], httpx.Response]  # the n-th request (from 0) -> its answer
    truncated: bool | None  # None: a success is expected
    requests: int  # how many requests the client sends
    says: str = ""
    # A success: the run the client read, as (run_id, life_cycle_state); None: no run in it.
    read: tuple[int, str] | None = (7, "RUNNING")


def _html(_: int) -> httpx.Response:
    return httpx.Response(
        200, headers={"Content-Type": "text/html"}, content=b"<html><body>Sign in</body></html>"
    )


def _cut_json(_: int) -> httpx.Response:
    return httpx.Response(200, headers={"Content-Type": "application/json"}, content=RUN[:20])


def _short_body(_: int) -> httpx.Response:
    return httpx.Response(200, headers={"Content-Length": str(len(RUN))}, content=RUN[:-5])


def _cut_then_whole(n: int) -> httpx.Response:
    return _short_body(n) if n == 0 else httpx.Response(200, content=RUN)


def _redirect(status: int) -> Callable[[int], httpx.Response]:
    def answer(_: int) -> httpx.Response:
        location = "https://user:s3cr3t-pass@login.example.com/sso?code=s3cr3t-code&next=/api"
        return httpx.Response(status, headers={"Location": location})

    return answer


CASES = [
    Case("302 redirect", _redirect(302), False, 1, "HTTP 302 redirect to https://login"),
    Case("301 redirect", _redirect(301), False, 1, "HTTP 301 redirect"),
    Case("307 redirect", _redirect(307), False, 1, "does not follow redirects"),
    Case("HTML instead of JSON", _html, False, 1, "not JSON (text/html"),
    Case("JSON cut mid-document", _cut_json, True, 3, "ends in the middle of its JSON"),
    Case("shorter than Content-Length", _short_body, True, 3, "cut short"),
    Case("cut, then whole on retry", _cut_then_whole, None, 2),
    Case("whole", lambda _: httpx.Response(200, content=RUN), None, 1),
    Case("empty body", lambda _: httpx.Response(200), None, 1, read=None),
]


class Counting:
    def __init__(self, answer: Callable[[int], httpx.Response]) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(len(self.requests) - 1)


def _check(case: Case, outcome: object, handler: Counting) -> None:
    assert len(handler.requests) == case.requests
    if case.truncated is None:
        # The body the client was given, not merely no error (a retry that kept the cut
        # answer's half-read state would be no error either).
        assert isinstance(outcome, RunState), repr(outcome)
        if case.read is not None:
            assert (outcome.run_id, outcome.life_cycle_state) == case.read
        return
    assert isinstance(outcome, InvalidResponse), repr(outcome)
    assert outcome.truncated is case.truncated
    assert outcome.retryable is case.truncated
    text = str(outcome)
    assert case.says in text
    assert TOKEN not in text and "s3cr3t" not in text


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_sync_answers(case: Case) -> None:
    handler = Counting(case.answer)
    with AirClient(
        "https://ws.example.com", TOKEN, transport=httpx.MockTransport(handler), retry=FAST
    ) as client:
        try:
            outcome: object = client.get_run(7)
        except Exception as exc:
            outcome = exc
    _check(case, outcome, handler)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_async_answers(case: Case) -> None:
    handler = Counting(case.answer)

    async def main() -> object:
        client = AsyncAirClient(
            "https://ws.example.com", TOKEN, transport=httpx.MockTransport(handler), retry=FAST
        )
        async with client:
            try:
                return await client.get_run(7)
            except Exception as exc:
                return exc

    _check(case, asyncio.run(main()), handler)


def test_an_operation_reading_headers_gets_the_same_error() -> None:
    """``whoami`` reads the raw response (for a header): its body is checked all the same."""
    handler = Counting(_html)
    client = AirClient("https://ws.example.com", TOKEN, transport=httpx.MockTransport(handler))
    with client, pytest.raises(InvalidResponse, match="not JSON"):
        client.whoami()


def test_a_redirect_from_the_real_local_workspace(local_workspace) -> None:
    """The local workspace (Starlette) redirects a path with a trailing slash: not followed."""
    with AirClient(local_workspace.host, local_workspace.token) as client:
        with pytest.raises(InvalidResponse, match=r"HTTP 30\d redirect") as caught:
            client._run(client._core.call("GET", "/api/2.2/jobs/runs/list/"))
        assert caught.value.status_code in (301, 302, 307, 308)
        assert client.list_runs()[0] == []  # the same client still works


@pytest.mark.parametrize(
    ("host", "warned"),
    [
        ("http://ws.example.com", True),
        ("http://10.1.2.3:8080", True),
        ("https://ws.example.com", False),
        ("http://127.0.0.1:8765", False),
        ("http://localhost:8765", False),
        ("http://[::1]:8765", False),
    ],
)
def test_plain_http_token_warning_once_per_client(host: str, warned: bool, caplog) -> None:
    handler = Counting(lambda _: httpx.Response(200, content=RUN))
    caplog.set_level(logging.WARNING, logger="air_runtime.client")
    with AirClient(host, TOKEN, transport=httpx.MockTransport(handler)) as client:
        client.get_run(7)
        client.get_run(7)
    warnings = [r for r in caplog.records if "plain http" in r.getMessage()]
    assert len(warnings) == (1 if warned else 0)
    assert all(TOKEN not in r.getMessage() for r in caplog.records)
    with AirClient(host, TOKEN, transport=httpx.MockTransport(handler)) as client:
        client.get_run(7)  # a new client warns again
    assert len([r for r in caplog.records if "plain http" in r.getMessage()]) == (
        2 if warned else 0
    )


def test_the_client_redacts_its_own_token() -> None:
    handler = Counting(lambda _: httpx.Response(200, content=RUN))
    with AirClient("https://ws.example.com", TOKEN, transport=httpx.MockTransport(handler)) as c:
        assert c.redactor(f"header Bearer {TOKEN}") == "header Bearer ***"
        derived = c.redactor.with_values(["hf-secret-value"])
        assert derived(f"{TOKEN} hf-secret-value") == "*** ***"
