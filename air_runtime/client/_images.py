"""Docker image registration (docs/spec/rest-api.md §4): the flows the client runs.

A public image is registered without credentials. A private one needs the registry user's
credentials stored as a workspace secret first (found by ``air_runtime._docker_credentials``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._docker_credentials import DockerCredential, find_docker_credentials
from .._docker_ref import DockerRefError, normalize_docker_ref
from .._errors import AirError, AuthError, ConfigurationError, NotFound, RunTimeout
from ._core import ClientCore, Flow, ImageRegistration, Sleep, gather, offload
from ._identity import whoami
from ._secrets import ensure_secret_scope, put_secret, secret_key_name, secret_scope_name

if TYPE_CHECKING:
    from ..plan import ImageRequirement

logger = logging.getLogger("air_runtime.images")

IMAGES_API = "/api/2.0/ai-compute-manager/images"
# How long to wait for a registration to become AVAILABLE, and how often to look (§4).
IMAGE_WAIT_TIMEOUT_S = 3600.0
IMAGE_POLL_INTERVAL_S = 5.0


def register_command(image: str) -> str:
    """What to tell a user whose image is not registered yet."""
    return (
        f"airo images register {image}  (or the AirRegisterImageOperator in Airflow / "
        "the register image op in Dagster)"
    )


def normal_image(reference: str) -> str:
    try:
        return normalize_docker_ref(reference)
    except DockerRefError as error:
        raise ConfigurationError(f"{error.message}; {error.hint}") from error


def credentials_secret_location(user_name: str, credential: DockerCredential) -> tuple[str, str]:
    """Scope and key where registry credentials are stored, named as the CLI names them
    (image_credentials.go storeDockerCredentials): ``docker-credentials-<user>`` and
    ``<registry host>-<registry user>-local``, so either tool finds the other's secret."""
    scope = secret_scope_name(f"docker-credentials-{user_name}")
    key = secret_key_name(f"{credential.registry}-{credential.username}-local")
    return scope, key


# --- flows ---------------------------------------------------------------------------------


def get_image(core: ClientCore, reference: str) -> Flow[ImageRegistration | None]:
    url = normal_image(reference)
    try:
        body = yield from core.call("GET", f"{IMAGES_API}:get", params={"docker_image_url": url})
    except NotFound:
        return None
    return ImageRegistration.from_api(body, url)


def check_image_access(core: ClientCore, reference: str) -> Flow[bool | None]:
    """Whether the image can be pulled without credentials; None when unknown. Only a hint
    (image_client.go): where the call is not exposed (404) or fails, nothing is aborted."""
    url = normal_image(reference)
    try:
        body = yield from core.call(
            "GET", f"{IMAGES_API}:checkImageAccess", params={"docker_image_url": url}
        )
    except AirError as error:
        logger.debug("image access of %s unknown: %s", url, error)
        return None
    public = body.get("publicly_accessible")
    return public if isinstance(public, bool) else None


def _post_registration(
    core: ClientCore, url: str, scope: str | None, key: str | None
) -> Flow[ImageRegistration]:
    body: dict[str, Any] = {"docker_image_url": url}
    if scope and key:
        body["credentials_scope"], body["credentials_key"] = scope, key
    try:
        answer = yield from core.call("POST", IMAGES_API, json=body)
    except AuthError as error:
        if scope and key:
            raise ConfigurationError(
                f"Docker Hub refused the credentials stored in secret {scope}/{key} for "
                f"{url}: update that secret (docker login, then register again) or pass "
                "another scope/key"
            ) from error
        raise
    return ImageRegistration.from_api(answer, url)


def register_image(
    core: ClientCore,
    reference: str,
    *,
    credentials_scope: str | None,
    credentials_key: str | None,
    refresh: bool,
    docker_credential: DockerCredential | None = None,
) -> Flow[ImageRegistration]:
    """Register (or re-check, with ``refresh``) an image; does not wait for AVAILABLE."""
    url = normal_image(reference)
    if (credentials_scope is None) != (credentials_key is None):
        raise ConfigurationError("credentials_scope and credentials_key go together")
    if not refresh:
        existing = yield from get_image(core, url)
        if existing is not None and existing.is_available:
            logger.info("%s is already registered and AVAILABLE", url)
            return existing
    if credentials_scope and credentials_key:
        return (yield from _post_registration(core, url, credentials_scope, credentials_key))
    # Local credentials first (a file read): without them the image is registered as it is,
    # and the access probe is only asked when they exist (register_image.go).
    discovered = docker_credential is None
    credential = docker_credential
    if credential is None:
        credential = yield from offload(find_docker_credentials)
    if credential is None:
        return (yield from _post_anonymous(core, url))
    # The registry login is a secret like the token: out of every message this client makes.
    core.redactor.add(credential.password, credential.secret_value())
    public = yield from check_image_access(core, url)
    if public is True:
        logger.info("%s is public: registering it without credentials", url)
        return (yield from _post_registration(core, url, None, None))
    identity = yield from whoami(core)
    scope, key = credentials_secret_location(identity.user_name, credential)
    try:
        yield from ensure_secret_scope(core, scope)
        yield from put_secret(core, scope, key, credential.secret_value())
    except (ConfigurationError, AuthError) as stored:
        if not discovered:
            raise
        # As the CLI does (register_image.go): the image may be public after all, so it is
        # registered without credentials, and a refusal names why they were not stored.
        logger.warning(
            "the Docker credentials found on this machine could not be stored: %s", stored
        )
        try:
            return (yield from _post_registration(core, url, None, None))
        except AuthError as error:
            raise ConfigurationError(
                f"{url} needs credentials, and the credentials found in your local Docker "
                f"config could not be stored: {stored}"
            ) from error
    logger.info(
        "stored Docker Hub credentials of %s in secret %s/%s", credential.username, scope, key
    )
    try:
        return (yield from _post_registration(core, url, scope, key))
    except ConfigurationError:
        if not discovered:
            raise
        # Stale credentials from an old `docker login` must not block a public image.
        logger.warning(
            "the Docker credentials found on this machine were refused for %s; trying "
            "without credentials in case the image is public",
            url,
        )
        return (yield from _post_anonymous(core, url))


