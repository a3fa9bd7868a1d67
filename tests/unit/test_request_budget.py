"""A watcher's request budget is counted where requests are sent (``_request_budget``): the
client's transport admits each request marked with a budget and counts it, retries
included; unmarked requests pass uncounted; a request's timeout starts once it is admitted;
and no other module counts requests or holds a bucket."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import httpx
import pytest

from air_runtime import AsyncAirClient
from air_runtime._request_budget import Lane, RequestBudget, timeout_once_admitted
from air_runtime.client import RetryPolicy

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / "air_runtime", ROOT / "dagster_air", ROOT / "providers" / "airflow_air"]
BUDGET_MODULE = ROOT / "air_runtime" / "_request_budget.py"
LOCAL_WORKSPACE = ROOT / "air_runtime" / "local"


class Answers:
    """An inner transport that answers ``statuses`` in turn (then 200) and keeps what it got."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.got: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.got.append(request)
        status = self.statuses.pop(0) if self.statuses else 200
        return httpx.Response(status, json={"runs": [], "has_more": False})


def _client(answers: Answers) -> AsyncAirClient:
    return AsyncAirClient(
        "http://127.0.0.1:9",
        "a-token",
        transport=httpx.MockTransport(answers),
        retry=RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.01),
    )


def _budget(rate: float = 100.0) -> RequestBudget:
    return RequestBudget(rate, lines_share=0.9, progress_share=0.05)


async def test_each_marked_request_is_counted_in_its_lane_and_unmarked_ones_pass() -> None:
    answers = Answers()
    budget = _budget()
    async with _client(answers) as client:
        with budget.spending(Lane.POLL):
            await client.list_runs_raw({"limit": 1})
            await client.list_runs_raw({"limit": 1})
        with budget.spending(Lane.LINES):
            await client.list_runs_raw({"limit": 1})
        await client.list_runs_raw({"limit": 1})  # a request of no budget
    assert len(answers.got) == 4
    assert budget.sent == {Lane.POLL: 2, Lane.LINES: 1}
    assert budget.requests == 3


async def test_a_retried_request_is_counted_as_often_as_it_was_sent() -> None:
    """The count is what went out: a 503 answered, then retried, is two requests."""
    answers = Answers([503, 503])
    budget = _budget()
    async with _client(answers) as client:
        with budget.spending(Lane.POLL):
            await client.list_runs_raw({"limit": 1})
    assert len(answers.got) == 3
    assert budget.requests == 3


async def test_tasks_started_in_a_spending_block_spend_from_it() -> None:
    answers = Answers()
    budget = _budget()
    async with _client(answers) as client:
        with budget.spending(Lane.POLL):
            await asyncio.gather(*(client.list_runs_raw({"limit": 1}) for _ in range(5)))
    assert budget.sent[Lane.POLL] == 5 == len(answers.got)


async def test_the_timeout_counts_from_admission_not_from_the_wait_for_the_budget() -> None:
    """Five requests at 2 per second: the last is admitted about 2 s after it was made, past
    its 1 s bound, and still gets its answer, since the workspace answers each at once."""
    answers = Answers()
    budget = _budget(rate=2.0)
    async with _client(answers) as client:

        async def one() -> None:
            async with timeout_once_admitted(1.0):
                await client.list_runs_raw({"limit": 1})

        loop = asyncio.get_running_loop()
        started = loop.time()
        with budget.spending(Lane.POLL):
            await asyncio.gather(*(one() for _ in range(5)))
        # The budget held them: the queue was longer than the bound.
        assert loop.time() - started >= 1.5
    assert budget.requests == 5


async def test_a_block_of_no_budget_times_out_from_its_start() -> None:
    async def never() -> None:
        await asyncio.Event().wait()

    with pytest.raises(TimeoutError):
        async with timeout_once_admitted(0.05):
            await never()


def _counting_sites(path: Path) -> list[str]:
    """Where a module counts requests (``x.requests += ...``, ``sent[...] += ...``) or holds
    or uses a token bucket."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign):
            target = node.target
            name = (
                target.attr
                if isinstance(target, ast.Attribute)
                else target.id
                if isinstance(target, ast.Name)
                else ast.unparse(target.value)
                if isinstance(target, ast.Subscript)
                else ""
            )
            if name.endswith("requests") or name.split(".")[-1] == "sent":
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in ("TokenBucket", "admit"):
                found.append(f"{path.name}:{node.lineno}: {name}")
    return found


def test_no_module_but_the_budget_module_counts_requests() -> None:
    offenders = [
        site
        for package in PACKAGES
        for path in sorted(package.rglob("*.py"))
        # The local workspace is the server: it counts what it received.
        if path != BUDGET_MODULE and LOCAL_WORKSPACE not in path.parents
        for site in _counting_sites(path)
    ]
    assert not offenders, offenders


def test_the_rule_finds_a_request_counted_by_hand(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "class W:\n    def poll(self):\n        self.requests += 1\n"
        "        self.line_requests += 3\n        self.bucket = TokenBucket(1.0)\n"
    )
    assert len(_counting_sites(planted)) == 3
    assert _counting_sites(BUDGET_MODULE)  # the budget module itself is what it looks for
