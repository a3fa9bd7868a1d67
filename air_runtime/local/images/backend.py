"""Docker Hub image registrations: PENDING -> IMPORTING -> AVAILABLE | FAILED over a
configured delay, with private repositories that need stored registry credentials."""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from collections.abc import Callable
from typing import Any

from air_runtime._docker_ref import DockerRefError, parse_docker_ref
from air_runtime.local._errors import invalid
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._store import ImageTable


def normal_form(url: Any) -> tuple[str, str]:
    """(normal form, repository `docker.io/<org>/<repo>`); 400 for anything not on Docker Hub."""
    if not isinstance(url, str) or not url.strip():
        raise invalid("docker_image_url is required.")
    try:
        ref = parse_docker_ref(url.strip())
    except DockerRefError as exc:
        raise invalid(f"{exc.message}; {exc.hint}") from None
    return ref.normal_form, f"docker.io/{ref.repository}"


class ImageRegistry:
    def __init__(
        self,
        table: ImageTable,
        options: WorkspaceOptions,
        secret_lookup: Callable[[str, str], bytes | None],
    ) -> None:
        self._table = table
        self.options = options
        self.secret_lookup = secret_lookup
        self.private = {
            normal_form(repo)[1]: creds for repo, creds in options.private_images.items()
        }

    def is_public(self, url: Any) -> bool:
        return normal_form(url)[1] not in self.private

    def register(self, url: Any, scope: Any, key: Any) -> dict[str, Any]:
        if (scope is None) != (key is None):
            raise invalid("credentials_scope and credentials_key must be given together.")
        image, repository = normal_form(url)
        state, message = "AVAILABLE", f"{image} is available."
        expected = self.private.get(repository)
        if expected is not None:
            state, message = self._check_credentials(image, expected, scope, key)
        self._table.register(image, scope, key, state, message)
        registration = self.get(image)
        assert registration is not None
        return registration

    def _check_credentials(
        self, image: str, expected: dict[str, str], scope: Any, key: Any
    ) -> tuple[str, str]:
        if scope is None:
            return "FAILED", (
                f"{image} is private: register it with credentials_scope and credentials_key "
                "naming a secret that holds base64('<user>:<password or token>')."
            )
        secret = self.secret_lookup(str(scope), str(key))
        if secret is None:
            return "FAILED", f"The credentials secret {scope}/{key} does not exist."
        try:
            user, _, password = base64.b64decode(secret, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return "FAILED", (
                f"The credentials secret {scope}/{key} is not base64('<user>:<password>')."
            )
        if user != expected.get("user") or password != expected.get("password"):
            return "FAILED", (
                f"Docker Hub refused the credentials in secret {scope}/{key} "
                f"(unauthorized) for {image}."
            )
        return "AVAILABLE", f"{image} is available."

    def get(self, url: Any) -> dict[str, Any] | None:
        image, _ = normal_form(url)
        record = self._table.get(image)
        if record is None:
            return None
        elapsed = time.time() - record.registered_at
        delay = self.options.image_delay_s
        result: dict[str, Any] = {"docker_image_url": image}
        if elapsed < delay / 2:
            result.update(state="PENDING", status_message="Waiting to import the image.")
        elif elapsed < delay:
            result.update(state="IMPORTING", status_message=f"Importing {image}.")
        else:
            result.update(state=record.outcome_state, status_message=record.outcome_message)
            if record.outcome_state == "AVAILABLE":
                seed = f"{image}#{record.generation}".encode()
                result["manifest_sha256"] = hashlib.sha256(seed).hexdigest()
        if record.credentials_scope:
            result["credentials_scope"] = record.credentials_scope
            result["credentials_key"] = record.credentials_key
        return result
