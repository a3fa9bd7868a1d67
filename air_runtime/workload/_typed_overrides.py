"""Override values typed by the workload's schema.

An override often arrives as text where the schema wants a number: Airflow renders
``{"compute.num_accelerators": "{{ params.gpus }}"}`` to ``"2"``, a Dagster config field
may hold a string, ``airo --override 'max_retries="2"'`` quotes it. Where the schema allows
only integers, numbers or booleans at the override's path, such a text is converted before
validation. A text that is none of those is left as it is: the checker then reports it as
it reports any wrong value, with the field path, the fix and the override that set it.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any

from air_runtime.workload._schema import workload_json_schema

_TYPED = frozenset({"integer", "number", "boolean"})
_INTEGER_RE = re.compile(r"^[+-]?\d+(\.0*)?$")
_TRUE = frozenset({"true", "yes", "on"})
_FALSE = frozenset({"false", "no", "off"})


@functools.cache
def _schema() -> dict[str, Any]:
    return workload_json_schema()


def _branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The schema and each alternative it allows (``anyOf``/``oneOf`` with properties)."""
    found = [schema]
    for keyword in ("anyOf", "oneOf"):
        found += [b for b in schema.get(keyword, ()) if isinstance(b, dict)]
    return found


def _child(schemas: list[dict[str, Any]], part: str | int) -> list[dict[str, Any]]:
    children: list[dict[str, Any]] = []
    for schema in schemas:
        for branch in _branches(schema):
            if isinstance(part, int):
                items = branch.get("items")
                if isinstance(items, dict):
                    children.append(items)
                continue
            properties = branch.get("properties") or {}
            if part in properties:
                children.append(properties[part])
            elif isinstance(branch.get("additionalProperties"), dict):
                children.append(branch["additionalProperties"])
    return children


def _types(schemas: list[dict[str, Any]]) -> set[str]:
    """Every JSON type the schemas allow (``enum``/``const`` count by their values)."""
    types: set[str] = set()
    for schema in schemas:
        for branch in _branches(schema):
            declared = branch.get("type")
            if isinstance(declared, str):
                types.add(declared)
            elif isinstance(declared, list):
                types.update(t for t in declared if isinstance(t, str))
            for value in [*branch.get("enum", ()), *(["x"] if "const" in branch else [])]:
                types.add("string" if isinstance(value, str) else "other")
    return types


def _convert_text(text: str, types: set[str]) -> Any:
    """``text`` as the first of the allowed types it reads as; itself when none."""
    word = text.strip()
    if "boolean" in types and word.lower() in _TRUE | _FALSE:
        return word.lower() in _TRUE
    if "integer" in types and _INTEGER_RE.match(word):
        return int(float(word)) if "." in word else int(word)
    if "number" in types:
        try:
            number = float(word)
        except ValueError:
            return text
        if math.isfinite(number):
            return int(number) if _INTEGER_RE.match(word) else number
    return text


def _typed(value: Any, schemas: list[dict[str, Any]]) -> Any:
    if not schemas:
        return value
    if isinstance(value, str):
        types = _types(schemas)
        if types and types <= _TYPED:
            return _convert_text(value, types)
        return value
    if isinstance(value, dict):
        return {k: _typed(v, _child(schemas, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v, _child(schemas, i)) for i, v in enumerate(value)]
    return value


def typed_override(parts: Sequence[str | int], value: Any) -> Any:
    """``value`` (set at the path ``parts``) with each text converted to the integer, number
    or boolean the schema wants there."""
    schemas = [_schema()]
    for part in parts:
        schemas = _child(schemas, part)
        if not schemas:
            return value
    return _typed(value, schemas)
