"""Code snapshots end to end, as a new user meets them: `airo run` against a local workspace.

A workload pinning ``code_source.snapshot.git.commit`` in a repository with uncommitted
edits runs the committed code (the CLI packs that revision with ``git archive``:
databricks/cli cmd/air/snapshot_resolve.go), from ``$CODE_SOURCE_PATH`` = the unpacked
``<code_source>/<dir>`` (snapshot_package.go).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from air_runtime.local import LocalWorkspace

GIT_ENV = {
    "GIT_AUTHOR_NAME": "tester",
    "GIT_AUTHOR_EMAIL": "tester@example.com",
    "GIT_COMMITTER_NAME": "tester",
    "GIT_COMMITTER_EMAIL": "tester@example.com",
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    ).stdout.strip()


def _airo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "air_runtime.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.slow
def test_airo_run_executes_the_pinned_commit_not_the_working_tree(
    tmp_path: Path, local_workspace: LocalWorkspace
) -> None:
    repo = tmp_path / "trainer"
    (repo / "pkg").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "pkg" / "train.py").write_text("print('training with the committed code')\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "trainer")
    commit = _git(repo, "rev-parse", "HEAD")
    (repo / "pkg" / "train.py").write_text("print('UNCOMMITTED EDIT')\n")
    (repo / "pkg" / "extra.py").write_text("print('UNTRACKED FILE')\n")
    workload = repo / "run.yaml"
    workload.write_text(
        "experiment_name: pinned_commit\n"
        "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
        "command: |\n"
        '  ls "$CODE_SOURCE_PATH/pkg"\n'
        '  python3 "$CODE_SOURCE_PATH/pkg/train.py"\n'
        "code_source:\n"
        "  type: snapshot\n"
        "  snapshot:\n"
        "    root_path: .\n"
        f"    git: {{commit: {commit}}}\n"
    )

    done = _airo(
        "run", str(workload), "--host", local_workspace.host, "--token", local_workspace.token,
        "--wait", "--follow-logs",
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert "training with the committed code" in done.stdout
    assert "UNCOMMITTED EDIT" not in done.stdout
    assert "extra.py" not in done.stdout

    # Again, unchanged: the same archive is found on the workspace and not uploaded again.
    again = _airo(
        "run", str(workload), "--host", local_workspace.host, "--token", local_workspace.token,
        "--wait", "--follow-logs",
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert "training with the committed code" in again.stdout
    archive_uploads = [
        e
        for e in local_workspace.admin.request_log()
        if e["method"] == "POST" and e["path"].endswith(".tar.gz")
    ]
    assert len(archive_uploads) == 1, archive_uploads
