"""``airo pools list|get``, ``airo get RUN_ID`` and ``airo list``: what a workspace has and
runs, as today's CLI shows it (pools.go, acceptance/air/get, list.go), each with ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from air_runtime._errors import AirError
from air_runtime.cli._connection import (
    EXIT_OK,
    EXIT_USAGE,
    add_workspace_options,
    fail,
    open_client,
)


def register(subparsers: Any) -> None:
    pools = subparsers.add_parser("pools", help="GPU pools of the workspace")
    pool_commands = pools.add_subparsers(dest="pools_command", required=True)
    pool_list = pool_commands.add_parser("list", help="the GPU pools and their reservations")
    add_workspace_options(pool_list)
    pool_list.set_defaults(func=_pools_list)
    pool_get = pool_commands.add_parser(
        "get",
        help="one GPU pool with its used and idle accelerators (POOL_ID may be left out "
        "when the workspace has exactly one pool)",
    )
    pool_get.add_argument("pool_id", nargs="?", metavar="POOL_ID")
    add_workspace_options(pool_get)
    pool_get.set_defaults(func=_pools_get)

    get = subparsers.add_parser(
        "get",
        help="a run: state, why it failed, retries, progress, tasks, experiment, MLflow link, "
        "GPU-hours (a task-run id shows its run)",
    )
    get.add_argument("run_id", type=int, metavar="RUN_ID")
    add_workspace_options(get)
    get.set_defaults(func=_get)

    runs = subparsers.add_parser(
        "list", help="your AI Runtime runs, newest first (active ones by default)"
    )
    runs.add_argument(
        "--limit", type=int, default=20, metavar="N", help="at most N runs (default 20)"
    )
    runs.add_argument(
        "--all-status", action="store_true", help="runs in every state, not only active ones"
    )
    runs.add_argument("--all-users", action="store_true", help="runs of every user, not only yours")
    runs.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only runs that match (repeatable): experiment=GLOB, name=GLOB, state=FAILED, "
        "user=EMAIL, accelerator_type=H100, num_accelerators=N",
    )
    add_workspace_options(runs)
    runs.set_defaults(func=_list)


def _or_na(value: Any) -> str:
    return "N/A" if value is None or value == "" else str(value)


def _pools_list(args: argparse.Namespace) -> int:
    client = None
    try:
        with open_client(args) as client:
            pools = client.list_gpu_pools()
    except AirError as error:
        return fail(error, client)
    if args.json:
        rows = [
            {
                "pool_id": p.pool_id,
                "accelerator_type": p.accelerator_type,
                "reserved_accelerators": p.reserved_accelerators,
            }
            for p in pools
        ]
        print(json.dumps({"pools": rows}, indent=2))
        return EXIT_OK
    if not pools:
        print("No GPU pools found.")
        return EXIT_OK
    # pools.go renderPoolTable
    print(f"{'ID':<40} {'ACCELERATOR':<14} RESERVED")
    for pool in pools:
        print(
            f"{_or_na(pool.pool_id):<40} {_or_na(pool.accelerator_type):<14} {pool.reserved_accelerators}"
        )
    return EXIT_OK


def _pools_get(args: argparse.Namespace) -> int:
    if args.pool_id is not None and not args.pool_id.strip():
        print("airo pools get: pool_id cannot be empty", file=sys.stderr)
        return EXIT_USAGE
    client = None
    try:
        with open_client(args) as client:
            pool = client.get_gpu_pool(args.pool_id)
    except AirError as error:
        return fail(error, client)
    if args.json:
        print(json.dumps(pool.to_dict(), indent=2))
        return EXIT_OK
    # pools.go renderPoolDetail
    for label, value in (
        ("Pool ID", _or_na(pool.pool_id)),
        ("Accelerator Type", _or_na(pool.accelerator_type)),
        ("Reserved Accelerators", str(pool.reserved_accelerators)),
        ("Used Accelerators", _or_na(pool.used_accelerators)),
        ("Idle Accelerators", _or_na(pool.idle_accelerators)),
    ):
        print(f"{label + ':':<24} {value}")
    return EXIT_OK


def _duration(seconds: int | None) -> str:
    if seconds is None:
        return "N/A"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def _accelerators(summary: Any) -> str:
    """The most the run held at once across its tasks (``2x A10``; ``2x A10 + 1x H100``)."""
    held = [(kind, n) for kind, n in summary.accelerators if kind and n]
    if not held:
        return "N/A"
    return " + ".join(f"{n}x {kind.rsplit('x', 1)[-1]}" for kind, n in held)


def _retries(attempt_number: int, max_retries: int | None) -> str:
    """The CLI's count (Retries, Max Retries): 0 is the first try."""
    if max_retries is None:
        return str(attempt_number)
    return f"{attempt_number} of {'unlimited' if max_retries < 0 else max_retries}"


