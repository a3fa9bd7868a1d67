"""Running one task attempt on this machine: one `bash command.sh` process group per node
rank, with the environment the platform's launcher would give it (docs/spec/workload.md §7)."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from air_runtime.local._errors import ApiError
from air_runtime.local._logs import LogBook, NodeLog
from air_runtime.local._security import private_dir, restrict_tree
from air_runtime.local.files.backend import VolumeTree, WorkspaceTree
from air_runtime.platform import GPUS_PER_NODE

# Set in every rank so a restarted workspace can recognise (and stop) its orphans: the
# task run and the workspace's own random id (another workspace's ranks are never touched).
RANK_MARKER = "AIRO_LOCAL_TASK_RUN_ID"
WORKSPACE_MARKER = "AIRO_LOCAL_WORKSPACE_ID"
# What the platform says of an attempt whose node was lost (a simulated node loss).
# What the Jobs API says of a run cancelled through runs/cancel (its state_message and its
# status.termination_details message: USER_CANCELED).
CANCELLED_BY_USER = "Run cancelled by user"
NODE_LOST_MESSAGE = "Node %d was lost: its host stopped answering (simulated node loss)"
# A rank's output is read in chunks; a line longer than this becomes several records.
MAX_LOG_LINE = 64 * 1024
_READ_CHUNK = 64 * 1024


class SetupError(Exception):
    """The attempt cannot start (missing file, missing secret...): the task fails with it."""


@dataclass
class Role:
    """What a set of ranks runs: the single command, or one container."""

    name: str | None
    command_path: str
    ranks: list[int]
    image: str | None


@dataclass
class AttemptOutcome:
    result_state: str
    message: str
    error_trace: str | None = None
    failed_node: int | None = None
    life_cycle_state: str = "TERMINATED"


@dataclass
class AttemptContext:
    task_run_id: int
    task: dict[str, Any]
    timeout_s: float | None
    work_dir: Path
    cancel_event: asyncio.Event
    on_running: Callable[[list[int]], None]
    kill_grace_s: float
    secret_lookup: Callable[[str, str], bytes | None]
    workspace: WorkspaceTree
    volumes: VolumeTree
    logbook: LogBook
    instance_id: str = ""
    node_logs: dict[int, NodeLog] = field(default_factory=dict)
    # What the platform gives every rank to log to the attempt's MLflow run (MLFLOW_*, and
    # the workspace and credential its MLflow client reaches it with).
    tracking_env: dict[str, str] = field(default_factory=dict)
    # Each running rank's process group, and the nodes lost (``lose_node``).
    rank_pids: dict[int, int] = field(default_factory=dict)
    lost_nodes: set[int] = field(default_factory=set)

    def lose_node(self, node: int) -> bool:
        """Take node ``node`` away as a lost host would: its processes die at once (SIGKILL,
        no launcher line), and the attempt fails with the platform's word for it. False when
        the attempt has no such running node."""
        pid = self.rank_pids.get(node)
        if pid is None:
            return False
        self.lost_nodes.add(node)
        _signal_group(pid, signal.SIGKILL)
        return True


def topology(task: dict[str, Any]) -> tuple[int, int, int]:
    """(nodes, GPUs per node, total GPUs) of a validated ai_runtime_task."""
    compute = task["ai_runtime_task"]["deployments"][0]["compute"]
    per_node = GPUS_PER_NODE[compute["accelerator_type"]]
    total = int(compute.get("accelerator_count") or per_node)
    return total // per_node, per_node, total


def roles(task: dict[str, Any]) -> list[Role]:
    ai = task["ai_runtime_task"]
    deployment = ai["deployments"][0]
    nodes, _, _ = topology(task)
    if deployment.get("containers"):
        return [
            Role(
                name=c["name"],
                command_path=c["command_path"],
                ranks=[int(r) for r in c.get("ranks") or range(nodes)],
                image=c.get("unity_catalog_image_path") or c.get("docker_image_url"),
            )
            for c in deployment["containers"]
        ]
    image = ai.get("docker_image_url") or ai.get("unity_catalog_image_path")
    return [Role(None, deployment["command_path"], list(range(nodes)), image)]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read_workspace_file(ctx: AttemptContext, path: str) -> bytes:
    try:
        if path.startswith("/Volumes/"):
            return ctx.volumes.read(path)
        return ctx.workspace.read(path)
    except ApiError as exc:
        raise SetupError(f"{path} cannot be read: {exc.message}") from None


def _materialize(ctx: AttemptContext, role: Role) -> Path:
    """Copy the command's folder (with its side files) into this attempt's own directory,
    so a later upload to the same launch folder cannot change a running attempt."""
    folder = str(PurePosixPath(role.command_path).parent)
    source = ctx.workspace.local_path(folder)
    command = ctx.workspace.local_path(role.command_path)
    if not command.is_file():
        raise SetupError(
            f"command file {role.command_path} does not exist in the workspace: "
            "upload the launch directory before submitting"
        )
    relative = source.relative_to(ctx.workspace.root)
    target = ctx.work_dir / "files" / relative
    if not target.exists():
        private_dir(target.parent)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.uploading"))
        restrict_tree(target)
    return target


def _snapshot_root(archive: tarfile.TarFile, archive_path: str) -> str:
    """The one top-level folder every entry of a code snapshot is under."""
    roots = set()
    for member in archive.getmembers():
        parts = [p for p in PurePosixPath(member.name).parts if p not in (".", "/")]
        if not parts:
            continue  # the "." entry of `tar -C parent .`
        if len(parts) == 1 and not member.isdir():
            roots.add("")  # a file at the top: no snapshot folder
        else:
            roots.add(parts[0])
    if len(roots) != 1 or "" in roots:
        found = ", ".join(sorted(r or "<files at the top level>" for r in roots)) or "nothing"
        raise SetupError(
            f"code source archive {archive_path} must hold exactly one top-level folder "
            f"(every entry under <dir>/), found: {found}"
        )
    return roots.pop()


def _unpack_code_source(ctx: AttemptContext, archive_path: str) -> Path:
    """Unpack the snapshot as the platform does and return `CODE_SOURCE_PATH`.

    The archive's top-level folder name is load-bearing: the platform's entry script
    unpacks it under its code_source folder and CODE_SOURCE_PATH is `<code_source>/<dir>`,
    `<dir>` taken from the archive (`snapshot_package.go` in the `databricks air` CLI, whose
    snapshots are `git archive --prefix=<dir>/` or `tar -C <parent> <dir>`). An archive
    without a single top folder has no `<dir>` to point at, so the attempt fails at set-up,
    before any rank starts, with a message that says so.
    """
    target = ctx.work_dir / "code_source"
    data = _read_workspace_file(ctx, archive_path)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            root = _snapshot_root(archive, archive_path)
            if not (target / root).is_dir():
                private_dir(target)
                archive.extractall(target, filter="data")
                restrict_tree(target)
    except (tarfile.TarError, OSError) as exc:
        raise SetupError(f"code source archive {archive_path} cannot be unpacked: {exc}") from None
    return target / root


def _role_env(ctx: AttemptContext, folder: Path, role: Role) -> dict[str, str]:
    env: dict[str, str] = {}
    plain = folder / "env_vars.json"
    if plain.is_file():
        for item in json.loads(plain.read_text()):
            env[str(item["name"])] = str(item["value"])
    secret_file = folder / "secret_env_vars.json"
    if secret_file.is_file():
        for item in json.loads(secret_file.read_text()):
            scope, key = str(item["secret_scope"]), str(item["secret_key"])
            value = ctx.secret_lookup(scope, key)
            if value is None:
                where = f"container {role.name}" if role.name else "the command"
                raise SetupError(
                    f"secret {scope}/{key} for environment variable {item['name']} of {where} "
                    f"does not exist: create it with secrets/put in scope {scope}"
                )
            env[str(item["name"])] = value.decode("utf-8", errors="replace")
    return env


# The only variables of the server's own environment a rank sees (besides PATH): the
# platform gives a container its env contract and the workload's variables, nothing of the
# machine that scheduled it, so no DATABRICKS_TOKEN or AIRFLOW_CONN_* of the orchestrator
# running this workspace leaks into a workload.
_BASE_NAMES = ("HOME", "LANG")


# Variables whose value is a volume folder the ranks write to (a checkpoint folder).
_VOLUME_FOLDER_VARIABLES = ("AIRO_CHECKPOINT_DIR",)


def _mounted(ctx: AttemptContext, env: dict[str, str]) -> dict[str, str]:
    """The platform mounts volumes at ``/Volumes`` on every node; this host has no such
    mount, so a volume folder a rank is given is the workspace's own folder of that path
    (made if missing, as a write to a mounted volume would make it)."""
    for name in _VOLUME_FOLDER_VARIABLES:
        value = env.get(name, "")
        if value.startswith("/Volumes/"):
            try:
                ctx.volumes.mkdirs(value)
            except ApiError as error:
                raise SetupError(f"{name} {value}: {error}") from None
            env[name] = str(ctx.volumes.local_path(value))
    return env


def base_environment() -> dict[str, str]:
    """PATH (this interpreter's folder first, so `python` in a command is the interpreter
    the workspace runs with and its packages), HOME and LANG."""
    env = {name: os.environ[name] for name in _BASE_NAMES if os.environ.get(name)}
    env.setdefault("LANG", "C.UTF-8")
    bin_dir = str(Path(sys.executable).parent)
    inherited = os.environ.get("PATH") or os.defpath
    env["PATH"] = os.pathsep.join([bin_dir, inherited])
    return env


async def _pump(stream: asyncio.StreamReader, log: NodeLog) -> None:
    """Drain a rank's pipe in chunks. Lines go to the log one record each; a line longer
    than MAX_LOG_LINE is written as several records instead of stopping the drain (a
    stopped drain fills the pipe and hangs the rank)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    while True:
        chunk = await stream.read(_READ_CHUNK)
        pending += decoder.decode(chunk, final=not chunk)
        *lines, pending = pending.split("\n")
        for line in lines:
            line = line.rstrip("\r")
            for start in range(0, max(len(line), 1), MAX_LOG_LINE):
                log.write(line[start : start + MAX_LOG_LINE])
        while len(pending) > MAX_LOG_LINE:
            log.write(pending[:MAX_LOG_LINE])
            pending = pending[MAX_LOG_LINE:]
        if not chunk:
            if pending:
                log.write(pending.rstrip("\r"))
            return


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _stop(procs: list[asyncio.subprocess.Process], grace_s: float) -> None:
    running = [p for p in procs if p.returncode is None]
    for proc in running:
        _signal_group(proc.pid, signal.SIGTERM)
    if running:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in running)), timeout=grace_s)
    # SIGKILL the whole group in every case: background children of a finished rank too.
    for proc in procs:
        _signal_group(proc.pid, signal.SIGKILL)
    await asyncio.gather(*(p.wait() for p in procs))


