"""Jinja settings for workload templates.

Secret references ``{{secrets/<scope>/<key>}}`` are kept verbatim by the core's workload
environment (``air_runtime.workload_template_environment``); every other ``{{ ... }}`` is
rendered as usual. Absolute workload paths are also allowed (Airflow's loader only searches
the Dag folder and ``template_searchpath``).
"""

from __future__ import annotations

from typing import Any

import jinja2

from air_runtime import workload_template_environment


def workload_template_env(env: jinja2.Environment) -> jinja2.Environment:
    loaders: list[Any] = [env.loader] if env.loader is not None else []
    loaders.append(jinja2.FileSystemLoader("/"))
    return workload_template_environment(env.overlay(loader=jinja2.ChoiceLoader(loaders)))