def _get(args: argparse.Namespace) -> int:
    from air_runtime.cli._run_views import run_summary

    client = None
    try:
        with open_client(args) as client:
            summary = client.run_flow(lambda core: run_summary(core, args.run_id))
    except AirError as error:
        return fail(error, client)
    if args.json:
        print(client.redactor(json.dumps(summary.to_dict(), indent=2)))
        return EXIT_OK
    write = print
    if summary.asked_for is not None:
        write(f"{summary.asked_for} is a task run of run {summary.run_id}; showing the run.")
    if summary.diagnosis is not None:
        write(client.redactor(f"Run {summary.run_id} failed: {summary.diagnosis.headline()}"))
    state = summary.status + (f": {summary.state_message}" if summary.state_message else "")
    for label, value in (
        ("Run ID", summary.run_id),
        ("Status", state),
        ("Submitted", summary.started_at),
        ("Retries", _retries(summary.attempt_number, summary.max_retries)),
        ("Duration", _duration(summary.duration_seconds)),
        ("Progress", summary.progress.detailed() if summary.progress else None),
        ("Experiment", summary.experiment_name),
        # An orchestrator's run is named after its pipeline, task and index or partition.
        ("Run name", summary.run_name),
        ("User", summary.user),
        ("Accelerators", _accelerators(summary)),
        ("GPU-hours", f"{summary.gpu_hours:.4f}"),
        ("Run URL", summary.run_page_url),
        ("MLflow URL", summary.mlflow_run_url),
    ):
        write(client.redactor(f"{label + ':':<14} {_or_na(value)}"))
    ended = summary.termination
    if ended is not None and ended.code and ended.code != "SUCCESS":
        # As the API gives it (status.termination_details), then why our code cancelled it.
        kind = f" ({ended.type})" if ended.type else ""
        text = f"{ended.code}{kind}" + (f": {ended.message}" if ended.message else "")
        write(client.redactor(f"{'Termination:':<14} {text}"))
    if summary.cancel_cause is not None:
        write(client.redactor(f"{'Cause:':<14} {summary.cancel_cause.describe()}"))
    if summary.checkpoint is not None:  # where a retry, or the next run, resumes
        newest = summary.checkpoint
        write(client.redactor(f"{'Checkpoint:':<14} {newest.describe()} ({newest.path})"))
    if summary.tasks:
        write("")
        # Each task's own experiment: a workflow's stages may log to different ones. Whole
        # task keys and experiments (a partition or map index is at their end): the columns
        # are as wide as their longest.
        keys = max(28, *(len(t.task_key) + 1 for t in summary.tasks))
        names = max(28, *(len(_or_na(t.experiment_name)) + 1 for t in summary.tasks))
        write(
            f"{'Task':<{keys}}{'Task run':<14}{'Status':<16}{'Retries':<12}{'GPU-hours':<11}"
            f"{'Experiment':<{names}}Progress"
        )
        for task in summary.tasks:
            run = "-" if task.task_run_id is None else str(task.task_run_id)
            progress = task.progress.compact() if task.progress else "-"
            write(
                client.redactor(
                    f"{task.task_key:<{keys}}{run:<14}{task.status:<16}"
                    f"{_retries(task.attempt_number, task.max_retries):<12}"
                    f"{task.gpu_hours:<11.4f}{_or_na(task.experiment_name):<{names}}{progress}"
                )
            )
    if summary.last_lines:
        write("")
        write(f"Last lines of node {summary.failed_node}:")
        for line in summary.last_lines:
            write(client.redactor(f"  | {line}"))
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    if args.limit < 1:
        print(
            f"airo list: invalid --limit {args.limit}: must be a positive integer", file=sys.stderr
        )
        return EXIT_USAGE
    from air_runtime.cli._run_views import RunFilters, list_runs

    client = None
    try:
        filters = RunFilters.parse(args.filter)
    except AirError as error:
        print(f"airo list: {error}", file=sys.stderr)
        return EXIT_USAGE
    if filters.state is not None and not args.all_status:
        args.all_status = True  # an ended state is only found among every state's runs
    try:
        with open_client(args) as client:
            runs = client.run_flow(
                lambda core: list_runs(
                    core,
                    limit=args.limit,
                    all_status=args.all_status,
                    filters=filters,
                    all_users=args.all_users,
                )
            )
    except AirError as error:
        return fail(error, client)
    if args.json:
        print(json.dumps({"runs": [r.to_dict() for r in runs]}, indent=2))
        return EXIT_OK
    if not runs:
        print("No runs found." if args.all_status else "No active runs found.")
        return EXIT_OK
    # The CLI's columns (list_format.go), with the run's name last and whole: an
    # orchestrator's run is named after its pipeline, run, task and index.
    print(
        f"{'Run ID':<18}{'Experiment':<28}{'Status':<14}{'Started':<22}{'Duration':<10}"
        f"{'Progress':<16}{'GPU-hours':<11}{'Accelerators':<14}Name"
    )
    for run in runs:
        progress = run.progress.compact() if run.progress else "-"
        print(
            client.redactor(
                f"{run.run_id:<18}{_or_na(run.experiment_name)[:27]:<28}{run.status:<14}"
                f"{_or_na(run.started_at):<22}{_duration(run.duration_seconds):<10}"
                f"{progress:<16}{run.gpu_hours:<11.4f}{_accelerators(run):<14}"
                f"{_or_na(run.run_name)}"
            )
        )
    return EXIT_OK
