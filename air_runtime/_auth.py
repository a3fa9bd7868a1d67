"""Credentials: where the ``Authorization`` header comes from.

Every credential has sync and async ``headers()``/``refresh()`` twins and a ``source`` that
error messages name instead of the secret. ``refreshable`` says whether a 401 is worth one
refresh-and-retry (OAuth) or final (a static token was revoked).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx

from ._errors import AuthError, ConfigurationError, PlatformError

if TYPE_CHECKING:
    from databricks.sdk.core import Config

# Refresh a token this long before the server says it expires, so a request sent just
# before expiry does not arrive with a dead token.
_EXPIRY_MARGIN_S = 60.0

# Until the token endpoint has answered once, a connection to it is given this long and its
# answer this long: a wrong host is told within seconds (the client names it), while a token
# endpoint answers in well under a second.
FIRST_TOKEN_CONNECT_S = 3.0
FIRST_TOKEN_READ_S = 5.0


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

    def _http_timeout(self) -> httpx.Timeout:
        if self._generation:  # the endpoint answered before: an outage gets the whole timeout
            return httpx.Timeout(self._timeout)
        return httpx.Timeout(
            self._timeout,
            connect=min(self._timeout, FIRST_TOKEN_CONNECT_S),
            read=min(self._timeout, FIRST_TOKEN_READ_S),
        )

    def _token_request(self) -> dict[str, Any]:
        return {
            "url": self.token_url,
            "data": {"grant_type": "client_credentials", "scope": self._scope},
            "auth": (self.client_id, self._client_secret),
            "headers": {"Accept": "application/json"},
        }

    def _accept(self, response: httpx.Response) -> None:
        status = response.status_code
        if status == 429 or status >= 500:
            # The token service is overloaded or down, not refusing these credentials: an
            # outage across a renewal is waited out like any other (retryable).
            raise PlatformError(
                f"{self.token_url} could not issue a token for OAuth client {self.client_id} "
                f"(HTTP {status}); the workspace is unavailable",
                status_code=status,
            )
        if status >= 400:
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
            with httpx.Client(transport=self._transport, timeout=self._http_timeout()) as http:
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
                transport=self._async_transport, timeout=self._http_timeout()
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


# The databricks-sdk's ``Config()`` (0.162) asks the host for /.well-known/databricks-config
# before anything else (``Config._resolve_host_metadata``), a best-effort probe that falls back
# to the explicit configuration on any failure. Its client takes the config's
# ``retry_timeout_seconds`` and ``http_timeout_seconds`` (the SDK's own comment there: "Build
# its client from the configured timeouts: otherwise it uses the default 300s retry budget");
# unset, a host that does not answer holds ``Config()`` for five minutes. Ours: each connect
# and read within 1.5 s, and no retry after the first failure (the SDK's retry loop sleeps 1-2 s
# after it, then finds its 1 s budget spent). A workspace answers that probe in well under a
# second; a host that does not is told by our client's first request (``FirstContact``).
SDK_PROBE_TIMEOUTS: dict[str, Any] = {"http_timeout_seconds": 1.5, "retry_timeout_seconds": 1}


def profile_host(path: Path, profile: str) -> str | None:
    """The ``host`` of ``profile`` in the ``~/.databrickscfg``-style file ``path``, if any
    (``DEFAULT``: the file's defaults), read without the databricks-sdk."""
    import configparser  # only where a profile is read

    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    if profile == "DEFAULT":
        return parser.defaults().get("host") or None
    if not parser.has_section(profile):
        return None
    return parser.get(profile, "host", fallback="") or None


def config_file() -> Path:
    """The databricks-sdk's configuration file: $DATABRICKS_CONFIG_FILE or ~/.databrickscfg."""
    return Path(os.environ.get("DATABRICKS_CONFIG_FILE") or Path.home() / ".databrickscfg")


def _configured_host(host: str | None, options: dict[str, Any]) -> tuple[str, str] | None:
    """The host the databricks-sdk will use and where it is set, as the SDK looks for it
    (argument, then $DATABRICKS_HOST, then the profile), without asking the SDK; None when
    only the SDK can tell (a cloud login's own lookup)."""
    if host:
        return host, "the host argument"
    from_env = os.environ.get("DATABRICKS_HOST", "").strip()
    if from_env:
        return from_env, "$DATABRICKS_HOST"
    profile = options.get("profile") or os.environ.get("DATABRICKS_CONFIG_PROFILE") or "DEFAULT"
    path = Path(options["config_file"]) if options.get("config_file") else config_file()
    found = profile_host(path, profile)
    return (found, f"the host of profile {profile} in {path}") if found else None


class SdkConfigCredentials:
    """``databricks.sdk.core.Config``: its env vars, ``~/.databrickscfg`` profiles and cloud
    flows (Azure, GCP, OAuth). The SDK renews its own tokens; headers are cached briefly in
    async code so a busy event loop does not call into the SDK on every request.

    ``Config()`` talks to the host (a discovery probe, cloud token lookups), so it never runs
    on an event loop: async code gets ``deferred`` credentials, whose configuration is read in
    a thread on first use (``aheaders``), or builds them in a thread (``afrom_environment``).
    """

    _ASYNC_CACHE_S = 20.0

    def __init__(
        self,
        config: Config | None = None,
        *,
        build: Callable[[], Config] | None = None,
        host: str | None = None,
        host_source: str | None = None,
    ) -> None:
        """``config``, or (``deferred``) ``build`` to read it on first use and its ``host``."""
        self._config: Config | None = None
        self._build = build
        self._building = threading.Lock()
        self._host = host
        self._cached: dict[str, str] | None = None
        self._cached_at = 0.0
        # Where the host was set, when the SDK found it (for the fix of an unreachable host).
        self.host_source = host_source
        if config is not None:
            self._adopt(config)
        elif build is None or host is None:
            raise ValueError("SdkConfigCredentials needs a config, or build and host")
        else:
            self.source = "databricks-sdk config (environment / ~/.databrickscfg)"
            self.refreshable = True  # known once read; a 401 is asked about only after

    def _adopt(self, config: Config) -> None:
        self._config = config
        auth_type = getattr(config, "auth_type", None) or "default"
        profile = getattr(config, "profile", None)
        where = f"profile {profile}" if profile else "environment / ~/.databrickscfg"
        self.source = f"databricks-sdk config ({auth_type} auth, {where})"
        self.refreshable = auth_type != "pat"

    @classmethod
    def from_environment(cls, host: str | None = None, **kwargs: Any) -> SdkConfigCredentials:
        """The SDK's configuration for ``host`` (or the one it finds), read now. Blocking:
        from async code use ``afrom_environment`` or ``deferred``."""
        config = _sdk_config(host, kwargs)
        credentials = cls(config)
        if not host:
            found = _configured_host(None, kwargs)
            credentials.host_source = found[1] if found else "the databricks-sdk configuration"
        return credentials

    @classmethod
    async def afrom_environment(
        cls, host: str | None = None, **kwargs: Any
    ) -> SdkConfigCredentials:
        """``from_environment`` in a thread, off the event loop."""
        return await asyncio.to_thread(functools.partial(cls.from_environment, host, **kwargs))

    @classmethod
    def deferred(cls, host: str | None = None, **kwargs: Any) -> SdkConfigCredentials:
        """Credentials for code on an event loop: the SDK's configuration is read in a
        thread on first use (``aheaders``); only the host is looked up now, the way the SDK
        looks for it. Falls back to ``from_environment`` when only the SDK can find the host
        (then there is no host to probe either)."""
        found = _configured_host(host, kwargs)
        if found is None:
            return cls.from_environment(host, **kwargs)
        profile = kwargs.get("profile")
        credentials = cls(
            build=functools.partial(_sdk_config, host, kwargs),
            host=found[0],
            host_source=None if host else found[1],
        )
        if profile:
            credentials.source = f"databricks-sdk config (profile {profile})"
        return credentials

    @property
    def config(self) -> Config:
        """The SDK's configuration, read on first use for ``deferred`` credentials (blocking:
        async code reaches it through ``aheaders``, in a thread)."""
        if self._config is None:
            with self._building:  # concurrent first requests read it once
                if self._config is None:
                    assert self._build is not None
                    self._adopt(self._build())
        assert self._config is not None
        return self._config

    @property
    def host(self) -> str:
        if self._config is None and self._host is not None:
            return self._host
        return str(self.config.host)

    def headers(self) -> dict[str, str]:
        headers = dict(self.config.authenticate())
        self._cached, self._cached_at = headers, time.monotonic()
        return headers

    async def aheaders(self) -> dict[str, str]:
        if self._cached is not None and time.monotonic() - self._cached_at < self._ASYNC_CACHE_S:
            return self._cached
        if self._config is not None and not self.refreshable:
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
            await asyncio.to_thread(lambda: self.config.init_auth())

    def secret_values(self) -> list[str]:
        """The configured token, password and client secret (for ``air_runtime.Redactor``);
        none yet for ``deferred`` credentials (the token sent is redacted once sent)."""
        if self._config is None:
            return []
        found = []
        for name in ("token", "password", "client_secret", "azure_client_secret"):
            value = getattr(self._config, name, None)
            if isinstance(value, str) and value:
                found.append(value)
        return found

    def __repr__(self) -> str:
        return f"SdkConfigCredentials(source={self.source!r})"


def _sdk_config(host: str | None, options: dict[str, Any]) -> Config:
    from databricks.sdk.core import Config

    kwargs = {**SDK_PROBE_TIMEOUTS, **options}
    try:
        return Config(host=host, **kwargs) if host else Config(**kwargs)
    except Exception as exc:  # the SDK raises ValueError subclasses with good text
        raise ConfigurationError(
            "no Databricks workspace configured: pass host and token, set "
            "DATABRICKS_HOST and DATABRICKS_TOKEN, or configure a ~/.databrickscfg "
            f"profile ({exc})"
        ) from exc


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


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
    # On an event loop (a trigger, a watcher) the SDK's configuration is read in a thread.
    sdk_credentials = (
        SdkConfigCredentials.deferred if _on_event_loop() else SdkConfigCredentials.from_environment
    )
    if token and not host:
        sdk = sdk_credentials()
        return normalize_host(sdk.host), StaticToken(token)
    sdk = sdk_credentials(host)
    return normalize_host(sdk.host), sdk
