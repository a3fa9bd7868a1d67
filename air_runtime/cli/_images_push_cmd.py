"""``airo images push``: copy an image from a registry into Unity Catalog (the workspace's
Databricks Artifact Registry) without Docker, and print its ``unity_catalog_image``.

Follows ``databricks air images push`` (databricks/cli cmd/air/image.go; acceptance
air/image-push): SOURCE, ``--catalog``, ``--schema``, ``--artifact NAME[:TAG]`` (default:
the source's name and tag), names checked before anything is read, linux/amd64 only; a JSON
document with ``--json``. Where the CLI pulls into a local Docker daemon and pushes from it,
this command copies registry to registry.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from air_runtime._errors import AirError, ConfigurationError
from air_runtime.cli._connection import (
    EXIT_OK,
    EXIT_USAGE,
    add_workspace_options,
    fail,
    open_client,
)


def _images_commands(subparsers: Any) -> Any:
    """The sub-commands of ``airo images`` (made by ``_run_cmds``), or a new group."""
    images = subparsers.choices.get("images")
    if images is None:
        images = subparsers.add_parser("images", help="container images")
        return images.add_subparsers(dest="images_command", required=True)
    for action in images._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return images.add_subparsers(dest="images_command", required=True)


def register(subparsers: Any) -> None:
    push = _images_commands(subparsers).add_parser(
        "push",
        help="copy an image from a registry into Unity Catalog (no Docker needed)",
        description="Copy SOURCE (Docker Hub by default; any registry, with the login of "
        "~/.docker/config.json) to the workspace's Artifact Registry as "
        "<catalog>.<schema>.<artifact>:<tag> and print that unity_catalog_image.",
    )
    push.add_argument(
        "source", metavar="SOURCE", help="e.g. pytorch/pytorch:2.6.0 or host/repo:tag"
    )
    push.add_argument("--catalog", required=True, help="lowercase letters, digits, underscores")
    push.add_argument("--schema", required=True, help="lowercase letters, digits, underscores")
    push.add_argument(
        "--artifact",
        default=None,
        metavar="NAME[:TAG]",
        help="artifact name and tag (default: the source's last path component and tag)",
    )
    push.add_argument(
        "--registry-host",
        default=None,
        help="the Artifact Registry host (default: <workspace id>.container.<region>.<zone>)",
    )
    push.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_workspace_options(push)  # --host, --token-file, --profile, --json
    push.set_defaults(func=_push)


def _mib(count: int) -> str:
    return f"{count / 1048576:.1f} MiB"


def _progress_printer(quiet: bool) -> Any:
    if quiet:
        return None

    def show(event: Any) -> None:
        if event.event == "resolved":
            line = f"copying {event.digest}: {event.layers_total} blobs, {_mib(event.bytes_total)}"
        elif event.event == "uploading":
            line = f"  {event.digest[:19]} {_mib(event.blob_done)}/{_mib(event.blob_size)}"
        elif event.event in ("exists", "mounted", "uploaded"):
            line = (
                f"[{event.layers_done}/{event.layers_total}] {event.digest[:19]} {event.event}"
                f" ({_mib(event.blob_size)}); sent {_mib(event.bytes_sent)}"
            )
        elif event.event == "up-to-date":
            line = "the Artifact Registry has this image already: nothing sent"
        else:
            line = f"manifest pushed; sent {_mib(event.bytes_sent)}"
        print(line, file=sys.stderr, flush=True)

    return show


def _push(args: argparse.Namespace) -> int:
    from air_runtime.images import parse_source_image, push_image, unity_catalog_image

    try:
        # The names first: a bad one is refused (a usage error) before anything is asked.
        unity_catalog_image(
            args.catalog, args.schema, args.artifact, source=parse_source_image(args.source)
        )
    except ConfigurationError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    client = None
    try:
        with open_client(args) as client:
            pushed = push_image(
                client,
                args.source,
                catalog=args.catalog,
                schema=args.schema,
                artifact=args.artifact,
                registry_host=args.registry_host,
                progress=_progress_printer(args.quiet or args.json),
            )
    except AirError as error:
        return fail(error, client)
    if args.json:
        print(json.dumps(pushed.as_dict(), indent=2))
    else:
        print(
            f"Now you can set `environment.unity_catalog_image = {pushed.unity_catalog_image}` "
            "in your workload and run it with `airo run`.",
            file=sys.stderr,
        )
        print(pushed.unity_catalog_image)
    return EXIT_OK
