"""``airo run``, ``airo logs``, ``airo cancel`` and ``airo images register``: commands that
talk to a workspace (see ``_connection`` for how they find it and their exit codes).

What they print (log lines, state messages, failure messages, errors) goes through the
client's ``Redactor``: the credentials airo holds (token, OAuth client secret, the Docker Hub
login it would register a private image with) and their encodings never show. The values of a workload's Databricks secrets are not known here, so a
workload printing those is shown as the platform serves its log."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from air_runtime._errors import (
    AirError,
    ConfigurationError,
    NotFound,
    RetriesStopped,
    WorkloadError,
)
from air_runtime._failure_policy import RetryDecision
from air_runtime._states import RunState
from air_runtime.cli._connection import (
    EXIT_ERROR,
    EXIT_INVALID_WORKLOAD,
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    _is_loopback,
    _local_token,  # noqa: F401  (kept importable: the core-install test reads it here)
    add_workspace_options,
    fail,
    follow_options,
    open_client,
)
from air_runtime.client import LogRecord
from air_runtime.client._log_reads import task_keys_named

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def register(subparsers: Any) -> None:
    run = subparsers.add_parser("run", help="submit a workload and optionally wait for it")
    run.add_argument("file", metavar="FILE")
    run.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="(repeatable)"
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="validate here, then ask the workspace's own check once; nothing is uploaded "
        "or submitted",
    )
    run.add_argument(
        "--registry-host",
        default=None,
        help="with --dry-run: the Artifact Registry to look Unity Catalog images up in "
        "(default: derived from the workspace, as for `airo images push`)",
    )
    run.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="TYPE=AMOUNT",
        help="what one GPU-hour of an accelerator type costs (repeatable, e.g. "
        "--price GPU_8xH100=98 --currency USD): --dry-run then estimates the most a run "
        "costs (accelerators x timeout hours x price), a wait prints what it cost",
    )
    run.add_argument("--currency", default=None, help="the currency of --price")
    run.add_argument("--wait", action="store_true", help="wait until the run ends")
    run.add_argument(
        "--follow-logs", action="store_true", help="print every node's log while waiting"
    )
    run.add_argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="Ctrl-C or SIGTERM while waiting cancels the run (default: stop waiting, the "
        "run goes on)",
    )
    run.add_argument(
        "--stop-deterministic-retries",
        action="store_true",
        help="wait (as --wait); an attempt that fails in a way retries will not change (CUDA "
        "out of memory, a missing command, ...) cancels the run instead of being retried by "
        "the platform. Every wait does so now (the default failure policy); kept for scripts",
    )
    run.add_argument(
        "--checkpoint-volume",
        default=None,
        metavar="VOLUME",
        help="the Unity Catalog volume (/Volumes/<catalog>/<schema>/<volume>) where the ranks "
        "keep checkpoints: the experiment's folder in it is AIRO_CHECKPOINT_DIR, the same for "
        "the platform's retries and later runs of the experiment; '' for none. Default: none, "
        f"except on a local workspace (a loopback host): {LOCAL_CHECKPOINT_VOLUME}",
    )
    add_workspace_options(run)
    run.set_defaults(func=_run)

    logs = subparsers.add_parser(
        "logs",
        help="print a run's logs: every node of every task and attempt, each line labelled",
    )
    logs.add_argument("run_id", type=int, metavar="RUN_ID")
    logs.add_argument(
        "--task",
        metavar="KEY",
        help="only this task of a multi-task run: its key, its stage's name (every task of "
        "the stage) or its partition key",
    )
    logs.add_argument("--node", type=int, help="only this node (0 is the first)")
    logs.add_argument(
        "--attempt",
        type=int,
        metavar="K",
        help="only attempt K (0 is the first, as labelled; the same as --retry K)",
    )
    logs.add_argument(
        "--retry",
        type=int,
        metavar="N",
        help="only retry N (0 is the first try; as `databricks air logs --retry`; a repair's "
        "task run is the next retry of its task)",
    )
    logs.add_argument(
        "--download-to",
        metavar="DIR",
        help="write every task's, node's and retry's log (repairs included) to its own file "
        "under DIR/logs/ (<task>/attempt_<retry>/node_<n>.log) instead of printing them",
    )
    window = logs.add_mutually_exclusive_group()
    window.add_argument("--tail", type=int, metavar="N", help="the last N lines of each node")
    window.add_argument("--minutes", type=float, metavar="M", help="the last M minutes only")
    logs.add_argument("--follow", action="store_true", help="keep printing until the run ends")
    add_workspace_options(logs)
    logs.set_defaults(func=_logs)

    cancel = subparsers.add_parser("cancel", help="cancel runs, or all of your active runs")
    cancel.add_argument("run_ids", type=int, nargs="*", metavar="RUN_ID")
    cancel.add_argument("--all", action="store_true", help="cancel all of your active runs")
    cancel.add_argument("-y", "--yes", action="store_true", help="skip the confirmation of --all")
    add_workspace_options(cancel)
    cancel.set_defaults(func=_cancel)

    images = subparsers.add_parser(
        "images",
        help="container images: copy one into Unity Catalog (push), register a Docker Hub "
        "image (register)",
    )
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
    add_workspace_options(register_image)
    register_image.set_defaults(func=_register_image)


def _learn_registry_credentials(client: Any) -> None:
    """The Docker Hub login of this machine (what a private image is registered with)."""
    from air_runtime import find_docker_credentials

    try:
        credential = find_docker_credentials()
    except Exception:  # a broken helper: registration reports it, if it gets that far
        return
    if credential is not None:
        client.redactor.add(credential.password, credential.secret_value())


def _elapsed(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _ran(seconds: float) -> str:
    """A run's own duration: tenths under 10 s (a run of 0.4 s did not run "0s")."""
    return f"{seconds:.1f}s" if seconds < 10 else _elapsed(seconds)


