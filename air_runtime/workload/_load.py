"""``load_workload``: source (path, YAML text or mapping) + overrides -> ``Workload``."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from yaml.nodes import Node

from air_runtime._errors import Problem, WorkloadError
from air_runtime.workload._go_yaml import encode_go_yaml, go_yaml_dump, override_node, set_node
from air_runtime.workload._models import Workload
from air_runtime.workload._rules import Checker
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


def _to_models(
    normalized: dict[str, Any], source_text: str, base_dir: str | None, label: str | None
) -> Workload:
    try:
        return Workload.model_validate(
            {**normalized, "source_text": source_text, "base_dir": base_dir}
        )
    except ValidationError as exc:
        # A rule the checker missed; still report it as a workload problem.
        problems = [
            Problem(".".join(str(p) for p in err["loc"]), err["msg"], "check this field")
            for err in exc.errors()
        ]
        raise WorkloadError(problems, label) from None


def load_workload(
    source: str | os.PathLike[str] | Mapping[str, Any],
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    source_name: str | None = None,
) -> Workload:
    """Load and validate a workload; raise ``WorkloadError`` listing every problem.

    ``source`` is a file path (a str naming an existing file or ending in .yaml/.yml), YAML
    text, or a mapping of the same structure. ``overrides`` are dotted paths applied to the
    raw mapping before validation: ``{"compute.num_accelerators": 16}`` or
    ``["compute.num_accelerators=16"]`` (values of the ``K=V`` form are YAML scalars).

    ``source_text`` (uploaded as training_config.yaml) is the YAML tree after the overrides,
    re-encoded as the CLI's go-yaml writes it (comments dropped, key order and each value's
    style kept); for a mapping, the mapping in go-yaml's layout.

    ``source_name`` names YAML text or a mapping in messages (``WorkloadError.source``), e.g.
    the file a template was rendered from; a path names itself.
    """
    label: str | None = None
    try:
        folder = os.fspath(base_dir) if base_dir is not None else None
        try:
            raw, marks, text, folder, label = _read_source(source, folder)
        except YamlLoadError as exc:
            raise WorkloadError([exc.problem], source_name) from None
        if source_name is not None and label in ("<text>", "<mapping>"):
            label = source_name
        if not isinstance(raw, dict):
            raise WorkloadError(
                [
                    Problem(
                        "",
                        f"the workload must be a mapping of fields, got {type(raw).__name__}",
                        "start with experiment_name: ..., compute: ..., command: ...",
                        1,
                        1,
                    )
                ],
                label,
            )
        items, problems = _parse_overrides(overrides)
        applied: list[tuple[list[str | int], Node]] = []
        for key, value, value_text in items:
            error = _apply_override(raw, key, value)
            if error:
                problems.append(
                    Problem(
                        f"overrides.{key}",
                        error,
                        "give a dotted path such as compute.num_accelerators",
                        override=key,
                    )
                )
            else:
                applied.append((_split_path(key) or [], override_node(value_text, value)))
                marks.overridden.add(key)
                for table in (marks.values, marks.keys):
                    for path in [
                        p for p in table if p == key or p.startswith((key + ".", key + "["))
                    ]:
                        del table[path]
        checker = Checker(marks)
        normalized = checker.workload(raw)
        problems.extend(checker.problems)
        if problems or normalized is None:
            # in file order, so the list reads top to bottom; located problems first
            problems.sort(key=lambda p: (p.line is None, p.line or 0, p.column or 0))
            raise WorkloadError(problems, label)
        # runconfig_load.go: the tree after overrides, comments stripped, go-yaml's layout
        if marks.root is None:
            text = go_yaml_dump(raw)
        else:
            for parts, node in applied:
                set_node(marks.root, parts, node)
            text = encode_go_yaml(marks.root)
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_BYTES:  # runupload.go maxConfigYAMLBytes: the run page renders it
            raise WorkloadError(
                [
                    Problem(
                        "",
                        f"training_config.yaml would be {size / (1024 * 1024):.2f} MB, over the "
                        "1 MB limit",
                        "reduce parameters or command (move data into code_source or a volume)",
                    )
                ],
                label,
            )
        workload = _to_models(normalized, text, folder, label)
        workload._raw = raw
        return workload
    except WorkloadError:
        raise
    except RecursionError:
        raise WorkloadError(
            [Problem("", "the workload nests too deeply", "flatten the structure")], label
        ) from None
    except Exception as exc:  # never leak parser/model internals to callers
        raise WorkloadError(
            [
                Problem(
                    "",
                    f"cannot read the workload: {type(exc).__name__}: {exc}",
                    "check the workload structure",
                )
            ],
            label,
        ) from None


def lint_workload(workload: Workload) -> list[str]:
    """Warnings that do not block a submit."""
    warnings: list[str] = []
    for i, permission in enumerate(workload.permissions):
        if permission.level != permission.level.strip().upper():
            # Sent as written, as the CLI does (runpermissions.go); the permissions API
            # knows the upper-case names only.
            warnings.append(
                f"permissions[{i}].level {permission.level!r} is sent as written: the workspace "
                f"knows {permission.level.strip().upper()}; write it that way"
            )
    image = workload.environment.docker_image
    if image is not None and workload.command:
        for line in workload.command.splitlines():
            words = line.strip().split()
            if len(words) >= 2 and words[0] in ("python", "python3", "bash", "sh", "torchrun"):
                script = next((w for w in words[1:] if not w.startswith("-")), None)
                if (
                    script
                    and not script.startswith(("/", "$", '"$', "'$", "~"))
                    and ("/" in script or script.endswith((".py", ".sh")))
                ):
                    warnings.append(
                        f"command runs the relative path {script!r} with docker image {image.url}: "
                        "the platform ignores the image's WORKDIR, so use an absolute path "
                        '(or "$CODE_SOURCE_PATH/...")'
                    )
    return warnings
