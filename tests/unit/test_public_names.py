"""The public names of ``air_runtime`` and ``air_runtime.local``: each listed once, each
importable, and the lazy ones imported only on first use (one helper for both packages)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

import air_runtime


@pytest.mark.parametrize("package", ["air_runtime", "air_runtime.local"])
def test_every_public_name_is_listed_once_and_resolves(package: str) -> None:
    module = __import__(package, fromlist=["__all__"])
    twice = [name for name, count in Counter(module.__all__).items() if count > 1]
    assert twice == []
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nothing'"):
        module.nothing  # noqa: B018


def test_a_lazy_name_loads_its_module_on_first_use_only() -> None:
    code = (
        "import sys, air_runtime\n"
        "assert 'httpx' not in sys.modules and 'air_runtime.client' not in sys.modules\n"
        "client = air_runtime.AirClient\n"
        "assert 'air_runtime.client' in sys.modules\n"
        "assert vars(air_runtime)['AirClient'] is client\n"  # kept: later reads are plain
        "import air_runtime.local as local\n"
        "assert 'air_runtime.local._server' not in sys.modules\n"
        "local.start_local_workspace\n"
        "assert 'air_runtime.local._server' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_core_lists_its_lazy_names_through_the_mapping() -> None:
    assert {"AirClient", "normalize_host", "parse_docker_ref"} <= set(air_runtime.__all__)
