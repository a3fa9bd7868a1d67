"""``airo run --dry-run`` looks a workload's Unity Catalog images up before anything is
submitted: a missing image is exit 1 with the push command, whether the workspace's own
check found it (the local workspace paired with its Artifact Registry) or airo did (the
registry named with ``--registry-host``, or derived from a Databricks workspace)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from image_registries import Registries

from air_runtime import AirClient
from air_runtime.cli import build_parser
from air_runtime.cli import main as airo
from air_runtime.cli._connection import EXIT_INVALID_WORKLOAD, EXIT_OK
from air_runtime.images import push_image
from air_runtime.local import LocalWorkspace
from image_fixtures.image_builder import push_generated_image

pytestmark = pytest.mark.slow  # real registry servers


def _workload(tmp_path: Path, image: str) -> Path:
    path = tmp_path / f"{image.replace(':', '_')}.yaml"
    path.write_text(
        "experiment_name: uc-dry-run\n"
        "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
        f"environment:\n  unity_catalog_image: {image}\n"
        "command: echo hi\n"
    )
    return path


@pytest.fixture
def options(image_workspace: LocalWorkspace, tmp_path: Path) -> list[str]:
    token_file = tmp_path / "token"
    token_file.write_text(image_workspace.token)
    token_file.chmod(0o600)
    return ["--host", image_workspace.host, "--token-file", str(token_file)]


@pytest.fixture
def unpaired(image_workspace: LocalWorkspace, registries: Registries) -> Iterator[None]:
    """The workspace checks no images for the test (its check cannot find them)."""
    image_workspace.admin.set_artifact_registry("")
    try:
        yield
    finally:
        image_workspace.admin.set_artifact_registry(registries.artifact_registry.host)


def test_a_missing_image_is_exit_1_with_the_push_command_from_the_paired_workspace(
    registries: Registries, options: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = _workload(tmp_path, "main.research.absent:1.0")
    assert airo(["run", str(workload), "--dry-run", *options]) == EXIT_INVALID_WORKLOAD
    err = capsys.readouterr().err
    assert "error: config validation failed:" in err
    assert (
        f"Unity Catalog image main.research.absent:1.0 is not in the Artifact Registry "
        f"{registries.artifact_registry.host}" in err
    )
    assert "airo images push SOURCE --catalog main --schema research --artifact absent:1.0" in err


def test_airo_looks_the_image_up_in_the_registry_it_is_given(
    registries: Registries,
    image_workspace: LocalWorkspace,
    options: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    unpaired: None,
) -> None:
    host = registries.artifact_registry.host
    workload = _workload(tmp_path, "main.research.lookedup:2.0")
    # Not paired: the workspace's check passes it, and airo does not know the registry.
    assert airo(["run", str(workload), "--dry-run", *options]) == EXIT_OK
    out = capsys.readouterr()
    assert "valid (checked here and by" in out.out
    assert "note: Unity Catalog images not looked up here: the Artifact Registry is not known" in out.err  # fmt: skip

    given = ["run", str(workload), "--dry-run", "--registry-host", host, *options]
    assert airo(given) == EXIT_INVALID_WORKLOAD
    err = capsys.readouterr().err
    assert f"environment.unity_catalog_image (line 4:24): Unity Catalog image main.research.lookedup:2.0 is not in the Artifact Registry {host}" in err  # fmt: skip
    assert (
        "push it first: airo images push SOURCE --catalog main --schema research "
        f"--artifact lookedup:2.0 --registry-host {host}" in err
    )
    assert image_workspace.token not in err

    push_generated_image(
        registries.hub.host,
        "acme/lookedup",
        "2.0",
        login=registries.hub_login,
        workdir=tmp_path / "build",
    )
    with AirClient(image_workspace.host, image_workspace.token) as client:
        push_image(
            client,
            f"{registries.hub.host}/acme/lookedup:2.0",
            catalog="main",
            schema="research",
            source_credentials=registries.hub_login,
            registry_host=host,
            state_dir=tmp_path / "state",
        )
    assert airo([*given, "--json"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == '{"valid": true, "errors": []}'


def test_airo_workspace_pairs_with_an_artifact_registry_by_a_flag() -> None:
    from air_runtime.local._server import options_from_arguments

    args = build_parser().parse_args(["workspace", "--artifact-registry", "127.0.0.1:5000"])
    assert options_from_arguments(args).artifact_registry_host == "127.0.0.1:5000"
    assert options_from_arguments(build_parser().parse_args(["workspace"])).artifact_registry_host == ""  # fmt: skip


def test_airo_images_help_names_both_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        airo(["--help"])
    top = capsys.readouterr().out
    assert "Docker Hub image registration" not in top
    with pytest.raises(SystemExit):
        airo(["images", "--help"])
    text = capsys.readouterr().out
    assert "push" in text and "register" in text
    assert "Docker Hub image registration" not in text
