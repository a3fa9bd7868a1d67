"""The resource's first use names a wrong workspace host within seconds, in the core's words:
a refused port, a name under ``.invalid`` and a black hole, with a token and with a
``~/.databrickscfg`` profile (the databricks-sdk chain)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster_checks import failure_data, workload
from unreachable_hosts import (
    KINDS,
    WITHIN_S,
    assert_names_host_and_cause,
    write_profile,
    wrong_host,
)

from air_runtime import WorkspaceUnreachable
from dagster_air import AirStage, AirWorkspace, build_air_assets

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def no_sdk_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("DATABRICKS_", "ARM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def _resource(kind: str, host: str, directory: Path, monkeypatch) -> AirWorkspace:
    if kind == "profile":
        monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(write_profile(directory, host)))
        return AirWorkspace()
    return AirWorkspace(host=host, token="dapi-resource-token")


@pytest.mark.parametrize("auth", ["token", "profile"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_resource_names_a_wrong_host(kind, auth, no_sdk_environment, monkeypatch):
    with wrong_host(kind) as host:
        workspace = _resource(auth, host, no_sdk_environment, monkeypatch)
        started = time.monotonic()
        with workspace.get_client() as client, pytest.raises(WorkspaceUnreachable) as raised:
            client.whoami()
        elapsed = time.monotonic() - started
    assert elapsed < WITHIN_S
    message = str(raised.value)
    assert_names_host_and_cause(message, host, kind)
    if auth == "token":
        assert "check the host of the AirWorkspace resource" in message
    else:
        assert "check the host of profile DEFAULT in" in message
    assert "dapi-resource-token" not in message and "dapi-profile-token" not in message


@pytest.mark.parametrize("auth", ["token", "profile"])
def test_a_materialization_on_a_black_hole_fails_naming_it(
    auth, no_sdk_environment, monkeypatch, instance
):
    """A whole step: the asset's materialization fails within seconds and says why."""
    assets = build_air_assets(AirStage(key="trained", workload=workload("trained", "true")))
    with wrong_host("no answer") as host:
        workspace = _resource(auth, host, no_sdk_environment, monkeypatch)
        started = time.monotonic()
        result = dg.materialize(
            [assets],
            resources={"air_workspace": workspace},
            instance=instance,
            raise_on_error=False,
        )
        elapsed = time.monotonic() - started
    assert not result.success
    # A dagster.Failure, as every error the step meets: in the core's words.
    description = failure_data(result).user_failure_data.description
    assert_names_host_and_cause(description, host, "no answer")
    assert elapsed < WITHIN_S
