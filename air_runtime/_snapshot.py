"""Code snapshots: what is packed, how, and the content-addressed name it is uploaded under.

Follows the `databricks air` CLI (databricks/cli ``cmd/air/snapshot*.go``):

- every archive entry sits under the snapshot root's folder name (``<dir>/...``): the
  platform's entry script unpacks it under its code-source folder and ``CODE_SOURCE_PATH``
  names ``<code_source>/<dir>`` (snapshot_package.go);
- ``git.commit`` / ``git.branch`` pack that revision with ``git archive``, never the working
  tree; a dirty tree is fine for a commit and refused for a branch (snapshot_resolve.go);
- the archive is named ``<dir>_<16 hex of the cache key>.tar.gz`` and lives in
  ``<artifact dir>/.internal/``, so an unchanged snapshot is found and not uploaded again
  (snapshot_upload.go, snapshot_cachekey.go).

Local I/O only (files, ``git``): the client runs it off the event loop.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import posixpath
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ._errors import ConfigurationError
from .plan import CodeSnapshot

# Bumped when packing changes in a way that must not reuse archives made before.
PACKAGING_VERSION = "v1"
INTERNAL_DIR = ".internal"
# Never shipped, whatever the ignore rules say: version control, caches, environments.
_NEVER_PACKED_DIRS = frozenset({".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"})


@dataclass(frozen=True)
class PackedSnapshot:
    """A resolved snapshot: its remote path and, unless ``git archive`` is still to run,
    its bytes (``content``); ``pack()`` gives the bytes either way."""

    remote_path: str
    root: Path
    mode: str  # "git_archive" or "plain_tar"
    commit: str | None
    include_paths: tuple[str, ...]
    subtree: str
    content: bytes | None = None

    @property
    def name(self) -> str:
        return posixpath.basename(self.remote_path)

    @property
    def dir_name(self) -> str:
        return self.root.name

    def pack(self) -> bytes:
        if self.content is not None:
            return self.content
        assert self.commit is not None
        return _git_archive(self.root, self.commit, self.subtree, self.include_paths)


def resolve_root(root_path: str, base_dir: str | None) -> Path:
    """``root_path`` as the CLI reads it (snapshot.go resolveRootPath): environment
    variables and ``~`` expanded, ``project_root/`` and relative paths taken from the
    workload file's folder."""
    expanded = os.path.expanduser(os.path.expandvars(root_path))
    base = Path(base_dir) if base_dir else Path.cwd()
    if expanded.startswith("project_root/"):
        resolved = base / expanded[len("project_root/") :]
    elif os.path.isabs(expanded):
        resolved = Path(expanded)
    else:
        resolved = base / expanded
    resolved = resolved.resolve()
    if not resolved.exists():
        raise ConfigurationError(f"code_source.snapshot.root_path does not exist: {resolved}")
    if not resolved.is_dir():
        raise ConfigurationError(f"code_source.snapshot.root_path must be a folder: {resolved}")
    return resolved


def artifact_dir(snapshot: CodeSnapshot, home: str) -> str:
    """Where archives live: the workload's ``remote_volume``, else the user's
    ``.air/repo_snapshots`` (runsubmit.go), always under ``.internal`` (snapshot_upload.go)."""
    base = snapshot.remote_volume or f"{home}/.air/repo_snapshots"
    base = base.rstrip("/")
    if not base.startswith(("/Workspace", "/Volumes")):
        base = "/Workspace" + base  # a bare /Users/... path is served under /Workspace
    return f"{base}/{INTERNAL_DIR}"


