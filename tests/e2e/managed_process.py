"""Long-running service processes for the deployment tests, and bounded waits on them.

Every service runs in its own process group with its output in a log file, so a test can
show the tail of each log when something goes wrong and teardown can kill whole trees
(an Airflow scheduler forks executors, a Dagster daemon forks run workers).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log file)"
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """One service started with ``subprocess.Popen`` in a new session (its own group)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_dir: Path,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)

    def kill(self) -> None:
        """SIGKILL the whole group at once: a crash, nothing gets to clean up."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the whole group, then SIGKILL what is left after ``grace`` seconds."""
        pgid = self.popen.pid  # the session leader's pid is the group id
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace)
        # Children (task runners, run workers) may outlive the leader: always sweep the group.
        self.kill()


def run_command(
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_dir: Path,
    timeout: float,
    cwd: Path | None = None,
) -> None:
    """Run a one-shot command (e.g. a DB migration) to completion, failing with its log tail."""
    proc = ManagedProcess(name, argv, env=env, log_dir=log_dir, cwd=cwd)
    try:
        code = proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.stop(grace=2)
        pytest.fail(f"{name} did not finish in {timeout:.0f}s:\n{proc.tail()}")
    if code != 0:
        pytest.fail(f"{name} exited with {code}:\n{proc.tail()}")


def describe(processes: Iterable[ManagedProcess], lines: int = 40) -> str:
    parts = []
    for proc in processes:
        state = "running" if proc.alive else f"exited with {proc.popen.returncode}"
        parts.append(f"----- {proc.name} ({state}), {proc.log_path}\n{proc.tail(lines)}")
    return "\n".join(parts)


def wait_for(
    check: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    processes: Sequence[ManagedProcess] = (),
    interval: float = 1.0,
) -> T:
    """Poll ``check`` until it returns something truthy; fail with service logs otherwise.

    Also fails early when a service process dies, instead of waiting out the deadline.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # a service still starting refuses connections
            last_error = exc
        dead = [p for p in processes if not p.alive]
        if dead:
            pytest.fail(f"while waiting for {what}: a service exited\n{describe(processes)}")
        if time.monotonic() >= deadline:
            pytest.fail(
                f"timed out after {timeout:.0f}s waiting for {what}"
                f" (last error: {last_error!r})\n{describe(processes)}"
            )
        time.sleep(interval)


def own_database(server: str, name: str) -> str:
    """The DSN of database ``name`` on ``server`` (``postgresql://user@host:port``), created
    once: a deployment of its own, which the deployment tests of other suites (resetting
    theirs) never touch."""
    import psycopg2

    conn = psycopg2.connect(f"{server}/postgres")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()
    return f"{server}/{name}"


def reset_postgres_database(dsn: str) -> None:
    """Drop and recreate the public schema so every run starts from an empty database."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            # Sessions left over from an earlier crashed run would block the drop.
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            cur.execute("DROP SCHEMA IF EXISTS public CASCADE")
            cur.execute("CREATE SCHEMA public")
    finally:
        conn.close()
