"""``secret_env``: environment variables whose values live in Airflow (docs/spec/workload.md §6).

A reference names where the value is, never the value itself:

- ``conn:<conn_id>:<field>``: a connection field (``password``, ``login``, ``host``,
  ``schema``, ``port``, ``uri``) or ``extra.<key>`` for one key of its extra JSON;
- ``var:<name>``: an Airflow variable.

Values are resolved only at execute time, registered with Airflow's secrets masker at once,
written to a Databricks secret scope under keys of this submission alone
(``air_runtime.Submission.prepare``), and the workload carries only ``scope/key`` references. They are never assigned to
an operator field, so they cannot reach rendered template fields or XCom; the only copy kept
is inside the try's ``air_runtime.Redactor``, which removes them (and their base64, URL and
JSON encodings) from failure messages and streamed log lines. The triggerer looks the same
references up again (``secret_values``): a trigger's serialized kwargs carry references,
never values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_air._lookups import (
    ConnectionLookup,
    Lookup,
    MaskSecret,
    VariableLookup,
    run_lookups,
)
from airflow_air.exceptions import AirConfigurationError

if TYPE_CHECKING:
    from airflow.sdk import Context

    from air_runtime import AirClient, Redactor
    from airflow_air.operators import AirRunOperator

_CONN_FIELDS = ("password", "login", "host", "schema", "port", "uri")


def check_references(secret_env: Mapping[str, str]) -> None:
    """Reject malformed references early, with what to write instead (no lookups)."""
    from air_runtime.workload import ENV_NAME_RE

    problems = []
    for name, ref in secret_env.items():
        if not ENV_NAME_RE.match(str(name)):
            problems.append(f"{name!r}: not a valid environment variable name")
        if not isinstance(ref, str) or not (ref.startswith("conn:") or ref.startswith("var:")):
            problems.append(
                f"{name}: {ref!r} is not a reference; use 'conn:<conn_id>:<field>' or "
                "'var:<variable name>' (the value itself must not appear in the DAG)"
            )
        elif ref.startswith("conn:") and len(ref.split(":", 2)) != 3:
            problems.append(f"{name}: {ref!r} needs a field, e.g. 'conn:hf_default:password'")
    if problems:
        raise AirConfigurationError("invalid secret_env:\n  - " + "\n  - ".join(problems))


def _reference_value(name: str, ref: str) -> Lookup[str]:
    """The value a well-formed reference points to; an ``AirConfigurationError`` naming the
    reference when it cannot be looked up or is empty."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    if ref.startswith("conn:"):
        _, conn_id, field = ref.split(":", 2)
        try:
            conn = yield ConnectionLookup(conn_id)
        except AirflowNotFoundException as exc:
            raise AirConfigurationError(
                f"secret_env {name}: Airflow connection {conn_id!r} is not defined"
            ) from exc
        return _field_of(conn, name, conn_id, field)
    key = ref.removeprefix("var:")
    value = yield VariableLookup(key)
    if value is None or value == "":
        raise AirConfigurationError(
            f"secret_env {name}: Airflow variable {key!r} is not defined or empty"
        )
    return str(value)


def _field_of(conn: Any, name: str, conn_id: str, field: str) -> str:
    if field.startswith("extra."):
        value = (conn.extra_dejson or {}).get(field.removeprefix("extra."))
    elif field == "uri":
        value = conn.get_uri()
    elif field in _CONN_FIELDS:
        value = getattr(conn, field)
    else:
        raise AirConfigurationError(
            f"secret_env {name}: unknown connection field {field!r}; use one of "
            f"{', '.join(_CONN_FIELDS)} or extra.<key>"
        )
    if value is None or value == "":
        raise AirConfigurationError(
            f"secret_env {name}: field {field!r} of connection {conn_id!r} is empty"
        )
    return str(value)


