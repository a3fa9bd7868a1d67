"""`airo workspace`: serve the local workspace in the foreground."""

from __future__ import annotations

import argparse
import sys
from importlib.util import find_spec
from typing import Any

# What the `local` extra installs: the local workspace's server.
LOCAL_EXTRA_MODULES = frozenset({"fastapi", "uvicorn", "starlette"})
INSTALL_HINT = 'the local workspace needs its extra: pip install "air-orchestration[local]"'


def register(subparsers: Any) -> None:
    missing_modules = [m for m in sorted(LOCAL_EXTRA_MODULES) if find_spec(m) is None]
    if missing_modules:
        missing = subparsers.add_parser(
            "workspace", help=f"serve the local workspace ({INSTALL_HINT})"
        )
        missing.add_argument("rest", nargs=argparse.REMAINDER)
        missing.set_defaults(func=_not_installed)
        return
    from air_runtime.local._arguments import add_server_arguments

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "workspace",
        help="serve the local workspace (an AI Runtime emulator that runs workloads here)",
        description=(
            "Serve the local workspace: the AI Runtime REST API on this machine. Point any "
            "client at http://<host>:<port> with one of the tokens. Without a token option, "
            "a random token is kept in <data dir>/token (mode 0600); `airo run/logs/cancel` "
            "pointed at a loopback --host without --token read it from the default data dir."
        ),
    )
    add_server_arguments(parser)
    parser.set_defaults(func=_run)


def _not_installed(args: argparse.Namespace) -> int:
    print(f"airo workspace: {INSTALL_HINT}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    import sys

    from air_runtime.local._server import run_from_arguments

    try:
        run_from_arguments(args, announce=True)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
