"""One local workspace and its two registries for the image copy tests of a module (each
test copies to its own repositories)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from image_registries import Registries, image_registries

from air_runtime.local import LocalWorkspace, start_local_workspace


@pytest.fixture(scope="module")
def image_workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorkspace]:
    workspace = start_local_workspace(
        data_dir=tmp_path_factory.mktemp("workspace"), image_delay_s=0.2, retry_interval_s=0.05
    )
    try:
        yield workspace
    finally:
        workspace.stop()


@pytest.fixture(scope="module")
def registries(
    tmp_path_factory: pytest.TempPathFactory, image_workspace: LocalWorkspace
) -> Iterator[Registries]:
    with image_registries(tmp_path_factory.mktemp("registries"), image_workspace) as found:
        yield found
