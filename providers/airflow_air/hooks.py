"""``AirHook``: the core AI Runtime client, built from an Airflow ``databricks`` connection.

The connection type stays the one of apache-airflow-providers-databricks, so an existing
``databricks_default`` works unchanged. Supported fields (same meaning as in that provider):

- host (``https://`` is added when no scheme is given; the port field is honoured);
- a personal access token in the password field (or, discouraged, ``{"token": ...}`` in extra);
- ``{"service_principal_oauth": true}``: OAuth M2M with login = client id, password = secret;
- ``{"azure_tenant_id": ...}`` (login/password = Azure service principal),
  ``{"use_azure_managed_identity": true}``, optional ``azure_resource_id``: Azure flows through
  the databricks-sdk configuration;
- no credential at all: the databricks-sdk default chain (env vars, ``~/.databrickscfg``).

Our own extra keys: ``checkpoint_volume``, and ``gpu_hour_prices`` with ``currency`` (what one
GPU-hour of each accelerator type costs, ``{"GPU_1xA10": 1.2, "GPU_8xH100": 98.0}``, ``"USD"``:
the user's figures, nothing is built in) that turn GPU-hours into money in results, XComs and
budget messages.

This module never builds payloads or talks HTTP itself: the core client does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from airflow.sdk import BaseHook

from airflow_air._lookups import (
    BlockingCall,
    ConnectionLookup,
    Lookup,
    run_lookups,
    run_lookups_in_loop,
)
from airflow_air.exceptions import AirConfigurationError

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from air_runtime import (
        AirClient,
        AsyncAirClient,
        Credentials,
        LineBudget,
        Prices,
        RunWatcher,
    )

DEFAULT_CONN_ID = "databricks_default"
ClientT = TypeVar("ClientT", bound="AirClient | AsyncAirClient")


@functools.cache
def user_agent_extra() -> str:
    """``airflow/<version> airflow-air/<version>``: the orchestrator part of the User-Agent."""
    from importlib.metadata import PackageNotFoundError, version

    from airflow_air import __version__

    try:
        airflow_version = version("apache-airflow")
    except PackageNotFoundError:  # pragma: no cover - airflow-core only installs
        airflow_version = version("apache-airflow-core")
    return f"airflow/{airflow_version} airflow-air/{__version__}"


def config_float(option: str, fallback: float) -> float:
    """A float from the provider's ``[air]`` section."""
    from airflow.sdk import conf

    return conf.getfloat("air", option, fallback=fallback)


def default_poll_interval() -> float:
    return config_float("default_poll_interval", 5.0)


def first_poll_delay() -> float:
    """Seconds between a deferral and its trigger's first status request (see triggers).

    By default twice ``[workers] min_heartbeat_interval``: the supervisor of the try that
    deferred notices its process exit only when it next wakes, up to that interval later,
    and the scheduler must have read that exit before the trigger fires.
    """
    from airflow.sdk import conf

    heartbeat = conf.getfloat("workers", "min_heartbeat_interval", fallback=5.0)
    return config_float("trigger_first_poll_delay", 2 * heartbeat)


def defer_timeout_grace() -> float:
    """Seconds past a task's ``execution_timeout`` before Airflow times its trigger out."""
    return config_float("defer_timeout_grace", 300.0)


def request_budget() -> float:
    return config_float("workspace_request_budget", 10.0)


def live_lines() -> LineBudget | None:
    """How deferred tasks see their runs' node lines while they run (``[air] live_lines``,
    on by default): None when off. The reads share the workspace request budget."""
    from airflow.sdk import conf

    from air_runtime import LineBudget

    if not conf.getboolean("air", "live_lines", fallback=True):
        return None
    return LineBudget(
        interval=config_float("live_lines_interval", 15.0),
        lines_per_read=conf.getint("air", "live_lines_per_read", fallback=50),
        share=config_float("live_lines_share", 0.95),
        progress_interval=config_float("live_progress_interval", 60.0),
        progress_share=config_float("live_progress_share", 0.05),
    )


def completed_log_lines() -> int:
    from airflow.sdk import conf

    return conf.getint("air", "completed_log_lines", fallback=10_000)


def submits_in_triggerer(task_option: bool | None) -> bool:
    """An operator's ``submit_in_triggerer``, else ``[air] submit_in_triggerer``."""
    if task_option is not None:
        return bool(task_option)
    from airflow.sdk import conf

    return conf.getboolean("air", "submit_in_triggerer", fallback=False)


