"""The plan's direct writers give exactly the bytes of the library calls they replace."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from air_runtime.plan._build import _copy_json, _hyperparameters, _json_bytes
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


def _safe_dump(parameters: dict[Any, Any]) -> bytes:
    return yaml.safe_dump(
        parameters, sort_keys=False, allow_unicode=True, default_flow_style=False
    ).encode("utf-8")


@SETTINGS
@given(st.dictionaries(keys, values, max_size=6))
def test_hyperparameters_are_what_safe_dump_writes(parameters: dict[Any, Any]) -> None:
    assert _hyperparameters(parameters) == _safe_dump(parameters)


def test_hyperparameters_of_typical_parameters() -> None:
    for parameters in [
        {"learning_rate": 0.05, "epochs": 5, "rollouts_per_epoch": 16},
        {"reward": {"kind": "exact_match", "weight": 1.0}, "flag": True, "none": None},
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "lr": 1e-05, "big": 10**30, "neg": -0.0},
        {"nested": {"deeper": {"deepest": {"x": 1}}}, "empty": {}, "list": [1, 2]},
        {word: word for word in TRICKY_WORDS},
    ]:
        assert _hyperparameters(parameters) == _safe_dump(parameters), parameters


env_entries = st.lists(
    st.dictionaries(
        st.text(max_size=8), st.one_of(st.text(max_size=12), st.integers()), max_size=3
    ),
    max_size=4,
)


@SETTINGS
@given(env_entries)
def test_env_files_are_what_json_dumps_writes(entries: list[dict[str, Any]]) -> None:
    assert _json_bytes(entries) == (json.dumps(entries, indent=2) + "\n").encode("utf-8")


def test_env_file_of_typical_entries() -> None:
    entries = [
        {"name": "MODEL_ID", "value": "Qwen/Qwen2.5-0.5B-Instruct"},
        {"name": "QUOTE", "value": 'say "hi"\\n\n\té\U0001f600\u2028\x00'},
        {"name": "HF_TOKEN", "secret_scope": "research", "secret_key": "hf_token"},
    ]
    assert _json_bytes(entries) == (json.dumps(entries, indent=2) + "\n").encode("utf-8")


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
    assert repr(built) == repr(yaml.safe_load(text))