class _Progress:
    """State changes of a waited-on run on stderr: on a terminal one spinner line with the
    state and the elapsed time, a line kept per change; otherwise a plain line per change."""

    def __init__(self, client: Any, run_id: int) -> None:
        self.client = client
        self.run_id = run_id
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.state = "SUBMITTED"
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.tty:
            self._ticker = threading.Thread(target=self._spin, daemon=True)
            self._ticker.start()

    def _line(self) -> str:
        return self.client.redactor(
            f"run {self.run_id}: {self.state} ({_elapsed(time.monotonic() - self.started)})"
        )

    def _spin(self) -> None:
        frame = 0
        while not self._done.wait(0.1):
            with self._lock:
                sys.stderr.write(f"\r\033[K{_SPINNER[frame % len(_SPINNER)]} {self._line()}")
                sys.stderr.flush()
            frame += 1

    def update(self, state: RunState) -> None:
        with self._lock:
            self.state = state.describe()
            if self.tty:
                sys.stderr.write(f"\r\033[K{self._line()}\n")
            else:
                print(self._line(), file=sys.stderr, flush=True)

    def retry(self, decision: RetryDecision) -> None:
        """What the failure policy made of a failed attempt (the platform retries it, or
        not), on its own line before the error or the retry's states."""
        if decision.stops:
            return  # the error that ends the wait says it
        with self._lock:
            if self._ticker is not None and not self._done.is_set():
                sys.stderr.write("\r\033[K")
            print(self.client.redactor(decision.line()), file=sys.stderr, flush=True)

    def print_record(self, record: LogRecord) -> None:
        """A followed log line on its own line: the spinner's line (stderr, the same
        terminal) is cleared first and drawn again at its next tick."""
        with self._lock:
            if self._ticker is not None and not self._done.is_set():
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
            _print_record(self.client, record)

    def stop(self) -> None:
        if self._done.is_set():
            return
        self._done.set()
        if self._ticker is not None:
            self._ticker.join()
            with self._lock:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()


class _Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _InterruptGuard:
    """The first SIGINT/SIGTERM stops the wait (raises ``_Interrupted`` in the main
    thread); the default handlers come back at once, so a second signal ends the process
    there and then, even while the first is being handled (run.go notifyInterrupt)."""

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> _InterruptGuard:
        self._previous = {s: signal.signal(s, self._handle) for s in self._SIGNALS}
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        for s in self._SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        raise _Interrupted(signum)

    def __exit__(self, *exc_info: object) -> None:
        for s, handler in self._previous.items():
            if signal.getsignal(s) == self._handle:
                signal.signal(s, handler)


def _guidance(args: argparse.Namespace, run_id: int) -> list[str]:
    options = follow_options(args)
    return [
        f"  follow it:  airo logs {run_id} --follow{options}",
        f"  status:     airo get {run_id}{options}",
        f"  cancel it:  airo cancel {run_id}{options}",
    ]