def resolve_snapshot(snapshot: CodeSnapshot, home: str) -> PackedSnapshot:
    """Decide how ``snapshot`` is packed and its content-addressed remote path; packs the
    working tree at once (its key is the archive's content), a git revision only on
    ``pack()`` (its key is the commit)."""
    root = resolve_root(snapshot.root_path, snapshot.base_dir)
    includes = tuple(p.strip() for p in snapshot.include_paths)
    folder = artifact_dir(snapshot, home)
    in_git = _git_ok(root, "rev-parse", "--is-inside-work-tree") == "true"
    if snapshot.git_commit is None and snapshot.git_branch is None:
        content = _plain_archive(root, includes, in_git)
        digest = hashlib.sha256(content + f"\0plain\0{PACKAGING_VERSION}".encode()).hexdigest()
        return PackedSnapshot(
            f"{folder}/{root.name}_{digest[:16]}.tar.gz", root, "plain_tar", None, includes, "",
            content,
        )  # fmt: skip
    if not in_git:
        raise ConfigurationError(
            f"code_source.snapshot.git is set but {root} is not in a git repository: "
            "remove the git block to pack the folder as it is"
        )
    if snapshot.git_commit is not None:
        commit = snapshot.git_commit
        if _git_ok(root, "cat-file", "-e", f"{commit}^{{commit}}") is None:
            raise ConfigurationError(
                f"commit {commit!r} does not exist in the local repository at {root}: fetch it "
                "(git fetch) first; the snapshot packs your local copy and fetches nothing"
            )
    else:
        branch = str(snapshot.git_branch)
        status = _git(root, "status", "--porcelain", "--", *(includes or (".",)))
        if status.strip():
            raise ConfigurationError(
                f"uncommitted changes under {root} would not be included: git.branch deploys "
                f"the committed head of {branch!r}; commit them, or pin a revision with "
                "git.commit"
            )
        sha = _git_ok(root, "rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}")
        if sha is None:
            raise ConfigurationError(
                f"branch {branch!r} does not exist in the local repository at {root}: check "
                "the name (a local branch, not origin/...) and code_source.snapshot.root_path"
            )
        commit = sha
    commit = _git(root, "rev-parse", "--verify", f"{commit}^{{commit}}").strip()
    subtree = _git(root, "rev-parse", "--show-prefix").strip().rstrip("/")
    missing = [
        p
        for p in includes
        if not _git(root, "ls-tree", f"{commit}:{subtree}" if subtree else commit, "--", p).strip()
    ]
    if missing:
        raise ConfigurationError(
            f"code_source.snapshot.include_paths do not exist at commit {commit[:8]}: "
            f"{', '.join(missing)}"
        )
    key_material = "\n".join(
        [commit, "\n".join(sorted(includes)), subtree, PACKAGING_VERSION]
    ).encode()
    digest = hashlib.sha256(key_material).hexdigest()
    return PackedSnapshot(
        f"{folder}/{root.name}_{digest[:16]}.tar.gz", root, "git_archive", commit, includes,
        subtree,
    )  # fmt: skip


# --- git ------------------------------------------------------------------------------------


def _git_run(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, check=False, timeout=300
        )
    except FileNotFoundError as error:
        raise ConfigurationError(
            "code_source.snapshot.git needs the git command: install git"
        ) from error


def _git(root: Path, *args: str) -> str:
    done = _git_run(root, *args)
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()
        raise ConfigurationError(f"git {' '.join(args)} failed in {root}: {detail}")
    return done.stdout.decode("utf-8", "replace")


def _git_ok(root: Path, *args: str) -> str | None:
    try:
        done = _git_run(root, *args)
    except ConfigurationError:
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "replace").strip()


def _git_archive(root: Path, commit: str, subtree: str, includes: tuple[str, ...]) -> bytes:
    """``git archive --prefix=<dir>/`` of the revision (snapshot_package.go); a root below
    the repository's top packs that subtree only."""
    tree = f"{commit}:{subtree}" if subtree else commit
    done = _git_run(
        root, "archive", "--format=tar.gz", f"--prefix={root.name}/", tree, "--", *includes
    )
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()
        raise ConfigurationError(f"git archive of {commit[:8]} failed in {root}: {detail}")
    return done.stdout


