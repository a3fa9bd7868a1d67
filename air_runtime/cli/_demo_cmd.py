"""``airo demo``: the same end-to-end demo as ``make demo``."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    from air_runtime import demo

    parser = subparsers.add_parser(
        "demo",
        help="run the toy RL pipeline on a local workspace, directly, via Airflow and via Dagster",
        description=demo.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from air_runtime import demo

    return demo.run(args)
