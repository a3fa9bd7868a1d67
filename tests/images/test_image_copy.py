"""Copying images registry to registry into the stand-in Artifact Registry, between real
Distribution registry servers (tests/image_registries.py): the images are generated here
and pushed to the stand-in Docker Hub first."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from image_registries import HUB_PASSWORD, Registries, write_docker_config

from air_runtime import AirClient, ConfigurationError, NotFound
from air_runtime.images import (
    CopyProgress,
    Login,
    RegistryAuthError,
    copy_image,
    push_image,
    registry_host,
)
from air_runtime.local import LocalWorkspace
from image_fixtures.image_builder import push_generated_image

MIB = 1024 * 1024


def _target_digest(registries: Registries, workspace: LocalWorkspace, repository: str, tag: str):
    from air_runtime.local.registry_tokens.backend import issue_token

    token = issue_token(workspace.data_dir, "test", [f"repository:{repository}:pull"])
    response = httpx.head(
        f"http://{registries.artifact_registry.host}/v2/{repository}/manifests/{tag}",
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.oci.image.manifest.v1+json",
        },
    )
    return response.headers.get("docker-content-digest") if response.status_code == 200 else None


def _push(client, registries, source, *, artifact, state_dir, **kw):
    return push_image(
        client,
        source,
        catalog="main",
        schema="images",
        artifact=artifact,
        registry_host=registries.artifact_registry.host,
        docker_config=registries.docker_config,
        state_dir=state_dir,
        **kw,
    )


def test_first_copy_resolves_the_index_and_a_second_copy_sends_nothing(
    registries: Registries, image_workspace: LocalWorkspace, tmp_path: Path
):
    built = push_generated_image(
        registries.hub.host,
        "team/trainer",
        "1.0",
        layer_sizes=(300_000, 2 * MIB, 50_000),
        platforms=("linux/amd64", "linux/arm64"),
        login=registries.hub_login,
        workdir=tmp_path / "build",
    )
    events: list[CopyProgress] = []
    with AirClient(image_workspace.host, image_workspace.token) as client:
        first = _push(
            client,
            registries,
            f"{registries.hub.host}/team/trainer:1.0",
            artifact=None,
            state_dir=tmp_path / "state",
            progress=events.append,
        )
        again = _push(
            client,
            registries,
            f"{registries.hub.host}/team/trainer:1.0",
            artifact=None,
            state_dir=tmp_path / "state",
        )
    # The artifact and tag default to the source's; the digest is the amd64 manifest's.
    assert first.unity_catalog_image == "main.images.trainer:1.0"
    assert first.digest == built.manifests["linux/amd64"] != built.digest
    assert _target_digest(registries, image_workspace, "main.images.trainer", "1.0") == first.digest
    assert first.copy.layers == 4 and first.copy.blobs_uploaded == 4
    assert first.copy.bytes_sent == first.copy.bytes_total == built.size
    assert events[0].event == "resolved" and events[-1].event == "manifest"
    assert max(e.layers_done for e in events) == 4
    assert events[-1].bytes_sent == built.size
    assert again.digest == first.digest
    assert again.copy.bytes_sent == 0 and not again.copy.manifest_pushed


def test_blobs_the_target_has_are_skipped_and_same_registry_blobs_are_mounted(
    registries: Registries, image_workspace: LocalWorkspace, tmp_path: Path
):
    push_generated_image(
        registries.hub.host,
        "team/base",
        "2",
        layer_sizes=(MIB, 100_000),
        login=registries.hub_login,
        workdir=tmp_path / "build",
        seed=7,
    )
    with AirClient(image_workspace.host, image_workspace.token) as client:
        first = _push(
            client,
            registries,
            f"{registries.hub.host}/team/base:2",
            artifact="base:2",
            state_dir=tmp_path / "state",
        )
        # Same image under another tag of the same repository: every blob is there.
        retag = _push(
            client,
            registries,
            f"{registries.hub.host}/team/base:2",
            artifact="base:2-retagged",
            state_dir=tmp_path / "state",
        )
    assert first.copy.blobs_uploaded == 3
    assert retag.copy.blobs_present == 3 and retag.copy.bytes_sent == 0
    assert retag.copy.manifest_pushed and retag.digest == first.digest
    # From one repository of the Artifact Registry to another: mounted, no bytes moved.
    login = Login("oauthtoken", image_workspace.token)
    mounted = copy_image(
        f"{registries.artifact_registry.host}/main.images.base:2",
        registries.artifact_registry.host,
        "main.other.base",
        "2",
        source_credentials=login,
        target_credentials=login,
        state_dir=tmp_path / "state",
    )
    assert mounted.blobs_mounted == 3 and mounted.bytes_sent == 0
    assert mounted.digest == first.digest


def test_an_image_without_linux_amd64_is_refused_before_anything_is_sent(
    registries: Registries, image_workspace: LocalWorkspace, tmp_path: Path
):
    push_generated_image(
        registries.hub.host,
        "team/armonly",
        "1",
        platforms=("linux/arm64",),
        login=registries.hub_login,
        workdir=tmp_path / "build",
    )
    push_generated_image(
        registries.hub.host,
        "team/armindex",
        "1",
        platforms=("linux/arm64", "linux/arm/v7"),
        login=registries.hub_login,
        workdir=tmp_path / "build",
    )
    with AirClient(image_workspace.host, image_workspace.token) as client:
        with pytest.raises(
            ConfigurationError, match=r"linux/arm64 image: AI Runtime runs linux/amd64"
        ):
            _push(
                client,
                registries,
                f"{registries.hub.host}/team/armonly:1",
                artifact=None,
                state_dir=tmp_path / "state",
            )
        with pytest.raises(
            ConfigurationError,
            match=r"has no linux/amd64 image \(it has: linux/arm64, linux/arm/v7\)",
        ):
            _push(
                client,
                registries,
                f"{registries.hub.host}/team/armindex:1",
                artifact=None,
                state_dir=tmp_path / "state",
            )
    assert _target_digest(registries, image_workspace, "main.images.armonly", "1") is None
    assert _target_digest(registries, image_workspace, "main.images.armindex", "1") is None


def test_a_missing_tag_names_the_registry_and_the_image(
    registries: Registries, image_workspace: LocalWorkspace, tmp_path: Path
):
    push_generated_image(
        registries.hub.host,
        "team/tagged",
        "1",
        login=registries.hub_login,
        workdir=tmp_path / "build",
    )
    with (
        AirClient(image_workspace.host, image_workspace.token) as client,
        pytest.raises(NotFound) as raised,
    ):
        _push(
            client,
            registries,
            f"{registries.hub.host}/team/tagged:2",
            artifact=None,
            state_dir=tmp_path / "state",
        )
    assert str(raised.value) == (
        f"the source registry {registries.hub.host} has no image team/tagged:2"
    )


def test_a_refused_source_login_names_the_registry_and_the_fix(
    registries: Registries, image_workspace: LocalWorkspace, tmp_path: Path
):
    host = registries.hub.host
    wrong = "wrong-hub-password-987654"
    config = write_docker_config(tmp_path / "docker" / "config.json", host, "hubuser", wrong)
    with AirClient(image_workspace.host, image_workspace.token) as client:
        with pytest.raises(RegistryAuthError) as refused:
            push_image(
                client,
                f"{host}/team/any:1",
                catalog="main",
                schema="images",
                registry_host=registries.artifact_registry.host,
                docker_config=config,
                state_dir=tmp_path / "state",
            )
        with pytest.raises(RegistryAuthError) as anonymous:
            push_image(
                client,
                f"{host}/team/any:1",
                catalog="main",
                schema="images",
                registry_host=registries.artifact_registry.host,
                docker_config=tmp_path / "none.json",
                state_dir=tmp_path / "state",
            )
    message = str(refused.value)
    assert message.startswith(
        f"the source registry {host} refused the login of 'hubuser' from docker config"
    )
    assert f"run `docker login {host}`" in message
    assert str(anonymous.value).startswith(
        f"the source registry {host} needs a login: run `docker login {host}`"
    )
    for text in (message, str(anonymous.value)):
        assert wrong not in text and HUB_PASSWORD not in text


def test_a_refused_workspace_token_names_the_artifact_registry_and_the_fix(
    registries: Registries, image_workspace: LocalWorkspace, tmp_path: Path
):
    push_generated_image(
        registries.hub.host,
        "team/small",
        "1",
        layer_sizes=(1000,),
        login=registries.hub_login,
        workdir=tmp_path / "build",
    )
    stale = "dapi-not-a-token-of-this-workspace-42"
    with (
        AirClient(image_workspace.host, stale) as client,
        pytest.raises(RegistryAuthError) as refused,
    ):
        _push(
            client,
            registries,
            f"{registries.hub.host}/team/small:1",
            artifact=None,
            state_dir=tmp_path / "state",
        )
    message = str(refused.value)
    host = registries.artifact_registry.host
    assert message.startswith(
        f"the Artifact Registry {host} refused the login of 'oauthtoken' from the workspace credentials"
    )
    assert "databricks auth login --host <workspace-url>" in message
    assert stale not in message and image_workspace.token not in message


def test_names_are_checked_as_the_cli_checks_them_before_anything_is_contacted(
    image_workspace: LocalWorkspace,
):
    unreachable = "127.0.0.1:9"  # nothing listens: a name error must come first
    cases = [
        (
            dict(catalog="Main", schema="s"),
            "invalid catalog 'Main': use only lowercase letters, digits, and underscores",
        ),
        (dict(catalog="main", schema="team-a"), "invalid schema 'team-a'"),
        (
            dict(catalog="main", schema="s", artifact="invalid.name"),
            "invalid artifact name 'invalid.name'",
        ),
        (
            dict(catalog="main", schema="s", artifact="a" * 256),
            "invalid artifact name: must be 255 characters or less",
        ),
        (
            dict(catalog="main", schema="s", artifact="ok:" + "t" * 129),
            "invalid image tag: must be 128 characters or less",
        ),
        (dict(catalog="main", schema="s", artifact="ok:-bad"), "invalid image tag '-bad'"),
    ]
    with AirClient(image_workspace.host, image_workspace.token) as client:
        for names, expected in cases:
            with pytest.raises(ConfigurationError, match="^" + re.escape(expected)):
                push_image(client, "docker.io/team/trainer:1", registry_host=unreachable, **names)


def test_the_artifact_registry_host_is_derived_as_the_cli_derives_it(
    image_workspace: LocalWorkspace,
):
    assert (
        registry_host("1234567890", "us-west-2", "https://dbc-a1b2.cloud.databricks.com")
        == "1234567890.container.us-west-2.cloud.databricks.com"
    )
    assert (
        registry_host("77", "westeurope", "https://adb-77.7.azuredatabricks.net/")
        == "77.container.westeurope.azuredatabricks.net"
    )
    assert (
        registry_host("5", "us-east4", "https://5.5.staging.gcp.databricks.com")
        == "5.container.us-east4.staging.gcp.databricks.com"
    )
    # The local workspace answers the metastore summary and its workspace id, but its host
    # is no Databricks DNS zone: the registry host has to be given.
    with AirClient(image_workspace.host, image_workspace.token) as client:
        assert client.metastore_summary()["region"] == "us-west-2"
        assert client.whoami().org_id == image_workspace.options.workspace_id
        with pytest.raises(ConfigurationError, match="pass the registry host"):
            push_image(client, "docker.io/team/trainer:1", catalog="main", schema="s")


_COPY_SCRIPT = """
import json, sys
from air_runtime.images import Login, copy_image
hub, target, token, state = sys.argv[1:5]
def show(event):
    print(json.dumps({"event": event.event, "done": event.blob_done, "size": event.blob_size}), flush=True)
    if event.event == "uploading" and event.blob_size > 10 * 2**20 and event.blob_done >= 3 * 2**20:
        sys.stdin.readline()  # held between two segments until the test kills the copy
