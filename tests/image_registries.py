"""Two real Distribution registry servers on loopback ports for the image copy tests: the
stand-in Docker Hub (HTTP Basic, a user of its htpasswd) and the stand-in Artifact Registry
of a local workspace (token auth, the workspace as token service). Skipped locally and
failed under CI when ``docker-registry`` is missing (tests/deployment_services.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deployment_services import DOCKER_REGISTRY, require_services

from air_runtime.images import Login
from air_runtime.local import LocalWorkspace
from image_fixtures.image_builder import GeneratedImage, push_generated_image
from image_fixtures.registry_server import (
    RegistryServer,
    start_artifact_registry,
    start_registry_server,
)

HUB_USER = "hubuser"
HUB_PASSWORD = "hub-pw-Secret-0123456789"


@dataclass
class Registries:
    hub: RegistryServer
    artifact_registry: RegistryServer
    docker_config: Path  # a config.json with the hub login (what `docker login` writes)
    hub_login: Login


def write_docker_config(path: Path, host: str, user: str, password: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    path.write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    path.chmod(0o600)
    return path


@contextmanager
def image_registries(directory: Path, workspace: LocalWorkspace) -> Iterator[Registries]:
    require_services(DOCKER_REGISTRY)
    hub = start_registry_server(directory / "hub", users={HUB_USER: HUB_PASSWORD})
    try:
        artifact_registry = start_artifact_registry(workspace, directory / "artifact-registry")
        try:
            config = write_docker_config(
                directory / "docker" / "config.json", hub.host, HUB_USER, HUB_PASSWORD
            )
            yield Registries(hub, artifact_registry, config, Login(HUB_USER, HUB_PASSWORD))
        finally:
            artifact_registry.stop()
    finally:
        hub.stop()


# The images the RL pipeline (dags/rl_pipeline.py, the Dagster example) copies.
RL_SOURCES = (("vllm/vllm-openai", "v0.8.5"), ("pytorch/pytorch", "2.6.0-cuda12.4-cudnn9-runtime"))


def push_rl_images(registries: Registries, workdir: Path) -> dict[str, GeneratedImage]:
    """Generated stand-ins of the RL images (linux/amd64 and linux/arm64) on the hub."""
    return {
        repository: push_generated_image(
            registries.hub.host,
            repository,
            tag,
            platforms=("linux/amd64", "linux/arm64"),
            login=registries.hub_login,
            seed=seed,
            workdir=workdir,
        )
        for seed, (repository, tag) in enumerate(RL_SOURCES)
    }
