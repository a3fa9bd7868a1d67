"""Generated images pushed to a registry: what the tests, the demo and the benchmark copy.

An image here is a few uncompressed tar layers of seeded random bytes (so sizes are exact
and nothing compresses them away), an image configuration per platform, a manifest per
platform and, for more than one platform, an OCI index over them, all pushed with the
distribution API (monolithic blob uploads, files streamed from disk).
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from air_runtime.images._registry import Login, Registry

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
_PIECE = 1024 * 1024


@dataclass
class GeneratedImage:
    reference: str  # host/repository:tag
    digest: str  # of what the tag names (the index, or the one manifest)
    manifests: dict[str, str] = field(default_factory=dict)  # "linux/amd64" -> digest
    layers: list[str] = field(default_factory=list)
    size: int = 0  # bytes of all blobs of one platform


def _layer_file(directory: Path, index: int, size: int, seed: int) -> Path:
    """A tar holding one file of ``size`` seeded random bytes."""
    path = directory / f"layer-{seed}-{index}.tar"
    rng = random.Random(f"{seed}-{index}")

    class _Random(io.RawIOBase):
        left = size

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
            count = min(len(buffer), self.left, _PIECE)
            buffer[:count] = rng.randbytes(count)
            self.left -= count
            return count

    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"data/layer-{index}.bin")
        info.size = size
        info.mtime = 0
        tar.addfile(info, io.BufferedReader(_Random(), _PIECE))
    return path


def _digest_file(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        while piece := handle.read(_PIECE):
            hasher.update(piece)
    return "sha256:" + hasher.hexdigest()


def _push_blob(registry: Registry, repository: str, digest: str, content: bytes | Path) -> None:
    scopes = (f"repository:{repository}:pull,push",)
    if registry.has_blob(repository, digest, scopes):
        return
    started = registry.request("POST", f"/v2/{repository}/blobs/uploads/", scopes)
    if started.status_code != 202:
        raise registry.error(started, "start an upload")
    location = registry.upload_url(started.headers["location"])
    separator = "&" if "?" in location else "?"
    size = len(content) if isinstance(content, bytes) else content.stat().st_size
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
    if isinstance(content, bytes):
        done = registry.request(
            "PUT", f"{location}{separator}digest={digest}", scopes, headers=headers, content=content
        )
    else:
        with content.open("rb") as handle:
            done = registry.request(
                "PUT",
                f"{location}{separator}digest={digest}",
                scopes,
                headers=headers,
                content=handle,
                retry=False,
            )
    if done.status_code != 201:
        raise registry.error(done, f"commit blob {digest}")


def push_generated_image(
    host: str,
    repository: str,
    tag: str,
    *,
    layer_sizes: Sequence[int] = (256 * 1024, 1024 * 1024, 64 * 1024),
    platforms: Sequence[str] = ("linux/amd64",),
    login: Login | None = None,
    seed: int = 0,
    workdir: str | Path | None = None,
) -> GeneratedImage:
    """Generate and push an image; more than one platform makes an OCI index (the layers
    differ per platform, as built images' do)."""
    scratch = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="airo-image-"))
    scratch.mkdir(parents=True, exist_ok=True)
    image = GeneratedImage(reference=f"{host}/{repository}:{tag}", digest="")
    with httpx.Client(timeout=httpx.Timeout(300.0, connect=15.0)) as http:
        registry = Registry(
            host, login, role="the registry", login_fix="check the login", http=http
        )
        entries: list[dict[str, Any]] = []
        for number, platform in enumerate(platforms):
            os_name, _, architecture = platform.partition("/")
            architecture, _, variant = architecture.partition("/")
            described = {"architecture": architecture, "os": os_name}
            if variant:
                described["variant"] = variant
            layers: list[dict[str, Any]] = []
            diff_ids = []
            for index, size in enumerate(layer_sizes):
                path = _layer_file(scratch, index, size, seed * 1000 + number)
                digest = _digest_file(path)
                _push_blob(registry, repository, digest, path)
                layers.append(
                    {"mediaType": OCI_LAYER, "digest": digest, "size": path.stat().st_size}
                )
                diff_ids.append(digest)
                path.unlink()
            config = json.dumps(
                {
                    "architecture": architecture,
                    "os": os_name,
                    "config": {"Cmd": ["/bin/sh"]},
                    "rootfs": {"type": "layers", "diff_ids": diff_ids},
                },
                sort_keys=True,
            ).encode()
            config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
            _push_blob(registry, repository, config_digest, config)
            manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": OCI_MANIFEST,
                    "config": {
                        "mediaType": OCI_CONFIG,
                        "digest": config_digest,
                        "size": len(config),
                    },
                    "layers": layers,
                },
                sort_keys=True,
            ).encode()
            digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
            reference = tag if len(platforms) == 1 else digest
            registry.put_manifest(repository, reference, OCI_MANIFEST, manifest)
            image.manifests[platform] = digest
            if number == 0:
                image.layers = [layer["digest"] for layer in layers]
                image.size = len(config) + sum(layer["size"] for layer in layers)
            entries.append(
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest,
                    "size": len(manifest),
                    "platform": described,
                }
            )
        if len(platforms) == 1:
            image.digest = entries[0]["digest"]
        else:
            index_body = json.dumps(
                {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}, sort_keys=True
            ).encode()
            registry.put_manifest(repository, tag, OCI_INDEX, index_body)
            image.digest = "sha256:" + hashlib.sha256(index_body).hexdigest()
    return image
