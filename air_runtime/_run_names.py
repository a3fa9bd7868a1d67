"""How an orchestrator's run is named on the platform, so ``airo get``, ``airo list`` and the
run page tie it back to the task that made it.

A name is ``<experiment or workflow>--<pipeline>--<run>--<task>[--<index>]`` within the
experiment name's rule, which is what the CLI itself sends as ``run_name``
(``experimental/air/cmd/runsubmit.go``: ``RunName: cfg.ExperimentName``; the rule is
``runconfig.go``'s ``taskKeyRe``): 1-100 characters of ``[A-Za-z0-9_-]``.

- The run is in a short form (``short_run``): a Dagster run's first 8 characters, as its UI
  shows them; an Airflow run's kind and logical date.
- A partition key is *encoded*, not mangled (``encode_name_part``): letters, digits and a
  lone ``-`` stay as they are, any other character becomes ``_`` and two hex digits per UTF-8
  byte (``lr-0.05`` -> ``lr-0_2e05``), so ``decode_name_part`` gives the key back and two
  keys never share a name. An encoded part never holds ``--`` (the separator), nor starts or
  ends with ``-``, and its ``_`` is always followed by two hex digits.
- A range of partitions (``PartitionRange``) is ``<first>_to_<last>_<count>keys``: ``_t`` and
  a trailing ``_<n>keys`` cannot come from an encoded key, so the range reads unambiguously.

A name longer than the rule allows is shortened from its least telling parts (the pipeline,
then the experiment, then the task; the run and the index last) and ends with a digest of the
whole identity, so two runs that differ only in what was cut still get different names.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .platform import MAX_TASK_KEY_LENGTH, TASK_KEY_CHARACTERS

MAX_RUN_NAME_LENGTH = MAX_TASK_KEY_LENGTH
NAME_SEPARATOR = "--"
_NOT_IN_NAME = re.compile(f"[^{TASK_KEY_CHARACTERS}]+")
_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ESCAPE = re.compile(r"(?:_[0-9a-f]{2})+")
_DIGEST_LENGTH = 8

# An Airflow run id: its kind and its logical date (``scheduled__2026-01-01T00:00:00+00:00``).
_AIRFLOW_RUN_ID = re.compile(
    r"^(?P<kind>[A-Za-z_]+?)__(?P<date>\d{4}-\d{2}-\d{2})T(?P<time>\d{2}:\d{2}(:\d{2})?)"
)
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_SHORT_RUN_LENGTH = 24


def short_run(run: str) -> str:
    """A short, stable form of an orchestrator's run id for run names: an Airflow run id's
    kind and logical date to the second (``scheduled_20260101T000000``), a Dagster run id's
    first 8 characters (as Dagster's UI shows it), any other id as given, or when longer
    than 24 characters its first 15 and a digest of the whole."""
    found = _AIRFLOW_RUN_ID.match(run)
    if found:
        stamp = found["date"].replace("-", "") + "T" + found["time"].replace(":", "")
        return f"{found['kind']}_{stamp}"
    if _UUID.match(run):
        return run[:8]
    if len(run) <= _SHORT_RUN_LENGTH:
        return run
    digest = hashlib.sha256(run.encode("utf-8")).hexdigest()[:_DIGEST_LENGTH]
    return f"{run[:15]}_{digest}"


def encode_name_part(text: str) -> str:
    """``text`` in the run name's characters, reversibly (see the module docstring)."""
    out: list[str] = []
    last = len(text) - 1
    for i, char in enumerate(text):
        if char in _KEPT or (char == "-" and 0 < i < last and text[i - 1] != "-"):
            out.append(char)
        else:
            out.append("".join(f"_{byte:02x}" for byte in char.encode("utf-8")))
    return "".join(out)


def decode_name_part(encoded: str) -> str:
    """The text ``encode_name_part`` encoded."""
    return _ESCAPE.sub(
        lambda m: bytes.fromhex(m.group(0).replace("_", "")).decode("utf-8"), encoded
    )


@dataclass(frozen=True)
class PartitionRange:
    """The partitions one run trains, as its name shows them: a single key, or the first and
    last of several with how many there are (``count``: a range may skip keys its lineage
    already materialized)."""

    first: str
    last: str
    count: int = 1

    @classmethod
    def of(cls, keys: Sequence[str]) -> PartitionRange:
        return cls(keys[0], keys[-1], len(keys))

    def name(self) -> str:
        if self.count == 1 and self.first == self.last:
            return encode_name_part(self.first)
        return f"{encode_name_part(self.first)}_to_{encode_name_part(self.last)}_{self.count}keys"


def name_part(text: str) -> str:
    """``text`` as one part of a name: characters outside the rule become ``_``."""
    return _NOT_IN_NAME.sub("_", text).strip("_") or "_"


def compose_run_name(parts: Sequence[str], index: str | None, identity: Sequence[str]) -> str:
    """``parts`` (base, pipeline, run, task: each a ``name_part``) and the already encoded
    ``index``, joined by ``--`` within the length rule; ``identity`` is what the digest of a
    shortened name is taken over."""
    clean = [name_part(p) for p in parts]
    if index is not None:
        clean.append(index or "_")
    name = NAME_SEPARATOR.join(clean)
    if len(name) <= MAX_RUN_NAME_LENGTH:
        return name
    digest = hashlib.sha256(
        json.dumps(list(identity), separators=(",", ":")).encode("utf-8")
    ).hexdigest()[:_DIGEST_LENGTH]
    room = MAX_RUN_NAME_LENGTH - len(NAME_SEPARATOR) - len(digest)
    # Least telling first: the pipeline, the experiment, the task, then the index and run.
    order = [1, 0, 3, 4, 2][: len(clean)]
    over = len(NAME_SEPARATOR.join(clean)) - room
    for i in order:
        if over <= 0:
            break
        keep = max(1, len(clean[i]) - over)
        cut = clean[i][:keep].rstrip("_-") or "_"
        over -= len(clean[i]) - len(cut)
        clean[i] = cut
    return f"{NAME_SEPARATOR.join(clean)}{NAME_SEPARATOR}{digest}"
