"""Copy one image from a registry to another, registry to registry, without Docker.

- An index (multi-platform image) is resolved to its linux/amd64 manifest, and an image
  without one is refused, as ``databricks air images push`` refuses it (it pulls and checks
  linux/amd64: acceptance/air/image-push "incompatible local image must not be pushed").
  The manifest is pushed byte for byte, so its digest stays the source's.
- Blobs stream through in bounded pieces: a blob the target has (``HEAD``) is skipped, one on
  the same host is mounted across repositories, others are uploaded in segments (``PATCH``
  with ``Content-Range``) and committed with their digest, which is checked on the way.
- An upload that breaks (connection lost, process killed) resumes where the target says it
  stands (``GET`` on the upload location): the bytes the target holds are read from the
  source again to rebuild the digest, not sent again. Where each upload stands is kept in a
  small state file (``state_dir``) so that a new process resumes it too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from .._errors import ConfigurationError
from ._names import SourceImage
from ._registry import INDEX_TYPES, MANIFEST_TYPES, Registry, RegistryError

PLATFORM = ("linux", "amd64")
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_READ_BYTES = 256 * 1024  # per read of a source blob; three blobs stream at once
_MAX_CONFIG_BYTES = 16 * 1024 * 1024
_UPLOAD_ATTEMPTS = 5


@dataclass(frozen=True)
class CopyProgress:
    """Where a copy stands, given to the ``progress`` callback after every step.

    ``event`` is ``resolved`` (the manifest is known), ``exists`` / ``mounted`` /
    ``uploaded`` (one blob is done), ``uploading`` (a segment was sent), ``manifest`` (the
    manifest was pushed) or ``up-to-date`` (the target had this very manifest already)."""

    event: str
    layers_total: int
    layers_done: int
    bytes_total: int
    bytes_sent: int
    digest: str | None = None
    blob_size: int = 0
    blob_done: int = 0


@dataclass(frozen=True)
class CopyResult:
    source: str
    target: str  # <host>/<repository>:<tag>
    digest: str  # the manifest's digest, the same at the source and the target
    media_type: str
    layers: int  # blobs of the image (config and layers)
    bytes_total: int
    bytes_sent: int  # blob bytes uploaded by this copy
    blobs_uploaded: int
    blobs_present: int
    blobs_mounted: int
    manifest_pushed: bool


@dataclass
class _Blob:
    digest: str
    size: int
    media_type: str


class _UploadBroke(Exception):
    """A segment did not reach the target; the upload resumes from where it stands."""


@dataclass
class _Tally:
    layers_total: int = 0
    bytes_total: int = 0
    layers_done: int = 0
    bytes_sent: int = 0
    uploaded: int = 0
    present: int = 0
    mounted: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def default_state_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "airo" / "uploads"


class _UploadStates:
    """Upload locations by target blob, so an interrupted upload is resumed, not redone."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, host: str, repository: str, digest: str) -> Path:
        key = hashlib.sha256(f"{host}/{repository}@{digest}".encode()).hexdigest()
        return self.directory / f"{key}.json"

    def load(self, host: str, repository: str, digest: str) -> str | None:
        try:
            data = json.loads(self._path(host, repository, digest).read_text())
        except (OSError, ValueError):
            return None
        location = data.get("location") if isinstance(data, dict) else None
        return location if isinstance(location, str) else None

    def save(self, host: str, repository: str, digest: str, location: str, offset: int) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self._path(host, repository, digest)
        temporary = path.with_suffix(".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"location": location, "offset": offset}, handle)
        os.replace(temporary, path)

    def drop(self, host: str, repository: str, digest: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(host, repository, digest).unlink()


def _with_digest(location: str, digest: str) -> str:
    parts = urlsplit(location)
    query = [*parse_qsl(parts.query, keep_blank_values=True), ("digest", digest)]
    return urlunsplit(parts._replace(query=urlencode(query)))


def _pieces(response: httpx.Response, skip: int, size: int) -> Iterator[bytes]:
    """The blob's bytes from the offset asked for: a 200 (the registry ignored ``Range``)
    starts at 0, so its first ``skip`` bytes are dropped."""
    to_drop = skip if response.status_code == 200 else 0
    for piece in response.iter_bytes(DEFAULT_READ_BYTES):
        if to_drop:
            if len(piece) <= to_drop:
                to_drop -= len(piece)
                continue
            piece, to_drop = piece[to_drop:], 0
        yield piece


class _Stream:
    """Reads a blob stream in exact amounts while hashing what passes."""

    def __init__(self, pieces: Iterator[bytes], hasher: Any) -> None:
        self._pieces = pieces
        self._held = b""
        self.hasher = hasher

    def take(self, count: int) -> Iterator[bytes]:
        left = count
        while left:
            if not self._held:
                try:
                    self._held = next(self._pieces)
                except StopIteration:
                    raise RegistryError(
                        "the source registry ended a blob before its size"
                    ) from None
            piece, self._held = self._held[:left], self._held[left:]
            self.hasher.update(piece)
            left -= len(piece)
            yield piece

    def skip(self, count: int) -> None:
        for _ in self.take(count):
            pass


class ImageCopier:
    """Copies images from ``source`` to ``target`` (see the module doc)."""

    def __init__(
        self,
        source: Registry,
        target: Registry,
        *,
        progress: Callable[[CopyProgress], None] | None = None,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        state_dir: str | os.PathLike[str] | None = None,
        parallel_blobs: int = 3,
    ) -> None:
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be positive")
        self.source = source
        self.target = target
        self._progress = progress
        self._segment = segment_bytes
        self._states = _UploadStates(Path(state_dir) if state_dir else default_state_dir())
        self._parallel = max(1, parallel_blobs)

    # --- resolving ------------------------------------------------------------------------

    def resolve(self, image: SourceImage) -> tuple[str, bytes, str]:
        """(media type, bytes, digest) of the linux/amd64 manifest of ``image``."""
        media_type, body, digest = self.source.get_manifest(image.repository, image.reference)
        digest = self._checked(body, digest, image.digest)
        if media_type in INDEX_TYPES or _json(body).get("manifests") is not None:
            entries = _json(body).get("manifests") or []
            platforms = []
            chosen = None
            for entry in entries:
                platform = entry.get("platform") or {}
                os_arch = (platform.get("os"), platform.get("architecture"))
                if os_arch == ("unknown", "unknown"):  # attestations, not a platform
                    continue
                platforms.append("/".join(p for p in (*os_arch, platform.get("variant")) if p))
                if os_arch == PLATFORM and chosen is None:
                    chosen = entry
            if chosen is None:
                raise ConfigurationError(
                    f"{image} has no linux/amd64 image (it has: {', '.join(platforms) or 'none'})"
                    ": AI Runtime runs linux/amd64; build and push a linux/amd64 variant"
                )
            media_type, body, digest = self.source.get_manifest(image.repository, chosen["digest"])
            digest = self._checked(body, digest, chosen["digest"])
            return media_type, body, digest
        if media_type not in MANIFEST_TYPES:
            raise ConfigurationError(
                f"{image} has a manifest of type {media_type or 'unknown'}, which cannot be "
                "copied: push it again with a current Docker or buildah (OCI or Docker v2 schema 2)"
            )
        config = _json(body).get("config") or {}
        os_arch = self._platform_of(image, config)
        if os_arch != PLATFORM:
            raise ConfigurationError(
                f"{image} is a {'/'.join(p for p in os_arch if p) or 'unknown-platform'} image: "
                "AI Runtime runs linux/amd64; build and push a linux/amd64 variant"
            )
        return media_type, body, digest

    def _checked(self, body: bytes, served: str, expected: str | None) -> str:
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        for claimed in (served, expected):
            if claimed and claimed != actual:
                raise RegistryError(
                    f"{self.source.label} served a manifest whose digest is {actual}, "
                    f"not {claimed}: the registry or a proxy altered it"
                )
        return actual

    def _platform_of(self, image: SourceImage, config: dict[str, Any]) -> tuple[str, str]:
        digest, size = config.get("digest"), int(config.get("size") or 0)
        if not isinstance(digest, str) or size > _MAX_CONFIG_BYTES:
            raise ConfigurationError(f"{image} has no usable image configuration")
        with self.source.open_blob(image.repository, digest) as response:
            body = response.read()
        data = _json(body)
        return (str(data.get("os") or ""), str(data.get("architecture") or ""))

    # --- copying --------------------------------------------------------------------------

    def copy(self, image: SourceImage, repository: str, tag: str) -> CopyResult:
        media_type, body, digest = self.resolve(image)
        manifest = _json(body)
        blobs = [
            _Blob(d["digest"], int(d.get("size") or 0), str(d.get("mediaType") or ""))
            for d in [manifest.get("config") or {}, *(manifest.get("layers") or [])]
            if isinstance(d, dict) and d.get("digest")
        ]
        tally = _Tally(layers_total=len(blobs), bytes_total=sum(b.size for b in blobs))
        self._report(tally, "resolved", digest=digest)
        target = f"{self.target.host}/{repository}:{tag}"
        push_scope = (f"repository:{repository}:pull,push",)
        if self.target.manifest_digest(repository, tag, push_scope) == digest:
            tally.layers_done = tally.layers_total
            self._report(tally, "up-to-date", digest=digest)
            return self._result(image, target, digest, media_type, tally, pushed=False)
        with ThreadPoolExecutor(max_workers=self._parallel) as pool:
            for done in pool.map(lambda b: self._ensure_blob(image, repository, b, tally), blobs):
                del done
        pushed_digest = self.target.put_manifest(repository, tag, media_type, body)
        if pushed_digest and pushed_digest != digest:
            raise RegistryError(
                f"{self.target.label} stored the manifest as {pushed_digest}, not {digest}"
            )
        self._report(tally, "manifest", digest=digest)
        return self._result(image, target, digest, media_type, tally, pushed=True)

    def _result(
        self,
        image: SourceImage,
        target: str,
        digest: str,
        media_type: str,
        tally: _Tally,
        *,
        pushed: bool,
    ) -> CopyResult:
        return CopyResult(
            source=str(image),
            target=target,
            digest=digest,
            media_type=media_type,
            layers=tally.layers_total,
            bytes_total=tally.bytes_total,
            bytes_sent=tally.bytes_sent,
            blobs_uploaded=tally.uploaded,
            blobs_present=tally.present,
            blobs_mounted=tally.mounted,
            manifest_pushed=pushed,
        )

    def _report(self, tally: _Tally, event: str, **fields: Any) -> None:
        if self._progress is None:
            return
        with tally.lock:
            snapshot = CopyProgress(
                event=event,
                layers_total=tally.layers_total,
                layers_done=tally.layers_done,
                bytes_total=tally.bytes_total,
                bytes_sent=tally.bytes_sent,
            )
        self._progress(replace(snapshot, **fields))

    def _blob_done(self, tally: _Tally, kind: str, blob: _Blob) -> None:
        with tally.lock:
            tally.layers_done += 1
            if kind == "exists":
                tally.present += 1
            elif kind == "mounted":
                tally.mounted += 1
            else:
                tally.uploaded += 1
        self._report(tally, kind, digest=blob.digest, blob_size=blob.size, blob_done=blob.size)

    def _ensure_blob(self, image: SourceImage, repository: str, blob: _Blob, tally: _Tally) -> None:
        push_scope = (f"repository:{repository}:pull,push",)
        if self.target.has_blob(repository, blob.digest, push_scope):
            self._blob_done(tally, "exists", blob)
            return
        location = None
        if self.source.host == self.target.host:
            # Same registry: mount the blob from the source repository, no bytes moved.
            scopes = (*push_scope, f"repository:{image.repository}:pull")
            response = self.target.request(
                "POST",
                f"/v2/{repository}/blobs/uploads/",
                scopes,
                params={"mount": blob.digest, "from": image.repository},
            )
            if response.status_code == 201:
                self._blob_done(tally, "mounted", blob)
                return
            if response.status_code != 202:
                raise self.target.error(response, f"mount blob {blob.digest}")
            location = self.target.upload_url(response.headers["location"])
        self._upload(image, repository, blob, tally, location)
        self._blob_done(tally, "uploaded", blob)

    def _start_upload(self, repository: str) -> str:
        response = self.target.request(
            "POST", f"/v2/{repository}/blobs/uploads/", (f"repository:{repository}:pull,push",)
        )
        if response.status_code != 202 or "location" not in response.headers:
            raise self.target.error(response, "start a blob upload")
        return self.target.upload_url(response.headers["location"])

    def _upload_offset(self, repository: str, location: str) -> tuple[str, int] | None:
        """(location, bytes the target holds) of an upload; None when it is gone."""
        response = self.target.request("GET", location, (f"repository:{repository}:pull,push",))
        if response.status_code != 204:
            return None
        end = response.headers.get("range", "0-0").rpartition("-")[2]
        held = int(end) + 1 if end.isdigit() and int(end) > 0 else 0
        return self.target.upload_url(response.headers.get("location") or location), held

    def _upload(
        self,
        image: SourceImage,
        repository: str,
        blob: _Blob,
        tally: _Tally,
        location: str | None,
    ) -> None:
        host = self.target.host
        held = 0
        if location is None:
            saved = self._states.load(host, repository, blob.digest)
            status = self._upload_offset(repository, saved) if saved else None
            if status is not None:
                location, held = status
            else:
                location = self._start_upload(repository)
        scopes = (f"repository:{repository}:pull,push",)
        # The digest so far and where it stands: the source is read from there again.
        hasher, hashed = hashlib.sha256(), 0
        for attempt in range(1, _UPLOAD_ATTEMPTS + 1):
            checkpoint, checkpoint_at = hasher.copy(), hashed
            try:
                with self.source.open_blob(image.repository, blob.digest, hashed) as response:
                    stream = _Stream(_pieces(response, hashed, blob.size), hasher)
                    stream.skip(held - hashed)  # what the target holds already
                    hashed = held
                    checkpoint, checkpoint_at = hasher.copy(), hashed
                    while hashed < blob.size:
                        length = min(self._segment, blob.size - hashed)
                        sent = self.target.request(
                            "PATCH",
                            location,
                            scopes,
                            headers={
                                "Content-Type": "application/octet-stream",
                                # distribution-spec: "Content-Range: <start>-<end>", inclusive
                                "Content-Range": f"{hashed}-{hashed + length - 1}",
                                "Content-Length": str(length),
                            },
                            content=stream.take(length),
                            retry=False,
                        )
                        if sent.status_code != 202:
                            if sent.status_code >= 500 or sent.status_code in (408, 429):
                                raise _UploadBroke(f"HTTP {sent.status_code}")
                            raise self.target.error(sent, f"upload blob {blob.digest}")
                        location = self.target.upload_url(sent.headers.get("location") or location)
                        hashed += length
                        held = hashed
                        checkpoint, checkpoint_at = hasher.copy(), hashed
                        self._states.save(host, repository, blob.digest, location, hashed)
                        with tally.lock:
                            tally.bytes_sent += length
                        self._report(
                            tally,
                            "uploading",
                            digest=blob.digest,
                            blob_size=blob.size,
                            blob_done=hashed,
                        )
            except (httpx.TransportError, _UploadBroke, RegistryError) as error:
                if isinstance(error, RegistryError) and not error.retryable:
                    raise
                if attempt == _UPLOAD_ATTEMPTS:
                    raise RegistryError(
                        f"the upload of {blob.digest} to {self.target.label} broke "
                        f"{attempt} times (last: {type(error).__name__}): try again later; "
                        "the next copy resumes it"
                    ) from None
                status = self._upload_offset(repository, location)
                hasher, hashed = checkpoint, checkpoint_at
                if status is None or status[1] < hashed:
                    location, held = self._start_upload(repository), 0
                    hasher, hashed = hashlib.sha256(), 0
                else:
                    location, held = status
                continue
            break
        actual = "sha256:" + hasher.hexdigest()
        if actual != blob.digest:
            self.target.request("DELETE", location, scopes)
            self._states.drop(host, repository, blob.digest)
            raise RegistryError(
                f"{self.source.label} served {blob.digest} with content whose digest is "
                f"{actual}: nothing was committed; check the source image"
            )
        done = self.target.request(
            "PUT", _with_digest(location, blob.digest), scopes, headers={"Content-Length": "0"}
        )
        if done.status_code != 201:
            raise self.target.error(done, f"commit blob {blob.digest}")
        self._states.drop(host, repository, blob.digest)


def _json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
