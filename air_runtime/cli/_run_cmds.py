"""``airo run``, ``airo logs``, ``airo cancel`` and ``airo images register``: commands that
talk to a workspace. Without ``--host`` they use the databricks-sdk configuration chain
(DATABRICKS_HOST / DATABRICKS_TOKEN, ~/.databrickscfg).

What they print (log lines, state messages, failure messages, errors) goes through the
client's ``Redactor``: the credentials airo holds (token, OAuth client secret, the Docker Hub
login it would register a private image with) and their encodings never show. The values of a workload's Databricks secrets are not known here, so a
workload printing those is shown as the platform serves its log."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from air_runtime._errors import AirError
from air_runtime._states import RunState
from air_runtime.client import LogRecord


def _workspace_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default=None, help="workspace URL (default: databricks-sdk config)"
    )
    parser.add_argument(
        "--token", default=None, help="access token (default: databricks-sdk config)"
    )


def register(subparsers: Any) -> None:
    run = subparsers.add_parser("run", help="submit a workload and optionally wait for it")
    run.add_argument("file", metavar="FILE")
    run.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="(repeatable)"
    )
    run.add_argument("--wait", action="store_true", help="wait until the run ends")
    run.add_argument(
        "--follow-logs", action="store_true", help="print every node's log while waiting"
    )
    _workspace_options(run)
    run.set_defaults(func=_run)

    logs = subparsers.add_parser(
        "logs",
        help="print a run's logs: every node of every task and attempt, each line labelled",
    )
    logs.add_argument("run_id", type=int, metavar="RUN_ID")
    logs.add_argument("--task", metavar="KEY", help="only this task of a multi-task run")
    logs.add_argument("--node", type=int, help="only this node (0 is the first)")
    logs.add_argument("--follow", action="store_true", help="keep printing until the run ends")
    _workspace_options(logs)
    logs.set_defaults(func=_logs)

    cancel = subparsers.add_parser("cancel", help="cancel a run")
    cancel.add_argument("run_id", type=int, metavar="RUN_ID")
    _workspace_options(cancel)
    cancel.set_defaults(func=_cancel)

    images = subparsers.add_parser("images", help="Docker Hub image registration")
    image_commands = images.add_subparsers(dest="images_command", required=True)
    register_image = image_commands.add_parser(
        "register", help="register an image and wait until it is AVAILABLE"
    )
    register_image.add_argument("image", metavar="IMAGE")
    register_image.add_argument("--scope", default=None, help="secret scope of stored credentials")
    register_image.add_argument("--key", default=None, help="secret key of stored credentials")
    register_image.add_argument(
        "--refresh", action="store_true", help="register again even when already AVAILABLE"
    )
    register_image.add_argument("--timeout", type=float, default=3600.0)
    _workspace_options(register_image)
    register_image.set_defaults(func=_register_image)


def _local_token(host: str | None) -> str | None:
    """The token of the local workspace in its default data dir, for a loopback host."""
    if not host:
        return None
    from urllib.parse import urlsplit

    try:
        from air_runtime.local._security import TOKEN_FILE, is_loopback, read_token_file
        from air_runtime.local._server import default_data_dir
    except ModuleNotFoundError:  # the core without the [local] extra: no local workspace here
        return None

    name = urlsplit(host if "://" in host else f"http://{host}").hostname or ""
    if not is_loopback(name):
        return None
    try:
        return read_token_file(default_data_dir() / TOKEN_FILE)
    except (OSError, ValueError):
        return None


def _client(args: argparse.Namespace) -> Any:
    from air_runtime.client import AirClient

    token = args.token if args.token is not None else _local_token(args.host)
    return AirClient(args.host, token, user_agent_extra="airo-cli")


def _learn_registry_credentials(client: Any) -> None:
    """The Docker Hub login of this machine (what a private image is registered with)."""
    from air_runtime import find_docker_credentials

    try:
        credential = find_docker_credentials()
    except Exception:  # a broken helper: registration reports it, if it gets that far
        return
    if credential is not None:
        client.redactor.add(credential.password, credential.secret_value())


def _fail(error: Exception, client: Any = None) -> int:
    redact = client.redactor if client is not None else str
    print(redact(f"error: {error}"), file=sys.stderr)
    return 1


def _update_printer(client: Any) -> Any:
    def print_update(state: RunState) -> None:
        print(client.redactor(f"state: {state.describe()}"), file=sys.stderr)

    return print_update


def _run(args: argparse.Namespace) -> int:
    from air_runtime.workload import load_workload

    client = None
    try:
        workload = load_workload(args.file, args.override or None)
        with _client(args) as client:
            if workload.environment.docker_image is not None:
                _learn_registry_credentials(client)
            submitted = client.submit_workload(workload)
            print(f"run {submitted.run_id}: {submitted.run_page_url}")
            if not (args.wait or args.follow_logs):
                return 0
            if args.follow_logs:
                # Logs stream in the background; the main thread reports state changes.
                printer = threading.Thread(
                    target=_print_logs, args=(client, submitted.run_id), daemon=True
                )
                printer.start()
            state = client.wait(submitted.run_id, on_update=_update_printer(client))
            if args.follow_logs:
                printer.join(timeout=30)
            client.raise_for_failure(state)
            print(f"run {submitted.run_id} succeeded")
            return 0
    except AirError as error:
        return _fail(error, client)


def _print_record(client: Any, record: LogRecord) -> None:
    print(client.redactor(f"[{record.label}] {record.body}"), flush=True)


def _print_logs(client: Any, run_id: int) -> None:
    try:
        for record in client.iter_run_logs(run_id, follow=True):
            _print_record(client, record)
    except AirError as error:
        print(client.redactor(f"log streaming stopped: {error}"), file=sys.stderr)


def _logs(args: argparse.Namespace) -> int:
    client = None
    try:
        with _client(args) as client:
            if args.task is not None:
                state = client.get_run(args.run_id)
                if all(t.task_key != args.task for t in state.tasks):
                    keys = ", ".join(sorted({t.task_key for t in state.tasks})) or "none"
                    print(
                        f"airo: run {args.run_id} has no task {args.task!r} (its tasks: {keys})",
                        file=sys.stderr,
                    )
                    return 2
            for record in client.iter_run_logs(
                args.run_id, task_key=args.task, node=args.node, follow=args.follow
            ):
                _print_record(client, record)
        return 0
    except AirError as error:
        return _fail(error, client)


def _cancel(args: argparse.Namespace) -> int:
    client = None
    try:
        with _client(args) as client:
            client.cancel(args.run_id)
        print(f"cancellation of run {args.run_id} requested")
        return 0
    except AirError as error:
        return _fail(error, client)


def _register_image(args: argparse.Namespace) -> int:
    client = None
    try:
        with _client(args) as client:
            if args.scope is None:
                _learn_registry_credentials(client)
            registration = client.register_image(
                args.image,
                credentials_scope=args.scope,
                credentials_key=args.key,
                refresh=args.refresh,
            )
            print(f"{registration.docker_image_url}: {registration.state}", file=sys.stderr)
            if not registration.is_available:
                registration = client.wait_for_image(args.image, timeout=args.timeout)
            print(f"{registration.docker_image_url} is AVAILABLE")
        return 0
    except AirError as error:
        return _fail(error, client)