def _prices(args: argparse.Namespace) -> Any:
    """The prices of ``--price TYPE=AMOUNT`` and ``--currency`` (None without ``--price``);
    ``ConfigurationError`` naming a bad one and the fix."""
    from air_runtime._sweeps import Prices

    given: dict[str, str] = {}
    for item in args.price:
        kind, sep, amount = item.partition("=")
        if not sep or not kind:
            raise ConfigurationError(
                f"--price {item!r}: expected TYPE=AMOUNT. Fix: e.g. --price GPU_8xH100=98"
            )
        given[kind.strip()] = amount.strip()
    if not given:
        if args.currency is not None:
            raise ConfigurationError("--currency without --price. Fix: add --price TYPE=AMOUNT")
        return None
    return Prices.of(given, args.currency, where="--price")


def _estimate(workload: Any, prices: Any) -> Any:
    from air_runtime._sweeps import estimate_cost

    compute = workload.compute
    return estimate_cost(
        compute.accelerator_type,
        compute.num_accelerators,
        workload.timeout_minutes,
        workload.max_retries,
        prices,
    )


def _dry_run(args: argparse.Namespace, workload: Any, prices: Any = None) -> int:
    from air_runtime.images._presence import ImageCheck, check_unity_catalog_images
    from air_runtime.workload import locate_problems

    client = None
    try:
        with open_client(args) as client:
            problems = client.preflight(workload)
            # The workspace refuses at submit an image its Artifact Registry lacks: once its
            # check passes (which may have looked already), the images are looked up here.
            # A secret the workload names that its scope lacks fails the run at its start.
            secrets = client.check_secrets(workload)
            problems = [*problems, *secrets.problems]
            images = ImageCheck()
            if not problems:
                images = check_unity_catalog_images(
                    client, workload, registry_host=args.registry_host
                )
                problems = list(images.problems)
            host = client.host
    except AirError as error:
        return fail(error, client)
    # The workspace names fields of the workload: where they are in its file.
    problems = locate_problems(args.file, problems, args.override)
    for unchecked in secrets.unchecked:
        print(client.redactor(f"note: not looked up here: {unchecked}"), file=sys.stderr)
    if images.unchecked is not None:
        note = f"note: Unity Catalog images not looked up here: {images.unchecked}"
        print(client.redactor(note), file=sys.stderr)
    estimate = _estimate(workload, prices) if prices is not None else None
    if args.json:
        errors = client.redactor.redact_data([p.to_dict() for p in problems])
        answer: dict[str, Any] = {"valid": not problems, "errors": errors}
        if estimate is not None:
            answer["estimate"] = estimate.to_json()
        print(json.dumps(answer))
    elif problems:
        # The workspace's field errors, one per line (validateconfig.go formatConfigErrors).
        print("error: config validation failed:", file=sys.stderr)
        for problem in problems:
            print(client.redactor(f"  {problem}"), file=sys.stderr)
    else:
        print(f"{args.file}: valid (checked here and by {host}); nothing was submitted")
    if estimate is not None and not args.json:
        print(estimate.text())
    return EXIT_INVALID_WORKLOAD if problems else EXIT_OK


# The local workspace keeps volumes as folders under its data dir: any volume path works there.
LOCAL_CHECKPOINT_VOLUME = "/Volumes/local/airo/checkpoints"


def _with_checkpoints(
    args: argparse.Namespace, client: Any, workload: Any
) -> tuple[Any, str | None]:
    """``workload`` with its experiment's checkpoint folder and the resume variables (the
    folder made first, so a missing volume refuses the run), and the folder; unchanged when
    no volume applies or the author set ``AIRO_CHECKPOINT_DIR`` themselves."""
    from air_runtime._checkpoints import ENV_CHECKPOINT_DIR, CheckpointIdentity, checkpoint_volume
    from air_runtime.client._checkpoint_folders import prepare_folder

    volume = args.checkpoint_volume
    if volume is None:
        volume = LOCAL_CHECKPOINT_VOLUME if _is_loopback(client.host) else ""
    if not volume or ENV_CHECKPOINT_DIR in workload.env_variables:
        return workload, None
    volume = checkpoint_volume(volume)
    # Named by the experiment: a retry, and a later run of the same experiment, resume.
    identity = CheckpointIdentity("airo", "", "airo", workload.experiment_name, "run")
    folder = identity.folder(volume)
    workload = workload.with_env_variables({ENV_CHECKPOINT_DIR: folder})
    return client.run_flow(lambda core: prepare_folder(core, identity, volume, workload)), folder


