"""The options of `airo workspace` and `python -m air_runtime.local`, and the default data
dir: importable without the server's dependencies, so building `airo`'s parser (and
finding the local workspace's token file) stays cheap."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from air_runtime.local._security import TOKEN_ENV, TOKEN_FILE


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "airo" / "workspace"


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (0 = any free port)")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help=f"state folder (default {default_data_dir()})"
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        action="append",
        default=None,
        help="file holding an accepted bearer token, repeatable",
    )
    parser.add_argument(
        "--token",
        action="append",
        default=None,
        help=(
            "accepted bearer token, repeatable; prefer --token-file or "
            f"${TOKEN_ENV} (a command line is readable by every user of the machine). "
            f"Default: a random token kept in <data dir>/{TOKEN_FILE}"
        ),
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help=(
            "allow --host to be an address other than loopback (needs an explicit token; "
            "the names clients use for this machine go in --allowed-host)"
        ),
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=None,
        metavar="NAME",
        help="another name accepted in the Host header (besides loopback names and --host)",
    )
    parser.add_argument("--mode", choices=("execute", "simulate"), default=None)
    parser.add_argument(
        "--gpu-pool",
        action="append",
        default=None,
        metavar="ID=TYPE:COUNT",
        help="serve a GPU pool, e.g. pool-a10=GPU_1xA10:8 (repeatable); runs with "
        "compute.pool_id ID count against it",
    )
    parser.add_argument(
        "--artifact-registry",
        default=None,
        metavar="HOST:PORT",
        help="pair with this Artifact Registry (a registry taking this workspace's tokens): "
        "runs and dry runs naming a Unity Catalog image it lacks are refused",
    )
    parser.add_argument("--faults", default=None, help="fault injection settings as JSON")
    parser.add_argument(
        "--config", default=None, help="any other workspace options as a JSON object"
    )
    parser.add_argument(
        "--config-file", type=Path, default=None, help="workspace options in a JSON file"
    )
    parser.add_argument("--ready-file", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--log-level", default="warning")


__all__ = ["add_server_arguments", "default_data_dir"]
