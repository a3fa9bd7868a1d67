"""training_config.yaml in go-yaml v3's layout (databricks/cli cmd/air/runconfig_load.go;
the layout rules are go-yaml's emitter: four-space indentation, sequences indented under
their key, a sequence item's mapping two columns in, other nesting on multiples of four)."""

from __future__ import annotations

import pytest
import yaml

from air_runtime.workload._go_yaml import encode_go_yaml, go_yaml_dump


def reencoded(text: str) -> str:
    return encode_go_yaml(yaml.compose(text, Loader=yaml.SafeLoader))


@pytest.mark.parametrize(
    ("source", "written"),
    [
        # nesting: mappings on multiples of four, sequences under their key
        ("a:\n  b:\n    c: 1\n", "a:\n    b:\n        c: 1\n"),
        ("a:\n- x\n- y\n", "a:\n    - x\n    - y\n"),
        ("a:\n  - - x\n    - y\n", "a:\n    - - x\n      - y\n"),
        (
            "c:\n  - name: t\n    env:\n      variables:\n        A: '1'\n    ranks:\n      - 0\n",
            "c:\n    - name: t\n      env:\n        variables:\n            A: '1'\n"
            "      ranks:\n        - 0\n",
        ),
        # styles kept: flow, quotes, null spellings, empty collections
        ("a: [1, 'b', \"c\"]\nd: {e: f}\n", "a: [1, 'b', \"c\"]\nd: {e: f}\n"),
        ("a:\nb: ~\nc: null\n", "a:\nb: ~\nc: null\n"),
        ("a: []\nb: {}\nc:\n  - []\n", "a: []\nb: {}\nc:\n    - []\n"),
        ("'a b': 'it''s'\n", "'a b': 'it''s'\n"),
        # comments are dropped
        ("# head\na: 1  # line\n# foot\n", "a: 1\n"),
        # block scalars and their hints
        ("a: |\n  x\n  y\n", "a: |\n    x\n    y\n"),
        ("a: |-\n  x\n", "a: |-\n    x\n"),
        ("a: |+\n  x\n\nb: 1\n", "a: |+\n    x\n\nb: 1\n"),
        ("a: |2\n    indented\n", "a: |4\n      indented\n"),
        ("a: |\n  x\n\n  y\n", "a: |\n    x\n\n    y\n"),
        # go-yaml's folded writer looks ahead from the value's start, not from the break,
        # so a break after text is always doubled (the value reads back the same)
        ("a: >\n  x\n  y\n", "a: >\n    x y\n\n"),
        ("- |\n  x\n", "- |\n  x\n"),
        # what go-yaml's emitter cannot write in the source's style falls back to double quotes
        ('a: "x \\ny"\n', 'a: "x \\ny"\n'),
        ("a: |\n  trailing \n  space\n", 'a: "trailing \\nspace\\n"\n'),
        ("a: '\ttab'\n", 'a: "\\ttab"\n'),
        ('a: "\\U0001F680 \\x7f"\n', 'a: "\\U0001F680 \\x7F"\n'),
        ("a: é\n", "a: é\n"),
        # explicit tags are not written: the style carries the type instead
        ('a: !!str 5\nb: !!int "7"\n', 'a: "5"\nb: 7\n'),
    ],
)
def test_layout_and_styles(source: str, written: str) -> None:
    assert reencoded(source) == written
    assert yaml.safe_load(written) == yaml.safe_load(source)


def test_python_values_take_go_yamls_forms() -> None:
    assert go_yaml_dump(
        {"b": "true", "a": 1e-05, "c": [1, {"d": None}], "e": "x\ny\n", "f": ""}
    ) == ('b: "true"\na: 1e-05\nc:\n    - 1\n    - d: null\ne: |\n    x\n    y\nf: ""\n')


def test_ascii_forms_of_the_character_patterns_agree_with_the_unicode_ones() -> None:
    """Each pattern answers ASCII text with its small form (the Unicode class costs ~10 ms to
    compile in every process that writes a workload): both forms must agree."""
    import random
    import re

    from air_runtime.workload import _go_yaml

    patterns = [
        _go_yaml._SPECIAL,
        _go_yaml._SPACE_BREAK,
        _go_yaml._ANY_BREAK,
        _go_yaml._NON_NEWLINE_BREAK,
    ]
    ascii_chars = [chr(i) for i in range(128)]
    other = [chr(i) for i in range(128, 0x300)] + list("\u2028\u2029\ufeff\ud7ff\ue000\ufffe")
    rng = random.Random(7)
    for pattern in patterns:
        full = re.compile(pattern._source)
        for _ in range(5000):
            value = "".join(
                rng.choice(ascii_chars if rng.random() < 0.8 else other)
                for _ in range(rng.randint(0, 6))
            )
            assert (pattern.search(value) is None) == (full.search(value) is None), repr(value)


def test_ascii_text_never_compiles_the_unicode_class() -> None:
    from air_runtime.workload import _go_yaml

    fresh = _go_yaml._CharPattern("[^a]", "[^a\u00e9]")
    assert fresh.search("abc") is not None and fresh._full is None
    assert fresh.search("a\u00e9") is None and fresh._full is not None
