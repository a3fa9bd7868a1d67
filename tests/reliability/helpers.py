"""Small pieces the campaigns share: workloads, trigger driving, subprocess scripts."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air_runtime import AirClient, load_workload
from air_runtime.local import LocalWorkspace

REPO = Path(__file__).resolve().parents[2]
TERMINAL = ("TERMINATED", "SKIPPED", "INTERNAL_ERROR")
CANCEL_WITHIN_S = 30.0  # R2: a run the orchestrator gave up on is cancelled this soon


def workload_dict(name: str, command: str, **extra: Any) -> dict[str, Any]:
    return {
        "experiment_name": name,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": command,
        **extra,
    }


def workload(name: str, command: str, **extra: Any) -> Any:
    return load_workload(workload_dict(name, command, **extra))


def client_for(ws: LocalWorkspace, **kwargs: Any) -> AirClient:
    return AirClient(ws.host, ws.token, **kwargs)


def runs_created(ws: LocalWorkspace) -> int:
    return int(ws.admin.counters()["runs_created"])


def all_runs(client: AirClient) -> list[Any]:
    """Every run of the workspace (newest first), across pages."""
    runs: list[Any] = []
    token: str | None = None
    while True:
        page, token = client.list_runs(active_only=False, limit=25, page_token=token)
        runs.extend(page)
        if not token:
            return runs


def wait_for_state(
    client: AirClient, run_id: int, predicate: Callable[[Any], bool], timeout: float
) -> Any:
    deadline = time.monotonic() + timeout
    state = client.get_run(run_id)
    while not predicate(state) and time.monotonic() < deadline:
        time.sleep(0.1)
        state = client.get_run(run_id)
    return state


def running(state: Any) -> bool:
    return state.life_cycle_state == "RUNNING"


def terminal(state: Any) -> bool:
    return bool(state.is_terminal)


def cancelled(state: Any) -> bool:
    return bool(state.is_terminal and state.result_state == "CANCELED")


def check_cancelled(tally: Any, ws: LocalWorkspace, run_id: int, since: float, what: str) -> float:
    """Seconds from ``since`` (wall clock) until the run ended CANCELED, from the run's own
    end time; an orphan (counted, and then cancelled) when it did not end so within 30 s."""
    with client_for(ws) as client:
        budget = max(CANCEL_WITHIN_S - (time.time() - since), 1.0)
        state = wait_for_state(client, run_id, cancelled, budget)
    ended = (state.end_time / 1000.0) if state.end_time else time.time()
    took = ended - since
    if not cancelled(state) or took > CANCEL_WITHIN_S:
        tally.orphans += 1
        tally.fail(f"{what}: run {run_id} is {state.describe()} {took:.1f}s after")
        with client_for(ws) as client:  # do not leave it running for the next trial
            client.cancel(run_id)
    return took


def record_cancel_time(tally: Any, took: float) -> None:
    times = tally.notes.setdefault("cancel_seconds", [])
    times.append(round(took, 2))
    tally.notes["max_cancel_s"] = max(times)


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "providers"), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    env.update(extra or {})
    return env


def start_script(code: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Run ``code`` in a fresh Python process (stdout piped, one JSON line per event)."""
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=python_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
    )


def read_json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


# --- triggers -------------------------------------------------------------------------------


class LoopThread:
    """An event loop on its own thread: one "triggerer process" lifetime."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def close(self) -> None:
        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(drain(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


async def first_event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


def trigger_from(serialized: tuple[str, dict[str, Any]]) -> Any:
    """A new trigger instance from ``serialize()``, as the triggerer builds it."""
    import importlib

    classpath, kwargs = serialized
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return cls(**json.loads(json.dumps(kwargs)))


def reliability_dag(dag_id: str) -> Any:
    """A Dag of ``dags/reliability_dags.py`` (a local Dag bundle of the test session)."""
    import importlib.util

    module = sys.modules.get("reliability_dags")
    if module is None:
        path = Path(__file__).resolve().parent / "dags" / "reliability_dags.py"
        spec = importlib.util.spec_from_file_location("reliability_dags", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["reliability_dags"] = module
        spec.loader.exec_module(module)
    for value in vars(module).values():
        if getattr(value, "dag_id", None) == dag_id:
            return value
    raise KeyError(dag_id)


# --- secret leak scanning --------------------------------------------------------------------

# A workload proves it received the secret by printing its SHA-256, never the value.
PRINT_SECRET_DIGEST = 'echo "digest: $(printf %s "$HF_TOKEN" | sha256sum | cut -c1-64)"'


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def occurrences(text: str, values: dict[str, str]) -> dict[str, int]:
    return {name: text.count(value) for name, value in values.items() if value in text}


class LeakScan:
    """Where any of the secret ``values`` appears: each occurrence is a leak in ``tally``."""

    def __init__(self, tally: Any, values: dict[str, str]) -> None:
        self.tally = tally
        self.values = values
        self.locations: dict[str, dict[str, int]] = {}

    def __call__(self, where: str, text: str) -> None:
        found = occurrences(text, self.values)
        if found:
            self.locations[where] = found
            self.tally.leaks += sum(found.values())

    def report(self) -> None:
        self.tally.notes.update(locations=self.locations)
        if self.locations:
            self.tally.fail(f"secret values found in: {self.locations}")


def _tables_text(cursor: Any, tables_sql: str, skip_tables: tuple[str, ...] = ()) -> str:
    """The rows of every table that ``tables_sql`` lists (but ``skip_tables``), as text."""
    cursor.execute(tables_sql)
    tables = [row[0] for row in cursor.fetchall()]
    parts = []
    for table in tables:
        if table in skip_tables:
            continue
        cursor.execute(f'SELECT * FROM "{table}"')
        parts.extend(
            " ".join(
                bytes(v).decode("utf-8", "replace") if isinstance(v, bytes | memoryview) else str(v)
                for v in row
            )
            for row in cursor.fetchall()
        )
    return "\n".join(parts)


def sqlite_text(path: Path, skip_tables: tuple[str, ...] = ()) -> str:
    """The rows of every table (but ``skip_tables``) of a SQLite database, as text."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables_sql = "SELECT name FROM sqlite_master WHERE type='table'"
        return _tables_text(connection.cursor(), tables_sql, skip_tables)
    finally:
        connection.close()


def postgres_text(dsn: str) -> str:
    """The rows of every table of a PostgreSQL database's public schema, as text."""
    import psycopg2

    connection = psycopg2.connect(dsn)
    try:
        tables_sql = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        return _tables_text(connection.cursor(), tables_sql)
    finally:
        connection.close()


def workspace_data_text(data_dir: Path) -> dict[str, str]:
    texts: dict[str, str] = {}
    for path in data_dir.rglob("*"):
        if not path.is_file() or path.name.startswith("state.sqlite3"):
            continue
        texts[str(path.relative_to(data_dir))] = path.read_bytes().decode("utf-8", "replace")
    texts["state.sqlite3 (all tables but secrets)"] = sqlite_text(
        data_dir / "state.sqlite3", skip_tables=("secrets",)
    )
    return texts
