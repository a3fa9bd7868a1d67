"""Flows for secret scopes and secrets (rest-api.md §3). Values travel only in the body of
``secrets/put``, which is never logged."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from .._errors import AuthError, ConfigurationError, PlatformError
from ._core import ClientCore, Flow, gather

SECRETS_API = "/api/2.0/secrets"
_KEY_FORBIDDEN = re.compile(r"[^A-Za-z0-9_.-]")
_SCOPE_FORBIDDEN = re.compile(r"[^A-Za-z0-9_.@-]")
MAX_KEY_LENGTH = 128
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
