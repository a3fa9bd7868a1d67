"""Flows for secret scopes and secrets (docs/spec/rest-api.md §3). Values travel only in the body of
``secrets/put``, which is never logged."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from .._errors import AirError, AuthError, ConfigurationError, NotFound, PlatformError
from ..platform import MAX_SECRET_NAME_LENGTH, SECRET_KEY_CHARACTERS, SECRET_SCOPE_CHARACTERS
from ._core import ClientCore, Flow, gather
from ._identity import whoami

SECRETS_API = "/api/2.0/secrets"
MAX_KEY_LENGTH = MAX_SECRET_NAME_LENGTH
_KEY_FORBIDDEN = re.compile(f"[^{SECRET_KEY_CHARACTERS}]")
_SCOPE_FORBIDDEN = re.compile(f"[^{SECRET_SCOPE_CHARACTERS}]")
T = TypeVar("T")
_PARALLEL_PUTS = 8


def _fit(name: str, forbidden: re.Pattern[str]) -> str:
    cleaned = forbidden.sub("_", name)
    if len(cleaned) <= MAX_KEY_LENGTH:
        return cleaned
    # Keep names distinct after truncation by ending them with a digest of the full name.
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return f"{cleaned[: MAX_KEY_LENGTH - 13]}-{digest}"


def secret_key_name(name: str) -> str:
    """A valid secret key (``[A-Za-z0-9_.-]``, ≤ 128 chars) derived from ``name``."""
    return _fit(name, _KEY_FORBIDDEN)


def secret_scope_name(name: str) -> str:
    return _fit(name, _SCOPE_FORBIDDEN)


def ensure_secret_scope(core: ClientCore, scope: str) -> Flow[None]:
    try:
        yield from core.call("POST", f"{SECRETS_API}/scopes/create", json={"scope": scope})
    except PlatformError as error:
        if error.error_code == "RESOURCE_ALREADY_EXISTS":
            return
        if error.error_code == "RESOURCE_LIMIT_EXCEEDED":
            raise ConfigurationError(
                f"cannot create secret scope {scope!r} on {core.host}: the workspace has "
                "reached its limit of secret scopes; reuse an existing scope"
            ) from error
        raise
    except AuthError as error:
        # A 403 here is either the scope's permissions or credentials the workspace refuses
        # everywhere (an invalid token answers 403 too): the current-user call tells them
        # apart, and a refused token is reported as what it is.
        try:
            yield from whoami(core)
        except AuthError:
            raise
        except AirError:
            pass  # cannot tell: the scope's permissions are the likelier cause
        raise ConfigurationError(
            f"not allowed to create secret scope {scope!r} on {core.host} "
            f"(credentials from {core.credentials.source}): ask a workspace admin to create "
            "it and grant you MANAGE on it, or pass an existing scope"
        ) from error


def put_secret(core: ClientCore, scope: str, key: str, value: str) -> Flow[None]:
    if secret_key_name(key) != key:
        raise ConfigurationError(
            f"secret key {key!r} is not valid: use up to {MAX_KEY_LENGTH} characters of "
            "letters, digits, '_', '.', '-'"
        )
    yield from core.call(
        "POST", f"{SECRETS_API}/put", json={"scope": scope, "key": key, "string_value": value}
    )


def materialize_secrets(
    core: ClientCore, values: Mapping[str, str], *, scope: str, key_prefix: str
) -> Flow[dict[str, str]]:
    """Store orchestrator-held values as workspace secrets; answer ``{NAME: "scope/key"}``
    for ``Workload.with_secrets``."""
    if not values:
        return {}
    yield from ensure_secret_scope(core, scope)
    keys = {name: secret_key_name(f"{key_prefix}{name}") for name in values}
    yield from gather(
        [put_secret(core, scope, keys[name], value) for name, value in values.items()],
        _PARALLEL_PUTS,
    )
    return {name: f"{scope}/{key}" for name, key in keys.items()}


# --- the secrets of one logical submission ------------------------------------------------
#
# Orchestrator secrets are written once per logical submission (deployment namespace,
# orchestrator, pipeline, run, task, map index or partition) under keys
#
#     airo.<label>.<task tag>.<submission tag>.<NAME>          (or ...<stage>.<NAME>)
#
# ``label`` is the task id made readable (no dots, at most 32 characters), the task tag is a
# digest of (namespace, orchestrator, pipeline, task) and the submission tag a digest of
# (run, map index): two runs, two deployments or two mapped instances never share a key,
# and every key of one task of one deployment starts with the same ``airo.<label>.<tag>.``.
# Right after the submit a marker ``<prefix>run-<run id>`` says which run reads the keys:
# once that run has ended, anyone (the task itself, its next run, ``airo secrets prune``)
# may delete the submission's keys. ``secrets/list`` returns key names only, so the scope
# itself is the record of what is left to delete.

KEY_NAMESPACE = "airo"
_TAG_LENGTH = 12
_LABEL_LENGTH = 32
_LABEL_FORBIDDEN = re.compile(r"[^A-Za-z0-9_-]")
_SUBMISSION_KEY = re.compile(
    rf"^{KEY_NAMESPACE}\.[A-Za-z0-9_-]*\.(?P<task>[0-9a-f]{{{_TAG_LENGTH}}})"
    rf"\.(?P<submission>[0-9a-f]{{{_TAG_LENGTH}}})\.(?P<rest>.+)$"
)
_MARKER = re.compile(r"^run-(?P<run_id>[0-9]+)$")
_PARALLEL_DELETES = 8


def _tag(*parts: object) -> str:
    key = json.dumps([None if p is None else str(p) for p in parts], separators=(",", ":"))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:_TAG_LENGTH]


@dataclass(frozen=True)
class SecretInfo:
    """One entry of ``secrets/list``: a key name and when it was last written (ms)."""

    key: str
    last_updated_ms: int | None


@dataclass(frozen=True)
class ParsedSecretKey:
    """A secret key name written by ``SubmissionSecrets``, parsed: the tags of its task and
    submission, and the run id when it is the marker key. (The submission itself is named by
    ``air_runtime.SubmissionKey``.)"""

    task_tag: str
    submission_tag: str
    marker_run_id: int | None  # set for the marker key


def parse_secret_key(key: str) -> ParsedSecretKey | None:
    match = _SUBMISSION_KEY.match(key)
    if match is None:
        return None
    marker = _MARKER.match(match["rest"])
    return ParsedSecretKey(
        match["task"], match["submission"], int(marker["run_id"]) if marker else None
    )


@dataclass(frozen=True)
class SubmissionSecrets:
    """The secret keys of one logical submission in one scope (see above)."""

    scope: str
    label: str
    task_tag: str
    submission_tag: str

    @classmethod
    def of(
        cls,
        scope: str,
        *,
        namespace: str,
        orchestrator: str,
        pipeline_id: str,
        task_key: str,
        run_id: str,
        map_index: int | str | None = None,
    ) -> SubmissionSecrets:
        label = _LABEL_FORBIDDEN.sub("_", task_key)[:_LABEL_LENGTH]
        return cls(
            scope=scope,
            label=label,
            task_tag=_tag(namespace, orchestrator, pipeline_id, task_key),
            submission_tag=_tag(run_id, map_index),
        )

    @property
    def prefix(self) -> str:
        return f"{KEY_NAMESPACE}.{self.label}.{self.task_tag}.{self.submission_tag}."

    def key(self, name: str, stage: str | None = None) -> str:
        return secret_key_name(self.prefix + (f"{stage}.{name}" if stage else name))

    def marker(self, run_id: int) -> str:
        return f"{self.prefix}run-{int(run_id)}"


def list_secrets(core: ClientCore, scope: str) -> Flow[list[SecretInfo]]:
    """The keys of ``scope`` (empty when the scope does not exist)."""
    try:
        body = yield from core.call("GET", f"{SECRETS_API}/list", params={"scope": scope})
    except NotFound:
        return []
    out = []
    for item in body.get("secrets") or []:
        updated = item.get("last_updated_timestamp")
        out.append(SecretInfo(str(item["key"]), int(updated) if updated is not None else None))
    return out


def delete_secret(core: ClientCore, scope: str, key: str) -> Flow[bool]:
    """Delete one key; False when it was already gone."""
    try:
        yield from core.call("POST", f"{SECRETS_API}/delete", json={"scope": scope, "key": key})
    except NotFound:
        return False
    return True


def _delete_keys(core: ClientCore, scope: str, keys: list[str]) -> Flow[int]:
    done = yield from gather([delete_secret(core, scope, k) for k in keys], _PARALLEL_DELETES)
    return sum(1 for d in done if d)


def store_submission_secrets(
    core: ClientCore,
    secrets: SubmissionSecrets,
    values: Mapping[str, str],
    stage: str | None = None,
) -> Flow[dict[str, str]]:
    """Write the values of one submission (one stage of it); ``{NAME: "scope/key"}``."""
    if not values:
        return {}
    yield from ensure_secret_scope(core, secrets.scope)
    keys = {name: secrets.key(name, stage) for name in values}
    yield from gather(
        [put_secret(core, secrets.scope, keys[name], value) for name, value in values.items()],
        _PARALLEL_PUTS,
    )
    return {name: f"{secrets.scope}/{key}" for name, key in keys.items()}


def mark_submission_run(core: ClientCore, secrets: SubmissionSecrets, run_id: int) -> Flow[None]:
    """Record which run reads the submission's keys (so they can be deleted once it ended)."""
    yield from put_secret(core, secrets.scope, secrets.marker(run_id), str(run_id))


