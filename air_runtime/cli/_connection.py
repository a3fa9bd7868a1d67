"""How every ``airo`` command that talks to a workspace finds it: ``--host``, and a token
from ``--token``, ``--token-file`` or (for a local workspace on this machine) its default
token file; otherwise the databricks-sdk configuration (``DATABRICKS_HOST``/``DATABRICKS_TOKEN``,
``~/.databrickscfg`` profiles), the variables every entry point reads. The older names
(``AIRO_WORKSPACE_TOKEN``, ``AIRO_HOST``/``AIRO_TOKEN``) still work, with a warning line.

When nothing is found the command fails at once, naming what was looked for, instead of
leaving the databricks-sdk to try every cloud login first. Also: the exit codes, and the
error printer every command shares (through the client's ``Redactor``)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import warnings
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from air_runtime._auth import config_file, deprecated_variable, profile_host
from air_runtime._errors import AirError, ConfigurationError, RunFailed, WorkloadError
from air_runtime._loopback import is_loopback_name

HOST_ENV = "DATABRICKS_HOST"
TOKEN_ENV = "DATABRICKS_TOKEN"
_SDK_CREDENTIAL_VARIABLES = (
    "DATABRICKS_TOKEN",
    "DATABRICKS_CLIENT_ID",
    "DATABRICKS_CLIENT_SECRET",
    "DATABRICKS_USERNAME",
    "ARM_CLIENT_ID",
    "DATABRICKS_AUTH_TYPE",
)

# Exit codes of the commands that talk to a workspace (README, `airo`).
EXIT_OK = 0
EXIT_INVALID_WORKLOAD = 1  # local validation or the workspace's own check refused it
EXIT_USAGE = 2  # bad arguments (argparse's code too), a task-run id for a run id
EXIT_RUN_FAILED = 3  # the run ended without success (FAILED, TIMEDOUT, CANCELED, ...)
EXIT_ERROR = 4  # credentials, connection, or an error answer of the workspace


def add_workspace_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default=None,
        help=f"workspace URL (default: ${HOST_ENV} or the databricks-sdk config)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"file holding the access token (or set ${TOKEN_ENV})",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="access token; prefer --token-file or $" + TOKEN_ENV + " (a command line is "
        "visible to every user of the machine)",
    )
    parser.add_argument("--profile", default=None, help="~/.databrickscfg profile (without --host)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def _is_loopback(host: str) -> bool:
    """Whether a --host URL (or bare host) names this machine."""
    return is_loopback_name(urlsplit(host if "://" in host else f"http://{host}").hostname)


def _local_token_file() -> Path | None:
    if find_spec("fastapi") is None:  # the core without the [local] extra: no workspace here
        return None
    from air_runtime.local._arguments import default_data_dir
    from air_runtime.local._security import TOKEN_FILE

    return default_data_dir() / TOKEN_FILE


def _local_token(host: str | None) -> str | None:
    """The token of the local workspace in its default data dir, for a loopback host."""
    if not host or not _is_loopback(host):
        return None
    path = _local_token_file()
    if path is None:
        return None
    from air_runtime.local._security import read_token_file

    try:
        return read_token_file(path)
    except (OSError, ValueError):
        return None


def _read_token_file(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the token file {path}: {exc.strerror}") from None
    if not token:
        raise ConfigurationError(f"the token file {path} is empty")
    return token


def _explicit_token(args: argparse.Namespace) -> str | None:
    """--token, --token-file, or an older name of $DATABRICKS_TOKEN (the databricks-sdk
    reads that one itself)."""
    if args.token:
        return str(args.token)
    if args.token_file is not None:
        return _read_token_file(args.token_file)
    return deprecated_variable(TOKEN_ENV)


def _config_file() -> Path:
    return config_file()


def _profile_has_host(path: Path, profile: str) -> bool:
    return profile_host(path, profile) is not None


def _sdk_configured(host: str | None, profile: str) -> bool:
    """Whether the databricks-sdk chain has something to go on: a host (given, in
    $DATABRICKS_HOST or the profile) and, for a given host, credentials in the environment
    or a profile."""
    has_file_profile = _profile_has_host(_config_file(), profile)
    if host is None:
        return bool(os.environ.get("DATABRICKS_HOST")) or has_file_profile
    return any(os.environ.get(v) for v in _SDK_CREDENTIAL_VARIABLES) or has_file_profile


def _looked_for(host: str | None, profile: str) -> str:
    parts = ["--token", "--token-file"]
    if host is not None and _is_loopback(host):
        path = _local_token_file()
        if path is not None:
            parts.append(f"the local workspace's token file {path} (missing)")
    if host is None:
        parts.append(f"--host, ${HOST_ENV}")
    parts.append(", ".join(f"${v}" for v in _SDK_CREDENTIAL_VARIABLES[:2]))
    parts.append(f"profile {profile} in {_config_file()}")
    return "; ".join(parts)


def open_client(args: argparse.Namespace) -> Any:
    """The ``AirClient`` the command's options describe, or ``ConfigurationError`` at once
    when they describe none. An older variable name read on the way is one warning line."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", FutureWarning)
        try:
            return _open_client(args)
        finally:
            for warning in seen:
                print(f"warning: {warning.message}", file=sys.stderr)


