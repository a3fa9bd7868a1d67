"""Names a package exports but imports only on first use (PEP 562 module ``__getattr__``), so
importing the package stays cheap: a DAG file importing ``air_runtime`` pays for no HTTP
client, ``airo`` reading the local workspace's token file for no server."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(namespace: dict[str, Any], exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of the package whose ``globals()`` is ``namespace``: each name of
    ``exports`` (name -> module) is imported from its module when first asked for, then kept
    in the namespace (later lookups are plain attribute reads)."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
