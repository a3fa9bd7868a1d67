"""Credentials: where the ``Authorization`` header comes from.

Every credential has sync and async ``headers()``/``refresh()`` twins and a ``source`` that
error messages name instead of the secret. ``refreshable`` says whether a 401 is worth one
refresh-and-retry (OAuth) or final (a static token was revoked).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx

from ._errors import AuthError, ConfigurationError

if TYPE_CHECKING:
    from databricks.sdk.core import Config

# Refresh a token this long before the server says it expires, so a request sent just
# before expiry does not arrive with a dead token.
_EXPIRY_MARGIN_S = 60.0


@runtime_checkable
class Credentials(Protocol):
    source: str
    refreshable: bool

    def headers(self) -> dict[str, str]: ...

    async def aheaders(self) -> dict[str, str]: ...

    def refresh(self) -> None: ...

    async def arefresh(self) -> None: ...


class StaticToken:
    """A personal access token (or any bearer token that cannot be renewed here)."""

    refreshable = False

    def __init__(self, token: str, *, source: str = "the token argument") -> None:
        if not token:
            raise ConfigurationError(f"empty token from {source}")
        self._headers = {"Authorization": f"Bearer {token}"}
        self.source = source

    def headers(self) -> dict[str, str]:
        return self._headers

    async def aheaders(self) -> dict[str, str]:
        return self._headers

    def refresh(self) -> None:
        return None

    async def arefresh(self) -> None:
        return None

    def secret_values(self) -> list[str]:
        """What must never be shown (for ``air_runtime.Redactor``)."""
        return [self._headers["Authorization"].removeprefix("Bearer ")]

    def __repr__(self) -> str:
        return f"StaticToken(source={self.source!r})"


class OAuthM2M:
    """OAuth machine-to-machine (client credentials) against ``<host>/oidc/v1/token``.

    The token is fetched lazily, renewed shortly before ``expires_in`` runs out, and renewed
    once more when the workspace answers 401. One refresh runs at a time per thread pool
    and per event loop; concurrent callers wait for it instead of each asking for a token.
    """

    refreshable = True

    def __init__(
        self,
        host: str,
        client_id: str,
        client_secret: str,
        *,
        scope: str = "all-apis",
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not client_id or not client_secret:
            raise ConfigurationError("OAuth M2M needs both a client id and a client secret")
        self.token_url = f"{host.rstrip('/')}/oidc/v1/token"
        self.client_id = client_id
        self._client_secret = client_secret
        self._scope = scope
        self._timeout = timeout
        self._transport = transport
        self._async_transport = async_transport
        self._headers: dict[str, str] | None = None
        self._expires_at = 0.0
        self._generation = 0  # bumps on every new token, so waiters can tell one arrived
        self._lock = threading.Lock()
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]
        self._async_locks = weakref.WeakKeyDictionary()
        self.source = f"OAuth client {client_id} ({self.token_url})"

    def _fresh(self) -> bool:
        return self._headers is not None and time.monotonic() < self._expires_at

    def _token_request(self) -> dict[str, Any]:
        return {
            "url": self.token_url,
            "data": {"grant_type": "client_credentials", "scope": self._scope},
            "auth": (self.client_id, self._client_secret),
            "headers": {"Accept": "application/json"},
        }

    def _accept(self, response: httpx.Response) -> None:
        if response.status_code >= 400:
            raise AuthError(
                f"{self.token_url} refused OAuth client {self.client_id} "
                f"(HTTP {response.status_code}); check the client id and secret"
            )
        body = response.json()
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise AuthError(f"{self.token_url} answered without an access_token")
        lifetime = float(body.get("expires_in") or 3600)
        self._headers = {"Authorization": f"Bearer {token}"}
        self._expires_at = time.monotonic() + max(lifetime - min(_EXPIRY_MARGIN_S, lifetime / 2), 0)
        self._generation += 1

    def headers(self) -> dict[str, str]:
        if not self._fresh():
            self._refresh_if(self._generation)
        assert self._headers is not None
        return self._headers

    def refresh(self) -> None:
        self._refresh_if(self._generation)

    def _refresh_if(self, seen_generation: int) -> None:
        with self._lock:
            # Another thread renewed while this one waited: use its token.
            if self._generation != seen_generation and self._fresh():
                return
            with httpx.Client(transport=self._transport, timeout=self._timeout) as http:
                self._accept(http.post(**self._token_request()))

    def _loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._async_locks.get(loop)
        if lock is None:
            lock = self._async_locks[loop] = asyncio.Lock()
        return lock

    async def aheaders(self) -> dict[str, str]:
        if not self._fresh():
            await self._arefresh_if(self._generation)
        assert self._headers is not None
        return self._headers

    async def arefresh(self) -> None:
        await self._arefresh_if(self._generation)

    async def _arefresh_if(self, seen_generation: int) -> None:
        async with self._loop_lock():
            if self._generation != seen_generation and self._fresh():
                return
            async with httpx.AsyncClient(
                transport=self._async_transport, timeout=self._timeout
            ) as http:
                response = await http.post(**self._token_request())
            with self._lock:
                self._accept(response)

    def secret_values(self) -> list[str]:
        """The client secret and the current token (for ``air_runtime.Redactor``)."""
        token = (self._headers or {}).get("Authorization", "").removeprefix("Bearer ")
        return [v for v in (self._client_secret, token) if v]

    def __repr__(self) -> str:
        return f"OAuthM2M(client_id={self.client_id!r}, token_url={self.token_url!r})"


class SdkConfigCredentials:
    """``databricks.sdk.core.Config``: its env vars, ``~/.databrickscfg`` profiles and cloud
    flows (Azure, GCP, OAuth). The SDK renews its own tokens; headers are cached briefly in
    async code so a busy event loop does not call into the SDK on every request."""

    _ASYNC_CACHE_S = 20.0

    def __init__(self, config: Config) -> None:
        self.config = config
        auth_type = getattr(config, "auth_type", None) or "default"
        profile = getattr(config, "profile", None)
        where = f"profile {profile}" if profile else "environment / ~/.databrickscfg"
        self.source = f"databricks-sdk config ({auth_type} auth, {where})"
        self.refreshable = auth_type != "pat"
        self._cached: dict[str, str] | None = None
        self._cached_at = 0.0

    @classmethod
    def from_environment(cls, host: str | None = None, **kwargs: Any) -> SdkConfigCredentials:
        from databricks.sdk.core import Config

        try:
            config = Config(host=host, **kwargs) if host else Config(**kwargs)
        except Exception as exc:  # the SDK raises ValueError subclasses with good text
            raise ConfigurationError(
                "no Databricks workspace configured: pass host and token, set "
                "DATABRICKS_HOST and DATABRICKS_TOKEN, or configure a ~/.databrickscfg "
                f"profile ({exc})"
            ) from exc
        return cls(config)

    @property
    def host(self) -> str:
        return str(self.config.host)

    def headers(self) -> dict[str, str]:
        headers = dict(self.config.authenticate())
        self._cached, self._cached_at = headers, time.monotonic()
        return headers

    async def aheaders(self) -> dict[str, str]:
        if self._cached is not None and time.monotonic() - self._cached_at < self._ASYNC_CACHE_S:
            return self._cached
        if not self.refreshable:
            return self.headers()  # a PAT costs nothing to read
        return await asyncio.to_thread(self.headers)

    def refresh(self) -> None:
        self._cached = None
        if self.refreshable:
            # Rebuilds the SDK's header factory, which fetches a new token.
            self.config.init_auth()

    async def arefresh(self) -> None:
        self._cached = None
        if self.refreshable:
            await asyncio.to_thread(self.config.init_auth)

    def secret_values(self) -> list[str]:
        """The configured token, password and client secret (for ``air_runtime.Redactor``)."""
        found = []
        for name in ("token", "password", "client_secret", "azure_client_secret"):
            value = getattr(self.config, name, None)
            if isinstance(value, str) and value:
                found.append(value)
        return found

    def __repr__(self) -> str:
        return f"SdkConfigCredentials(source={self.source!r})"


def normalize_host(host: str) -> str:
    host = host.strip().rstrip("/")
    if "://" not in host:
        host = f"https://{host}"
    return host


# Every entry point (the clients, ``airo``, the Dagster resource, the examples) finds a
# workspace by the variables the databricks-sdk chain reads. Older names, each read only
# while its new name is unset, with a warning: the examples' AIRO_HOST / AIRO_TOKEN and
# ``airo``'s client token AIRO_WORKSPACE_TOKEN (which still sets a local workspace's own token).
DEPRECATED_VARIABLES: dict[str, tuple[str, ...]] = {
    "DATABRICKS_HOST": ("AIRO_HOST",),
    "DATABRICKS_TOKEN": ("AIRO_TOKEN", "AIRO_WORKSPACE_TOKEN"),
}


def deprecated_variable(name: str) -> str | None:
    """The value of an older name of ``name`` (``DATABRICKS_HOST`` or ``DATABRICKS_TOKEN``)
    when ``name`` itself is unset; warns (``FutureWarning``) that the older name is read."""
    if os.environ.get(name, "").strip():
        return None
    for old in DEPRECATED_VARIABLES[name]:
        value = os.environ.get(old, "").strip()
        if value:
            warnings.warn(
                f"${old} is deprecated and will be ignored in a later release: set ${name} instead",
                FutureWarning,
                stacklevel=2,
            )
            return value
    return None


def resolve_credentials(
    host: str | None, token: str | None, credentials: Credentials | None
) -> tuple[str, Credentials]:
    """Pick the workspace and credentials the way users expect: explicit values first,
    then the databricks-sdk chain (env vars, ~/.databrickscfg)."""
    if credentials is None and not host:
        host = deprecated_variable("DATABRICKS_HOST")
        if token is None and host:
            token = deprecated_variable("DATABRICKS_TOKEN")
    if credentials is not None:
        if host is None:
            host = getattr(credentials, "host", None)
        if not host:
            raise ConfigurationError("a host is needed together with explicit credentials")
        return normalize_host(host), credentials
    if host and token:
        return normalize_host(host), StaticToken(token)
    if token and not host:
        sdk = SdkConfigCredentials.from_environment()
        return normalize_host(sdk.host), StaticToken(token)
    sdk = SdkConfigCredentials.from_environment(host)
    return normalize_host(sdk.host), sdk
