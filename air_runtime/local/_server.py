"""Starting a local workspace: in this process (uvicorn in a thread) or as a subprocess."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from air_runtime.local._arguments import add_server_arguments, default_data_dir
from air_runtime.local._faults import Outage
from air_runtime.local._options import WorkspaceOptions, normalize_tokens
from air_runtime.local._security import (
    TOKEN_ENV,
    ensure_token,
    is_loopback,
    private_dir,
    read_token_file,
    write_private,
)

ADMIN = "/api/2.0/airo-admin"
READY_FILE = "server.json"
CONFIG_FILE = "options.json"  # options of a subprocess workspace (tokens included): 0600


class _QuietDrops(logging.Filter):
    """Injected dropped connections are expected; do not log them as server errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "without starting response" not in record.getMessage()


def bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit this; asyncio only sets it itself on sockets it creates,
    # and without it every answer waits ~40 ms for a delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    return sock


class WorkspaceServer(uvicorn.Server):
    """uvicorn's server, able to stop listening and listen again on the same address: a
    `refuse` outage (`_faults.Outage`), where connecting is refused by the kernel as while
    a workspace restarts, and the run engine in this process goes on."""

    def __init__(self, config: uvicorn.Config, outage: Outage) -> None:
        super().__init__(config)
        self.outage = outage
        outage.listener = self
        self._addresses: list[tuple[str, int]] = []

    async def stop_listening(self) -> None:
        self._addresses = [
            (sock.getsockname()[0], sock.getsockname()[1])
            for server in self.servers
            for sock in server.sockets
        ]
        for server in self.servers:
            server.close()  # the listening sockets: new connections are refused
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.close()  # what the callers of a stopped process see

    async def listen_again(self) -> None:
        loop = asyncio.get_running_loop()
        config = self.config

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            # As uvicorn's own startup builds it.
            protocol: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=_loop,
            )
            return protocol

        servers = []
        for host, port in self._addresses:
            sock = await _bind_again(host, port)
            servers.append(
                await loop.create_server(create_protocol, sock=sock, backlog=config.backlog)
            )
        self.servers = servers

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Held requests go (closed) at once instead of holding the shutdown up.
        await self.outage.end(listen=False)
        await super().shutdown(sockets)


async def _bind_again(host: str, port: int) -> socket.socket:
    """The address given up by a `refuse` outage, bound again (a connection closing on that
    port may hold it for a moment)."""
    for _ in range(100):
        try:
            return bind_socket(host, port)
        except OSError:
            await asyncio.sleep(0.05)
    return bind_socket(host, port)


def _uvicorn_config(app: Any, log_level: str) -> uvicorn.Config:
    logging.getLogger("uvicorn.error").addFilter(_QuietDrops())
    return uvicorn.Config(
        app,
        http="h11",
        loop="asyncio",  # uvloop lets ranks inherit the listening socket
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=3,
        timeout_keep_alive=30,
        backlog=4096,
    )


def workspace_server(options: WorkspaceOptions, data_dir: Path, log_level: str) -> WorkspaceServer:
    """The server of one local workspace (not started)."""
    from air_runtime.local._app import asgi_app, create_app

    app = create_app(options, data_dir)
    injector = app.state.workspace.faults
    return WorkspaceServer(_uvicorn_config(asgi_app(app), log_level), injector.outage)


def serve(
    options: WorkspaceOptions,
    data_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    ready_file: Path | None = None,
    log_level: str = "warning",
    announce: bool = False,
    token_shell: str | None = None,
) -> None:
    """Serve in the foreground until SIGINT/SIGTERM (used by `airo workspace`).

    ``token_shell`` is a shell expression giving the token (``$(cat FILE)``, ``$VAR``) for
    the printed Airflow command; without one the generated token file's is used."""
    token_file: Path | None = None
    if not options.tokens:
        token_file = ensure_token(data_dir)[1]
        options.tokens = [read_token_file(token_file)]
        token_shell = token_from_file(token_file)
    if host not in options.allowed_hosts and not is_loopback(host):
        options.allowed_hosts = [*options.allowed_hosts, host]
    sock = bind_socket(host, port)
    actual = sock.getsockname()[1]
    if announce:
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        where = (
            f"token in {token_file} (send it as 'Authorization: Bearer <token>')"
            if token_file is not None
            else "token: the one you gave"
        )
        print(
            f"local workspace ({options.mode}) on http://{shown}:{actual}  {where}  "
            f"data: {data_dir}\n"
            "Airflow's databricks_default connection to it:\n"
            f"  {airflow_connection_command(f'http://{shown}:{actual}', token_shell)}\n"
            f"Run pages: http://{shown}:{actual}/jobs/runs (a browser logs in with the token)",
            flush=True,
        )
    server = workspace_server(options, data_dir, log_level)
    if ready_file is not None:

        def write_ready_file() -> None:
            while not server.started and not server.should_exit:
                time.sleep(0.01)
            write_private(ready_file, json.dumps({"port": actual, "pid": os.getpid()}))

        threading.Thread(target=write_ready_file, daemon=True).start()
    server.run(sockets=[sock])


