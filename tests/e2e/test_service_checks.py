"""The decision to skip the deployment tests, and the one line that says why (no service is
stopped or uninstalled for it: the services below are made up)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from deployment_services import Service, require_services, service_problem, summary_line


def _refused() -> None:
    raise ConnectionRefusedError("nothing listens")


def test_the_skip_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    absent = Service("Absent DB at 127.0.0.1:1", ("airo-no-such-server",), _refused)
    stopped = Service("Stopped DB at 127.0.0.1:2", (Path(sys.executable).name,), _refused)
    running = Service("Running DB", ("airo-no-such-server",), lambda: None)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))

    assert service_problem(running) is None
    assert service_problem(absent) == (
        "Absent DB at 127.0.0.1:1 is not installed (no airo-no-such-server on PATH)"
    )
    assert "is installed but does not answer (ConnectionRefusedError)" in str(
        service_problem(stopped)
    )

    monkeypatch.delenv("CI", raising=False)
    require_services(running)
    with pytest.raises(pytest.skip.Exception) as skipped:
        require_services(running, absent, stopped)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):  # CI must not pass without its services
        require_services(absent)

    # Three skipped tests, two of them for the same service: one line, each service once.
    reason = skipped.value.msg
    line = summary_line([reason, reason, reason.split("; ")[0], "Skipped: unrelated"])
    assert line == (
        "*** 3 deployment tests skipped: Absent DB at 127.0.0.1:1 is not installed (no "
        "airo-no-such-server on PATH); Stopped DB at 127.0.0.1:2 is installed but does not "
        "answer (ConnectionRefusedError): `make services` starts it ***"
    )
    assert summary_line(["Skipped: unrelated"]) is None
