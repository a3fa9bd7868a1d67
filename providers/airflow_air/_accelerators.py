"""How many accelerators a workload asks for, read when the Dag file is parsed: what
``pool_slots="accelerators"`` and ``airflow_air.sweeps`` weigh a task by.

Imports nothing beyond the standard library until a YAML workload is read (the operators
module imports it at parse time). Only what is literal is known then: a dict, YAML text or
a file, with a literal ``compute.num_accelerators`` override; a templated value is decided
when the task renders, so it is None here."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

ACCELERATORS = "accelerators"  # the pool_slots value that asks for the workload's count
_FIELD = "compute.num_accelerators"


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip()) or None
    return None


def _mapping(workload: Any, folders: Sequence[str]) -> Mapping[str, Any] | None:
    if isinstance(workload, Mapping):
        return workload
    if not isinstance(workload, str | os.PathLike):
        return None
    text = os.fspath(workload)
    if text.endswith((".yaml", ".yml")) and "\n" not in text:
        candidates = [text] if os.path.isabs(text) else [os.path.join(f, text) for f in folders]
        found = next((c for c in candidates if os.path.isfile(c)), None)
        if found is None:
            return None
        with open(found, encoding="utf-8") as handle:
            text = handle.read()
    if "{{" in text and "num_accelerators" in text.split("{{", 1)[1]:
        return None  # rendered at run time
    import yaml

    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return loaded if isinstance(loaded, Mapping) else None


def _override(overrides: Any) -> tuple[bool, Any]:
    """Whether ``overrides`` set the accelerator count, and to what."""
    if isinstance(overrides, Mapping):
        return (_FIELD in overrides), overrides.get(_FIELD)
    if isinstance(overrides, Sequence) and not isinstance(overrides, str):
        for item in overrides:
            if isinstance(item, str) and item.split("=", 1)[0].strip() == _FIELD:
                return True, item.split("=", 1)[1] if "=" in item else None
    return False, None


def parse_time_accelerators(
    workload: Any, overrides: Any = None, folders: Sequence[str] = ()
) -> int | None:
    """The accelerators ``workload`` (a dict, YAML text, or a file looked up in ``folders``)
    with ``overrides`` asks for, when literal; None when only the rendered task knows."""
    given, value = _override(overrides)
    if given:
        return _count(value)
    mapping = _mapping(workload, folders)
    if mapping is None:
        return None
    compute = mapping.get("compute")
    return _count(compute.get("num_accelerators")) if isinstance(compute, Mapping) else None
