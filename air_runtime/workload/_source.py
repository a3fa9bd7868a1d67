"""Where a workload comes from: its source (path, YAML text or mapping) read into a raw
mapping with the source positions of its values, and the overrides applied to that mapping."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from air_runtime._errors import Problem, WorkloadError
from air_runtime.workload._yaml import (
    MAX_BYTES,
    SourceMarks,
    YamlLoadError,
    decode_source,
    is_literal_path,
    load_yaml_text,
)

_INDEX = re.compile(r"^(.*)\[(\d+)\]$")


def _looks_like_path(source: str) -> bool:
    if "\n" in source or len(source) > 4096:
        return False
    if source.endswith((".yaml", ".yml")):
        return True
    try:
        return Path(source).is_file()
    except (OSError, ValueError):
        return False


def _read_source(
    source: str | os.PathLike[str] | Mapping[str, Any], base_dir: str | None
) -> tuple[Any, SourceMarks, str | None, str | None, str]:
    """(raw data, marks, text as submitted or None, base dir, label for messages)."""
    if isinstance(source, Mapping):
        try:
            raw = copy.deepcopy(dict(source))
        except Exception as exc:  # a mapping that cannot be copied is not a workload
            raise WorkloadError([Problem("", f"cannot read the workload mapping: {exc}")]) from None
        return raw, SourceMarks(), None, base_dir, "<mapping>"
    if isinstance(source, os.PathLike) or (isinstance(source, str) and _looks_like_path(source)):
        path = Path(os.fspath(source))
        label = str(path)
        try:
            size = path.stat().st_size
            if size > MAX_BYTES:
                raise WorkloadError(
                    [
                        Problem(
                            "",
                            f"the workload is {size} bytes, over the 1 MiB limit",
                            "keep the YAML small: move large data into code_source or a volume",
                        )
                    ],
                    label,
                )
            data = path.read_bytes()
        except OSError as exc:
            raise WorkloadError(
                [Problem("", f"cannot read {label}: {exc.strerror or exc}", "check the file path")],
                label,
            ) from None
        try:
            text = decode_source(data)
            raw, marks = load_yaml_text(text)
        except YamlLoadError as exc:  # name the file, as for every other problem
            raise WorkloadError([exc.problem], label) from None
        folder = base_dir if base_dir is not None else str(path.resolve().parent)
        return raw, marks, text, folder, label
    if isinstance(source, bytes):
        text = decode_source(source)
    elif isinstance(source, str):
        text = source
    else:
        raise WorkloadError(
            [
                Problem(
                    "",
                    f"a workload must be a file path, YAML text or a mapping, got {type(source).__name__}",
                )
            ]
        )
    raw, marks = load_yaml_text(text)
    return raw, marks, text, base_dir, "<text>"


def _parse_overrides(
    overrides: Mapping[str, Any] | Sequence[str] | None,
) -> tuple[list[tuple[str, Any, str | None]], list[Problem]]:
    """(key, value, the value's text when given as ``K=V``) of each override."""
    if overrides is None:
        return [], []
    items: list[tuple[str, Any, str | None]] = []
    problems: list[Problem] = []
    if isinstance(overrides, Mapping):
        return [(str(k), v, None) for k, v in overrides.items()], []
    if isinstance(overrides, str):
        overrides = [overrides]
    for entry in overrides:
        if not isinstance(entry, str) or "=" not in entry:
            problems.append(
                Problem(
                    f"overrides.{entry}",
                    f"override {entry!r} is not of the form KEY=VALUE",
                    "e.g. compute.num_accelerators=16",
                    override=str(entry),
                )
            )
            continue
        key, text = entry.split("=", 1)
        key = key.strip()
        if is_literal_path(key):
            items.append((key, text, text))  # environment variables keep their text
            continue
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text
        # any YAML, as runconfig_override.go parseOverrideNode: "[1, 2]" is a list
        items.append((key, value, text))
    return items, problems


def _split_path(key: str) -> list[str | int] | None:
    parts: list[str | int] = []
    for segment in key.split("."):
        indexes: list[int] = []
        while (match := _INDEX.match(segment)) is not None:
            segment, index = match.group(1), int(match.group(2))
            indexes.insert(0, index)
        if not segment and not (indexes and parts):
            return None
        if segment:
            parts.append(int(segment) if segment.isdigit() and parts else segment)
        parts.extend(indexes)
    return parts or None


def _apply_override(raw: dict[str, Any], key: str, value: Any) -> str | None:
    """Set ``key`` (dotted, ``a.b[1].c``) in ``raw``; the reason it cannot, or None."""
    parts = _split_path(key)
    if parts is None:
        return f"override key {key!r} is not a dotted path"
    target: Any = raw
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(target, dict):
            part = str(part)
            if last:
                target[part] = value
                return None
            nxt = target.get(part)
            if nxt is None:
                if isinstance(parts[i + 1], int):
                    return f"cannot set {key!r}: {part} is not a list"
                nxt = target[part] = {}
            target = nxt
        elif isinstance(target, list) and isinstance(part, int):
            if part >= len(target):
                return f"index {part} is out of range in override {key!r} (the list has {len(target)} items)"
            if last:
                target[part] = value
                return None
            target = target[part]
        else:
            where = ".".join(str(p) for p in parts[:i]) or "the workload"
            return f"cannot set {key!r}: {where} is not a mapping"
    return None  # pragma: no cover


def locate_problems(
    source: str | os.PathLike[str],
    problems: Sequence[Problem],
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
) -> list[Problem]:
    """``problems`` found after loading (the workspace's own check names workload fields,
    ``client._refusals``), each with the line and column of its field in ``source`` (a
    workload file or YAML text), or the override that set it; unchanged when the source
    cannot be read again or gives no line."""
    from air_runtime.workload._check_base import Report

    try:
        _, marks, _, _, _ = _read_source(source, None)
    except Exception:  # the workload was loaded once: nothing worse than no line
        return list(problems)
    for key in overrides or ():
        marks.overridden.add(str(key).split("=", 1)[0].strip())
    report = Report(marks)
    located = []
    for problem in problems:
        if problem.line is not None or problem.override is not None or not problem.path:
            located.append(problem)
            continue
        override = marks.override_for(problem.path) if marks.overridden else None
        mark = None if override is not None else report.mark_of(problem.path)
        line, column = mark if mark else (None, None)
        located.append(Problem(problem.path, problem.message, problem.hint, line, column, override))
    return located
