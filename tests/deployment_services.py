"""The local services the deployment tests need (PostgreSQL, Redis): whether they answer, and
what is missing when they do not.

`make test` starts them when they are installed and stopped (`.ci/services.sh`). When one is
not installed, or does not answer, the tests that need it are skipped (failed under `CI`),
and the session ends with one line naming what is missing (`pytest_terminal_summary` in
`tests/conftest.py`), not one line per test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pytest

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432"
REDIS_URL = "redis://127.0.0.1:6379"
SKIP_PREFIX = "deployment service missing: "


@dataclass(frozen=True)
class Service:
    name: str
    programs: tuple[str, ...]  # installed when one of them is on PATH
    answer: Callable[[], object]  # raises unless the service answers


def _postgres_answers() -> None:
    import psycopg2

    psycopg2.connect(f"{POSTGRES_URL}/postgres", connect_timeout=3).close()


def _redis_answers() -> None:
    import redis

    redis.Redis.from_url(f"{REDIS_URL}/0", socket_connect_timeout=3).ping()


def _registry_installed() -> None:
    if shutil.which("docker-registry") is None:
        raise FileNotFoundError("docker-registry")


POSTGRESQL = Service(
    "PostgreSQL at 127.0.0.1:5432", ("pg_ctlcluster", "pg_ctl", "postgres"), _postgres_answers
)
REDIS = Service("Redis at 127.0.0.1:6379", ("redis-server",), _redis_answers)
# The Distribution registry server the image copy tests start per test (`.ci/services.sh`
# installs it).
DOCKER_REGISTRY = Service(
    "the Distribution registry server", ("docker-registry",), _registry_installed
)

_seen: dict[Service, str | None] = {}


def service_problem(service: Service) -> str | None:
    """None when ``service`` answers; else what is wrong, "not installed" first (then
    starting it cannot help). Asked once per session."""
    if service not in _seen:
        try:
            service.answer()
            _seen[service] = None
        except Exception as exc:
            if not any(shutil.which(program) for program in service.programs):
                _seen[service] = (
                    f"{service.name} is not installed (no {', '.join(service.programs)} on PATH)"
                )
            else:
                _seen[service] = (
                    f"{service.name} is installed but does not answer ({type(exc).__name__}): "
                    "`make services` starts it"
                )
    return _seen[service]


def require_services(*services: Service) -> None:
    """Skip the test when a service is missing on a developer machine; fail it in CI."""
    problems = [p for p in (service_problem(s) for s in services) if p]
    if not problems:
        return
    message = SKIP_PREFIX + "; ".join(problems)
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def summary_line(skip_reasons: Iterable[str]) -> str | None:
    """The one line that ends a session whose deployment tests were skipped: how many, and
    each missing service once."""
    tests = 0
    problems: dict[str, None] = {}
    for reason in skip_reasons:
        _, found, rest = reason.partition(SKIP_PREFIX)
        if found:
            tests += 1
            problems.update(dict.fromkeys(rest.split("; ")))
    if not tests:
        return None
    return (
        f"*** {tests} deployment test{'s' if tests != 1 else ''} skipped: {'; '.join(problems)} ***"
    )
