"""The code and shell blocks of the documentation (README.md and every page under docs/).

A block is a fenced block with an info string. What the tests do with it:

- ``python``: run as a program; ``sh``/``bash``: each command run in turn, against a local
  workspace (see test_doc_blocks.py); ``yaml``/``json``: loaded, and a workload validated by
  the core. Other fences (``text``, none) are output or listings, not code.
- An HTML comment on the line right before the fence marks a block that does not run here,
  with the reason the reader never sees: ``<!-- docs-test: skip REASON -->`` (still parsed:
  ``ast.parse``, ``bash -n`` and every ``airo`` command through the command line's parser), or
  ``<!-- docs-test: script TEST_FILE -->`` (a whole script that TEST_FILE runs as written).
- ``<!-- docs-test: dag-test -->`` before a python block: the block is a Dag file; besides
  being loaded, each Dag it defines runs with ``dag.test()`` against the local workspace.
- ``<!-- docs-test: materialize -->`` before a python block: the block defines Dagster
  ``defs``; after it runs, every asset of ``defs`` is materialized against the local workspace.
- ``<!-- docs-test: backfill -->`` before a python block: the block defines Dagster ``defs``
  whose assets share one partitioning; after it runs, all their partitions are materialized
  as one range run (what a ``BackfillPolicy.single_run()`` backfill launches), on a Dagster
  instance with storage (``DAGSTER_HOME``), against the local workspace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXECUTED = frozenset({"python", "sh", "bash"})
LOADED = frozenset({"yaml", "json"})
CODE = EXECUTED | LOADED
# The address the pages use for the local workspace; the tests put their own in its place.
DOCS_HOST = "http://127.0.0.1:8765"

_FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
_MARKER = re.compile(
    r"<!--\s*docs-test:\s*(?P<kind>skip|script|dag-test|materialize|backfill)\s*(?P<detail>.*?)\s*-->\s*$"
)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    body: str
    marker: str | None  # None, "skip", "script", "dag-test", "materialize" or "backfill"
    detail: str  # the reason (skip) or the test file that runs it (script)

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}-{self.language}"

    @property
    def commands(self) -> list[str]:
        """The block's shell commands: continuation lines joined, comments and blanks left out."""
        commands: list[str] = []
        pending = ""
        for raw in self.body.splitlines():
            line = raw.rstrip()
            if pending:
                line = pending + " " + line.lstrip()
                pending = ""
            if line.endswith("\\"):
                pending = line[:-1].rstrip()
                continue
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line.strip())
        return commands


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for match in _FENCE.finditer(text):
        language = match.group("info").strip().split(" ")[0].lower()
        if language not in CODE:
            continue
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        found.append(
            Block(
                path=path,
                line=line,
                language=language,
                body=match.group("body"),
                marker=marker.group("kind") if marker else None,
                detail=marker.group("detail") if marker else "",
            )
        )
    return found


def all_blocks() -> list[Block]:
    return [block for page in doc_pages() for block in blocks_of(page)]
