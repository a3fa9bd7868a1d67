"""The plan's side-file writers give the bytes the CLI's Go writers give (runupload.go)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from air_runtime.plan._build import _copy_json
from air_runtime.plan._writers import go_json as _go_json
from air_runtime.plan._writers import hyperparameters_yaml as _hyperparameters
from air_runtime.workload._yaml import load_yaml_text

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TRICKY_WORDS = [
    "true", "False", "yes", "No", "on", "OFF", "y", "n", "null", "Null", "~", "", "=", "<<",
    "1", "-1", "+1", "0x1f", "0o17", "017", "1_000", "1:30", "1.5", ".5", "1e5", "1.0e+5",
    ".inf", "-.inf", ".nan", "2024-01-01", "a" * 63, "a" * 64, "a" * 65, "a b", "a: b", "#c",
    "a#b", "- x", "-x", "x-", "a/b", "a.b", "_", "é", "line\nbreak", " lead", "trail ",
    "\U0001f600", "\u2028", "\x85", "'q'", '"q"', "[x]", "{x}", "&a", "*a", "!t", "%p", "@x",
    "`x", "|", ">", "?", "? x", "a,b", "\t",
]  # fmt: skip
words = st.one_of(st.sampled_from(TRICKY_WORDS), st.text(max_size=12),
                  st.from_regex(r"[A-Za-z_][A-Za-z0-9_./-]{0,70}", fullmatch=True))  # fmt: skip
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), words,
    st.sampled_from([0.0, -0.0, 1e16, 1e-7, 1.5e300, 123456789.123, float("inf"), -float("inf")]),
)  # fmt: skip
keys = st.one_of(words, st.integers(-3, 3), st.booleans(), st.none(), st.floats(0, 2))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=10,
)


def _without_floats(value: Any) -> bool:
    if isinstance(value, float):
        return False
    if isinstance(value, dict):
        return all(_without_floats(v) for v in value.values())
    if isinstance(value, list):
        return all(_without_floats(v) for v in value)
    return True


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


string_keyed = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(words, inner, max_size=4)),
    max_leaves=10,
)


@pytest.mark.slow  # the largest property run (nested maps read back with PyYAML)
@SETTINGS
@given(st.dictionaries(words, string_keyed, max_size=6).filter(_without_floats))
def test_hyperparameters_read_back_as_the_parameters(parameters: dict[str, Any]) -> None:
    """Whatever the quoting, the file reads back as the map (keys sorted, as Go writes it)."""
    text = _hyperparameters(parameters).decode("utf-8")
    assert yaml.safe_load(text) == (_sorted(parameters) or None)
    assert list(yaml.safe_load(text) or {}) == sorted(parameters)


def test_hyperparameters_as_go_yaml_writes_them() -> None:
    """go-yaml v3 (the CLI's writer, runupload.go): sorted keys, four-space indent, Go's
    shortest float form with exponents below 1e-4 and from 1e6, quotes where YAML 1.1
    would read another type."""
    parameters = {
        "lr": 0.05, "epochs": 5, "model": "Qwen/Qwen2.5-0.5B-Instruct", "tiny": 1e-05,
        "one": 1.0, "big": 1e6, "mid": 123456.0, "flag": True, "none": None, "yes": "yes",
        "reward": {"weight": 1.5, "kind": "exact_match"}, "list": [1, "a b"], "empty": {},
    }  # fmt: skip
    assert _hyperparameters(parameters).decode() == (
        "big: 1e+06\n"
        "empty: {}\n"
        "epochs: 5\n"
        "flag: true\n"
        "list:\n"
        "    - 1\n"
        "    - a b\n"
        "lr: 0.05\n"
        "mid: 123456\n"
        "model: Qwen/Qwen2.5-0.5B-Instruct\n"
        "none: null\n"
        "one: 1\n"
        "reward:\n"
        "    kind: exact_match\n"
        "    weight: 1.5\n"
        "tiny: 1e-05\n"
        '"yes": "yes"\n'
    )


env_entries = st.lists(
    st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=3), max_size=4
)


@SETTINGS
@given(env_entries)
def test_env_files_are_compact_json_that_reads_back(entries: list[dict[str, Any]]) -> None:
    written = _go_json(entries)
    assert json.loads(written) == entries
    assert not written.endswith(b"\n")
    assert b"<" not in written and b">" not in written and b"&" not in written


def test_env_file_as_go_json_marshal_writes_it() -> None:
    """Go's json.Marshal (runupload.go): compact, UTF-8 as is, <, >, & and U+2028 escaped."""
    entries = [
        {"name": "MODEL_ID", "value": "Qwen/Qwen2.5-0.5B-Instruct"},
        {"name": "QUOTE", "value": 'a<b>&"c"\\é\u2028'},
        {"name": "HF_TOKEN", "secret_scope": "research", "secret_key": "hf_token"},
    ]
    assert _go_json(entries).decode("utf-8") == (
        '[{"name":"MODEL_ID","value":"Qwen/Qwen2.5-0.5B-Instruct"},'
        '{"name":"QUOTE","value":"a\\u003cb\\u003e\\u0026\\"c\\"\\\\é\\u2028"},'
        '{"name":"HF_TOKEN","secret_scope":"research","secret_key":"hf_token"}]'
    )


@SETTINGS
@given(st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3))))  # fmt: skip
def test_json_copy_is_an_independent_deep_copy(value: Any) -> None:
    copied = _copy_json(value)
    assert repr(copied) == repr(copy.deepcopy(value))
    if isinstance(value, dict | list) and value:
        assert copied is not value


@SETTINGS
@given(st.dictionaries(st.text(max_size=6), scalars, max_size=5))
def test_yaml_strings_read_back_as_the_constructor_reads_them(data: dict[str, Any]) -> None:
    text = yaml.safe_dump({"m": data, "q": [str(v) for v in data.values()]}, allow_unicode=True)
    built, _ = load_yaml_text(text)
    assert repr(built) == repr(yaml.load(text, Loader=_GoFloatLoader))


class _GoFloatLoader(yaml.SafeLoader):
    """PyYAML's safe loader, plus what the workload loader adds: exponent floats without a
    point (``1e5``), which go-yaml v3, and so the CLI, reads as floats."""


_GoFloatLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$"), list("-+0123456789")
)