def resolve_secret_env(secret_env: Mapping[str, str]) -> dict[str, str]:
    """Look every reference up and mask each value before anything can log it."""
    check_references(secret_env)
    return run_lookups(_resolved(secret_env))


def _resolved(secret_env: Mapping[str, str]) -> Lookup[dict[str, str]]:
    values: dict[str, str] = {}
    for name, ref in secret_env.items():
        value = yield from _reference_value(name, ref)
        yield MaskSecret(value, name)
        values[name] = value
    return values


def secret_values(secret_env: Mapping[str, str]) -> Lookup[list[str]]:
    """The values the references point to, for redaction, each masked once looked up; a
    reference that cannot be looked up is skipped (the submit reports it; a reattaching try
    may never need it). The triggerer looks the references up again with
    ``run_lookups_in_loop``: a trigger's serialized kwargs carry references, never values."""
    values = []
    for name, ref in secret_env.items():
        if not isinstance(ref, str) or not ref.startswith(("conn:", "var:")):
            continue
        try:
            value = yield from _reference_value(name, ref)
        except Exception:
            continue
        yield MaskSecret(value, name)
        values.append(value)
    return values


# --- a try's scopes and redaction ------------------------------------------------------------


def secret_scope_of(task: AirRunOperator, secret_scope: str | None = None) -> str:
    """The scope ``secret_env`` values are written to (``secret_scope``: a rendered one)."""
    from airflow_air.hooks import default_secret_scope

    return secret_scope or task.secret_scope or default_secret_scope()


def submission_scopes(task: AirRunOperator, context: Context) -> list[str]:
    """The scopes the keys of ``task``'s submission are in. A workflow stage's are those of
    every stage of its run: the submit task wrote them all under one submission, and
    whichever stage task sees the whole run end deletes them (the last stage often has no
    ``secret_env`` of its own)."""
    stages = task.workflow_stages() or [task]
    scopes: list[str] = []
    for stage in stages:
        if not stage.secret_env:
            continue
        scope = stage.secret_scope
        if stage is not task and isinstance(scope, str) and "{{" in scope:
            scope = stage.render_template(scope, context)  # rendered when the stage runs
        scope = secret_scope_of(stage, scope)
        if scope not in scopes:
            scopes.append(scope)
    return scopes


def redaction_references(task: AirRunOperator) -> dict[str, str]:
    """The ``secret_env`` references whose values must not show in this task's messages:
    its own and, for a workflow stage, those of the other stages of its run (their
    workloads share one run, and a stage's log can print a sibling's secret)."""
    references: dict[str, str] = {}
    for other in task.workflow_stages():
        if other is not task:
            for name, ref in (other.secret_env or {}).items():
                if isinstance(ref, str) and "{{" not in ref:
                    references[f"{other.task_id}.{name}"] = ref
    references.update(task.secret_env or {})
    return references


def try_redactor(
    task: AirRunOperator, client: AirClient | None = None, *, check: bool = False
) -> Redactor:
    """The workspace credentials and every value of ``redaction_references``, looked up
    again, so a reattaching or resumed try that did not submit redacts them too. ``check``:
    a try about to submit checks its own references first (a malformed one fails it)."""
    from air_runtime import Redactor, credential_secrets
    from airflow_air.hooks import AirHook

    if check and not task.workflow_submit_task_id and task.secret_env:
        check_references(task.secret_env)
    values = run_lookups(secret_values(redaction_references(task)))
    if client is not None:
        redactor = client.redactor.with_values(values)
    else:
        redactor = Redactor(values)
        try:
            access = AirHook(task.databricks_conn_id).workspace_access()
            redactor.add(*credential_secrets(access.credentials))
        except Exception:  # the connection is checked where it is used
            pass
    if redactor.ignored:
        task.log.warning(
            "%d secret_env value(s) are shorter than 4 characters: they are not "
            "redacted from messages and logs (too short to tell from ordinary text)",
            redactor.ignored,
        )
    return redactor