class AdminClient:
    """The `/api/2.0/airo-admin/` calls, for tests and benchmarks."""

    def __init__(self, workspace: LocalWorkspace) -> None:
        self._workspace = workspace

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        response = httpx.request(
            method,
            f"{self._workspace.host}{ADMIN}{path}",
            json=body,
            headers={"Authorization": f"Bearer {self._workspace.token}"},
            timeout=30,
        )
        response.raise_for_status()
        return response.json()

    def set_faults(
        self, faults: dict[str, Any] | None = None, **by_endpoint: Any
    ) -> dict[str, Any]:
        """`set_faults({"jobs/runs/submit": {"rate_429": 0.3}, "seed": 1})`; `{}` turns faults off."""
        result: dict[str, Any] = self._call("PUT", "/faults", {**(faults or {}), **by_endpoint})
        return result

    def faults(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/faults")
        return result

    def counters(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/counters")
        return result

    def reset_counters(self) -> None:
        self._call("POST", "/counters/reset")

    def pool_ledger(self) -> dict[str, Any]:
        """Per GPU pool: reserved, used, peak_asked (held plus waited for, at most at once)
        and waits (attempts that waited for capacity)."""
        result: dict[str, Any] = self._call("GET", "/pool-ledger")
        return result

    def revoke_token(self, token: str) -> None:
        self._call("POST", "/tokens/revoke", {"token": token})

    def add_token(self, token: str) -> None:
        self._call("POST", "/tokens/add", {"token": token})

    def request_log(self, limit: int = 1000) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/request-log?limit={limit}")["entries"]
        return result

    def add_usage_policy(self, name: str, policy_id: str | None = None) -> dict[str, Any]:
        """A usage policy served by `GET /api/2.0/serverless-policies` (id: a UUID)."""
        body: dict[str, Any] = {"policy_name": name}
        if policy_id is not None:
            body["policy_id"] = policy_id
        result: dict[str, Any] = self._call("POST", "/usage-policies", body)
        return result

    def set_artifact_registry(self, host: str) -> None:
        """Pair the workspace with the Artifact Registry at ``host`` (``host:port``)."""
        self._call("PUT", "/artifact-registry", {"host": host})

    def set_simulation(self, **timeline: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._call("PUT", "/simulate", timeline)
        return result

    def outage(self, seconds: float, mode: str = "hang") -> dict[str, Any]:
        """Take the API away for ``seconds`` (``mode``: ``hang`` holds every request without
        an answer, ``refuse`` closes the listening socket); the ranks keep running. Answers
        the outage's status (``outage_status``)."""
        result: dict[str, Any] = self._call("POST", "/outage", {"seconds": seconds, "mode": mode})
        return result

    def lose_node(self, run_id: int, node: int = 0) -> list[int]:
        """Simulate the loss of node ``node`` of the run's running attempt (its host stops
        answering): its ranks are killed and the attempt fails with the platform's state
        message for a lost node; the task runs it hit."""
        result: dict[str, Any] = self._call("POST", "/node-loss", {"run_id": run_id, "node": node})
        return [int(x) for x in result["task_run_ids"]]

    def outage_status(self) -> dict[str, Any]:
        """``active``, ``mode``, ``started_at``, ``ends_at``, ``ended_at`` (Unix times; the
        end is when the API answers again) and ``held`` (requests held)."""
        result: dict[str, Any] = self._call("GET", "/outage")
        return result

    def end_outage(self) -> dict[str, Any]:
        """End a ``hang`` outage now (during ``refuse`` the admin API is refused too)."""
        result: dict[str, Any] = self._call("DELETE", "/outage")
        return result

    def wait_outage_end(self, timeout: float = 600.0) -> float:
        """Block until the outage is over (the workspace says so; while it refuses
        connections, asked again every 0.1 s); answers its ``ended_at``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                status = self.outage_status()
            except httpx.TransportError:  # a refuse outage: the admin API is down too
                status = {"active": True}
            if not status["active"] and status.get("ended_at") is not None:
                return float(status["ended_at"])
            if time.monotonic() > deadline:
                raise TimeoutError(f"the outage of {self._workspace.host} is not over")
            time.sleep(0.1)


class LocalWorkspace:
    """A running local workspace. Use as a context manager, or call `stop()`."""

    def __init__(
        self,
        options: WorkspaceOptions,
        data_dir: Path,
        *,
        in_process: bool,
        bind_host: str,
        port: int,
        owns_data_dir: bool,
        log_level: str = "warning",
    ) -> None:
        self.options = options
        self.data_dir = data_dir
        self.in_process = in_process
        self.bind_host = bind_host
        self.port = port
        self.token = options.tokens[0] if options.tokens else ""
        self.admin = AdminClient(self)
        self._owns_data_dir = owns_data_dir
        self._log_level = log_level
        self._server: WorkspaceServer | None = None
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        shown = "127.0.0.1" if self.bind_host in ("0.0.0.0", "") else self.bind_host
        return f"http://{shown}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id of a subprocess workspace."""
        return self._process.pid if self._process else None

    def __enter__(self) -> LocalWorkspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        if self.in_process:
            self._start_thread(timeout)
        else:
            self._start_process(timeout)
        self._wait_ready(timeout)

    def _start_thread(self, timeout: float) -> None:
        sock = bind_socket(self.bind_host, self.port)
        self.port = sock.getsockname()[1]
        server = workspace_server(self.options, self.data_dir, self._log_level)
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="airo-local-workspace", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the local workspace did not start; see the log above")
            time.sleep(0.01)
        self._server, self._thread = server, thread
        self._sock = sock

    def _start_process(self, timeout: float) -> None:
        ready = self.data_dir / READY_FILE
        with contextlib.suppress(FileNotFoundError):
            ready.unlink()
        # The options (tokens included) go through a private file, never the command line,
        # which every user of the machine can read in /proc.
        config = self.data_dir / CONFIG_FILE
        write_private(config, self.options.to_json())
        command = [
            sys.executable,
            "-m",
            "air_runtime.local",
            "--host",
            self.bind_host,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--config-file",
            str(config),
            "--allow-remote",  # checked here already: the parent was asked for this address
            "--ready-file",
            str(ready),
            "--log-level",
            self._log_level,
        ]
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"the local workspace exited with code {self._process.returncode} at start"
                )
            if time.monotonic() > deadline:
                self._process.kill()
                raise RuntimeError("the local workspace did not start in time")
            time.sleep(0.02)
        self.port = int(json.loads(ready.read_text())["port"])

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{self.host}{ADMIN}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local workspace at {self.host} is not answering")
            time.sleep(0.02)

    def stop(self, *, keep_data: bool = False) -> None:
        """Stop the server; its processes are stopped too. A temporary data dir created by
        `start_local_workspace` is removed unless `keep_data`."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=30)
            self._server = self._thread = None
            self._sock.close()
        if self._process is not None:
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGTERM)
                try:
                    self._process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            self._process = None
        if self._owns_data_dir and not keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL a subprocess workspace (a crash: nothing is cleaned up)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def restart(self, timeout: float = 30.0) -> None:
        """Stop (unless already stopped or killed) and start again on the same port and
        data dir: everything acknowledged before survives."""
        self.stop(keep_data=True)
        self.start(timeout)


def start_local_workspace(
    *,
    data_dir: str | os.PathLike[str] | None = None,
    token: str | Sequence[str] | None = None,
    mode: str = "execute",
    faults: dict[str, Any] | None = None,
    in_process: bool = True,
    port: int = 0,
    host: str = "127.0.0.1",
    log_level: str = "warning",
    **options: Any,
) -> LocalWorkspace:
    """Start a local workspace and return once it answers. `options` are the fields of
    `WorkspaceOptions` (e.g. `image_delay_s=0.2`, `private_images=...`,
    `oauth_clients={"id": "secret"}`, `simulate={"running_s": 3600}`).

    Without `token`, the workspace's own random token is used (`<data dir>/token`, created
    on first start); `workspace.token` holds it. A host other than loopback needs
    `allow_remote=True` and an explicit token."""
    from air_runtime.local._faults import normalize_faults

    allow_remote = bool(options.pop("allow_remote", False))
    tokens = normalize_tokens(token)
    check_bind_address(host, allow_remote=allow_remote, explicit_token=bool(tokens))
    owns = data_dir is None
    directory = Path(tempfile.mkdtemp(prefix="airo-workspace-")) if owns else Path(data_dir)  # type: ignore[arg-type]
    private_dir(directory)
    if not tokens:
        tokens = [ensure_token(directory)[0]]
    settings = WorkspaceOptions.from_mapping(
        {
            **options,
            "tokens": tokens,
            "mode": mode,
            "faults": normalize_faults(faults),
        }
    )
    if not is_loopback(host) and host not in settings.allowed_hosts:
        settings.allowed_hosts.append(host)
    workspace = LocalWorkspace(
        settings,
        directory,
        in_process=in_process,
        bind_host=host,
        port=port,
        owns_data_dir=owns,
        log_level=log_level,
    )
    workspace.start()
    return workspace


def check_bind_address(host: str, *, allow_remote: bool, explicit_token: bool) -> None:
    """Loopback only, unless asked: anything else needs the explicit flag and a token
    chosen by the caller (a generated one would only be readable on this machine)."""
    if host in ("", "0.0.0.0", "::") or not is_loopback(host):
        if not allow_remote:
            raise ValueError(
                f"binding {host or 'every address'} exposes the workspace (which runs commands "
                "for whoever holds its token) beyond this machine: pass --allow-remote "
                "(allow_remote=True) and an explicit token"
            )
        if not explicit_token:
            raise ValueError(
                f"binding {host or 'every address'} needs an explicit token "
                f"(--token-file, ${TOKEN_ENV} or --token)"
            )


def options_from_arguments(args: argparse.Namespace) -> WorkspaceOptions:
    from air_runtime.local._faults import normalize_faults

    values: dict[str, Any] = {}
    if args.config_file:
        values.update(json.loads(args.config_file.read_text(encoding="utf-8")))
    if args.config:
        values.update(json.loads(args.config))
    tokens = [*(values.get("tokens") or [])]
    for path in args.token_file or []:
        tokens.append(read_token_file(path))
    if os.environ.get(TOKEN_ENV):
        tokens.append(os.environ[TOKEN_ENV].strip())
    tokens += args.token or []
    if tokens:
        values["tokens"] = list(dict.fromkeys(tokens))
    if args.allowed_host:
        values["allowed_hosts"] = [*(values.get("allowed_hosts") or []), *args.allowed_host]
    if args.mode:
        values["mode"] = args.mode
    if args.gpu_pool:
        from air_runtime.local._options import parse_pool_argument

        values["gpu_pools"] = [
            *(values.get("gpu_pools") or []),
            *(parse_pool_argument(text) for text in args.gpu_pool),
        ]
    if args.artifact_registry:
        values["artifact_registry_host"] = args.artifact_registry.strip()
    if args.faults:
        values["faults"] = json.loads(args.faults)
    values["faults"] = normalize_faults(values.get("faults"))
    return WorkspaceOptions.from_mapping(values)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m air_runtime.local")
    add_server_arguments(parser)
    args = parser.parse_args(argv)
    run_from_arguments(args)
    return 0


def token_from_file(path: str | os.PathLike[str]) -> str:
    """The shell expression reading a token file (the token itself stays off the screen and
    out of shell history)."""
    import shlex

    return f"$(cat {shlex.quote(str(Path(path).absolute()))})"


def airflow_connection_command(
    host: str, token_shell: str | None, conn_id: str = "databricks_default"
) -> str:
    """The ``airflow connections add`` command pointing a ``databricks`` connection at a local
    workspace. ``token_shell`` is a shell expression for the token (``$(cat FILE)``, ``$VAR``),
    never the token: the line is printed and pasted. The host keeps its ``http://`` (without
    a scheme, https:// is assumed)."""
    password = f'"{token_shell}"' if token_shell else "'<your token>'"
    return (
        f"airflow connections add {conn_id} --conn-type databricks --conn-host {host} "
        f"--conn-password {password}"
    )


def _token_shell(args: argparse.Namespace) -> str | None:
    """Where the token given on the command line can be read from by a shell (None: only on
    the command line or in a config, so the printed command gets a placeholder)."""
    if args.token_file:
        return token_from_file(args.token_file[0])
    if os.environ.get(TOKEN_ENV):
        return f"${TOKEN_ENV}"
    return None


def run_from_arguments(args: argparse.Namespace, announce: bool = False) -> None:
    options = options_from_arguments(args)
    check_bind_address(
        args.host, allow_remote=args.allow_remote, explicit_token=bool(options.tokens)
    )
    data_dir = args.data_dir or default_data_dir()
    serve(
        options,
        Path(data_dir),
        host=args.host,
        port=args.port,
        ready_file=args.ready_file,
        log_level=args.log_level,
        announce=announce,
        token_shell=_token_shell(args),
    )
