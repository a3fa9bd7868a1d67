"""``code_source``: the folder to pack, its include paths and git revision (docs/spec/workload.md §1)."""

from __future__ import annotations

from typing import Any

from air_runtime.workload._check_base import (
    CODE_SOURCE_KEYS,
    GIT_KEYS,
    _short,
    _type_name,
)
from air_runtime.workload._check_containers import ContainerRules


class CodeSourceRules(ContainerRules):
    def code_source(self, raw: Any) -> dict[str, Any] | None:
        path = "code_source"
        if isinstance(raw, dict) and "type" in raw:
            # the older nested form {type: snapshot, snapshot: {...}}
            extra = [k for k in raw if k not in ("type", "snapshot")]
            for key in extra:
                self.unknown_key(path, str(key), ("type", "snapshot"))
            if raw.get("type") != "snapshot":
                self.add(
                    f"{path}.type",
                    f"unknown {path}.type {_short(raw.get('type'))}",
                    "use type: snapshot, or the flat form code_source: {root_path: ...}",
                )
                return None
            if "snapshot" not in raw:
                self.add(
                    f"{path}.snapshot",
                    f"{path}.snapshot is required with type: snapshot",
                    "add snapshot: {root_path: .}",
                )
                return None
            raw, path = raw["snapshot"], f"{path}.snapshot"
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
                given = [k for k in GIT_KEYS if k in git]
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
                    ok = ok and value is not None
                    out["git"] = {given[0]: value}
        return out if ok else None
