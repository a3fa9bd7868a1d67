"""The workspace's field errors (``config:validate``) in the workload's own names, with a fix.

The service answers in the names of its wire, relative to the ``ai_runtime_task`` or the run
options (acceptance/air/run-backend-error: ``deployments[0].compute.accelerator_count``,
``env_variables[1INVALID]``), and the CLI prints them as they come (validateconfig.go
formatConfigErrors). The user wrote ``compute.num_accelerators`` and ``compute.pool_id``
(``plan/_build`` turns one into the other): each error is named after the workload's field,
the wire's names in its message too, with a fix where the service's code says what to do.
A path this table does not know is kept as the service sent it."""

from __future__ import annotations

import re
from typing import Any

from .._errors import Problem

_DEPLOYMENT = r"(?:task\.)?deployments\[0\]\."
# (the service's path, the workload's field), first match wins.
_FIELDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), field)
    for pattern, field in (
        (rf"^{_DEPLOYMENT}compute\.accelerator_count$", "compute.num_accelerators"),
        (rf"^{_DEPLOYMENT}compute\.accelerator_type$", "compute.accelerator_type"),
        (rf"^{_DEPLOYMENT}compute\.provisioned_capacity_id$", "compute.pool_id"),
        (rf"^{_DEPLOYMENT}compute$", "compute"),
        (rf"^{_DEPLOYMENT}command_path$", "command"),
        (
            rf"^{_DEPLOYMENT}containers\[(\d+)\]\.unity_catalog_image_path$",
            r"containers[\1].unity_catalog_image",
        ),
        (rf"^{_DEPLOYMENT}containers\[(\d+)\]\.command_path$", r"containers[\1].command"),
        (rf"^{_DEPLOYMENT}containers\[(\d+)\](.*)$", r"containers[\1]\2"),
        (r"^(?:task\.)?unity_catalog_image_path$", "environment.unity_catalog_image"),
        (r"^(?:task\.)?docker_image_url$", "environment.docker_image.url"),
        (r"^(?:task\.)?priority_class$", "compute.priority_class"),
        (r"^(?:task\.)?experiment$", "experiment_name"),
        (r"^(?:task\.)?mlflow_run$", "mlflow_run_name"),
        (r"^(?:task\.)?(mlflow_experiment_directory|mlflow_artifact_location)$", r"\1"),
        (r"^(?:run_options\.)?env_variables\[(.+)\]$", r"env_variables.\1"),
        (r"^(?:run_options\.)?secrets\[(.+)\]$", r"secrets.\1"),
        (r"^run_options\.(\w+)$", r"\1"),
    )
)
# The wire's names in the service's messages ("accelerator_count must be at most 1024").
_WORDS = {
    "accelerator_count": "compute.num_accelerators",
    "provisioned_capacity_id": "compute.pool_id",
    "unity_catalog_image_path": "unity_catalog_image",
}
_WORD = re.compile(r"\b(" + "|".join(_WORDS) + r")\b")


def workload_field(wire_path: str) -> str:
    """The workload's field for a path of the service's answer (itself when unknown)."""
    for pattern, field in _FIELDS:
        if pattern.match(wire_path):
            return pattern.sub(field, wire_path)
    return wire_path


def _fix(field: str, code: str) -> str | None:
    """What to do, when the service's code says it."""
    if field == "compute.pool_id" and code == "NOT_FOUND":
        return "name one of this workspace's GPU pools (`airo pools list`), or leave pool_id out"
    if field == "compute.accelerator_type" and code == "FAILED_PRECONDITION":
        return "set the accelerator type of the pool (`airo pools get POOL_ID`) or use another pool"
    if field.endswith("unity_catalog_image") and code == "NOT_FOUND":
        return "push the image first (`airo images push`), or correct its name and tag"
    if code == "OUT_OF_RANGE":
        return "choose a value within the range the message gives"
    if code == "DISALLOWED_CHARACTERS":
        return "use letters, digits and underscores, not starting with a digit"
    if code == "PERMISSION_DENIED":
        return "ask a workspace admin for access"
    return None


def field_problems(answer: Any) -> list[Problem]:
    """The field errors of a config:validate answer (validateconfig.go configFieldError:
    path, message, code), each named after the workload's field, with a fix when known."""
    problems = []
    for item in (answer.get("errors") if isinstance(answer, dict) else None) or []:
        if not isinstance(item, dict):
            continue
        field = workload_field(str(item.get("path") or ""))
        message = str(item.get("message") or "rejected by the workspace")
        message = _WORD.sub(lambda m: _WORDS[m.group(1)], message)
        problems.append(
            Problem(path=field, message=message, hint=_fix(field, str(item.get("code") or "")))
        )
    return problems
