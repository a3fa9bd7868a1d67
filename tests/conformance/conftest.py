"""Fixtures of the conformance suite: a stub workspace our real client talks to, and a git
repository like the one the CLI's run-submit acceptance test makes (``git-repo-init``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_stub import HOST, StubWorkspace, git

from air_runtime.client import AirClient


@pytest.fixture
def stub() -> StubWorkspace:
    return StubWorkspace()


@pytest.fixture
def client(stub: StubWorkspace) -> Iterator[AirClient]:
    with AirClient(HOST, "dapi-conformance", transport=stub) as air:
        yield air


@pytest.fixture
def git_repo(tmp_path: Path) -> Callable[..., tuple[Path, str]]:
    """A repository named ``project`` with ``train.py`` committed; returns it and the
    commit."""

    def make(files: dict[str, str] | None = None) -> tuple[Path, str]:
        repo = tmp_path / "project"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        for name, text in (files or {"train.py": "print('committed')\n"}).items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "init")
        return repo, git(repo, "rev-parse", "HEAD")

    return make
