"""Registry credentials on this machine: where ``docker login`` left them
(``~/.docker/config.json``, ``$DOCKER_CONFIG`` honoured: inline ``auths`` or a credential
helper). Local I/O only; the client's image flow stores them as a workspace secret."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("air_runtime.images")

# Keys Docker uses for Docker Hub in config.json, newest convention last.
_DOCKER_HUB_KEYS = (
    "https://index.docker.io/v1/",
    "index.docker.io",
    "docker.io",
    "registry-1.docker.io",
    "https://registry-1.docker.io",
)
_HELPER_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class DockerCredential:
    """A registry login found on this machine. ``origin`` names where it came from."""

    registry: str
    username: str
    password: str
    origin: str

    def secret_value(self) -> str:
        return base64.b64encode(f"{self.username}:{self.password}".encode()).decode()

    def __repr__(self) -> str:  # never show the password
        return f"DockerCredential(registry={self.registry!r}, username={self.username!r}, origin={self.origin!r})"


def _docker_config_path() -> Path:
    root = os.environ.get("DOCKER_CONFIG")
    return Path(root) / "config.json" if root else Path.home() / ".docker" / "config.json"


def _from_helper(helper: str, server: str, registry: str = "docker.io") -> DockerCredential | None:
    try:
        done = subprocess.run(
            [f"docker-credential-{helper}", "get"],
            input=server.encode(),
            capture_output=True,
            timeout=_HELPER_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        logger.warning("docker credential helper %r failed: %s", helper, type(error).__name__)
        return None
    if done.returncode != 0:
        return None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        return None
    user, secret = answer.get("Username"), answer.get("Secret")
    if not user or not secret:
        return None
    return DockerCredential(registry, user, secret, origin=helper)


def _config_keys(registry: str) -> tuple[str, ...]:
    """The keys ``docker login`` may have filed ``registry`` under in config.json."""
    if registry in _DOCKER_HUB_KEYS:
        return _DOCKER_HUB_KEYS
    return (registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v1/")


def find_registry_credentials(
    registry: str, config_path: str | os.PathLike[str] | None = None
) -> DockerCredential | None:
    """The login for ``registry`` (a host, ``docker.io`` for Docker Hub) from
    ``~/.docker/config.json`` (``$DOCKER_CONFIG`` honoured): a per-registry ``credHelpers``
    entry, else inline ``auths``, else the ``credsStore``."""
    path = Path(config_path) if config_path else _docker_config_path()
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    keys = _config_keys(registry)
    helpers = config.get("credHelpers") or {}
    for key in keys:
        if key in helpers:
            found = _from_helper(str(helpers[key]), key, registry)
            if found:
                return found
    auths = config.get("auths") or {}
    for key in keys:
        entry = auths.get(key)
        if not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except ValueError:
                continue
            if user and password:
                return DockerCredential(registry, user, password, origin="docker-config")
        if entry.get("username") and entry.get("password"):
            return DockerCredential(
                registry, entry["username"], entry["password"], origin="docker-config"
            )
    store = config.get("credsStore")
    if store:
        found = _from_helper(str(store), keys[0], registry)
        if found:
            return found
    return None


def find_docker_credentials(
    config_path: str | os.PathLike[str] | None = None,
) -> DockerCredential | None:
    """Docker Hub credentials from ``~/.docker/config.json`` (see ``find_registry_credentials``)."""
    return find_registry_credentials("docker.io", config_path)