copy_image(f"{hub}/team/big:1", target, "main.images.big", "1",
           source_credentials=Login("hubuser", sys.argv[5]),
           target_credentials=Login("oauthtoken", token),
           progress=show, segment_bytes=1024 * 1024, state_dir=state, parallel_blobs=1)
"""


def test_a_copy_killed_mid_blob_resumes_where_the_target_stands(
    registries: Registries, image_workspace: LocalWorkspace, tmp_path: Path
):
    built = push_generated_image(
        registries.hub.host,
        "team/big",
        "1",
        layer_sizes=(12 * MIB,),
        login=registries.hub_login,
        workdir=tmp_path / "build",
    )
    state = tmp_path / "state"
    args = [
        registries.hub.host,
        registries.artifact_registry.host,
        image_workspace.token,
        str(state),
        HUB_PASSWORD,
    ]
    # Killed while it waits between two segments (in its progress callback), the copy has
    # no segment in flight: a registry keeps an upload only at the offset it acknowledged
    # (distribution refuses one resumed "at wrong offset" after a half-sent segment).
    copier = subprocess.Popen(
        [sys.executable, "-c", _COPY_SCRIPT, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    assert copier.stdin is not None and copier.stdout is not None
    seen = 0
    for line in copier.stdout:
        event = json.loads(line)
        if event["event"] == "uploading" and event["size"] > 10 * MIB and event["done"] >= 3 * MIB:
            seen = event["done"]
            copier.send_signal(signal.SIGKILL)
            break
    copier.wait()
    copier.stdin.close()
    assert seen, "the copy ended before it was interrupted"
    assert list(state.glob("*.json")), "the interrupted upload left where it stands"
    resumed = copy_image(
        f"{registries.hub.host}/team/big:1",
        registries.artifact_registry.host,
        "main.images.big",
        "1",
        source_credentials=registries.hub_login,
        target_credentials=Login("oauthtoken", image_workspace.token),
        segment_bytes=MIB,
        state_dir=state,
    )
    layer = 12 * MIB + 2048  # the tar of one 12 MiB file: header and end blocks
    # The config was uploaded before the layer or is resumed too; the layer is resumed from
    # at least where the killed copy had got to, never sent again from the start.
    assert resumed.blobs_uploaded >= 1
    assert resumed.bytes_sent <= built.size - seen
    assert resumed.bytes_sent >= layer - seen - MIB  # at most one segment was lost
    assert resumed.digest == built.digest
    assert _target_digest(registries, image_workspace, "main.images.big", "1") == built.digest
    assert not list(state.glob("*.json"))
