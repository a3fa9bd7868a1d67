"""One background event loop per process, where waits on remote runs happen.

Dagster interrupts a step (run termination) by raising in the step's main thread. Keeping
the asyncio machinery on its own thread means that interrupt always reaches the asset code
that cancels the remote run, instead of landing inside some task of an event loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="dagster-air-watcher", daemon=True
        )
        self._thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)


_lock = threading.Lock()
_current: BackgroundLoop | None = None


def background_loop() -> BackgroundLoop:
    """The loop of this process (a forked step process starts its own)."""
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = BackgroundLoop()
        return _current


def run_in_background(coroutine: Coroutine[Any, Any, T]) -> Future[T]:
    """Run a coroutine on this process's background event loop."""
    return background_loop().submit(coroutine)