def delete_submission_secrets(core: ClientCore, secrets: SubmissionSecrets) -> Flow[int]:
    """Delete every key of the submission (values, then the markers); the number deleted."""
    listed = yield from list_secrets(core, secrets.scope)
    mine = [s.key for s in listed if s.key.startswith(secrets.prefix)]
    values = [k for k in mine if not _MARKER.match(k.removeprefix(secrets.prefix))]
    deleted = yield from _delete_keys(core, secrets.scope, values)
    deleted += yield from _delete_keys(core, secrets.scope, sorted(set(mine) - set(values)))
    return deleted


def _run_ended(core: ClientCore, run_id: int) -> Flow[bool]:
    from ._runs import get_run

    try:
        state = yield from get_run(core, run_id)
    except NotFound:
        return True
    return state.is_terminal


def _ended_groups(
    core: ClientCore,
    listed: list[SecretInfo],
    select: Callable[[ParsedSecretKey], bool],
) -> Flow[dict[tuple[str, str], list[SecretInfo]]]:
    """Submission key groups (by task and submission tag) that ``select`` picks and whose
    marked runs have all ended, each with the keys that are safe to delete: the values
    written no later than the newest marker (a retry re-writing them now is left alone),
    and the markers."""
    groups: dict[tuple[str, str], list[tuple[SecretInfo, ParsedSecretKey]]] = {}
    for info in listed:
        parsed = parse_secret_key(info.key)
        if parsed is not None and select(parsed):
            groups.setdefault((parsed.task_tag, parsed.submission_tag), []).append((info, parsed))
    ended: dict[tuple[str, str], list[SecretInfo]] = {}
    for tags, entries in groups.items():
        markers = [(info, p.marker_run_id) for info, p in entries if p.marker_run_id is not None]
        if not markers:
            continue
        finished = True
        for _, run_id in markers:
            assert run_id is not None
            if not (yield from _run_ended(core, run_id)):
                finished = False
                break
        if not finished:
            continue
        newest = max((info.last_updated_ms or 0) for info, _ in markers)
        ended[tags] = [
            info
            for info, p in entries
            if p.marker_run_id is not None or (info.last_updated_ms or 0) <= newest
        ]
    return ended