def _note_run(client: Any, folder: str | None, run_id: int) -> None:
    from air_runtime.client._checkpoint_folders import record_run

    if folder is None:
        return
    try:
        client.run_flow(lambda core: record_run(core, folder, run_id))
    except AirError as error:
        print(
            client.redactor(f"warning: could not note run {run_id} in {folder}: {error}"),
            file=sys.stderr,
        )


def _run(args: argparse.Namespace) -> int:
    from air_runtime.workload import load_workload

    client = None
    try:
        workload = load_workload(args.file, args.override or None)
        prices = _prices(args)
    except AirError as error:
        return fail(error)
    if args.dry_run:
        return _dry_run(args, workload, prices)
    try:
        with open_client(args) as client:
            if workload.environment.docker_image is not None:
                _learn_registry_credentials(client)
            workload, folder = _with_checkpoints(args, client, workload)
            submitted = client.submit_workload(workload)
            run_id = submitted.run_id
            _note_run(client, folder, run_id)
            if folder is not None:
                print(f"checkpoints: {folder} (AIRO_CHECKPOINT_DIR)", file=sys.stderr)
            if not (args.wait or args.follow_logs or args.stop_deterministic_retries):
                if args.json:
                    print(
                        json.dumps({"run_id": str(run_id), "run_page_url": submitted.run_page_url})
                    )
                else:
                    print(f"run {run_id}: {submitted.run_page_url}")
                    print("\n".join(_guidance(args, run_id)))
                return EXIT_OK
            print(
                f"run {run_id}: {submitted.run_page_url}",
                file=sys.stderr if args.json else sys.stdout,
            )
            return _wait_for(args, client, run_id, prices)
    except WorkloadError as error:  # the workspace's refusal: where its fields are
        from air_runtime.workload import locate_problems

        located = locate_problems(args.file, error.problems, args.override)
        return fail(WorkloadError(located, error.source), client)
    except AirError as error:
        return fail(error, client)


def _wait_for(args: argparse.Namespace, client: Any, run_id: int, prices: Any = None) -> int:
    progress = _Progress(client, run_id)
    try:
        with _InterruptGuard():
            if args.follow_logs:
                # Logs stream in the background; the main thread reports state changes.
                printer = threading.Thread(
                    target=_print_logs, args=(client, run_id, progress.print_record), daemon=True
                )
                printer.start()
            try:
                state = client.wait(
                    run_id,
                    on_update=progress.update,
                    # The flag only ever said "stop"; without it the default policy holds.
                    stop_deterministic_retries=args.stop_deterministic_retries or None,
                    on_retry=progress.retry,
                )
            except RetriesStopped as stopped:
                progress.stop()
                print(client.redactor(f"error: {stopped}"), file=sys.stderr)
                from air_runtime.client import CancelCause

                client.cancel(run_id, cause=CancelCause("retries", str(stopped), "airo run"))
                state = client.wait(run_id)
                if args.follow_logs:
                    printer.join(timeout=30)
                print(f"run {run_id} cancelled: it ended {state.describe()}", file=sys.stderr)
                return EXIT_RUN_FAILED
            progress.stop()
            if args.follow_logs:
                printer.join(timeout=30)
    except _Interrupted as interrupt:
        progress.stop()
        return _interrupted(args, client, run_id, interrupt.signum)
    finally:
        progress.stop()  # the spinner never outlives the wait, an error included
    result = client.run_result(state)
    # The wait's own clock, as the state lines' "(5s)" count it (queueing included), then how
    # long the run ran by the platform's times: a short run no longer ends "in 0s" after a
    # "(5s)" line.
    summary = f" in {_elapsed(time.monotonic() - progress.started)}"
    if state.start_time and state.end_time:
        summary += f" (ran {_ran((state.end_time - state.start_time) / 1000)})"
    summary += f", {result.gpu_hours:.4f} GPU-hours"
    cost = prices.cost(state.gpu_hours_by_type()) if prices is not None else None
    if cost is not None:
        summary += f" ({prices.text(cost)})"
    if args.json:
        print(
            json.dumps(
                {
                    "run_id": str(run_id),  # as every --json prints run ids (the CLI's)
                    "result_state": state.result_state,
                    "life_cycle_state": state.life_cycle_state,
                    "duration_seconds": (state.end_time - state.start_time) // 1000
                    if state.start_time and state.end_time
                    else None,
                    "gpu_hours": result.gpu_hours,
                    "cost": cost,
                    "currency": prices.currency if cost is not None else None,
                    "run_page_url": state.run_page_url,
                }
            )
        )
    if result.failure is not None:
        print(client.redactor(f"error: {result.failure}"), file=sys.stderr)
        print(
            f"run {run_id} ended {state.result_state or state.life_cycle_state}{summary}",
            file=sys.stderr,
        )
        return EXIT_RUN_FAILED
    if not args.json:
        print(f"run {run_id} succeeded{summary}")
    return EXIT_OK


