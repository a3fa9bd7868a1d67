"""Hosts a client cannot reach, all on this machine or never contacted: a refused port, a name
under ``.invalid`` (RFC 6761: never resolves; only a DNS lookup happens) and a black hole (a
127.0.0.1 socket that accepts connections and never answers). Shared by the client, Airflow and
Dagster tests of ``WorkspaceUnreachable``."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

from air_runtime.client._core import has_answered

# What the issue asks of every entry point: a wrong host is named within this many seconds.
WITHIN_S = 15.0

UNRESOLVABLE = "https://adb-123.typo.example.invalid"

# The words each cause puts in the message.
CAUSE_WORDS = {
    "refused": "connection refused",
    "dns": "not found (DNS)",
    "no answer": "sent no answer within",
}


def refused_host() -> str:
    """A 127.0.0.1 port nothing listens on (bound, then closed), that this process has never
    heard from (a port a local workspace of an earlier test used would be a known host)."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            host = f"http://127.0.0.1:{probe.getsockname()[1]}"
        if not has_answered(host):
            return host


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """A 127.0.0.1 listening socket that accepts every connection and never answers."""
    # A port a local workspace of an earlier test used would be a known host: bind another.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    while has_answered(f"http://127.0.0.1:{listener.getsockname()[1]}"):
        replacement = socket.socket()
        replacement.bind(("127.0.0.1", 0))
        listener.close()
        listener = replacement
    listener.listen(64)
    listener.settimeout(0.1)  # so the acceptor sees the end (close does not wake accept)
    held: list[socket.socket] = []
    stopped = threading.Event()

    def accept() -> None:
        while not stopped.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(connection)

    acceptor = threading.Thread(target=accept, name="black-hole", daemon=True)
    acceptor.start()
    host = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        yield host
    finally:
        stopped.set()
        acceptor.join(timeout=5)
        listener.close()
        for connection in held:
            connection.close()


@contextlib.contextmanager
def wrong_host(kind: str) -> Iterator[str]:
    """The host of one kind of wrong host: ``refused``, ``dns`` or ``no answer``."""
    if kind == "no answer":
        with black_hole() as host:
            yield host
    elif kind == "refused":
        yield refused_host()
    else:
        yield UNRESOLVABLE


KINDS = ("refused", "dns", "no answer")


def write_profile(directory: Path, host: str, *, profile: str = "DEFAULT") -> Path:
    """A ``~/.databrickscfg``-style file whose ``profile`` points at ``host`` with a token."""
    path = directory / "databrickscfg"
    header = "[DEFAULT]" if profile == "DEFAULT" else f"[{profile}]"
    path.write_text(f"{header}\nhost = {host}\ntoken = dapi-profile-token\n", encoding="utf-8")
    return path


def assert_names_host_and_cause(message: str, host: str, kind: str) -> None:
    assert f"cannot reach the workspace {host}" in message, message
    assert CAUSE_WORDS[kind] in message, message
    assert "Fix: check" in message, message
