"""Workspace files (`/Workspace/...`) and Unity Catalog volume files (`/Volumes/...`),
stored as plain files under the data dir so a run can copy its launch directory."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from air_runtime.local._errors import ApiError, invalid, not_found
from air_runtime.local._security import private_dir, write_private


def _parts(path: str) -> tuple[str, ...]:
    if not path or not path.startswith("/"):
        raise invalid(f"Path ({path!r}) must be absolute.")
    parts = tuple(p for p in PurePosixPath(path).parts[1:] if p)
    if any(p in (".", "..") for p in parts) or "\x00" in path:
        raise invalid(f"Path ({path!r}) must not contain '.' or '..' components.")
    return parts


def object_id(path: str) -> int:
    return int.from_bytes(hashlib.sha256(path.encode()).digest()[:6], "big")


class WorkspaceTree:
    """`/Workspace/Users/x` and `/Users/x` name the same object, as on the platform."""

    def __init__(self, root: Path) -> None:
        self.root = root
        private_dir(root)

    def local_path(self, path: str) -> Path:
        parts = _parts(path)
        if parts and parts[0] == "Workspace":
            parts = parts[1:]
        return self.root.joinpath(*parts)

    def mkdirs(self, path: str) -> None:
        target = self.local_path(path)
        for parent in (target, *target.parents):
            if parent == self.root:
                break
            if parent.is_file():
                raise ApiError(
                    400,
                    "RESOURCE_ALREADY_EXISTS",
                    f"Path ({path}) cannot be created: a file exists at a parent path.",
                )
        private_dir(target)

    def import_file(self, path: str, content: bytes, overwrite: bool) -> None:
        target = self.local_path(path)
        if target == self.root or not target.parent.is_dir():
            raise not_found(f"The parent folder ({PurePosixPath(path).parent}) does not exist.")
        if target.is_dir():
            raise ApiError(400, "RESOURCE_ALREADY_EXISTS", f"Path ({path}) is a directory.")
        if target.exists() and not overwrite:
            raise ApiError(409, "RESOURCE_ALREADY_EXISTS", f"Path ({path}) already exists.")
        write_private(target, content)

    def status(self, path: str) -> dict[str, object]:
        target = self.local_path(path)
        if not target.exists():
            raise not_found(f"Path ({path}) doesn't exist.")
        return self._describe(path, target)

    def _describe(self, path: str, target: Path) -> dict[str, object]:
        stat = target.stat()
        info: dict[str, object] = {
            "object_type": "DIRECTORY" if target.is_dir() else "FILE",
            "path": path,
            "object_id": object_id(path),
            "modified_at": int(stat.st_mtime * 1000),
        }
        if target.is_file():
            info["size"] = stat.st_size
        return info

    def read(self, path: str) -> bytes:
        target = self.local_path(path)
        if not target.exists():
            raise not_found(f"Path ({path}) doesn't exist.")
        if target.is_dir():
            raise invalid(f"Path ({path}) is a directory; only files can be exported.")
        return target.read_bytes()

    def list(self, path: str) -> list[dict[str, object]]:
        target = self.local_path(path)
        if not target.exists():
            raise not_found(f"Path ({path}) doesn't exist.")
        if target.is_file():
            return [self._describe(path, target)]
        base = path.rstrip("/")
        return [
            self._describe(f"{base}/{child.name}", child)
            for child in sorted(target.iterdir())
            if not child.name.endswith(".uploading")
        ]

    def delete(self, path: str, recursive: bool) -> None:
        target = self.local_path(path)
        if not target.exists():
            raise not_found(f"Path ({path}) doesn't exist.")
        if target == self.root:
            raise invalid("The workspace root cannot be deleted.")
        if target.is_dir():
            if any(target.iterdir()) and not recursive:
                raise ApiError(
                    400,
                    "DIRECTORY_NOT_EMPTY",
                    f"Folder ({path}) is not empty; set recursive to delete it.",
                )
            shutil.rmtree(target)
        else:
            target.unlink()


class VolumeTree:
    """Files API view of `/Volumes/<catalog>/<schema>/<volume>/...`."""

    def __init__(self, root: Path, existing: list[str] | None = None) -> None:
        self.root = root
        # "catalog.schema.volume" of the volumes that exist; None: every one named does.
        self.existing = None if existing is None else {v.lower() for v in existing}
        private_dir(root)

    def local_path(self, path: str) -> Path:
        parts = _parts(path)
        if len(parts) < 4 or parts[0] != "Volumes":
            raise invalid(f"Path ({path}) must be under /Volumes/<catalog>/<schema>/<volume>/.")
        if self.existing is not None and ".".join(parts[1:4]).lower() not in self.existing:
            raise ApiError(
                404, "NOT_FOUND", f"Volume {'.'.join(parts[1:4])} does not exist ({path})."
            )
        return self.root.joinpath(*parts[1:])

    def put(self, path: str, content: bytes, overwrite: bool) -> None:
        target = self.local_path(path)
        if target.is_dir():
            raise ApiError(409, "ALREADY_EXISTS", f"Path ({path}) is a directory.")
        if target.exists() and not overwrite:
            raise ApiError(409, "ALREADY_EXISTS", f"The file {path} already exists.")
        private_dir(target.parent)
        write_private(target, content)

    def read(self, path: str) -> bytes:
        target = self.local_path(path)
        if not target.is_file():
            raise ApiError(404, "NOT_FOUND", f"The file {path} does not exist.")
        return target.read_bytes()

    def mkdirs(self, path: str) -> None:
        private_dir(self.local_path(path))

    def list(self, path: str) -> list[dict[str, Any]]:
        target = self.local_path(path)
        if not target.is_dir():
            raise ApiError(404, "NOT_FOUND", f"The directory {path} does not exist.")
        base = "/" + "/".join(_parts(path))
        entries = []
        for child in sorted(target.iterdir()):
            entry: dict[str, Any] = {
                "path": f"{base}/{child.name}",
                "name": child.name,
                "is_directory": child.is_dir(),
            }
            if child.is_file():
                entry["file_size"] = child.stat().st_size
                entry["last_modified"] = int(child.stat().st_mtime * 1000)
            entries.append(entry)
        return entries