def default_secret_scope() -> str:
    from airflow.sdk import conf

    return conf.get("air", "default_secret_scope", fallback="airflow-air")


@dataclass(frozen=True)
class WorkspaceAccess:
    """Where the workspace is and how to authenticate: what the core client is built from."""

    host: str | None
    credentials: Credentials
    source: str  # which connection fields were used, for messages (never a secret)
    # Where the host was set (the connection's host field, or what the databricks-sdk read),
    # for the fix of a host that cannot be reached.
    host_source: str | None = None


def _host_of(conn: Connection) -> str | None:
    host = (conn.host or "").strip().rstrip("/")
    if not host:
        return None
    if "://" not in host:
        scheme = conn.schema if conn.schema in ("http", "https") else "https"
        host = f"{scheme}://{host}"
    if conn.port and urlsplit(host).port is None:
        host = f"{host}:{conn.port}"
    return host


def prices_of(conn: Connection, conn_id: str) -> Prices | None:
    """The prices in a connection's extra (see the module docstring)."""
    from air_runtime import AirError, Prices

    extra = conn.extra_dejson or {}
    try:
        return Prices.of(
            extra.get("gpu_hour_prices"),
            extra.get("currency"),
            where=f"connection {conn_id} extra gpu_hour_prices",
        )
    except AirError as error:
        raise AirConfigurationError(str(error)) from None


def access_from_connection(conn: Connection) -> WorkspaceAccess:
    """Map a ``databricks`` connection to the core's credentials, in the order the
    Databricks provider checks them, so both providers agree on what a connection means.
    Blocking (the databricks-sdk's configuration asks the host): a lookup's ``BlockingCall``
    (``AirHook.workspace_access_lookup``), which a trigger runs in a thread."""
    access = _access_from_connection(conn)
    if access.host_source is None:
        host_source = (
            f"the host field of Airflow connection {conn.conn_id!r}"
            if _host_of(conn)
            else getattr(access.credentials, "host_source", None)
        )
        access = replace(access, host_source=host_source)
    return access


def _access_from_connection(conn: Connection) -> WorkspaceAccess:
    from air_runtime import ConfigurationError, OAuthM2M, SdkConfigCredentials, StaticToken

    extra = conn.extra_dejson or {}
    host = _host_of(conn)
    where = f"connection {conn.conn_id!r}"
    creds: Credentials
    try:
        if extra.get("token"):
            token = extra["token"]
            return WorkspaceAccess(host, StaticToken(token, source=f"{where} extra 'token'"), where)
        if conn.password and not conn.login:
            token = conn.password
            return WorkspaceAccess(host, StaticToken(token, source=f"{where} password"), where)
        if "azure_tenant_id" in extra or extra.get("use_azure_managed_identity"):
            options: dict[str, Any] = {}
            if extra.get("use_azure_managed_identity"):
                options["azure_use_msi"] = True
            else:
                if not conn.login or not conn.password:
                    raise AirConfigurationError(
                        f"{where}: Azure service principal needs the client id in login and "
                        "the client secret in password"
                    )
                options.update(
                    azure_client_id=conn.login,
                    azure_client_secret=conn.password,
                    azure_tenant_id=extra["azure_tenant_id"],
                )
            if extra.get("azure_resource_id"):
                options["azure_workspace_resource_id"] = extra["azure_resource_id"]
            creds = SdkConfigCredentials.from_environment(host, **options)
            return WorkspaceAccess(host or creds.host, creds, f"{where} (Azure)")
        if extra.get("service_principal_oauth"):
            if not host:
                raise AirConfigurationError(f"{where}: OAuth service principal needs a host")
            if not conn.login or not conn.password:
                raise AirConfigurationError(
                    f"{where}: service_principal_oauth needs the client id in login and the "
                    "client secret in password"
                )
            creds = OAuthM2M(host, conn.login, conn.password)
            return WorkspaceAccess(host, creds, f"{where} (OAuth service principal)")
        if conn.password:
            # login + password without another flag: the password is the token (basic auth
            # is not supported by the AI Runtime APIs).
            creds = StaticToken(conn.password, source=f"{where} password")
            return WorkspaceAccess(host, creds, where)
        creds = SdkConfigCredentials.from_environment(host)
        return WorkspaceAccess(host or creds.host, creds, f"{where} (databricks-sdk default chain)")
    except ConfigurationError as exc:
        raise AirConfigurationError(f"{where}: {exc}") from exc


