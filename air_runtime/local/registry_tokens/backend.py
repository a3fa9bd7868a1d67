"""The token service of the local workspace's Artifact Registry stand-in.

The stand-in is a real Distribution registry server (``docker-registry``) configured for
token auth (its ``auth.token`` section): it answers 401 with a bearer challenge naming this
workspace's ``/api/2.0/airo-registry/token`` as realm, and verifies the JWT this service
signs against the certificate kept in the workspace's data dir. The service takes what the
real registry takes from ``docker login``: user ``oauthtoken`` and a token of this workspace
as the password (databricks/cli libs/dockercredentials/registry.go OAuthTokenUsername,
cmd/auth/docker/docker_token.go). Not a Databricks API: the real registry's token service is
its own business; a client finds either one from the challenge. Here: the signer and the
tokens it signs; the endpoint is `routes`.
"""

from __future__ import annotations

import base64
import datetime
import secrets as token_source
import time
from pathlib import Path

TOKEN_PATH = "/api/2.0/airo-registry/token"
ISSUER = "airo-local-workspace"
SERVICE = "airo-artifact-registry"
TOKEN_LIFETIME_S = 300
OAUTH_TOKEN_USERNAME = "oauthtoken"


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