def sweep_ended_submissions(core: ClientCore, secrets: SubmissionSecrets) -> Flow[int]:
    """Delete the keys of earlier submissions of the same task (same deployment) whose runs
    have ended: what an earlier run could not delete (its worker died, the platform was
    unreachable). Submissions without a marker may still be about to submit: kept."""
    listed = yield from list_secrets(core, secrets.scope)
    ended = yield from _ended_groups(
        core,
        listed,
        lambda k: k.task_tag == secrets.task_tag and k.submission_tag != secrets.submission_tag,
    )
    deleted = 0
    for infos in ended.values():
        values = [i.key for i in infos if parse_secret_key(i.key).marker_run_id is None]  # type: ignore[union-attr]
        markers = [i.key for i in infos if i.key not in values]
        deleted += yield from _delete_keys(core, secrets.scope, values)
        deleted += yield from _delete_keys(core, secrets.scope, markers)
    return deleted


@dataclass(frozen=True)
class PruneResult:
    deleted: list[str]
    kept_active: list[str]  # keys of submissions whose run is still going


def prune_submission_secrets(
    core: ClientCore, scope: str, *, older_than_s: float, now_ms: int, dry_run: bool = False
) -> Flow[PruneResult]:
    """Delete submission keys (``airo.`` names) last written more than ``older_than_s`` ago,
    unless their submission's marked run is still going. Keys of other tools are not touched."""
    listed = yield from list_secrets(core, scope)
    cutoff = now_ms - int(older_than_s * 1000)
    old = [
        info
        for info in listed
        if parse_secret_key(info.key) is not None
        and info.last_updated_ms is not None
        and info.last_updated_ms < cutoff
    ]
    old_keys = {info.key for info in old}
    # A group with a marker is deleted only when its runs ended; one without a marker (the
    # submit never happened, or the worker died before marking) only by age.
    groups: dict[tuple[str, str], list[SecretInfo]] = {}
    for info in listed:
        parsed = parse_secret_key(info.key)
        if parsed is not None:
            groups.setdefault((parsed.task_tag, parsed.submission_tag), []).append(info)
    marked = {
        tags
        for tags, infos in groups.items()
        if any(parse_secret_key(i.key).marker_run_id is not None for i in infos)  # type: ignore[union-attr]
    }
    ended = yield from _ended_groups(
        core, listed, lambda k: (k.task_tag, k.submission_tag) in marked
    )
    deletable: list[str] = []
    kept: list[str] = []
    for tags, infos in groups.items():
        if tags in marked:
            allowed = {i.key for i in ended.get(tags, [])}
            for info in infos:
                if info.key in old_keys:
                    (deletable if info.key in allowed else kept).append(info.key)
        else:
            deletable.extend(i.key for i in infos if i.key in old_keys)
    values = sorted(k for k in deletable if parse_secret_key(k).marker_run_id is None)  # type: ignore[union-attr]
    markers = sorted(set(deletable) - set(values))
    if not dry_run:
        yield from _delete_keys(core, scope, values)
        yield from _delete_keys(core, scope, markers)
    return PruneResult(deleted=values + markers, kept_active=sorted(kept))
