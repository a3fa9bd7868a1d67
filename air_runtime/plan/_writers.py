"""The launch directory's side files, written byte for byte as the CLI's Go writers write
them (databricks/cli cmd/air/runupload.go): ``json.Marshal`` for the env files, go-yaml for
``hyperparameters.yaml``, the command as written for ``command.sh``."""

from __future__ import annotations

import json
import re
from typing import Any

from air_runtime.workload._go_yaml import go_float
from air_runtime.workload._yaml import plain_scalar_tag


def go_json(value: Any) -> bytes:
    """JSON as Go's ``json.Marshal`` writes it (runupload.go): compact, UTF-8, with ``<``,
    ``>``, ``&``, U+2028 and U+2029 escaped, no trailing newline."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if _GO_ESCAPED.search(text):
        text = _GO_ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text.encode("utf-8")


_GO_ESCAPED = re.compile("[<>&\u2028\u2029]")


def command_script(command: str) -> bytes:
    """``command.sh`` holds the command exactly as written (runupload.go)."""
    return command.encode("utf-8")


def _go_yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return go_float(value)
    text = str(value)
    # Plain when it is a run of ordinary words that reads back as the same string (not a
    # number, bool or null, YAML 1.1's included); double-quoted otherwise, the style
    # go-yaml falls back to.
    if _PLAIN_WORDS.fullmatch(text) and plain_scalar_tag(text) == "tag:yaml.org,2002:str":
        return text
    return _NOT_PRINTABLE.sub(
        lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False)
    )


_PLAIN_WORDS = re.compile(r"[A-Za-z0-9_.(][A-Za-z0-9_./()+=~^$@-]*(?: [A-Za-z0-9_./()+=~^$@-]+)*")
# Characters YAML does not allow as they are, or reads as line breaks: escaped inside
# double quotes.
_NOT_PRINTABLE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def _go_yaml_lines(value: Any, indent: str, out: list[str]) -> None:
    """A mapping or sequence as go-yaml v3 writes it: keys sorted, four-space indent."""
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            item = value[key]
            name = _go_yaml_scalar(key if isinstance(key, str) else str(key))
            if isinstance(item, (dict, list)) and item:
                out.append(f"{indent}{name}:\n")
                _go_yaml_lines(item, indent + "    ", out)
            else:
                out.append(f"{indent}{name}: {_go_yaml_block(item)}\n")
        return
    for item in value:
        if isinstance(item, dict) and item:
            nested: list[str] = []
            _go_yaml_lines(item, indent + "  ", nested)
            nested[0] = f"{indent}- {nested[0][len(indent) + 2 :]}"
            out.extend(nested)
        elif isinstance(item, list) and item:
            out.append(f"{indent}- \n")
            _go_yaml_lines(item, indent + "    ", out)
        else:
            out.append(f"{indent}- {_go_yaml_block(item)}\n")


def _go_yaml_block(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _go_yaml_scalar(value)


def hyperparameters_yaml(parameters: dict[str, Any]) -> bytes:
    """``hyperparameters.yaml`` as the CLI writes the parameters map with go-yaml
    (runupload.go): sorted keys, four-space indent, Go's float form."""
    lines: list[str] = []
    _go_yaml_lines(parameters, "", lines)
    return "".join(lines).encode("utf-8")
