"""One rule for "this host is this machine": a client may speak plain HTTP to it (the local
workspace; a local registry, as Docker treats 127.0.0.0/8 as an insecure registry) and
finds a local workspace's token for it, and the local workspace accepts it in a ``Host``
header and binds it without ``--allow-remote``."""

from __future__ import annotations

import ipaddress


def is_loopback_name(name: str | None) -> bool:
    """``localhost``, a ``*.localhost`` name (RFC 6761 6.3: always this machine),
    ``localhost.localdomain`` or a loopback address (127.0.0.0/8, ``::1``); in any case, an
    IPv6 address with or without brackets. ``name`` carries no port."""
    if not name:
        return False
    name = name.strip().strip("[]").lower().rstrip(".")
    if name in ("localhost", "localhost.localdomain") or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_loopback_host(host: str) -> bool:
    """The same for ``host[:port]`` (``127.0.0.1:5000``, ``[::1]:5000``, ``::1``)."""
    host = host.strip()
    if host.startswith("["):
        return is_loopback_name(host[1 : host.find("]")] if "]" in host else host)
    if host.count(":") == 1:
        return is_loopback_name(host.partition(":")[0])
    return is_loopback_name(host)
