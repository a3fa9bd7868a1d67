"""The ``airo`` command line. Each sub-command group lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# Modules that each expose ``register(subparsers)``; a command's handler is stored as
# ``func`` on its parser and returns the exit code.
_COMMAND_MODULES = (
    "air_runtime.cli._workload_cmds",  # validate, plan, schema
    "air_runtime.cli._workspace_cmd",  # workspace
    "air_runtime.cli._run_cmds",  # run, logs, cancel, images
    "air_runtime.cli._images_push_cmd",  # images push (after _run_cmds: adds to `images`)
    "air_runtime.cli._inspect_cmds",  # pools, get, list
    "air_runtime.cli._secrets_cmd",  # secrets prune
)


def _version() -> str:
    """The installed air-orchestration's version (what the client's User-Agent names)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("air-orchestration")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airo",
        description="Run Databricks AI Runtime workloads and a local workspace.",
        epilog="exit codes: 0 done; 1 the workload is invalid (here or by the workspace's "
        "check); 2 bad arguments; 3 the waited-for run did not succeed; 4 credentials, "
        "connection or an error of the workspace; 130/143 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"airo {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except BrokenPipeError:
        # The reader went away (`airo plan ... | head`): not an error of ours. Point stdout
        # at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
