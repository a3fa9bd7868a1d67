"""A Distribution registry server (Debian package ``docker-registry``) on a loopback port:
the stand-in Docker Hub (HTTP Basic, ``htpasswd``) and the stand-in Artifact Registry (token
auth whose token service is a local workspace) the tests, the demo and the benchmark copy
images between.

The server binds ``127.0.0.1:0``; its port is read from the ``listening on`` line it logs,
so no port is guessed and none is raced for.
"""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from air_runtime.local import LocalWorkspace

PROGRAM = "docker-registry"
_LISTENING = re.compile(r"listening on (\S+?)(?:\"|\s|$)")


def registry_program() -> str | None:
    return shutil.which(PROGRAM)


@dataclass(frozen=True)
class TokenAuth:
    """``auth.token`` of the registry: who issues the JWTs and the certificate they are
    signed with."""

    realm: str
    service: str
    issuer: str
    certificate: Path


class RegistryServer:
    def __init__(self, directory: Path, process: subprocess.Popen[bytes], host: str) -> None:
        self.directory = directory
        self.process = process
        self.host = host  # 127.0.0.1:<port>

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> RegistryServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RegistryServer({self.host!r})"


def _htpasswd_line(user: str, password: str) -> str:
    import bcrypt  # only the stand-in Docker Hub needs it (the dev group has it)

    return f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()}"


def start_registry_server(
    directory: str | Path,
    *,
    users: dict[str, str] | None = None,
    token_auth: TokenAuth | None = None,
    startup_timeout: float = 60.0,
) -> RegistryServer:
    """Start ``docker-registry`` storing into ``directory``: anonymous, with ``users`` (HTTP
    Basic), or with ``token_auth``. Raises ``FileNotFoundError`` when it is not installed."""
    program = registry_program()
    if program is None:
        raise FileNotFoundError(
            f"{PROGRAM} is not installed: `apt-get install docker-registry` (.ci/services.sh)"
        )
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": True}},
        "storage": {
            "filesystem": {"rootdirectory": str(root / "data")},
            "delete": {"enabled": True},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        # The secret signs upload state; random per server, never shared.
        "http": {"addr": "127.0.0.1:0", "secret": secrets.token_urlsafe(32)},
    }
    if users:
        htpasswd = root / "htpasswd"
        htpasswd.write_text("".join(_htpasswd_line(u, p) + "\n" for u, p in users.items()))
        htpasswd.chmod(0o600)
        config["auth"] = {"htpasswd": {"realm": "airo-registry", "path": str(htpasswd)}}
    elif token_auth is not None:
        config["auth"] = {
            "token": {
                "realm": token_auth.realm,
                "service": token_auth.service,
                "issuer": token_auth.issuer,
                "rootcertbundle": str(token_auth.certificate),
            }
        }
    config_path = root / "config.yml"
    config_path.write_text(yaml.safe_dump(config))
    config_path.chmod(0o600)
    log_path = root / "registry.log"
    process = subprocess.Popen(
        [program, "serve", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    found: list[str] = []
    ready = threading.Event()

    def follow() -> None:
        assert process.stdout is not None
        with log_path.open("ab") as log:
            for line in process.stdout:
                log.write(line)
                log.flush()
                if not found:
                    match = _LISTENING.search(line.decode(errors="replace"))
                    if match:
                        found.append(match.group(1))
                        ready.set()
        ready.set()  # the process ended

    threading.Thread(target=follow, name=f"registry-log-{root.name}", daemon=True).start()
    if not ready.wait(startup_timeout) or not found:
        process.kill()
        process.wait()
        tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
        raise RuntimeError(f"{PROGRAM} did not start (log {log_path}):\n{tail}")
    address = found[0]
    port = address.rsplit(":", 1)[1]
    return RegistryServer(root, process, f"127.0.0.1:{port}")


def start_artifact_registry(workspace: LocalWorkspace, directory: str | Path) -> RegistryServer:
    """The stand-in Artifact Registry of ``workspace``: a registry whose token service is
    the workspace (``air_runtime.local.registry_tokens``), so it takes user ``oauthtoken`` with a workspace
    token, as the real one takes the workspace's OAuth token. The workspace then checks
    submitted Unity Catalog images there."""
    from air_runtime.local.registry_tokens.backend import (
        ISSUER,
        SERVICE,
        TOKEN_PATH,
        signing_material,
    )

    _, certificate = signing_material(workspace.data_dir)
    server = start_registry_server(
        directory,
        token_auth=TokenAuth(
            realm=f"{workspace.host}{TOKEN_PATH}",
            service=SERVICE,
            issuer=ISSUER,
            certificate=certificate,
        ),
    )
    try:
        workspace.admin.set_artifact_registry(server.host)
    except Exception:
        server.stop()
        raise
    return server
