"""Fixtures of the deployment tests: a local workspace and the local database services."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deployment_services import POSTGRES_URL, POSTGRESQL, REDIS, REDIS_URL, require_services

from air_runtime.client import AirClient
from air_runtime.local import LocalWorkspace, start_local_workspace
from demo.pipeline import EVALUATE_YAML, TRAIN_YAML, store_placeholder_secrets


@pytest.fixture
def postgres() -> str:
    require_services(POSTGRESQL)
    return POSTGRES_URL


@pytest.fixture
def redis_url() -> str:
    require_services(REDIS)
    return REDIS_URL


@pytest.fixture
def local_workspace(tmp_path: Path) -> Iterator[LocalWorkspace]:
    # Images take a few seconds to become available, as on the platform (where it is minutes).
    with start_local_workspace(data_dir=tmp_path / "workspace", image_delay_s=6.0) as workspace:
        with AirClient(workspace.host, workspace.token) as client:
            store_placeholder_secrets(client, (TRAIN_YAML, EVALUATE_YAML))
        yield workspace


@pytest.fixture
def workspace_client(local_workspace: LocalWorkspace) -> Iterator[AirClient]:
    with AirClient(local_workspace.host, local_workspace.token) as client:
        yield client


@pytest.fixture
def rl_images(
    tmp_path: Path, local_workspace: LocalWorkspace
) -> Iterator[dict[str, dict[str, str]]]:
    """The stand-in Docker Hub holding the RL pipeline's images and the workspace's stand-in
    Artifact Registry: ``env`` for the deployment's processes (the Docker login, a cache of
    their own), ``conf`` for a run of ``rl_pipeline`` (where it copies from and to)."""
    from image_registries import image_registries, push_rl_images

    with image_registries(tmp_path / "registries", local_workspace) as registries:
        push_rl_images(registries, tmp_path / "build")
        yield {
            "env": {
                "DOCKER_CONFIG": str(registries.docker_config.parent),
                "XDG_CACHE_HOME": str(tmp_path / "cache"),
            },
            "conf": {
                "source_registry": registries.hub.host,
                "artifact_registry_host": registries.artifact_registry.host,
            },
        }