def _interrupted(args: argparse.Namespace, client: Any, run_id: int, signum: int) -> int:
    name = signal.Signals(signum).name
    if args.cancel_on_interrupt:
        print(f"\n{name}: cancelling run {run_id}", file=sys.stderr)
        client.cancel(
            run_id, cause=_user_cause(client, f"{name} to airo run --cancel-on-interrupt")
        )
        print(f"cancellation of run {run_id} requested", file=sys.stderr)
    else:
        lines = [
            f"\n{name}: stopped waiting. Run {run_id} is still going on the workspace"
            " (the workload was not cancelled):",
            *_guidance(args, run_id),
        ]
        print("\n".join(lines), file=sys.stderr, flush=True)
    return 128 + signum


def _print_record(client: Any, record: LogRecord) -> None:
    print(client.redactor(f"[{record.label}] {record.body}"), flush=True)


def _print_logs(client: Any, run_id: int, show: Callable[[LogRecord], None]) -> None:
    try:
        for record in client.iter_run_logs(run_id, follow=True):
            show(record)
    except AirError as error:
        print(client.redactor(f"log streaming stopped: {error}"), file=sys.stderr)


def _task_run_given(client: Any, run_id: int, command: str) -> int | None:
    """The usage exit code, with what the id is, when it names a task run, not a run."""
    from air_runtime.cli._run_views import task_run_ref

    ref = client.run_flow(lambda core: task_run_ref(core, run_id))
    if ref is None:
        return None
    fix = ""
    if ref.parent_run_id is not None:
        fix = (
            f": use `airo logs {ref.parent_run_id} --task {ref.task_key}`"
            if command == "logs"
            else f": use `airo cancel {ref.parent_run_id}` (it cancels the whole run)"
        )
    print(f"airo {command}: {ref.describe()}, not a run id{fix}", file=sys.stderr)
    return EXIT_USAGE