def _post_anonymous(core: ClientCore, url: str) -> Flow[ImageRegistration]:
    try:
        return (yield from _post_registration(core, url, None, None))
    except AuthError as error:
        raise ConfigurationError(
            f"{url} was not found or needs credentials, and no working Docker Hub credentials "
            "were found on this machine: run `docker login`, or store base64('<user>:<token>') "
            "as a workspace secret and pass its scope and key"
        ) from error


def wait_for_image(
    core: ClientCore,
    reference: str,
    *,
    timeout: float | None = None,
    poll_interval: float | None = None,
    on_update: Callable[[ImageRegistration], None] | None = None,
) -> Flow[ImageRegistration]:
    """The registration once AVAILABLE. Not registered or FAILED: ``ConfigurationError`` (a
    retry cannot help); still importing after ``timeout`` (``math.inf``: no limit):
    ``RunTimeout``. The one wait of the sync and async clients and the Airflow trigger."""
    timeout = IMAGE_WAIT_TIMEOUT_S if timeout is None else timeout
    poll_interval = IMAGE_POLL_INTERVAL_S if poll_interval is None else poll_interval
    url = normal_image(reference)
    deadline = time.monotonic() + timeout
    while True:
        registration = yield from get_image(core, url)
        if registration is None:
            raise ConfigurationError(f"{url} is not registered: {register_command(url)}")
        if on_update is not None:
            on_update(registration)
        if registration.is_available:
            return registration
        if registration.state == "FAILED":
            raise ConfigurationError(
                f"registration of {url} FAILED: {registration.status_message or 'no reason given'}"
            )
        remaining = deadline - time.monotonic()
        logger.info("Docker image %s is still %s; checking again", url, registration.state)
        if remaining <= 0:
            raise RunTimeout(
                f"{url} is still {registration.state} after {timeout:g}s; registration takes "
                "minutes for large images: wait longer and check again"
            )
        yield Sleep(min(poll_interval, remaining))


def ensure_images_registered(core: ClientCore, images: tuple[str, ...]) -> Flow[None]:
    """Fail before anything is uploaded when an image is not registered or FAILED; wait
    (up to an hour, logging progress) for one still being imported (rundockerimage.go)."""
    found = yield from gather([get_image(core, image) for image in images], len(images) or 1)
    waits = []
    for image, registration in zip(images, found, strict=True):
        if registration is None:
            raise ConfigurationError(
                f"Docker image {image} is not registered on {core.host}; register it first: "
                f"{register_command(image)}"
            )
        if registration.is_available:
            continue
        if registration.state == "FAILED":
            detail = f": {registration.status_message}" if registration.status_message else ""
            raise ConfigurationError(
                f"Docker image {image} is FAILED{detail}; register it again once the cause is "
                f"fixed: {register_command(image)}"
            )
        # PENDING, IMPORTING, or a state this client does not know yet: wait for it.
        logger.info(
            "Docker image %s is being registered (%s); waiting until it is AVAILABLE",
            image,
            registration.state,
        )
        waits.append(
            wait_for_image(
                core, image, timeout=IMAGE_WAIT_TIMEOUT_S, poll_interval=IMAGE_POLL_INTERVAL_S
            )
        )
    ready = yield from gather(waits, len(waits) or 1)
    for registration in ready:
        logger.info(
            "Docker image %s is AVAILABLE (digest %s)",
            registration.docker_image_url,
            registration.manifest_sha256 or "unknown",
        )


def refresh_image(core: ClientCore, requirement: ImageRequirement) -> Flow[ImageRegistration]:
    """``tag_policy: latest``: register again (the platform re-checks the tag and takes the
    re-pushed digest), then wait until AVAILABLE."""
    url = requirement.url
    yield from register_image(
        core,
        url,
        credentials_scope=requirement.credentials_scope,
        credentials_key=requirement.credentials_key,
        refresh=True,
    )
    registration = yield from wait_for_image(
        core, url, timeout=IMAGE_WAIT_TIMEOUT_S, poll_interval=IMAGE_POLL_INTERVAL_S
    )
    logger.info(
        "re-registered %s (tag_policy latest): digest %s",
        url,
        registration.manifest_sha256 or "unknown",
    )
    return registration


def prepare_images(core: ClientCore, requirements: Sequence[ImageRequirement]) -> Flow[None]:
    """Before anything is uploaded: ``auto`` images must be AVAILABLE already, ``latest``
    ones are registered again and waited for. All of them at once."""
    auto = tuple(r.url for r in requirements if r.tag_policy != "latest")
    flows: list[Flow[Any]] = [
        refresh_image(core, r) for r in requirements if r.tag_policy == "latest"
    ]
    if auto:
        flows.append(ensure_images_registered(core, auto))
    yield from gather(flows, len(flows) or 1)
