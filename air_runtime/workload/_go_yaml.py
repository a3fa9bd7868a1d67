"""``training_config.yaml`` as the CLI writes it: the workload's YAML tree, after overrides,
re-encoded with go-yaml v3 (databricks/cli cmd/air/runconfig_load.go ``finishRunConfigLoad``:
comments stripped, then ``yaml.Marshal`` of the document node; acceptance
``run-submit-deps`` and ``run-submit-overrides`` record the bytes).

go-yaml v3's layout, which this follows: four-space indentation; a block sequence indented
under its key; a mapping inside a sequence item starts after ``- `` and keeps that column;
every other nested block rounds up to the next multiple of four; no line wrapping. Each
scalar keeps the style it was written in (plain, quoted, ``|``, ``>``) unless go-yaml's
emitter cannot write it that way, and then falls back as it does (to double quotes). Flow
collections stay flow; empty ones are written ``[]`` / ``{}``.

Differences, all outside what a workload needs: anchors and aliases are written expanded
(PyYAML's composer does not keep anchor names), and explicit tags are not written.
"""

from __future__ import annotations

import decimal
import math
import re
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from air_runtime.workload._yaml import plain_scalar_tag

_INDENT = 4
_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_BREAKS = "\r\n\x85\u2028\u2029"
# The double-quoted escapes of go-yaml's emitter (emitterc.go write_double_quoted_scalar).
_ESCAPES = {
    "\0": "0", "\a": "a", "\b": "b", "\t": "t", "\n": "n", "\v": "v", "\f": "f", "\r": "r",
    "\x1b": "e", '"': '"', "\\": "\\", "\x85": "N", "\xa0": "_", "\u2028": "L", "\u2029": "P",
}  # fmt: skip


def _printable(ch: str) -> bool:
    """libyaml's ``is_printable`` (on UTF-8 bytes there; on code points here)."""
    cp = ord(ch)
    return (
        cp == 0x0A
        or 0x20 <= cp <= 0x7E
        or 0xA0 <= cp <= 0xD7FF
        or (0xE000 <= cp <= 0xFFFD and cp != 0xFEFF)
    )


class _CharPattern:
    """A pattern over characters, with an ASCII form for ASCII text (nearly every value).

    Compiling the Unicode forms costs every process that writes a workload ~12 ms (most of
    it the class of ``_SPECIAL``); they are compiled only when a value needs them.
    """

    def __init__(self, ascii_only: str, full: str) -> None:
        self._ascii = re.compile(ascii_only)
        self._source = full
        self._full: re.Pattern[str] | None = None

    def search(self, value: str) -> re.Match[str] | None:
        if value.isascii():
            return self._ascii.search(value)
        if self._full is None:
            self._full = re.compile(self._source)
        return self._full.search(value)


# A character no style but double quotes can hold: not printable for libyaml
# (``is_printable``), other than a tab (fine, as in go-yaml v3) and line breaks.
_SPECIAL = _CharPattern(
    "[^\t\n\r\x20-\x7e]",
    "[^\t\n\r\x85\u2028\u2029\x20-\x7e\xa0-\ud7ff\ue000-\ufefe\uff00-\ufffd]",
)
_SPACE_BREAK = _CharPattern(
    "[ ][\r\n]|[\r\n][ ]", "[ ][\r\n\x85\u2028\u2029]|[\r\n\x85\u2028\u2029][ ]"
)
_ANY_BREAK = _CharPattern("[\r\n]", "[\r\n\x85\u2028\u2029]")
_PRINTABLE_ASCII = re.compile("[\x20-\x7e]+")
_NON_NEWLINE_BREAK = _CharPattern("[\r]", "[\r\x85\u2028\u2029]")


def _special(value: str) -> bool:
    return _SPECIAL.search(value) is not None


def _space_break(value: str) -> bool:
    """A space right before a line break, or a break right before a space."""
    return _SPACE_BREAK.search(value) is not None