# --- working tree ---------------------------------------------------------------------------


def _ignore_patterns(root: Path) -> list[str]:
    """The root's .gitignore read as the CLI reads it for a folder outside git
    (snapshot_package.go parseGitignore): comments, negations and mid-path ``**`` dropped."""
    try:
        text = (root / ".gitignore").read_text("utf-8", "replace")
    except OSError:
        return []
    patterns = []
    for raw in text.splitlines():
        line = raw.rstrip(" \t\r")
        if not line or line.startswith(("#", "!")):
            continue
        line = line.rstrip("/")
        if "**" in line:
            if line.startswith("**/"):
                line = line[3:]
            elif line.endswith("/**"):
                line = line[:-3]
            else:
                continue
        if line:
            patterns.append(line)
    return patterns


def _ignored(relative: str, patterns: list[str]) -> bool:
    parts = relative.split("/")
    for pattern in patterns:
        if "/" in pattern:
            anchored = pattern.lstrip("/")
            if fnmatch.fnmatchcase(relative, anchored) or relative.startswith(anchored + "/"):
                return True
        elif any(fnmatch.fnmatchcase(part, pattern) for part in parts):
            return True
    return False


def _skipped(relative: str) -> bool:
    parts = relative.split("/")
    return (
        any(p in _NEVER_PACKED_DIRS for p in parts[:-1])
        or parts[-1] in _NEVER_PACKED_DIRS
        or parts[-1].startswith("._")  # macOS AppleDouble files (snapshot_package.go)
        or parts[-1].endswith(".pyc")
    )


def _working_tree_files(root: Path, includes: tuple[str, ...], in_git: bool) -> list[str]:
    """Relative paths of the files to pack: in a git repository what git would commit
    (tracked and untracked files, its ignore rules), elsewhere every file less the root's
    .gitignore patterns."""
    for member in includes:
        if not (root / member).resolve().is_relative_to(root):
            raise ConfigurationError(f"code_source.include_paths entry {member!r} leaves {root}")
        if not (root / member).exists():
            raise ConfigurationError(
                f"code_source.include_paths entry {member!r} does not exist under {root}"
            )
    if in_git:
        listed = _git(
            root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
            *(includes or (".",)),
        )  # fmt: skip
        names = {n for n in listed.split("\0") if n}
        files = [n for n in names if (root / n).is_file() or (root / n).is_symlink()]
    else:
        patterns = _ignore_patterns(root)
        files = []
        for member in includes or (".",):
            start = root / member
            if start.is_file():
                files.append(start.relative_to(root).as_posix())
                continue
            for folder, dirnames, filenames in os.walk(start):
                here = Path(folder).relative_to(root).as_posix()
                dirnames[:] = [
                    d
                    for d in dirnames
                    if d not in _NEVER_PACKED_DIRS
                    and not _ignored(posixpath.normpath(f"{here}/{d}"), patterns)
                ]
                for name in filenames:
                    relative = posixpath.normpath(f"{here}/{name}")
                    if not _ignored(relative, patterns):
                        files.append(relative)
    return sorted({f for f in files if not _skipped(f)})


def _plain_archive(root: Path, includes: tuple[str, ...], in_git: bool) -> bytes:
    """A reproducible tar.gz of the working tree, every entry under ``<dir>/`` (same tree,
    same bytes: times, owners and the gzip header are fixed)."""
    files = _working_tree_files(root, includes, in_git)
    prefix = root.name
    folders = {prefix}
    for relative in files:
        parent = posixpath.dirname(relative)
        while parent:
            folders.add(f"{prefix}/{parent}")
            parent = posixpath.dirname(parent)
    import tarfile  # only a pack needs it (and not every process that submits)

    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for folder in sorted(folders):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for relative in files:
            path = root / relative
            info = archive.gettarinfo(str(path), arcname=f"{prefix}/{relative}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.isreg():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()
