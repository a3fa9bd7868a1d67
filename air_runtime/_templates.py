"""Jinja-templated workloads: keeping secret references verbatim, and checking a template
before any orchestrator renders it.

A workload file may hold Jinja placeholders (``{{ ds }}``) that Airflow renders when the task
runs. To validate such a file earlier (``airo validate``, a Dag folder's test), it is rendered
with a *sample context*: the names Airflow gives templates, with fixed sample values, and
every other name (``var.value.x``, ``macros.ds_add(ds, 1)``) rendering as the word ``sample``.
Values that must be numbers or names can be given in the context (``airo validate --context
params.gpus=16``).

Workloads may also hold secret references ``{{secrets/<scope>/<key>}}`` (docs/spec/workload.md
§3); Jinja would read them as expressions, so they are wrapped in ``{% raw %}`` first.

jinja2 is optional: it is only imported when a template is rendered (Airflow brings it; or
``pip install "air-orchestration[templates]"``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from air_runtime._errors import Problem, WorkloadError

if TYPE_CHECKING:
    import jinja2

_SECRET_REFERENCE = re.compile(r"\{\{\s*secrets/[^{}]*\}\}")
_PLACEHOLDER = re.compile(r"\{\{|\{%|\{#")
SAMPLE_TEXT = "sample"
_SAMPLE_DATE = datetime(2026, 1, 1, tzinfo=UTC)


def has_template_placeholders(text: str) -> bool:
    """Whether ``text`` holds Jinja syntax other than secret references."""
    return bool(_PLACEHOLDER.search(_SECRET_REFERENCE.sub("", text)))


def keep_secret_references(source: str) -> str:
    """``source`` with each ``{{secrets/...}}`` wrapped in ``{% raw %}``."""
    return _SECRET_REFERENCE.sub(lambda m: "{% raw %}" + m.group(0) + "{% endraw %}", source)


def sample_template_context(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The names Airflow gives a task's templates, with sample values; ``extra`` (nested
    mappings merged) adds or replaces names, e.g. ``{"params": {"gpus": 16}}``."""
    date = _SAMPLE_DATE
    run_id = f"manual__{date.isoformat()}"
    context: dict[str, Any] = {
        "ds": date.strftime("%Y-%m-%d"),
        "ds_nodash": date.strftime("%Y%m%d"),
        "ts": date.isoformat(),
        "ts_nodash": date.strftime("%Y%m%dT%H%M%S"),
        "ts_nodash_with_tz": date.strftime("%Y%m%dT%H%M%S%z"),
        "logical_date": date,
        "data_interval_start": date,
        "data_interval_end": date + timedelta(days=1),
        "run_id": run_id,
        "params": {},
        "dag_run": {"run_id": run_id, "conf": {}, "logical_date": date},
        "try_number": 1,
        "map_index": -1,
    }
    for key, value in (extra or {}).items():
        current = context.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            context[key] = {**current, **value}
        else:
            context[key] = value
    return context


@functools.cache
def _jinja_classes() -> tuple[type[Any], type[Any]]:
    """(the secret-reference extension, the sample undefined); jinja2 imported on first use."""
    import jinja2
    from jinja2.ext import Extension

    class KeepSecretReferences(Extension):
        """Wraps each ``{{secrets/...}}`` in ``{% raw %}`` before Jinja parses the template."""

        def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
            return keep_secret_references(source)

        # Several environments of one process share this class: compare by type, so
        # overlays of an environment that already has it do not add it twice.
        identifier = "air_runtime.KeepSecretReferences"

    class SampleUndefined(jinja2.ChainableUndefined):
        """A name the sample context does not define: ``sample`` in text, callable, chainable."""

        def __str__(self) -> str:
            return SAMPLE_TEXT

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return self

    return KeepSecretReferences, SampleUndefined


def workload_template_environment(
    base: jinja2.Environment | None = None, *, sample: bool = False
) -> jinja2.Environment:
    """A Jinja environment for workloads (``base`` overlaid, or a new one) that keeps secret
    references verbatim; with ``sample``, undefined names render as ``sample``."""
    import jinja2

    extension, undefined = _jinja_classes()
    options: dict[str, Any] = {"undefined": undefined} if sample else {}
    if base is None:
        return jinja2.Environment(extensions=[extension], keep_trailing_newline=True, **options)
    return base.overlay(extensions=[extension], **options)


def render_workload_sample(
    text: str,
    context: Mapping[str, Any] | None = None,
    *,
    source_name: str | None = None,
    environment: jinja2.Environment | None = None,
) -> str:
    """Render a templated workload with ``sample_template_context(context)`` (text without
    placeholders is returned as is). A template that cannot render raises ``WorkloadError``
    naming ``source_name``."""
    if not has_template_placeholders(text):
        return text
    try:
        import jinja2
    except ImportError:
        raise WorkloadError(
            [
                Problem(
                    "",
                    "the workload holds Jinja placeholders and jinja2 is not installed",
                    'pip install "air-orchestration[templates]" (Airflow installs it too)',
                )
            ],
            source_name,
        ) from None
    env = workload_template_environment(environment, sample=True)
    try:
        return str(env.from_string(text).render(sample_template_context(context)))
    except jinja2.TemplateSyntaxError as exc:
        problem = Problem("", f"Jinja syntax error: {exc.message}", None, exc.lineno, None)
    except Exception as exc:  # a filter or call failing on a sample value
        problem = Problem(
            "",
            f"the template does not render with the sample context: {type(exc).__name__}: {exc}",
            "give the value it needs in the context (airo validate --context KEY=VALUE)",
        )
    raise WorkloadError([problem], source_name)