def _double_quoted(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch in _ESCAPES and (ch in '"\\' or ch in _BREAKS or not _printable(ch)):
            out.append("\\" + _ESCAPES[ch])
        elif not _printable(ch) or ch == "\ufeff" or ch in _BREAKS:
            cp = ord(ch)
            if cp <= 0xFF:
                out.append(f"\\x{cp:02X}")
            elif cp <= 0xFFFF:
                out.append(f"\\u{cp:04X}")
            else:
                out.append(f"\\U{cp:08X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _style(node: ScalarNode) -> str:
    return node.style or ""


def _inline(node: ScalarNode, in_flow: bool) -> str:
    """A scalar on one line: plain, single- or double-quoted."""
    value = node.value
    style = _style(node)
    if (
        style == ""
        and _PRINTABLE_ASCII.fullmatch(value) is not None
        and (node.tag != _STR or plain_scalar_tag(value) == _STR)
    ):
        return value  # the common case: a plain word as written
    if style in ("|", ">"):
        style = '"'  # block styles cannot appear in flow context or as keys
    # An explicit tag is not written, so the style must carry the type (go-yaml writes the
    # tag instead): a string that reads as something else plain is quoted, a typed value
    # written in quotes is written plain.
    if style == "" and node.tag == _STR and plain_scalar_tag(value) != _STR:
        style = '"'
    elif style in ("'", '"') and node.tag != _STR and plain_scalar_tag(value) == node.tag:
        style = ""
    if style == "" and (value == "" and in_flow):
        style = "'"
    if style in ("", "'") and (
        "\t" in value or _ANY_BREAK.search(value) is not None or _special(value)
    ):
        style = '"'
    if style == "":
        return value
    if style == "'":
        return "'" + value.replace("'", "''") + "'"
    return _double_quoted(value)


def _block_style(node: ScalarNode) -> str | None:
    """``|`` or ``>`` when the scalar is written as a block, else None."""
    value = node.value
    style = _style(node)
    if style == "" and "\n" in value:
        style = "|"  # go-yaml writes a plain multi-line value as a literal block
    if style not in ("|", ">"):
        return None
    if _special(value) or _space_break(value) or value.endswith(" "):
        return None  # the emitter falls back to double quotes
    if _NON_NEWLINE_BREAK.search(value) is not None:
        return None  # would not read back as written: a block keeps only "\n" breaks
    return style


def _block_hints(value: str) -> str:
    hints = str(_INDENT) if value[:1] in (" ", *_BREAKS) else ""
    if not value or value[-1] not in _BREAKS:
        return hints + "-"
    if len(value) == 1 or value[-2] in _BREAKS:
        return hints + "+"
    return hints


def _block_lines(value: str, style: str, indent: int) -> list[str]:
    """The body lines of a ``|`` or ``>`` block at ``indent`` (the header is the caller's)."""
    pad = " " * indent
    if style == "|":
        segments = re.split("[\r\n\x85\u2028\u2029]", value)
    else:
        # write_folded_scalar: a line break after text is doubled (a single one would
        # fold into a space); the look-ahead starts at the value's first character, as
        # in go-yaml.
        first_nonbreak = 0
        while first_nonbreak < len(value) and value[first_nonbreak] in _BREAKS:
            first_nonbreak += 1
        double = first_nonbreak < len(value) and value[first_nonbreak] not in " \t"
        out: list[str] = []
        breaks = True
        leading_spaces = True
        for ch in value:
            if ch in _BREAKS:
                if not breaks and not leading_spaces and ch == "\n" and double:
                    out.append("\n")
                out.append("\n")
                breaks = True
            else:
                if breaks:
                    leading_spaces = ch in " \t"
                out.append(ch)
                breaks = False
        segments = "".join(out).split("\n")
    if value and value[-1] in _BREAKS:
        segments = segments[:-1]
    return [pad + s if s else "" for s in segments]


def _empty(node: Node) -> bool:
    return isinstance(node, MappingNode | SequenceNode) and not node.value


def _flow(node: Node) -> str:
    if isinstance(node, ScalarNode):
        return _inline(node, in_flow=True)
    if isinstance(node, SequenceNode):
        return "[" + ", ".join(_flow(item) for item in node.value) + "]"
    assert isinstance(node, MappingNode)
    return "{" + ", ".join(f"{_flow(k)}: {_flow(v)}" for k, v in node.value) + "}"


def _is_block_collection(node: Node) -> bool:
    return isinstance(node, MappingNode | SequenceNode) and not node.flow_style and bool(node.value)


def _nested(indent: int) -> int:
    """Where a block nested in a mapping starts: the next multiple of four (go-yaml v3
    ``yaml_emitter_increase_indent``)."""
    return _INDENT * ((indent + _INDENT) // _INDENT)


def _block(node: Node, indent: int, out: list[str]) -> None:
    """A non-empty block mapping or sequence whose keys or items sit at ``indent``."""
    pad = " " * indent
    if isinstance(node, MappingNode):
        for key, value in node.value:
            head = pad + (
                _inline(key, in_flow=False) if isinstance(key, ScalarNode) else _flow(key)
            )
            _value(head + ":", value, _nested(indent), out)
        return
    assert isinstance(node, SequenceNode)
    for item in node.value:
        if _is_block_collection(item):
            # The first key (or item) follows "- " on the same line, two columns in.
            nested: list[str] = []
            _block(item, indent + 2, nested)
            nested[0] = pad + "- " + nested[0][indent + 2 :]
            out.extend(nested)
        else:
            _value(pad + "-", item, indent + 2, out)


def _value(head: str, node: Node, block_indent: int, out: list[str]) -> None:
    """``head`` (``key:`` or ``-``) and its value; nested blocks start at ``block_indent``."""
    if _is_block_collection(node):
        out.append(head)
        _block(node, block_indent, out)
        return
    if isinstance(node, ScalarNode):
        style = _block_style(node)
        if style is not None:
            out.append(f"{head} {style}{_block_hints(node.value)}")
            out.extend(_block_lines(node.value, style, block_indent))
            return
        text = _inline(node, in_flow=False)
        out.append(f"{head} {text}" if text else head)
        return
    out.append(f"{head} {_flow(node)}")


def encode_go_yaml(root: Node) -> str:
    """The document ``root`` as go-yaml v3's ``yaml.Marshal`` writes it."""
    if _is_block_collection(root):
        lines: list[str] = []
        _block(root, 0, lines)
        return "\n".join(lines) + "\n"
    if isinstance(root, ScalarNode):
        return _inline(root, in_flow=False) + "\n"
    return _flow(root) + "\n"


def go_float(value: float) -> str:
    """``strconv.FormatFloat(v, 'g', -1, 64)``, the form go-yaml writes floats in: the
    shortest digits, exponent form below 1e-4 and from 1e6 on (``1e+06``)."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    if 1e-4 <= abs(value) < 1e6:  # fixed notation, where repr gives Go's digits
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    sign = "-" if value < 0 else ""
    exact = decimal.Decimal(repr(abs(value))).normalize()
    digits = "".join(map(str, exact.as_tuple().digits))
    exponent = int(exact.as_tuple().exponent)
    point = len(digits) + exponent  # where the decimal point falls in the digits
    exp = point - 1
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


# --- nodes for values that come from no YAML text ------------------------------------------


def _scalar_text(value: Any) -> tuple[str, str]:
    """(text, style) of a Python scalar as go-yaml encodes the Go value."""
    if value is None:
        return "null", ""
    if value is True or value is False:
        return ("true" if value else "false"), ""
    if isinstance(value, int):
        return str(value), ""
    if isinstance(value, float):
        return go_float(value), ""
    text = str(value)
    if "\n" in text:
        return text, "|"
    if _PLAIN.fullmatch(text) and plain_scalar_tag(text) == _STR:
        return text, ""
    return text, '"'


_PLAIN = re.compile(r"[A-Za-z0-9_.(/][A-Za-z0-9_./()+=~^$@,<>-]*(?: [A-Za-z0-9_./()+=~^$@,<>-]+)*")


def node_from_value(value: Any) -> Node:
    """A node for a value given as Python data (a mapping source, an override value)."""
    if isinstance(value, dict):
        return MappingNode(
            _MAP, [(node_from_value(str(k)), node_from_value(v)) for k, v in value.items()]
        )
    if isinstance(value, list | tuple):
        return SequenceNode(_SEQ, [node_from_value(v) for v in value])
    text, style = _scalar_text(value)
    tag = _STR if isinstance(value, str) else plain_scalar_tag(text)
    return ScalarNode(tag, text, style=style or None)


def override_node(text: str | None, value: Any) -> Node:
    """The node an override puts in the tree: its text parsed as YAML when it was given as
    text (runconfig_override.go ``parseOverrideNode``), else the value itself. A variable's
    value given as a list or mapping is kept as text, and written as a string."""
    if text is not None:
        import yaml

        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
        except yaml.YAMLError:
            node = None
        if node is None and not text.strip():
            return ScalarNode("tag:yaml.org,2002:null", "null")
        if isinstance(node, ScalarNode) or (node is not None and not isinstance(value, str)):
            return node  # as parsed, also where the value is kept as text (variables)
    return node_from_value(value)


def set_node(root: Node, parts: list[str | int], node: Node) -> None:
    """Put ``node`` at ``parts`` in the tree, making missing mappings on the way (appended
    at the end, as runconfig_override.go ``applyOverrides`` does)."""
    current = root
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(current, SequenceNode) and isinstance(part, int):
            if last:
                current.value[part] = node
                return
            current = current.value[part]
            continue
        if not isinstance(current, MappingNode):
            return
        key = str(part)
        for index, (key_node, value_node) in enumerate(current.value):
            if isinstance(key_node, ScalarNode) and key_node.value == key:
                if last:
                    current.value[index] = (key_node, node)
                    return
                if not isinstance(value_node, MappingNode | SequenceNode):
                    value_node = MappingNode(_MAP, [])
                    current.value[index] = (key_node, value_node)
                current = value_node
                break
        else:
            child: Node = node if last else MappingNode(_MAP, [])
            current.value.append((ScalarNode(_STR, key), child))
            if last:
                return
            current = child


def go_yaml_dump(value: Any) -> str:
    """Python data as go-yaml writes it, in the data's own key order."""
    return encode_go_yaml(node_from_value(value))
