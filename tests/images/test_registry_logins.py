"""Where the source registry's login comes from: ``docker login``'s config.json (inline
``auths`` under the forms Docker files a host under) and its credential helpers (a real
``docker-credential-<name>`` program on PATH), for any registry host."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from air_runtime.images import parse_source_image, source_login


def test_inline_auths_under_each_form_docker_writes(tmp_path: Path):
    config = tmp_path / "config.json"
    for key in ("registry.example.com:5000", "https://registry.example.com:5000"):
        auth = base64.b64encode(b"team:inline-pass-123").decode()
        config.write_text(json.dumps({"auths": {key: {"auth": auth}}}))
        login = source_login(parse_source_image("registry.example.com:5000/team/img:1"), config)
        assert login is not None and (login.username, login.password) == ("team", "inline-pass-123")
        assert "inline-pass-123" not in repr(login)
    # Another host's login is not used, and Docker Hub's keys are Docker Hub's.
    assert source_login(parse_source_image("other.example.com/team/img:1"), config) is None
    hub = base64.b64encode(b"hubber:hub-pass-456").decode()
    config.write_text(json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": hub}}}))
    login = source_login(parse_source_image("team/img:1"), config)
    assert login is not None and login.username == "hubber"


def test_a_credential_helper_is_asked_for_the_host(tmp_path: Path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "asked"
    helper = bin_dir / "docker-credential-fake"
    helper.write_text(
        "#!/bin/sh\n"
        f'read server; printf %s "$server" > {asked}\n'
        'printf \'{"ServerURL":"%s","Username":"helper-user","Secret":"helper-secret-789"}\' "$server"\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"credHelpers": {"registry.example.com": "fake"}}))
    login = source_login(parse_source_image("registry.example.com/team/img:1"), config)
    assert login is not None
    assert (login.username, login.password) == ("helper-user", "helper-secret-789")
    assert login.origin == "docker config (fake)"
    assert asked.read_text() == "registry.example.com"
