"""What the provider reads from Airflow, written once for the worker and the triggerer.

A lookup is a generator that yields the steps it needs (a connection, a variable, a blocking
call, a secret to mask) and receives their results, as the core's client flows do
(``air_runtime.client._core``). Two drivers perform the steps: ``run_lookups`` with Airflow's
blocking calls (workers, commands, the UI's connection test) and ``run_lookups_in_loop`` from
a triggerer's event loop, which it never blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from airflow.sdk import Connection

T = TypeVar("T")


@dataclass(frozen=True)
class ConnectionLookup:
    """An Airflow connection; ``AirflowNotFoundException`` is thrown into the lookup when
    there is none."""

    conn_id: str


@dataclass(frozen=True)
class VariableLookup:
    """An Airflow variable's value, None when it is not defined."""

    key: str


@dataclass(frozen=True)
class BlockingCall:
    """A call that may block (the databricks-sdk's configuration probes the host)."""

    call: Callable[[], Any]


@dataclass(frozen=True)
class MaskSecret:
    """Register a secret value with this process's secrets masker."""

    value: str
    name: str


Step = ConnectionLookup | VariableLookup | BlockingCall | MaskSecret
Lookup = Generator[Step, Any, T]


def run_lookups(lookup: Lookup[T]) -> T:
    """Perform a lookup's steps with Airflow's blocking calls."""
    from airflow.sdk import BaseHook, Variable

    answer: Any = None
    error: Exception | None = None
    while True:
        try:
            step = lookup.throw(error) if error is not None else lookup.send(answer)
        except StopIteration as stop:
            result: T = stop.value
            return result
        answer, error = None, None
        if isinstance(step, MaskSecret):
            from airflow.sdk.log import mask_secret

            mask_secret(step.value, step.name)  # a value the masker missed must not be used
            continue
        try:
            if isinstance(step, ConnectionLookup):
                answer = BaseHook.get_connection(step.conn_id)
            elif isinstance(step, VariableLookup):
                answer = Variable.get(step.key, default=None)
            else:
                answer = step.call()
        except Exception as exc:
            error = exc


async def run_lookups_in_loop(lookup: Lookup[T]) -> T:
    """Perform a lookup's steps from a trigger's event loop: async connection lookups, and
    variable lookups and blocking calls in a thread."""
    from asgiref.sync import sync_to_async

    answer: Any = None
    error: Exception | None = None
    while True:
        try:
            step = lookup.throw(error) if error is not None else lookup.send(answer)
        except StopIteration as stop:
            result: T = stop.value
            return result
        answer, error = None, None
        if isinstance(step, MaskSecret):
            _mask_in_triggerer(step.value, step.name)
            continue
        try:
            if isinstance(step, ConnectionLookup):
                answer = await _connection_in_loop(step.conn_id)
            elif isinstance(step, VariableLookup):
                from airflow.sdk import Variable

                # Variables have no async lookup.
                answer = await sync_to_async(Variable.get)(step.key, default=None)
            else:
                answer = await asyncio.to_thread(step.call)
        except Exception as exc:
            error = exc


async def _connection_in_loop(conn_id: str) -> Connection:
    """A connection, from a trigger's event loop, wherever it is stored.

    The Task SDK's async lookup first (the triggerer answers it for every secrets backend).
    When it finds nothing, the synchronous lookup in a thread, as apache-airflow-providers-
    databricks does (``sync_to_async(get_connection)``): ``airflow dags test`` and
    ``dag.test()`` run triggers with an in-process supervisor whose comms answer only
    synchronous requests (Airflow 3.3 has no ``asend`` there), so the async lookup misses
    connections stored in the metadata database and finds only environment variables.
    Raises ``AirflowNotFoundException`` when neither finds it.
    """
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return await BaseHook.aget_connection(conn_id)
    except AirflowNotFoundException:
        from asgiref.sync import sync_to_async

        return await sync_to_async(BaseHook.get_connection)(conn_id)


def _mask_in_triggerer(value: str, name: str) -> None:
    """Also tell the triggerer's own masker (best effort: it is the second line of defence,
    after the trigger's ``air_runtime.Redactor``)."""
    try:
        from airflow.sdk.log import mask_secret

        mask_secret(value, name)
    except Exception:
        pass