class AirHook(BaseHook):
    """Builds ``AirClient`` / ``AsyncAirClient`` and the shared ``RunWatcher`` for one
    Databricks connection.

    In a worker: ``get_client()`` (``get_conn()``). In a trigger, without blocking the
    triggerer's event loop: ``await aget_watcher()``, the workspace's shared watcher, or a
    client of its own with ``await run_lookups_in_loop(hook.client_lookup(AsyncAirClient))``.
    The ``*_lookup`` methods read the connection once for both: ``run_lookups`` performs
    them with blocking calls, ``run_lookups_in_loop`` from an event loop (both in
    ``airflow_air.hooks``).

    :param databricks_conn_id: an Airflow connection of type ``databricks``.
    :param timeout: seconds per HTTP request.
    """

    conn_name_attr = "databricks_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "databricks"
    hook_name = "Databricks AI Runtime"

    def __init__(self, databricks_conn_id: str = DEFAULT_CONN_ID, *, timeout: float = 30.0) -> None:
        super().__init__()
        self.databricks_conn_id = databricks_conn_id
        self.timeout = timeout

    def connection_lookup(self) -> Lookup[Connection]:
        """The hook's Airflow connection; an ``AirConfigurationError`` when it is not defined."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            return (yield ConnectionLookup(self.databricks_conn_id))
        except AirflowNotFoundException as exc:
            raise AirConfigurationError(
                f"Airflow connection {self.databricks_conn_id!r} is not defined: create a "
                "'databricks' connection with the workspace host and a token"
            ) from exc

    def workspace_access_lookup(self) -> Lookup[WorkspaceAccess]:
        """Where the workspace is and how to authenticate (``access_from_connection``)."""
        conn = yield from self.connection_lookup()
        # A blocking call: the databricks-sdk's configuration (profile, Azure and default-chain
        # connections) probes the host, which must never hold the triggerer's event loop.
        return (yield BlockingCall(functools.partial(access_from_connection, conn)))

    def client_lookup(self, client_class: type[ClientT]) -> Lookup[ClientT]:
        """A new ``AirClient`` or ``AsyncAirClient`` of the workspace (the caller closes it)."""
        access = yield from self.workspace_access_lookup()
        return client_class(
            access.host,
            credentials=access.credentials,
            timeout=self.timeout,
            user_agent_extra=user_agent_extra(),
            poll_interval=default_poll_interval(),
            host_source=access.host_source,
        )

    def checkpoint_volume(self) -> str | None:
        """The connection's ``checkpoint_volume`` extra (``/Volumes/<catalog>/<schema>/
        <volume>``): where the tasks that use it keep their checkpoints; None when unset."""
        value = (run_lookups(self.connection_lookup()).extra_dejson or {}).get("checkpoint_volume")
        return str(value) if value else None

    def prices(self) -> Prices | None:
        """The connection's ``gpu_hour_prices`` and ``currency`` extras, checked (None when
        unset): a bad entry fails the task before anything is submitted, naming it. Read in
        the worker: a deferred task's trigger gets them in its kwargs."""
        return prices_of(run_lookups(self.connection_lookup()), self.databricks_conn_id)

    def workspace_access(self) -> WorkspaceAccess:
        return run_lookups(self.workspace_access_lookup())

    def get_conn(self) -> AirClient:
        return self.get_client()

    def get_client(self) -> AirClient:
        from air_runtime import AirClient

        return run_lookups(self.client_lookup(AirClient))

    async def aget_watcher(self, *, interval: float | None = None) -> RunWatcher:
        """The process-wide watcher of this workspace in the running event loop: thousands of
        deferred tasks share its connection pool and its coalesced status requests."""
        from air_runtime import RunWatcher

        access = await run_lookups_in_loop(self.workspace_access_lookup())
        return RunWatcher.shared(
            access.host,
            credentials=access.credentials,
            interval=interval if interval is not None else default_poll_interval(),
            budget_rps=request_budget(),
            lines=live_lines(),
            user_agent_extra=user_agent_extra(),
            host_source=access.host_source,
        )

    def test_connection(self) -> tuple[bool, str]:
        try:
            with self.get_client() as client:
                identity = client.whoami()
        except Exception as exc:
            return False, str(exc)
        return True, f"Connected as {identity.user_name}"
