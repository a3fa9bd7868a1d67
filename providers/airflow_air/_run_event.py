"""The one event an ``AirRunTrigger`` fires, as one value: what the trigger writes and what
the worker that resumes (``execute_complete``) reads, each field in one place.

Airflow stores the payload in its database, so its form is stable: fields are only ever
added; a payload an earlier version stored reads the same (``RunOutcome.from_event``,
``LinkXComs.from_event``), an unknown key is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from air_runtime import RunOutcome
from airflow_air.links import LinkXComs


@dataclass(frozen=True)
class RunEvent:
    """How the trigger's wait ended (``outcome``, its message already redacted) and what the
    worker that resumes still has to do: the XComs the trigger could not write (``links``);
    the submission whose secret keys it deletes (``submission``, ``Submission.to_json``); the
    node lines the trigger showed live, per stream (``shown_lines``: the worker copies only
    the rest). ``refused``: the trigger's submit was refused (a planned run): the task fails
    as a refusal in a worker would, with no retry."""

    outcome: RunOutcome
    links: LinkXComs = field(default_factory=LinkXComs)
    refused: bool = False
    submission: Mapping[str, Any] | None = None
    shown_lines: Mapping[str, int] | None = None

    def to_payload(self) -> dict[str, Any]:
        payload = self.outcome.to_event()
        if self.refused:
            payload["refused"] = True
        payload.update(self.links.to_event())
        if self.submission:
            payload["submission"] = dict(self.submission)
        if self.shown_lines:
            payload["shown_lines"] = dict(self.shown_lines)
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> RunEvent:
        shown = payload.get("shown_lines")
        return cls(
            outcome=RunOutcome.from_event(payload),
            links=LinkXComs.from_event(payload),
            refused=bool(payload.get("refused")),
            submission=payload.get("submission") or None,
            shown_lines={str(k): int(v) for k, v in shown.items()} if shown else None,
        )
