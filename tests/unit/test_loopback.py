"""One loopback rule for the client, the local workspace and the image registries: the same
names are this machine for each of them, in any case."""

from __future__ import annotations

import httpx
import pytest

from air_runtime._loopback import is_loopback_host, is_loopback_name
from air_runtime.cli._connection import _is_loopback as airo_host_is_loopback
from air_runtime.images._registry import Registry

CASES = [
    ("localhost", True),
    ("LOCALHOST", True),
    ("LocalHost.", True),
    ("app.localhost", True),
    ("localhost.localdomain", True),
    ("127.0.0.1", True),
    ("127.8.9.10", True),
    ("::1", True),
    ("[::1]", True),
    ("0.0.0.0", False),
    ("10.0.0.1", False),
    ("localhost.example.com", False),
    ("notlocalhost", False),
    ("example.com", False),
    ("", False),
]


@pytest.mark.parametrize(("name", "loopback"), CASES)
def test_one_rule_for_every_user(name: str, loopback: bool) -> None:
    assert is_loopback_name(name) is loopback
    # airo's --host, a registry host with a port, the local workspace's Host header
    if name:
        with_port = f"[{name.strip('[]')}]:5000" if ":" in name else f"{name}:5000"
        assert is_loopback_host(with_port) is loopback
        assert airo_host_is_loopback(f"http://{with_port}") is loopback
        with httpx.Client() as http:
            registry = Registry(with_port, None, role="r", login_fix="", http=http)
            assert registry.base_url.startswith("http://" if loopback else "https://")


@pytest.mark.parametrize(("name", "loopback"), CASES)
def test_the_local_workspace_accepts_the_same_hosts(name: str, loopback: bool) -> None:
    pytest.importorskip("fastapi")
    from air_runtime.local._security import host_allowed

    if name:
        header = f"[{name.strip('[]')}]:8765" if ":" in name else f"{name}:8765"
        assert host_allowed(header, []) is loopback
