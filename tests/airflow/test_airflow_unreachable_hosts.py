"""The hook names a wrong workspace host within seconds: a refused port, a name under
``.invalid`` and a black hole, with a token in the connection and with a ``~/.databrickscfg``
profile (a connection without credentials: the databricks-sdk chain). The async path (what
triggers use) resolves the connection's credentials off the event loop."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from airflow_runs import load_test_dag, task_states
from unreachable_hosts import (
    KINDS,
    WITHIN_S,
    assert_names_host_and_cause,
    black_hole,
    write_profile,
    wrong_host,
)

from air_runtime import WorkspaceUnreachable

pytestmark = pytest.mark.timeout(180)

CONNECTION = "AIRFLOW_CONN_DATABRICKS_DEFAULT"


@pytest.fixture
def no_sdk_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("DATABRICKS_", "ARM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def _connection(monkeypatch: pytest.MonkeyPatch, **fields: str) -> None:
    monkeypatch.setenv(CONNECTION, json.dumps({"conn_type": "databricks", **fields}))


@pytest.mark.parametrize("kind", KINDS)
def test_the_hook_with_a_token_names_a_wrong_host(kind, no_sdk_environment, monkeypatch):
    from airflow_air.hooks import AirHook

    with wrong_host(kind) as host:
        _connection(monkeypatch, host=host, password="dapi-connection-token")
        started = time.monotonic()
        with AirHook().get_client() as client, pytest.raises(WorkspaceUnreachable) as raised:
            client.list_runs()
        elapsed = time.monotonic() - started
    assert elapsed < WITHIN_S
    message = str(raised.value)
    assert_names_host_and_cause(message, host, kind)
    assert "check the host field of Airflow connection 'databricks_default'" in message
    assert "dapi-connection-token" not in message


@pytest.mark.parametrize("kind", KINDS)
def test_the_hook_with_a_profile_names_a_wrong_host(kind, no_sdk_environment, monkeypatch):
    """A connection with neither host nor credentials: the databricks-sdk default chain reads
    the profile (and probes its host, within our bound)."""
    from airflow_air.hooks import AirHook

    with wrong_host(kind) as host:
        config = write_profile(no_sdk_environment, host)
        monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(config))
        _connection(monkeypatch)
        started = time.monotonic()
        with AirHook().get_client() as client, pytest.raises(WorkspaceUnreachable) as raised:
            client.list_runs()
        elapsed = time.monotonic() - started
    assert elapsed < WITHIN_S
    assert_names_host_and_cause(str(raised.value), host, kind)
    assert f"check the host of profile DEFAULT in {config}" in str(raised.value)


def test_the_hooks_async_client_resolves_a_profile_off_the_event_loop(
    no_sdk_environment, monkeypatch
):
    """What a trigger does (``aget_watcher``, ``client_lookup`` in ``run_lookups_in_loop``): the
    connection's databricks-sdk configuration is read in a thread, so the loop keeps ticking
    while the SDK probes a black hole, and the first request names it."""
    from airflow_air.hooks import AirHook, run_lookups_in_loop

    from air_runtime import AsyncAirClient

    with black_hole() as host:
        config = write_profile(no_sdk_environment, host)
        monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(config))
        _connection(monkeypatch)

        async def request() -> tuple[float, WorkspaceUnreachable]:
            gaps: list[float] = []
            stop = asyncio.Event()

            async def tick() -> None:
                last = time.monotonic()
                while not stop.is_set():
                    await asyncio.sleep(0.02)
                    now = time.monotonic()
                    gaps.append(now - last)
                    last = now

            ticker = asyncio.create_task(tick())
            try:
                hook = AirHook()
                watcher = await hook.aget_watcher()
                client = await run_lookups_in_loop(hook.client_lookup(AsyncAirClient))
                async with client:
                    with pytest.raises(WorkspaceUnreachable) as raised:
                        await client.get_run(1)
            finally:
                stop.set()
                await ticker
            await watcher.client.aclose()
            return max(gaps), raised.value

        started = time.monotonic()
        worst_gap, error = asyncio.run(request())
        elapsed = time.monotonic() - started
    assert elapsed < WITHIN_S  # two SDK configurations (watcher, client) and the request
    assert worst_gap < 0.5, worst_gap
    assert_names_host_and_cause(str(error), host, "no answer")
    assert f"check the host of profile DEFAULT in {config}" in str(error)


def test_a_task_on_a_refused_host_fails_at_once_naming_it(
    airflow_db, no_sdk_environment, monkeypatch, task_log
):
    """A whole task (``dag.test()``): it fails within seconds, its log names the host."""
    with wrong_host("refused") as host:
        _connection(monkeypatch, host=host, password="dapi-connection-token")
        dag = load_test_dag("air_test_sync")
        started = time.monotonic()
        dag_run = dag.test()
        elapsed = time.monotonic() - started
    assert task_states(dag_run) == {"run": "failed"}
    log = task_log.text()
    assert f"cannot reach the workspace {host}: connection refused" in log
    assert "dapi-connection-token" not in log
    assert elapsed < 60  # dag.test()'s own start included; the request part fails within 1 s
