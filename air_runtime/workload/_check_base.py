"""What every section of the workload checker shares: one ``Report`` of the problems found
(each with its source position) and the typed reads (``Section``) each section reports through.

Each block of the YAML has its own section module, its keys and patterns beside its rules, as
the CLI keeps one file per block (``compute.go``, ``runconfig.go``); ``_rules.Checker`` composes
them over one report, so the user sees every problem of the workload at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from air_runtime._errors import Problem
from air_runtime.platform import TASK_KEY_RE
from air_runtime.workload._yaml import SourceMarks, child_path

# The Jobs API's task_key rule: experiment_name becomes the run's task key and
# mlflow_run_name follows the same rule (runconfig.go taskKeyRe, validateExperimentName).
NAME_RE = TASK_KEY_RE

MAX_COMMAND_LINES = 1000


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {_short(value)}"
    return f"{type(value).__name__} {value!r}"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def scalar_text(value: Any) -> str | None:
    """Literal text of an environment variable value given as a Python scalar (dict input)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


class Report:
    """The problems found so far, each located in the source (or at the override that set
    it); every section of one check adds to the same report."""

    def __init__(self, marks: SourceMarks | None = None) -> None:
        self.marks = marks or SourceMarks()
        self.problems: list[Problem] = []

    def add(
        self, path: str, message: str, hint: str | None = None, *, at_key: bool = False
    ) -> None:
        override = self.marks.override_for(path) if self.marks.overridden else None
        mark = None if override is not None else self.mark_of(path, at_key=at_key)
        line, column = mark if mark else (None, None)
        self.problems.append(Problem(path, message, hint, line, column, override))

    def mark_of(self, path: str, *, at_key: bool = False) -> tuple[int, int] | None:
        """Line and column of ``path`` in the source (of the nearest enclosing value that
        has one); None when no line set it."""
        if at_key and path in self.marks.keys:
            return self.marks.keys[path]
        probe = path
        while True:
            if probe in self.marks.values:
                return self.marks.values[probe]
            if not probe:
                return None
            cut = max(probe.rfind("."), probe.rfind("["))
            probe = probe[:cut] if cut > 0 else ""


class Section:
    """One block's rules: typed reads of the raw mapping that report what is wrong into the
    check's shared ``Report`` and return the normalized value (None when it is unusable)."""

    def __init__(self, report: Report) -> None:
        self.report = report

    def add(
        self, path: str, message: str, hint: str | None = None, *, at_key: bool = False
    ) -> None:
        self.report.add(path, message, hint, at_key=at_key)

    def mapping(
        self, value: Any, path: str, allowed: Iterable[str], what: str
    ) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.add(
                path,
                f"{path or 'the workload'} must be a mapping, got {_type_name(value)}",
                f"write {what} as 'key: value' lines",
            )
            return None
        allowed = tuple(allowed)
        for key in value:
            if not isinstance(key, str):
                self.add(
                    child_path(path, key),
                    f"key {key!r} in {path or 'the workload'} must be a string",
                    f"valid keys: {', '.join(allowed)}",
                    at_key=True,
                )
            elif key not in allowed:
                self.unknown_key(path, key, allowed)
        return value

    def unknown_key(self, path: str, key: str, allowed: tuple[str, ...]) -> None:
        where = child_path(path, key)
        import difflib  # only a refusal suggests

        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"valid keys here: {', '.join(allowed)}"
        self.add(where, f"unknown key {key!r} in {path or 'the workload'}", hint, at_key=True)

    def string(self, value: Any, path: str, *, blank_ok: bool = False) -> str | None:
        if not isinstance(value, str):
            self.add(path, f"{path} must be a string, got {_type_name(value)}", "quote the value")
            return None
        if not blank_ok and not value.strip():
            self.add(path, f"{path} must not be blank", "give a non-empty value or remove the key")
            return None
        return value

    def integer(self, value: Any, path: str, minimum: int) -> int | None:
        if not _is_int(value):
            self.add(
                path,
                f"{path} must be an integer, got {_type_name(value)}",
                f"write a whole number >= {minimum}",
            )
            return None
        if value < minimum:
            self.add(path, f"{path} must be >= {minimum}, got {value}", f"use a value >= {minimum}")
            return None
        return int(value)

    def command(self, value: Any, path: str) -> str | None:
        text = self.string(value, path)
        if text is None:
            return None
        # runconfig.go validateCommand counts line breaks + 1 (a trailing one included)
        lines = text.count("\n") + 1
        if lines > MAX_COMMAND_LINES:
            self.add(
                path,
                f"{path} has {lines} lines, more than {MAX_COMMAND_LINES}",
                "move the script into code_source and run it from the command",
            )
            return None
        return text