def _logs(args: argparse.Namespace) -> int:
    for name in ("tail", "minutes"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            print(f"airo logs: --{name} must be positive, got {value:g}", file=sys.stderr)
            return EXIT_USAGE
    if args.node is not None and args.node < 0:
        print(f"airo logs: --node must not be negative, got {args.node}", file=sys.stderr)
        return EXIT_USAGE
    if args.attempt is not None and args.retry is not None:
        print("airo logs: --retry and --attempt are one option; give one", file=sys.stderr)
        return EXIT_USAGE
    attempt = args.retry if args.retry is not None else args.attempt
    if attempt is not None and attempt < 0:
        print(f"airo logs: --retry must be 0 or more, got {attempt}", file=sys.stderr)
        return EXIT_USAGE
    if args.download_to is not None and (args.follow or args.tail or args.minutes):
        print("airo logs: --download-to writes whole logs (no --follow/--tail/--minutes)",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    client = None
    try:
        with open_client(args) as client:
            refused = _task_run_given(client, args.run_id, "logs")
            if refused is not None:
                return refused
            task_keys: list[str | None] = [None]
            if args.task is not None:
                state = client.get_run(args.run_id)
                found = task_keys_named(state, args.task)
                if not found:
                    keys = ", ".join(sorted({t.task_key for t in state.tasks})) or "none"
                    print(
                        f"airo: run {args.run_id} has no task {args.task!r} (its tasks: {keys})",
                        file=sys.stderr,
                    )
                    return EXIT_USAGE
                task_keys = list(found)
            records = (
                record
                for key in task_keys
                for record in client.read_logs(
                    args.run_id,
                    task_key=key,
                    node=args.node,
                    attempt=attempt,
                    tail=args.tail,
                    minutes=args.minutes,
                    follow=args.follow,
                )
            )
            if args.download_to is not None:
                return _download(args, client, records)
            printed = 0
            for record in records:
                printed += 1
                if args.json:
                    line = {
                        "task": record.task_key,
                        "node": record.node_index,
                        "attempt_number": record.attempt,
                        "time_unix_nano": record.time_unix_nano,
                        "line": record.body,
                    }
                    print(client.redactor(json.dumps(line)), flush=True)
                else:
                    _print_record(client, record)
            if not printed:
                _no_logs(client, args.run_id)
        return EXIT_OK
    except AirError as error:
        return fail(error, client)


def _no_logs(client: Any, run_id: int) -> None:
    state = client.get_run(run_id)
    ended = (
        f"Run terminated in state {state.result_state}"
        if state.is_terminal
        else f"Run is {state.life_cycle_state}"
    )
    print(f"No logs available for run {run_id}. {ended}", file=sys.stderr)


def _download(args: argparse.Namespace, client: Any, records: Iterator[LogRecord]) -> int:
    """Each (task, retry, node) stream to its own file, lines in order and unchanged
    (logdownload.go: one file per node under <dir>/logs/; ours adds the task and the retry,
    in the artifact layout's attempt_<n> folders)."""
    root = Path(args.download_to).resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        print(f"airo logs: failed to create {root}: {error}", file=sys.stderr)
        return EXIT_USAGE
    files: dict[tuple[str, int, int], Any] = {}
    try:
        for record in records:
            key = (record.task_key or "run", record.attempt, record.node_index)
            handle = files.get(key)
            if handle is None:
                path = root / "logs" / key[0] / f"attempt_{key[1]}" / f"node_{key[2]}.log"
                path.parent.mkdir(parents=True, exist_ok=True)
                handle = files[key] = path.open("w", encoding="utf-8")
            handle.write(client.redactor(record.body) + "\n")
    finally:
        for handle in files.values():
            handle.close()
    if not files:
        _no_logs(client, args.run_id)
        return EXIT_OK
    paths = {k: root / "logs" / k[0] / f"attempt_{k[1]}" / f"node_{k[2]}.log" for k in files}
    if args.json:
        rows = [
            {"task": t, "attempt_number": a, "node": n, "path": str(p)}
            for (t, a, n), p in sorted(paths.items())
        ]
        print(json.dumps({"run_id": str(args.run_id), "files": rows}))
        return EXIT_OK
    print(f"Downloaded {len(files)} log file(s) of run {args.run_id} to {root}")
    for (task, retry, node), path in sorted(paths.items()):
        print(f"  task {task} retry {retry} node {node}: {path}")
    return EXIT_OK


def _cancel(args: argparse.Namespace) -> int:
    """Best effort, as cancel.go: every id that names an active run is cancelled, and every
    one that cannot be (not found, a task run's id, refused) is reported; non-zero if any."""
    from air_runtime.cli._run_views import cancel_runs

    if args.all == bool(args.run_ids):
        print("airo cancel: give RUN_IDs, or --all (not both)", file=sys.stderr)
        return EXIT_USAGE
    client = None
    try:
        with open_client(args) as client:
            if args.all:
                return _cancel_all(args, client)
            ended: dict[str, str | None] = {}
            active: list[int] = []
            refused: list[tuple[int, str]] = []
            task_run_ids = 0
            for run_id in dict.fromkeys(args.run_ids):
                state, task_run_note = _run_or_task_run(client, run_id)
                if task_run_note is not None:
                    refused.append((run_id, task_run_note))
                    task_run_ids += 1
                elif state is None:
                    refused.append((run_id, _not_found(run_id)))
                elif state.is_terminal:
                    ended[str(run_id)] = state.result_state
                    if not args.json:
                        message = f"run {run_id} has already ended: {state.describe()}"
                        print(client.redactor(message))
                else:
                    active.append(run_id)
            cause = _user_cause(client, "airo cancel")
            result = client.run_flow(lambda core: cancel_runs(core, active, cause))
        failed = refused + list(result.failed)
        if args.json:
            payload: dict[str, Any] = {"cancelled": [str(i) for i in result.cancelled]}
            if ended:
                payload["ended"] = ended
            if failed:
                payload["failed"] = [{"run_id": str(i), "error": e} for i, e in failed]
            print(client.redactor(json.dumps(payload)))
        else:
            for run_id in result.cancelled:
                print(f"cancellation of run {run_id} requested")
            for run_id, error in failed:
                print(
                    client.redactor(f"run {run_id} could not be cancelled: {error}"),
                    file=sys.stderr,
                )
            if failed:
                print(f"{len(failed)} run(s) could not be cancelled", file=sys.stderr)
        if not failed:
            return EXIT_OK
        # A task run's id is a usage error (exit 2) when it is the only kind of failure.
        return EXIT_USAGE if task_run_ids == len(failed) else EXIT_ERROR
    except AirError as error:
        return fail(error, client)


def _user_cause(client: Any, how: str) -> Any:
    """The cause kept next to each run ``airo`` cancels: the user who asked, and how."""
    from air_runtime.client import CancelCause

    try:
        user = client.whoami().user_name
    except AirError:
        user = "a user"
    return CancelCause("user", f"cancelled with {how}", f"{user} (airo)")


def _not_found(run_id: int) -> str:
    return f"Run {run_id} does not exist: check the run id (a job run id, as `airo list` shows)"


def _run_or_task_run(client: Any, run_id: int) -> tuple[RunState | None, str | None]:
    """The run's state, or why ``run_id`` names a task run (with the run to cancel);
    ``(None, None)`` when no run has that id."""
    from air_runtime.cli._run_views import task_run_ref

    try:
        ref = client.run_flow(lambda core: task_run_ref(core, run_id))
        if ref is None:
            return client.get_run(run_id), None
    except NotFound:
        return None, None
    fix = (
        f": use `airo cancel {ref.parent_run_id}` (it cancels the whole run)"
        if ref.parent_run_id is not None
        else ""
    )
    return None, f"{ref.describe()}, not a run id{fix}"


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        raise ConfigurationError(f"{question} needs a confirmation: pass -y to give it")
    answer = input(f"{question} [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _cancel_all(args: argparse.Namespace, client: Any) -> int:
    """Every active run of the caller, all listed before the first cancel (cancel.go)."""
    from air_runtime.cli._run_views import active_runs_of_current_user, cancel_runs

    runs = client.run_flow(active_runs_of_current_user)
    if not runs:
        if args.json:
            print(json.dumps({"cancelled": [], "all": True, "workspace": client.host}))
        else:
            print("No active runs found.", file=sys.stderr)
        return EXIT_OK
    if not args.yes:
        print(
            f"\nWorkspace: {client.host}\nFound {len(runs)} active run(s) to cancel:\n",
            file=sys.stderr,
        )
        print(f"{'Run ID':<18}{'Experiment':<32}Started", file=sys.stderr)
        for run in runs:
            print(
                f"{run.run_id:<18}{(run.experiment_name or '-'):<32}{run.started_at or '-'}",
                file=sys.stderr,
            )
        if not _confirm(f"\nCancel {len(runs)} run(s) in {client.host}?"):
            print("Cancellation aborted.", file=sys.stderr)
            return EXIT_USAGE
    cause = _user_cause(client, "airo cancel --all")
    result = client.run_flow(lambda core: cancel_runs(core, [run.run_id for run in runs], cause))
    failed = [{"run_id": str(r), "error": message} for r, message in result.failed]
    if args.json:
        body: dict[str, Any] = {"cancelled": [str(r) for r in result.cancelled], "all": True}
        print(json.dumps({**body, **({"failed": failed} if failed else {})}))
    else:
        for run_id in result.cancelled:
            print(f"cancellation of run {run_id} requested")
    for item in failed:
        print(f"failed to cancel run {item['run_id']}: {item['error']}", file=sys.stderr)
    return EXIT_OK if not failed else EXIT_ERROR


def _register_image(args: argparse.Namespace) -> int:
    client = None
    try:
        with open_client(args) as client:
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
            if args.json:
                print(
                    json.dumps(
                        {
                            "docker_image_url": registration.docker_image_url,
                            "state": registration.state,
                            "digest": registration.digest,
                        }
                    )
                )
            else:
                print(f"{registration.docker_image_url} is AVAILABLE")
        return EXIT_OK
    except AirError as error:
        return fail(error, client)
