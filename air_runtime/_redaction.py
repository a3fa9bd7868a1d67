"""Secret redaction: the one place that decides what a secret looks like in text.

Every value an orchestrator resolves for a run (orchestrator secrets from ``secret_env``,
Docker registry passwords, workspace tokens and OAuth client secrets) goes into a
``Redactor``; failure messages, log tails and streamed log lines pass through it before they
reach Airflow, Dagster or ``airo``. That does not depend on the orchestrator's own masker
(Airflow's masks only the task log, and only the plain value; Dagster has none).

A workload that prints a secret rarely prints it plainly only: it shows up base64-encoded
(an ``Authorization: Basic`` header, a Docker ``auth`` field), URL-encoded (a connection
URI), or JSON-escaped (a config dump). So each value is redacted together with those
encodings of the whole value: base64 (standard and URL-safe alphabets, with and without
padding), percent-encoding (``quote`` and ``quote_plus``) and the inside of a JSON string.

Values shorter than ``MIN_SECRET_LENGTH`` characters are not redacted: replacing every
``1`` or ``abc`` in a message would mangle run ids, numbers and words until the message is
useless, and the pattern of ``***`` would point at the value anyway. A secret that short
gives no protection to begin with; it is still never sent or stored in clear by this
package (``ignored`` lists how many were skipped, so callers can warn).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

REDACTED = "***"
MIN_SECRET_LENGTH = 4


def encodings(value: str) -> set[str]:
    """The value and the common encodings of it that text may carry instead of it."""
    raw = value.encode()
    found = {value}
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = encoded.decode("ascii")
        found.update((text, text.rstrip("=")))
    found.update(
        (quote(value, safe=""), quote(value), quote_plus(value, safe=""), quote_plus(value))
    )
    found.add(json.dumps(value)[1:-1])
    found.add(json.dumps(value, ensure_ascii=False)[1:-1])
    if "\n" in value:
        # A multi-line secret (a PEM key) is shown line by line in log tails.
        found.update(line.strip() for line in value.splitlines())
    return {text for text in found if len(text) >= MIN_SECRET_LENGTH}


def credential_secrets(credentials: Any) -> list[str]:
    """The secret values a ``Credentials`` object holds (token, client secret), if it says."""
    values = getattr(credentials, "secret_values", None)
    if not callable(values):
        return []
    return [v for v in values() if isinstance(v, str) and v]


class Redactor:
    """Replaces known secret values, and their encodings, by ``***`` in text.

    Thread-safe: log-streaming threads redact while the owner may still ``add`` values.
    Calling it on ``None`` gives ``""``; ``redact_data`` walks dicts and lists.
    """

    def __init__(self, values: Iterable[str | None] = (), *, replacement: str = REDACTED) -> None:
        self.replacement = replacement
        self._values: set[str] = set()
        self._variants: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()
        self.ignored = 0
        self.add(*values)

    def add(self, *values: str | None) -> Redactor:
        """Redact these values too (empty and ``None`` ones are skipped); returns self."""
        with self._lock:
            fresh = False
            for value in values:
                if not value or not isinstance(value, str) or value in self._values:
                    continue
                self._values.add(value)
                if len(value) < MIN_SECRET_LENGTH:
                    self.ignored += 1
                    continue
                self._variants |= encodings(value)
                fresh = True
            if fresh:
                # Longest first, so an encoding with padding wins over its unpadded prefix.
                ordered = sorted(self._variants, key=lambda v: (-len(v), v))
                self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
        return self

    def include(self, other: Redactor) -> Redactor:
        """Redact ``other``'s values too; returns self."""
        with other._lock:
            known = list(other._values)
        return self.add(*known)

    def with_values(self, values: Iterable[str | None]) -> Redactor:
        """A new redactor with this one's values and ``values``."""
        with self._lock:
            known = list(self._values)
        return Redactor([*known, *values], replacement=self.replacement)

    @property
    def active(self) -> bool:
        """Whether there is anything to redact."""
        return self._pattern is not None

    def __call__(self, text: str | None) -> str:
        if text is None:
            return ""
        pattern = self._pattern
        return pattern.sub(self.replacement, text) if pattern is not None else text

    redact = __call__

    def redact_data(self, data: Any) -> Any:
        """``data`` with every string inside (dict values, list items) redacted."""
        if isinstance(data, str):
            return self(data)
        if isinstance(data, Mapping):
            return {key: self.redact_data(value) for key, value in data.items()}
        if isinstance(data, list | tuple):
            return type(data)(self.redact_data(value) for value in data)
        return data

    def __copy__(self) -> Redactor:
        return self.with_values(())

    def __deepcopy__(self, memo: dict[int, Any]) -> Redactor:
        return self.with_values(())

    def __repr__(self) -> str:  # never the values
        return f"Redactor({len(self._values)} values)"


__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "Redactor", "credential_secrets", "encodings"]


class RedactingLog:
    """A logger (``info``/``warning`` with ``%`` arguments, as the stdlib's, Airflow's task
    log and Dagster's ``context.log`` take them) that formats each line and removes secret
    values before logging it: an orchestrator's masker only knows plain values, and an
    Airflow triggerer's log has no masker at all for values it never looked up."""

    def __init__(self, log: Any, redact: Any) -> None:
        self._log = log
        self._redact = redact

    def _text(self, event: str, args: tuple[Any, ...]) -> str:
        try:
            text = event % args if args else event
        except (TypeError, ValueError):
            text = " ".join([event, *map(str, args)])
        return str(self._redact(text))

    def info(self, event: str, *args: Any) -> Any:
        return self._log.info("%s", self._text(event, args))

    def warning(self, event: str, *args: Any) -> Any:
        return self._log.warning("%s", self._text(event, args))
