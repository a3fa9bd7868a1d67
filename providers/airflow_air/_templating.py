"""Jinja settings for workload templates.

Workloads may hold secret references of the form ``{{secrets/<scope>/<key>}}`` (docs/spec/workload.md §3).
Jinja would read them as expressions and fail, so they are passed through verbatim; every
other ``{{ ... }}`` is rendered as usual. Absolute workload paths are also allowed (Airflow's
loader only searches the Dag folder and ``template_searchpath``).
"""

from __future__ import annotations

import re
from typing import Any

import jinja2
from jinja2.ext import Extension

_SECRET_REFERENCE = re.compile(r"\{\{\s*secrets/[^{}]*\}\}")


class KeepSecretReferences(Extension):
    """Wraps each ``{{secrets/...}}`` in ``{% raw %}`` before Jinja parses the template."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return _SECRET_REFERENCE.sub(lambda m: "{% raw %}" + m.group(0) + "{% endraw %}", source)


def workload_template_env(env: jinja2.Environment) -> jinja2.Environment:
    loaders: list[Any] = [env.loader] if env.loader is not None else []
    loaders.append(jinja2.FileSystemLoader("/"))
    return env.overlay(loader=jinja2.ChoiceLoader(loaders), extensions=[KeepSecretReferences])
