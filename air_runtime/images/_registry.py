"""One registry, spoken to over the OCI distribution API (distribution-spec v1.1) with httpx:
manifests, blobs, chunked uploads and the three ways registries authenticate (anonymous,
HTTP Basic, and the bearer-token challenge ``docker login`` answers).

Loopback registries are spoken to over plain HTTP (as Docker treats 127.0.0.0/8 as an
insecure registry); every other host over HTTPS.
"""

from __future__ import annotations

import base64
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from .._errors import AirError, AuthError, NotFound, PlatformError
from .._loopback import is_loopback_host

logger = logging.getLogger("air_runtime.images")

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Login:
    """A registry user and password (or token). Never shown: ``repr`` leaves it out."""

    username: str
    password: str
    origin: str = "explicit"

    def __repr__(self) -> str:
        return f"Login(username={self.username!r}, origin={self.origin!r})"


class RegistryAuthError(AuthError):
    """A registry refused the credentials (or needs some and none were given)."""


class RegistryError(PlatformError):
    """A registry answered something the copy cannot go on from."""


class Registry:
    """The API of one registry host. ``role`` names it in messages ("the source registry",
    "the Artifact Registry"); ``login_fix`` says what to do when it refuses the login."""

    def __init__(
        self,
        host: str,
        login: Login | None,
        *,
        role: str,
        login_fix: str,
        http: httpx.Client,
        attempts: int = 5,
    ) -> None:
        self.host = host
        self.login = login
        self.role = role
        self.login_fix = login_fix
        self.base_url = f"{'http' if is_loopback_host(host) else 'https'}://{host}"
        self._http = http
        self._attempts = attempts
        self._basic = False
        self._bearer_challenge: dict[str, str] | None = None
        self._tokens: dict[tuple[str, ...], str] = {}

    def __repr__(self) -> str:
        return f"Registry({self.host!r}, role={self.role!r})"

    @property
    def label(self) -> str:
        return f"{self.role} {self.host}"

    # --- auth -----------------------------------------------------------------------------

    def _auth_header(self, scopes: tuple[str, ...]) -> dict[str, str]:
        if self._bearer_challenge is not None:
            token = self._tokens.get(scopes) or self._fetch_token(scopes)
            return {"Authorization": f"Bearer {token}"}
        if self._basic and self.login is not None:
            pair = f"{self.login.username}:{self.login.password}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return {}

    def _learn_challenge(self, response: httpx.Response) -> None:
        header = response.headers.get("www-authenticate", "")
        scheme, _, rest = header.partition(" ")
        if scheme.lower() == "bearer":
            self._bearer_challenge = dict(_CHALLENGE_PARAM.findall(rest))
            if "realm" not in self._bearer_challenge:
                raise RegistryError(f"{self.label} sent a bearer challenge without a realm")
        elif scheme.lower() == "basic":
            if self.login is None:
                raise self._refused(None)
            self._basic = True
        else:
            raise self._refused(None)

    def _fetch_token(self, scopes: tuple[str, ...]) -> str:
        """The token endpoint of the bearer challenge (the registry token spec): GET realm
        with service and one scope parameter per scope, HTTP Basic with the login if any."""
        challenge = self._bearer_challenge or {}
        params: list[tuple[str, str | int | float | bool | None]] = []
        if challenge.get("service"):
            params.append(("service", challenge["service"]))
        params.extend(("scope", scope) for scope in scopes)
        auth = (self.login.username, self.login.password) if self.login else None
        response = self._send_with_retries(
            lambda: self._http.build_request("GET", challenge["realm"], params=params),
            auth=auth,
        )
        if response.status_code in (401, 403):
            raise self._refused(response)
        if response.status_code != 200:
            raise RegistryError(
                f"the token service of {self.label} answered HTTP {response.status_code}"
            )
        try:
            body = response.json()
            token = body.get("token") or body.get("access_token")
        except ValueError:
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"the token service of {self.label} sent no token")
        self._tokens[scopes] = token
        return token

    def _refused(self, response: httpx.Response | None) -> RegistryAuthError:
        if self.login is None:
            return RegistryAuthError(f"{self.label} needs a login: {self.login_fix}")
        detail = ""
        if response is not None:
            detail = f" (HTTP {response.status_code})"
        return RegistryAuthError(
            f"{self.label} refused the login of {self.login.username!r} "
            f"from {self.login.origin}{detail}: {self.login_fix}"
        )

    # --- requests -------------------------------------------------------------------------

    def _send_with_retries(
        self, build: Any, *, auth: Any = None, stream: bool = False
    ) -> httpx.Response:
        """Send the request ``build()`` makes, again after transport errors and 5xx/429
        (with backoff); the last answer or error is the caller's."""
        delay = 0.5
        for attempt in range(1, self._attempts + 1):
            try:
                response = self._http.send(build(), auth=auth, stream=stream)
            except httpx.TransportError as error:
                if attempt == self._attempts:
                    raise RegistryError(
                        f"{self.label} could not be reached ({type(error).__name__}): "
                        "check the host and that the registry is up"
                    ) from None
                logger.debug("%s: %s, retrying", self.label, type(error).__name__)
            else:
                if response.status_code not in _RETRY_STATUS or attempt == self._attempts:
                    return response
                response.close()
            time.sleep(delay)
            delay = min(delay * 2, 8.0)
        raise AssertionError("unreachable")

    def request(
        self,
        method: str,
        url: str,
        scopes: tuple[str, ...],
        *,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        content: Any = None,
        stream: bool = False,
        retry: bool = True,
    ) -> httpx.Response:
        """One call with auth: answers a 401 challenge once, then raises when refused.
        ``url`` is a path under the host or an absolute URL (an upload location)."""
        target = url if url.startswith(("http://", "https://")) else self.base_url + url
        for challenged in (False, True):

            def build() -> httpx.Request:
                return self._http.build_request(
                    method,
                    target,
                    headers={**(headers or {}), **self._auth_header(scopes)},
                    params=params,
                    content=content,
                )

            response = (
                self._send_with_retries(build, stream=stream)
                if retry
                else self._http.send(build(), stream=stream)
            )
            if response.status_code != 401:
                return response
            response.close()
            if challenged:
                raise self._refused(response)
            self._tokens.pop(scopes, None)
            self._learn_challenge(response)
            if content is not None and not isinstance(content, bytes):
                # A streamed body cannot be sent twice: the caller resumes the upload.
                raise RegistryError(f"{self.label} asked to authenticate again mid-upload")
        raise AssertionError("unreachable")

    def error(self, response: httpx.Response, doing: str) -> AirError:
        """A typed error for an unexpected answer, with the registry's own error codes."""
        codes = ""
        try:
            if not response.is_stream_consumed:
                response.read()
            errors = response.json().get("errors") or []
            codes = "; ".join(
                f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict)
            )
        except (ValueError, AttributeError, httpx.HTTPError):
            pass
        text = f"{self.label} answered HTTP {response.status_code} to {doing}"
        if codes:
            text += f" ({codes})"
        if response.status_code == 403:
            return RegistryAuthError(f"{text}: {self.login_fix}")
        if response.status_code == 404:
            return NotFound(text)
        return RegistryError(text, status_code=response.status_code)

    # --- the distribution API -------------------------------------------------------------

    def get_manifest(self, repository: str, reference: str) -> tuple[str, bytes, str]:
        """(media type, exact bytes, digest) of a manifest or index."""
        response = self.request(
            "GET",
            f"/v2/{repository}/manifests/{reference}",
            (f"repository:{repository}:pull",),
            headers={"Accept": ACCEPT},
        )
        if response.status_code == 404:
            raise NotFound(
                f"{self.label} has no image {repository}:{reference}"
                if not reference.startswith("sha256:")
                else f"{self.label} has no manifest {reference} in {repository}"
            ) from None
        if response.status_code != 200:
            raise self.error(response, f"GET manifest {repository}:{reference}")
        media_type = response.headers.get("content-type", "").split(";")[0].strip()
        return media_type, response.content, response.headers.get("docker-content-digest", "")

    def manifest_digest(
        self, repository: str, reference: str, scopes: tuple[str, ...]
    ) -> str | None:
        """The digest the registry holds under ``reference``, None when it holds none."""
        response = self.request(
            "HEAD",
            f"/v2/{repository}/manifests/{reference}",
            scopes,
            headers={"Accept": ACCEPT},
        )
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self.error(response, f"HEAD manifest {repository}:{reference}")
        return response.headers.get("docker-content-digest") or None

    def put_manifest(self, repository: str, reference: str, media_type: str, body: bytes) -> str:
        response = self.request(
            "PUT",
            f"/v2/{repository}/manifests/{reference}",
            (f"repository:{repository}:pull,push",),
            headers={"Content-Type": media_type},
            content=body,
        )
        if response.status_code not in (200, 201):
            raise self.error(response, f"PUT manifest {repository}:{reference}")
        return response.headers.get("docker-content-digest", "")

    def has_blob(self, repository: str, digest: str, scopes: tuple[str, ...]) -> bool:
        response = self.request("HEAD", f"/v2/{repository}/blobs/{digest}", scopes)
        if response.status_code == 404:
            return False
        if response.status_code != 200:
            raise self.error(response, f"HEAD blob {digest}")
        return True

    @contextmanager
    def open_blob(self, repository: str, digest: str, offset: int = 0) -> Iterator[httpx.Response]:
        """A streamed blob from ``offset`` on (a ``Range`` request; a registry that ignores
        it answers 200 and the caller skips what it has). Redirects (to a CDN) are followed;
        httpx drops the Authorization header when the origin changes."""
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        response = self.request(
            "GET",
            f"/v2/{repository}/blobs/{digest}",
            (f"repository:{repository}:pull",),
            headers=headers,
            stream=True,
        )
        try:
            if response.status_code not in (200, 206):
                raise self.error(response, f"GET blob {digest}")
            yield response
        finally:
            response.close()

    def upload_url(self, location: str) -> str:
        return (
            location if location.startswith(("http://", "https://")) else self.base_url + location
        )
