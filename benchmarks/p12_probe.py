"""The event-loop lag of a real triggerer, sampled from inside it (P12 in a deployment).

``LoopLagSensor`` defers at once to ``LoopLagTrigger``, which runs in the triggerer's event
loop beside every other trigger and samples how late a 10 ms sleep wakes up, writing one
``<unix time> <lag in s>`` line per sample to a file the benchmark reads afterwards (the
samples of its window). It ends after ``seconds``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk import BaseOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent

PERIOD_S = 0.01


class LoopLagTrigger(BaseTrigger):
    def __init__(self, path: str, seconds: float) -> None:
        super().__init__()
        self.path = path
        self.seconds = seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.LoopLagTrigger", {"path": self.path, "seconds": self.seconds})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        loop = asyncio.get_running_loop()
        samples: list[str] = []
        end = loop.time() + self.seconds
        while loop.time() < end:
            before = loop.time()
            await asyncio.sleep(PERIOD_S)
            samples.append(f"{time.time():.3f} {loop.time() - before - PERIOD_S:.4f}")
            if len(samples) >= 1000:  # a few writes, not one per sample
                self._write(samples)
                samples = []
        self._write(samples)
        yield TriggerEvent({"status": "done"})

    def _write(self, samples: list[str]) -> None:
        with open(self.path, "a") as out:
            out.write("".join(f"{s}\n" for s in samples))


class LoopLagSensor(BaseOperator):
    def __init__(self, *, path: str, seconds: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.seconds = seconds

    def execute(self, context: Any) -> None:
        self.defer(trigger=LoopLagTrigger(self.path, self.seconds), method_name="done")

    def done(self, context: Any, event: Any = None) -> None:
        return None
