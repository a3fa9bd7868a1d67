"""``code_source``: the folder to pack, its include paths and git revision (docs/spec/workload.md §1)."""

from __future__ import annotations

import re
from typing import Any

from air_runtime.workload._check_base import Section, _short, _type_name

CODE_SOURCE_KEYS = ("root_path", "remote_volume", "include_paths", "git")
GIT_KEYS = ("branch", "commit", "remote")
# runconfig.go gitRefRe: the branch name flows into git's arguments.
GIT_REF_RE = re.compile(r"^[\w./-]+$")


class CodeSourceRules(Section):
    def code_source(self, raw: Any) -> dict[str, Any] | None:
        """The forms runconfig.go takes: the fields directly under ``code_source``, with or
        without ``type: snapshot``, or nested under ``snapshot:`` (with ``type: snapshot``);
        the nested form mixed with fields directly under it is refused."""
        path = "code_source"
        if isinstance(raw, dict) and ("type" in raw or "snapshot" in raw):
            if "type" in raw and raw["type"] != "snapshot":
                self.add(
                    f"{path}.type",
                    f"code_source.type must be 'snapshot', got {_short(raw['type'])}",
                    "use type: snapshot (the only code source type), or remove type",
                )
                return None
            flat = {k: v for k, v in raw.items() if k != "type"}
            if "snapshot" in raw:
                beside = [k for k in flat if k != "snapshot"]
                for key in beside:
                    if key not in CODE_SOURCE_KEYS:
                        self.unknown_key(path, str(key), ("type", "snapshot", *CODE_SOURCE_KEYS))
                known = [str(k) for k in beside if k in CODE_SOURCE_KEYS]
                if known:
                    self.add(
                        f"{path}.snapshot",
                        "code_source mixes the nested snapshot: form with "
                        f"{', '.join(known)} directly under code_source",
                        "use one form: move those fields under snapshot:, or remove snapshot: "
                        "and keep them directly under code_source",
                        at_key=True,
                    )
                if beside:
                    return None
                raw, path = raw["snapshot"], f"{path}.snapshot"
                if raw is None:
                    self.add(
                        f"{path}.root_path",
                        f"{path}.root_path is required",
                        "give the local folder to upload, relative to the YAML file (e.g. .)",
                    )
                    return None
            else:
                raw = flat
        data = self.mapping(raw, path, CODE_SOURCE_KEYS, "code_source")
        if data is None:
            return None
        out: dict[str, Any] = {}
        ok = True
        if "root_path" in data:
            root = self.string(data["root_path"], f"{path}.root_path")
            ok = ok and root is not None
            if root is not None:
                out["root_path"] = root
        elif "git" not in data:
            self.add(
                f"{path}.root_path",
                f"{path}.root_path is required",
                "give the local folder to upload, relative to the YAML file (e.g. .)",
            )
            ok = False
        if "remote_volume" in data:
            volume = self.string(data["remote_volume"], f"{path}.remote_volume")
            if volume is not None and not volume.startswith("/Volumes/"):
                self.add(
                    f"{path}.remote_volume",
                    f"{path}.remote_volume {_short(volume)} must start with /Volumes/",
                    "e.g. /Volumes/<catalog>/<schema>/<volume>",
                )
                volume = None
            ok = ok and volume is not None
            if volume is not None:
                out["remote_volume"] = volume.rstrip("/")
        if "include_paths" in data:
            paths = data["include_paths"]
            if not isinstance(paths, list) or not paths:
                self.add(
                    f"{path}.include_paths",
                    f"{path}.include_paths must be a non-empty list, got {_type_name(paths)}",
                    "list relative paths, or remove include_paths to upload the whole root_path",
                )
                ok = False
            else:
                clean = []
                for i, item in enumerate(paths):
                    sub = f"{path}.include_paths[{i}]"
                    text = self.string(item, sub)
                    if text is None:
                        continue
                    if text.startswith("/") or ".." in text.replace("\\", "/").split("/"):
                        self.add(
                            sub,
                            f"include path {_short(text)} must be relative and must not contain '..'",
                            "give a path inside root_path",
                        )
                        continue
                    clean.append(text)
                ok = ok and len(clean) == len(paths)
                out["include_paths"] = clean
        if "git" in data:
            git = self.mapping(data["git"], f"{path}.git", GIT_KEYS, "git")
            if git is None:
                ok = False
            else:
                ok = self.git_remote(git, f"{path}.git") and ok
                given = [k for k in ("branch", "commit") if k in git]
                if len(given) != 1:
                    self.add(
                        f"{path}.git",
                        f"{path}.git needs exactly one of branch or commit, got "
                        f"{' and '.join(given) or 'neither'}",
                        "give branch: <name> or commit: <sha>",
                    )
                    ok = False
                else:
                    value = self.string(git[given[0]], f"{path}.git.{given[0]}")
                    if value is not None and given[0] == "branch" and not GIT_REF_RE.match(value):
                        # runconfig.go gitRefRe: the name goes into git's arguments
                        self.add(
                            f"{path}.git.branch",
                            f"invalid git.branch format {_short(value)}: only alphanumeric "
                            "characters, hyphens, dots, slashes, and underscores are allowed",
                            "give the branch name as git shows it (e.g. main, release/1.2)",
                        )
                        value = None
                    ok = ok and value is not None
                    out["git"] = {given[0]: value}
        return out if ok else None

    def git_remote(self, git: dict[str, Any], path: str) -> bool:
        """``git.remote``: only false or empty (runconfig.go gitRef.validate); the snapshot is
        always the local copy."""
        if "remote" not in git:
            return True
        remote = git["remote"]
        if isinstance(remote, dict | list):
            self.add(
                f"{path}.remote",
                "git.remote must be a boolean or a remote name string",
                "remove git.remote",
            )
            return False
        if (
            remote is True
            or (isinstance(remote, str) and remote != "")
            or (not isinstance(remote, bool | str) and remote is not None)
        ):
            self.add(
                f"{path}.remote",
                "git.remote is no longer supported: the snapshot archives your local copy, so a "
                "branch resolves to its local HEAD. To deploy a specific committed revision, use "
                "git.commit",
                "remove git.remote (or set it to false) and pin the revision with git.commit",
            )
            return False
        return True