def _exit_code(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode


async def run_attempt(ctx: AttemptContext) -> AttemptOutcome:
    try:
        return await _run_attempt(ctx)
    except SetupError as exc:
        log = ctx.node_logs.get(0)
        if log is not None:
            log.write(f"ERROR: {exc}")
        return AttemptOutcome("FAILED", str(exc))
    finally:
        for log in ctx.node_logs.values():
            log.close()


async def _run_attempt(ctx: AttemptContext) -> AttemptOutcome:
    task = ctx.task
    ai = task["ai_runtime_task"]
    nodes, per_node, total = topology(task)
    for node in range(nodes):
        ctx.node_logs[node] = ctx.logbook.open(ctx.task_run_id, node)
    all_roles = roles(task)

    code_source: Path | None = None
    if ai.get("code_source_path"):
        code_source = _unpack_code_source(ctx, str(ai["code_source_path"]))

    platform_env = {
        "NUM_NODES": str(nodes),
        "LOCAL_WORLD_SIZE": str(per_node),
        "WORLD_SIZE": str(total),
        RANK_MARKER: str(ctx.task_run_id),
        WORKSPACE_MARKER: ctx.instance_id,
        **ctx.tracking_env,
    }
    if nodes > 1:
        platform_env.update(
            LOCAL_ADDR="127.0.0.1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
        )
    if code_source is not None:
        platform_env["CODE_SOURCE_PATH"] = str(code_source)

    launches: list[tuple[int, Path, str, dict[str, str]]] = []
    base = base_environment()
    for role in all_roles:
        folder = _materialize(ctx, role)
        user_env = _mounted(ctx, _role_env(ctx, folder, role))
        for rank in role.ranks:
            env = {
                **base,
                **user_env,
                **platform_env,
                "POD_RANK": str(rank),
                "NODE_RANK": str(rank),
            }
            launches.append((rank, folder, PurePosixPath(role.command_path).name, env))

    images = sorted({r.image for r in all_roles if r.image})
    if images:
        ctx.node_logs[0].write(
            f"INFO: the local workspace does not pull images ({', '.join(images)}); "
            "commands run on this host"
        )

    procs: dict[int, asyncio.subprocess.Process] = {}
    started: dict[int, float] = {}
    pumps: list[asyncio.Task[None]] = []
    try:
        for rank, folder, command_name, env in launches:
            proc = await asyncio.create_subprocess_exec(
                "bash",
                command_name,
                cwd=str(folder),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                umask=0o077,  # what a rank writes under the data dir stays private
            )
            procs[rank] = proc
            ctx.rank_pids[rank] = proc.pid
            started[rank] = time.monotonic()
            assert proc.stdout is not None and proc.stderr is not None
            pumps.append(asyncio.create_task(_pump(proc.stdout, ctx.node_logs[rank])))
            pumps.append(asyncio.create_task(_pump(proc.stderr, ctx.node_logs[rank])))
    except BaseException:
        await _stop(list(procs.values()), ctx.kill_grace_s)
        raise
    ctx.on_running([p.pid for p in procs.values()])
    outcome = await _supervise(ctx, procs, started)
    # Pipes close once every process of the groups is gone; do not wait forever anyway.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*pumps, return_exceptions=True), timeout=5)
    return outcome


async def _supervise(
    ctx: AttemptContext, procs: dict[int, asyncio.subprocess.Process], started: dict[int, float]
) -> AttemptOutcome:
    deadline = None if not ctx.timeout_s else time.monotonic() + ctx.timeout_s
    waits = {asyncio.create_task(p.wait()): rank for rank, p in procs.items()}
    cancelled = asyncio.create_task(ctx.cancel_event.wait())
    outcome: AttemptOutcome | None = None
    try:
        while waits and outcome is None:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, _ = await asyncio.wait(
                [*waits, cancelled], timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            if cancelled in done:
                outcome = AttemptOutcome("CANCELED", CANCELLED_BY_USER)
                for log in ctx.node_logs.values():
                    log.write("INFO: the run was cancelled; stopping this node")
                break
            if not done:
                seconds = int(ctx.timeout_s or 0)
                outcome = AttemptOutcome(
                    "TIMEDOUT", f"Task timed out after {seconds}s (timeout_seconds={seconds})."
                )
                for log in ctx.node_logs.values():
                    log.write(f"ERROR: the task timed out after {seconds}s; stopping this node")
                break
            for task in done:
                rank = waits.pop(task)
                code = _exit_code(task.result())
                ctx.logbook.record_exit(ctx.task_run_id, rank, code, stopped=False)
                if rank in ctx.lost_nodes and outcome is None:
                    # The host is gone: nothing of it logs again, not even its launcher.
                    outcome = AttemptOutcome(
                        "FAILED",
                        f"{NODE_LOST_MESSAGE % rank}",
                        error_trace="\n".join(ctx.logbook.tail(ctx.task_run_id, rank, 30)),
                        failed_node=rank,
                    )
                elif code != 0 and outcome is None:
                    elapsed = round(time.monotonic() - started[rank])
                    line = f"ERROR: Script failed with exit code {code} after {elapsed}s"
                    ctx.node_logs[rank].write(line)
                    trace = "\n".join(ctx.logbook.tail(ctx.task_run_id, rank, 30))
                    outcome = AttemptOutcome(
                        "FAILED",
                        f"Node {rank} failed: Script failed with exit code {code} after {elapsed}s",
                        error_trace=trace,
                        failed_node=rank,
                    )
    finally:
        cancelled.cancel()
        await _stop(list(procs.values()), ctx.kill_grace_s)
        for task in waits:
            task.cancel()
            rank = waits[task]
            returncode = procs[rank].returncode
            if returncode is not None:  # stopped by the workspace, not ended on its own
                ctx.logbook.record_exit(ctx.task_run_id, rank, _exit_code(returncode), stopped=True)
    return outcome or AttemptOutcome("SUCCESS", "")
