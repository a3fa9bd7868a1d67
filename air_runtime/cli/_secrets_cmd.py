"""``airo secrets prune``: delete the orchestrator-secret keys a crash left behind.

The Airflow provider and the Dagster integration write ``secret_env`` values under keys of
one submission (``airo.<task>.<tag>.<tag>.<NAME>``, see ``air_runtime.client._secrets``) and
delete them once the run has ended, or on the task's next run. What is left after that (a
worker that died and a task that never ran again) is pruned here: keys last written
(``secrets/list``'s ``last_updated_timestamp``) more than ``--older-than`` ago, except those
of a submission whose recorded run is still going. Other keys of the scope are not touched.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

from air_runtime._errors import AirError
from air_runtime.cli._connection import add_workspace_options, fail, open_client

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` → seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use a number with s, m, h, d or w (e.g. 7d)"
        )
    return float(match[1]) * _UNIT_S[match[2]]


def register(subparsers: Any) -> None:
    secrets = subparsers.add_parser("secrets", help="orchestrator secrets in a secret scope")
    commands = secrets.add_subparsers(dest="secrets_command", required=True)
    prune = commands.add_parser(
        "prune", help="delete orchestrator-secret keys left behind by runs that ended"
    )
    prune.add_argument("--scope", required=True, help="the secret scope")
    prune.add_argument(
        "--older-than",
        required=True,
        type=parse_duration,
        metavar="DURATION",
        help="only keys last written longer ago than this (e.g. 7d, 12h, 30m)",
    )
    prune.add_argument("--dry-run", action="store_true", help="only print what would go")
    add_workspace_options(prune)
    prune.set_defaults(func=_prune)


def _prune(args: argparse.Namespace) -> int:
    try:
        with open_client(args) as client:
            result = client.prune_submission_secrets(
                args.scope,
                older_than_s=args.older_than,
                now_ms=int(time.time() * 1000),
                dry_run=args.dry_run,
            )
    except AirError as error:
        return fail(error)
    if args.json:
        print(
            json.dumps(
                {
                    "deleted": result.deleted,
                    "kept_active": result.kept_active,
                    "dry_run": args.dry_run,
                }
            )
        )
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    for key in result.deleted:
        print(f"{verb} {args.scope}/{key}")
    for key in result.kept_active:
        print(f"kept {args.scope}/{key} (its run is still going)", file=sys.stderr)
    print(f"{verb} {len(result.deleted)} keys from scope {args.scope}", file=sys.stderr)
    return 0
