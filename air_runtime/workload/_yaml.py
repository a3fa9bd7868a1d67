"""Safe YAML reading that remembers where every value came from.

We compose with PyYAML's ``SafeLoader`` and build Python values ourselves, so that we can
record the line/column of each node under its dotted path, keep environment variable values
as the literal text the user wrote (``RANK: 0`` is ``"0"``, ``X: 1.50`` is ``"1.50"``), and
count nodes while expanding aliases: a "billion laughs" document hits the bound after a few
thousand nodes instead of exhausting memory.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from air_runtime._errors import Problem

MAX_BYTES = 1024 * 1024
# Values built from the document (bounded by its size anyway) and values built again by
# expanding an alias: real workloads have a few hundred of each, a "billion laughs" has 10^9.
MAX_NODES = 500_000
MAX_ALIAS_NODES = 10_000
MAX_DEPTH = 64

_NULL_TAG = "tag:yaml.org,2002:null"
_STR_TAG = "tag:yaml.org,2002:str"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"

_LITERAL_PATHS = re.compile(
    r"^(env_variables\.[^.\[\]]+|containers\[\d+\]\.environment_variables\.variables\.[^.\[\]]+)$"
)

Mark = tuple[int, int]

# libyaml's parser when present: the pure-Python one takes seconds on a 1 MiB document.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Resolver(yaml.resolver.Resolver):
    """PyYAML's YAML 1.1 resolver, plus the exponent floats without a point (``1e-05``,
    ``5e+08``) that go-yaml v3 reads as floats and writes for large and small values, so a
    re-encoded training_config.yaml reads back as the CLI reads it."""


_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)
_RESOLVER = _Resolver()


def _resolve_plain(value: str) -> str:
    return _RESOLVER.resolve(ScalarNode, value, (True, False))


_resolve_plain_cached = functools.lru_cache(maxsize=4096)(_resolve_plain)


def plain_scalar_tag(value: str) -> str:
    """The tag PyYAML's resolver gives the plain (unquoted) scalar ``value``.

    Short ones are cached: the same few words (``name``, ``command``, ``true``, ...) come
    back in every document, and the resolver tries a list of regular expressions for each.
    Long text is not kept (the cache would hold it)."""
    return _resolve_plain_cached(value) if len(value) <= 128 else _resolve_plain(value)


class _SafeLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        # The composer asks this for every node. Scalars are resolved from their text
        # alone (the safe loader registers no path resolvers), so plain ones go through
        # the cache; everything else as before.
        if kind is ScalarNode and not self.yaml_path_resolvers:
            return plain_scalar_tag(value) if implicit[0] else _STR_TAG
        return super().resolve(kind, value, implicit)


def is_literal_path(path: str) -> bool:
    """Values at these paths are environment variables: keep the text as written."""
    return bool(_LITERAL_PATHS.match(path))


@dataclass
class SourceMarks:
    """1-based (line, column) of each value and of each mapping key, by dotted path."""

    values: dict[str, Mark] = field(default_factory=dict)
    keys: dict[str, Mark] = field(default_factory=dict)
    # paths set by overrides: their values come from no line of the file
    overridden: set[str] = field(default_factory=set)
    # the composed document (styles and key order), re-encoded as training_config.yaml
    root: Node | None = None

    def is_overridden(self, path: str) -> bool:
        return self.override_for(path) is not None

    def override_for(self, path: str) -> str | None:
        """The override key that set ``path`` (or a mapping holding it), or None."""
        for key in sorted(self.overridden, key=len, reverse=True):
            if path == key or path.startswith((key + ".", key + "[")):
                return key
        return None


class YamlLoadError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def child_path(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _mark(node: Node) -> Mark:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    def __init__(self, loader: Any, keep_literal: Callable[[str], bool]) -> None:
        self.loader = loader
        self.keep_literal = keep_literal
        self.count = 0
        self.alias_count = 0
        self.seen: set[int] = set()
        self.marks = SourceMarks()

    def fail(self, node: Node, path: str, message: str, hint: str | None = None) -> None:
        line, column = _mark(node)
        raise YamlLoadError(Problem(path, message, hint, line, column))

    def build(self, node: Node, path: str, depth: int, in_alias: bool = False) -> Any:
        self.count += 1
        if in_alias or id(node) in self.seen:
            in_alias = True
            self.alias_count += 1
        else:
            self.seen.add(id(node))
        if self.count > MAX_NODES or self.alias_count > MAX_ALIAS_NODES:
            self.fail(
                node,
                path,
                f"the document expands to more than {MAX_ALIAS_NODES} values through aliases"
                if self.alias_count > MAX_ALIAS_NODES
                else f"the document has more than {MAX_NODES} values",
                "remove the nested anchors/aliases; a workload needs only a few hundred values",
            )
        if depth > MAX_DEPTH:
            self.fail(
                node,
                path,
                f"the document nests deeper than {MAX_DEPTH} levels",
                "flatten the structure",
            )
        if path not in self.marks.values:
            self.marks.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, ScalarNode):
            # strings inline: most values are, and a call per value shows in the profile
            return node.value if node.tag == _STR_TAG else self.scalar(node, path)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ_TAG:
                self.fail(node, path, f"unsupported YAML tag {node.tag!r}", "remove the tag")
            return [
                self.build(item, f"{path}[{i}]", depth + 1, in_alias)
                for i, item in enumerate(node.value)
            ]
        if isinstance(node, MappingNode):
            if node.tag != _MAP_TAG:
                self.fail(node, path, f"unsupported YAML tag {node.tag!r}", "remove the tag")
            return self.mapping(node, path, depth, in_alias)
        self.fail(node, path, "unsupported YAML node")  # pragma: no cover
        return None  # pragma: no cover

    def scalar(self, node: ScalarNode, path: str) -> Any:
        tag = node.tag
        if tag == _STR_TAG:
            # What the constructor would return, without its per-node bookkeeping: most
            # scalars of a workload are strings.
            return node.value
        if tag != _NULL_TAG and self.keep_literal(path):
            return str(node.value)
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            self.fail(
                node,
                path,
                f"cannot read this value: {getattr(exc, 'problem', exc)}",
                "use plain YAML scalars, lists and mappings (no tags)",
            )
        except (ValueError, OverflowError) as exc:
            self.fail(node, path, f"cannot read this value: {exc}")
        return None  # pragma: no cover

    def mapping(self, node: MappingNode, path: str, depth: int, in_alias: bool) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                # `<<: *base` merges; built through `build` so expansions are counted.
                sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                for source in sources:
                    value = self.build(source, path, depth + 1, in_alias)
                    if not isinstance(value, dict):
                        self.fail(source, path, "a merge key (<<) must refer to a mapping")
                    for k, v in value.items():
                        merged.setdefault(k, v)
                continue
            if not isinstance(key_node, ScalarNode):
                self.fail(
                    key_node,
                    path,
                    "mapping keys must be plain scalars",
                    "use a simple name as the key",
                )
            key = key_node.value if key_node.tag == _STR_TAG else self.scalar(key_node, "")
            if key is None or isinstance(key, list | dict):
                self.fail(
                    key_node,
                    path,
                    "mapping keys must be plain scalars",
                    "use a simple name as the key",
                )
            sub = f"{path}.{key}" if path else str(key)  # child_path, inline
            if key in result:
                self.fail(key_node, sub, f"duplicate key {key!r}", "keep only one of them")
            if sub not in self.marks.keys:
                self.marks.keys[sub] = (
                    key_node.start_mark.line + 1,
                    key_node.start_mark.column + 1,
                )
            result[key] = self.build(value_node, sub, depth + 1, in_alias)
        for k, v in merged.items():
            result.setdefault(k, v)
        return result


def decode_source(data: bytes) -> str:
    """UTF-8 text of ``data`` (size limit first, so huge inputs are never decoded)."""
    if len(data) > MAX_BYTES:
        raise YamlLoadError(
            Problem(
                "",
                f"the workload is {len(data)} bytes, over the 1 MiB limit",
                "keep the YAML small: move large data into code_source or a volume",
            )
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Point at the first bad byte the way YAML problems are located (1-based).
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        raise YamlLoadError(
            Problem(
                "",
                f"the workload is not valid UTF-8 (byte {exc.start})",
                "save the file as UTF-8",
                line=data.count(b"\n", 0, exc.start) + 1,
                column=exc.start - line_start + 1,
            )
        ) from None


def load_yaml_text(
    text: str, keep_literal: Callable[[str], bool] = is_literal_path
) -> tuple[Any, SourceMarks]:
    """Parse one YAML document; raise ``YamlLoadError`` with a located problem otherwise."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlLoadError(
            Problem(
                "",
                "the workload is over the 1 MiB limit",
                "keep the YAML small: move large data into code_source or a volume",
            )
        )
    loader = _SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
            message = " ".join(str(p) for p in (exc.context, exc.problem) if p)
            raise YamlLoadError(
                Problem("", f"YAML syntax error: {message}", "fix the YAML syntax", line, column)
            ) from None
        except yaml.reader.ReaderError as exc:
            # A character YAML does not accept: located by its index in the text.
            line_start = text.rfind("\n", 0, exc.position) + 1
            line = text.count("\n", 0, exc.position) + 1
            column = exc.position - line_start + 1
            raise YamlLoadError(
                Problem("", f"YAML error: {exc}", "fix the YAML syntax", line, column)
            ) from None
        except yaml.YAMLError as exc:
            raise YamlLoadError(Problem("", f"YAML error: {exc}", "fix the YAML syntax")) from None
        except RecursionError:
            raise YamlLoadError(
                Problem("", "the document nests too deeply", "flatten the structure")
            ) from None
        if node is None:
            raise YamlLoadError(
                Problem("", "the workload is empty", "start from one of the examples/ files")
            )
        builder = _Builder(loader, keep_literal)
        try:
            data = builder.build(node, "", 0)
        except RecursionError:
            raise YamlLoadError(
                Problem("", "the document nests too deeply", "flatten the structure")
            ) from None
        builder.marks.root = node
        return data, builder.marks
    finally:
        loader.dispose()
