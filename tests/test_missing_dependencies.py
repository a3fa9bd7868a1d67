"""A missing optional dependency (``pytest.importorskip``) skips its tests on a developer
machine and fails them under ``CI`` (tests/conftest.py), in a test and at a module's top.
Each case is a pytest session of its own with the suite's conftest as a plugin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

IN_A_TEST = """
import pytest

def test_needs_it():
    pytest.importorskip("airo_no_such_module")

def test_skipped_for_another_reason():
    pytest.skip("not on this platform")
"""
AT_THE_TOP = """
import pytest

pytest.importorskip("airo_no_such_module")

def test_needs_it():
    pass
"""


def _session(tmp_path: Path, ci: str | None, source: str) -> str:
    tmp_path.mkdir()
    (tmp_path / "test_optional.py").write_text(source)
    env = {
        "PATH": str(Path(sys.executable).parent),
        "PYTHONPATH": str(Path(__file__).parent),
        **({"CI": ci} if ci is not None else {}),
    }
    plugins = ["-p", "conftest", "-p", "no:cacheprovider", "-p", "no:xdist"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, "-rA", "-q", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


@pytest.mark.parametrize("ci", [None, ""])
def test_a_developer_machine_skips(tmp_path: Path, ci: str | None) -> None:
    assert "2 skipped" in _session(tmp_path / "in_a_test", ci, IN_A_TEST)
    out = _session(tmp_path / "at_the_top", ci, AT_THE_TOP)
    assert "1 skipped" in out and "error" not in out, out


def test_ci_fails_the_tests_whose_dependency_is_missing(tmp_path: Path) -> None:
    out = _session(tmp_path / "in_a_test", "true", IN_A_TEST)
    assert "1 failed, 1 skipped" in out, out
    assert "FAILED test_optional.py::test_needs_it" in out, out
    assert "SKIPPED [1] test_optional.py:8: not on this platform" in out, out  # other skips
    # A module that needs it at its top: a collection error (the session stops there).
    top = _session(tmp_path / "at_the_top", "true", AT_THE_TOP)
    assert "ERROR test_optional.py" in top and "1 error" in top, top
    for text in (out, top):
        assert "could not import 'airo_no_such_module'" in text, text
        assert "CI is set: every optional dependency must be installed" in text, text
