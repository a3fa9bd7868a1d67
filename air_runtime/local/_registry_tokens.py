"""The token service of the local workspace's Artifact Registry stand-in.

The stand-in is a real Distribution registry server (``docker-registry``) configured for
token auth (its ``auth.token`` section): it answers 401 with a bearer challenge naming this
workspace's ``/api/2.0/airo-registry/token`` as realm, and verifies the JWT this service
signs against the certificate kept in the workspace's data dir. The service takes what the
real registry takes from ``docker login``: user ``oauthtoken`` and a token of this workspace
as the password (databricks/cli libs/dockercredentials/registry.go OAuthTokenUsername,
cmd/auth/docker/docker_token.go). Not a Databricks API: the real registry's token service is
its own business; a client finds either one from the challenge.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import secrets as token_source
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from air_runtime.local._security import token_matches
from air_runtime.local._workspace_state import workspace_state

TOKEN_PATH = "/api/2.0/airo-registry/token"
ISSUER = "airo-local-workspace"
SERVICE = "airo-artifact-registry"
TOKEN_LIFETIME_S = 300
OAUTH_TOKEN_USERNAME = "oauthtoken"

public_router = APIRouter()


def signing_material(data_dir: Path) -> tuple[Path, Path]:
    """(private key, certificate) of the token signer, made on first use (key 0600)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    directory = data_dir / "registry-token"
    key_path, cert_path = directory / "key.pem", directory / "cert.pem"
    if key_path.exists() and cert_path.exists():
        return key_path, cert_path
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd_path = key_path.with_suffix(".tmp")
    fd_path.touch(mode=0o600)
    fd_path.write_bytes(pem)
    fd_path.replace(key_path)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


def issue_token(data_dir: Path, subject: str, scopes: list[str]) -> str:
    """A JWT the registry accepts (distribution's registry/auth/token claim set), granting
    the actions asked for on each repository scope."""
    import jwt
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    key_path, cert_path = signing_material(data_dir)
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    access = []
    for scope in scopes:
        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        if kind == "repository" and name:
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "sub": subject,
        "aud": SERVICE,
        "exp": now + TOKEN_LIFETIME_S,
        "nbf": now - 5,
        "iat": now,
        "jti": token_source.token_hex(16),
        "access": access,
    }
    chain = [base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()]
    return jwt.encode(claims, key_path.read_bytes(), algorithm="RS256", headers={"x5c": chain})


def _workspace_principal(request: Request, password: str) -> str | None:
    state = workspace_state(request)
    if token_matches(password, state.revoked):
        return None
    if token_matches(password, state.tokens):
        return state.options.user_name
    row = state.store.access_token(password)
    if row is not None and row["expires_at"] > time.time():
        return str(row["principal"])
    return None


def _refused(message: str) -> JSONResponse:
    return JSONResponse(
        {"errors": [{"code": "UNAUTHORIZED", "message": message}]},
        status_code=401,
        headers={"WWW-Authenticate": f'Basic realm="{SERVICE}"'},
    )


@public_router.get(TOKEN_PATH)
async def registry_token(request: Request) -> JSONResponse:
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return _refused("log in with user oauthtoken and a workspace token")
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return _refused("malformed Basic credentials")
    principal = _workspace_principal(request, password) if user == OAUTH_TOKEN_USERNAME else None
    if principal is None:
        return _refused("invalid credentials: use user oauthtoken and a workspace token")
    scopes = request.query_params.getlist("scope")
    token = issue_token(workspace_state(request).data_dir, principal, scopes)
    body: dict[str, Any] = {
        "token": token,
        "access_token": token,
        "expires_in": TOKEN_LIFETIME_S,
        "issued_at": datetime.datetime.now(datetime.UTC).isoformat(),
    }
    return JSONResponse(body)