def _open_client(args: argparse.Namespace) -> Any:
    from air_runtime.client import AirClient

    host = args.host or deprecated_variable(HOST_ENV)
    token = _explicit_token(args) or _local_token(host or os.environ.get(HOST_ENV))
    if token is not None and host is None:
        host = os.environ.get(HOST_ENV)  # a local workspace's own token file
    profile = args.profile or os.environ.get("DATABRICKS_CONFIG_PROFILE") or "DEFAULT"
    if token is None and not _sdk_configured(host, profile):
        where = f" for {host}" if host else ""
        hint = (
            " A local workspace started with --data-dir DIR keeps its token in DIR/token: "
            "pass --token-file DIR/token."
            if host is not None and _is_loopback(host)
            else ""
        )
        raise ConfigurationError(
            f"no workspace credentials{where}: looked for {_looked_for(host, profile)}.{hint}"
        )
    source = _host_source(args, host, profile)
    if token is None and args.profile:
        from air_runtime._auth import SdkConfigCredentials

        credentials = SdkConfigCredentials.from_environment(host, profile=args.profile)
        return AirClient(
            host, credentials=credentials, user_agent_extra="airo-cli", host_source=source
        )
    return AirClient(host, token, user_agent_extra="airo-cli", host_source=source)


def _host_source(args: argparse.Namespace, host: str | None, profile: str) -> str | None:
    """Where the host the command uses was set, for the fix of a host it cannot reach."""
    if args.host:
        return "--host"
    if host is not None:
        return f"${HOST_ENV}" if os.environ.get(HOST_ENV) else "$AIRO_HOST"
    if os.environ.get(HOST_ENV):
        return f"${HOST_ENV}"
    return f"the host of profile {profile} in {_config_file()}"


def follow_options(args: argparse.Namespace) -> str:
    """The options a printed follow-up command needs to reach the same workspace (never a
    token: ``--token-file`` or the variable stand for it)."""
    parts: list[str] = []
    if args.host:
        parts += ["--host", args.host]
    if args.token_file is not None:
        parts += ["--token-file", str(args.token_file)]
    if args.profile:
        parts += ["--profile", args.profile]
    return "".join(f" {shlex.quote(p)}" for p in parts)


def exit_code(error: BaseException) -> int:
    if isinstance(error, WorkloadError):
        return EXIT_INVALID_WORKLOAD
    if isinstance(error, RunFailed):
        return EXIT_RUN_FAILED
    return EXIT_ERROR


def fail(error: AirError, client: Any = None) -> int:
    """Print the error (redacted) and return its exit code."""
    redact = client.redactor if client is not None else str
    print(redact(f"error: {error}"), file=sys.stderr)
    return exit_code(error)
