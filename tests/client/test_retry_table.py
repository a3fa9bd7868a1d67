"""Retries, Retry-After and capacity errors as tables: answers that a healthy server cannot be
made to give on cue, played by ``httpx.MockTransport`` to the real client."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from air_runtime import (
    AirError,
    AuthError,
    CapacityError,
    NotFound,
    PlatformError,
    RateLimited,
)
from air_runtime.client import AirClient, RetryPolicy
from air_runtime.client._core import parse_retry_after

FAST = RetryPolicy(max_attempts=4, initial_backoff_s=0.001, max_backoff_s=0.002, max_total_s=5.0)
OK = (200, {"run_id": 1, "state": {"life_cycle_state": "RUNNING"}}, {})


def _http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


def _client(answers: list[tuple[int, Any, dict[str, str]]]) -> tuple[AirClient, list[float]]:
    """A client whose server gives ``answers`` in turn; returns it and the request times."""
    sent: list[float] = []
    playing: Iterator[tuple[int, Any, dict[str, str]]] = iter(answers)

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        status, body, headers = next(playing)
        return httpx.Response(status, json=body, headers=headers)

    client = AirClient(
        "https://workspace.example.com", "dapi-x", transport=httpx.MockTransport(answer), retry=FAST
    )
    return client, sent


def error(code: str, message: str = "") -> dict[str, str]:
    return {"error_code": code, "message": message}


# Two kinds of retry: ``requests`` is how often the client itself sends the call (answers the
# server may give differently seconds later); ``retryable`` is what the raised error tells an
# orchestrator (an Airflow task retry, a Dagster step retry): worth trying again later.
@pytest.mark.parametrize(
    ("answers", "requests", "raised", "retryable"),
    [
        ([OK], 1, None, None),
        ([(500, error("INTERNAL_ERROR"), {}), OK], 2, None, None),
        ([(502, "bad gateway", {}), (503, error("TEMPORARILY_UNAVAILABLE"), {}), OK], 3, None, None),
        ([(429, error("REQUEST_LIMIT_EXCEEDED"), {"Retry-After": "0.01"}), OK], 2, None, None),
        ([(429, error("REQUEST_LIMIT_EXCEEDED"), {}), OK], 2, None, None),
        ([(500, error("INTERNAL_ERROR"), {})] * 4, 4, PlatformError, True),
        ([(429, error("REQUEST_LIMIT_EXCEEDED"), {})] * 4, 4, RateLimited, True),
        ([(503, error("INSUFFICIENT_CAPACITY", "no GPUs"), {})] * 4, 4, CapacityError, True),
        ([(400, error("CAPACITY_UNAVAILABLE", "try later"), {})], 1, CapacityError, True),
        ([(503, error("INSUFFICIENT_CAPACITY"), {}), OK], 2, None, None),
        ([(400, error("INVALID_PARAMETER_VALUE"), {})], 1, PlatformError, False),
        ([(404, error("RESOURCE_DOES_NOT_EXIST"), {})], 1, NotFound, False),
        ([(403, error("PERMISSION_DENIED"), {})], 1, AuthError, False),
        ([(401, error("UNAUTHENTICATED"), {})], 1, AuthError, False),
        ([(409, error("RESOURCE_CONFLICT"), {})], 1, PlatformError, False),
    ],
    ids=[
        "ok", "500-then-ok", "502-503-then-ok", "429-retry-after-seconds", "429-no-header",
        "500-every-time", "429-every-time", "503-capacity-every-time",
        "400-capacity-retryable-by-the-task", "503-capacity-then-ok", "400-not-retried",
        "404-not-retried", "403-not-retried", "401-static-token", "409-not-retried",
    ],
)  # fmt: skip
def test_retry_table(
    answers: list[tuple[int, Any, dict[str, str]]],
    requests: int,
    raised: type[Exception] | None,
    retryable: bool | None,
) -> None:
    client, sent = _client(answers)
    with client:
        if raised is None:
            assert client.get_run(1).run_id == 1
        else:
            with pytest.raises(raised) as caught:
                client.get_run(1)
            assert type(caught.value) is raised
            assert isinstance(caught.value, AirError) and caught.value.retryable is retryable
    assert len(sent) == requests


@pytest.mark.parametrize("error_class", [RateLimited, CapacityError])
@pytest.mark.parametrize("status", [None, 400, 409, 429, 500, 503])
def test_a_class_retryable_on_its_class_is_retryable_on_every_instance(
    error_class: type[PlatformError], status: int | None
) -> None:
    """What an orchestrator reads on an instance never contradicts its class."""
    assert error_class.retryable
    assert error_class("answer", status_code=status).retryable


def test_retry_after_is_a_floor_for_the_wait() -> None:
    client, sent = _client([(429, error("REQUEST_LIMIT_EXCEEDED"), {"Retry-After": "0.3"}), OK])
    with client:
        client.get_run(1)
    assert sent[1] - sent[0] >= 0.29


def test_retry_after_as_an_http_date_is_honoured() -> None:
    client, sent = _client([(503, error("TEMPORARILY_UNAVAILABLE"), {"Retry-After": _http_date(1.5)}), OK])  # fmt: skip
    with client:
        client.get_run(1)
    # HTTP dates have whole seconds: the wait is what is left of the named second.
    assert 0.4 <= sent[1] - sent[0] <= 2.6


def test_retry_after_past_the_budget_fails_at_once() -> None:
    """A server asking for more than max_retry_after_s: give up now, not wait an hour."""
    for header in ("3600", _http_date(3600)):
        client, sent = _client([(429, error("REQUEST_LIMIT_EXCEEDED"), {"Retry-After": header})])
        with client, pytest.raises(RateLimited):
            client.get_run(1)
        assert len(sent) == 1


@pytest.mark.parametrize(
    ("value", "low", "high"),
    [
        ("0", 0.0, 0.0), ("2.5", 2.5, 2.5), ("-4", 0.0, 0.0), ("", None, None),
        ("soon", None, None), (-60.0, 0.0, 0.0), (30.0, 20.0, 30.5),
    ],
)  # fmt: skip
def test_parse_retry_after(value: str | float, low: float | None, high: float | None) -> None:
    """Seconds, or an HTTP date (a float here: that many seconds from now)."""
    parsed = parse_retry_after(_http_date(value) if isinstance(value, float) else value)
    if low is None:
        assert parsed is None
    else:
        assert parsed is not None and low <= parsed <= (high or 0.0)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (503, error("INSUFFICIENT_CAPACITY", "no GPUs")),
        (400, error("CAPACITY_UNAVAILABLE", "try later")),
        (500, error("INTERNAL_ERROR", "Not enough capacity for GPU_8xH100")),
    ],
)
def test_capacity_answers_are_capacity_errors(status: int, body: dict[str, str]) -> None:
    client, sent = _client([(status, body, {})] * 4)
    with client, pytest.raises(CapacityError) as raised:
        client.get_run(1)
    assert "capacity" in str(raised.value).lower() or "CAPACITY" in str(raised.value)
    # The client re-sends a 5xx within the call; a 4xx it does not, but the task may try again.
    assert len(sent) == (4 if status >= 500 else 1)
    assert raised.value.retryable


def test_retries_stop_at_the_total_time_budget() -> None:
    slow = RetryPolicy(max_attempts=50, initial_backoff_s=0.2, max_backoff_s=0.2, max_total_s=0.5)
    sent: list[float] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        return httpx.Response(500, json=error("INTERNAL_ERROR"))

    transport = httpx.MockTransport(answer)
    with (
        AirClient("https://w.example.com", "t", transport=transport, retry=slow) as client,
        pytest.raises(PlatformError),
    ):
        client.get_run(1)
    assert 2 <= len(sent) < 50
    assert sent[-1] - sent[0] <= 0.6
