"""`airo workspace`: serve the local workspace in the foreground."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    from air_runtime.local._server import add_server_arguments

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "workspace",
        help="serve the local workspace (an AI Runtime emulator that runs workloads here)",
        description=(
            "Serve the local workspace: the AI Runtime REST API on this machine. Point any "
            "client at http://<host>:<port> with one of the tokens."
        ),
    )
    add_server_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from air_runtime.local._server import run_from_arguments

    run_from_arguments(args, announce=True)
    return 0
