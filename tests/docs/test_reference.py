"""The reference pages cover the public surface, and the site builds with nothing missing.

The pages name objects for mkdocstrings (`::: module.Name`); a public name added to a
package without a line in its page fails here, not silently in the site."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import ROOT

REFERENCE = ROOT / "docs" / "reference"


def _documented(page: str) -> set[str]:
    return set(re.findall(r"^::: ([\w.]+)", (REFERENCE / page).read_text(), flags=re.M))


def _rendered(page: str) -> set[str]:
    """The objects the page names once the site's hooks have filled it in (the
    more-public-names marker becomes one `::: package.Name` per name the page lacks)."""
    spec = importlib.util.spec_from_file_location(
        "airo_reference_hooks", ROOT / "docs" / "hooks" / "airo_reference.py"
    )
    assert spec and spec.loader
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    markdown = hooks.on_page_markdown((REFERENCE / page).read_text(), None, None, None)
    return set(re.findall(r"^::: ([\w.]+)", markdown, flags=re.M))


def _covered(name: str, documented: set[str]) -> bool:
    return any(path.rsplit(".", 1)[-1] == name for path in documented)


def test_every_public_name_of_the_core_is_in_its_reference() -> None:
    """Every name of `air_runtime.__all__` is in the page as the site renders it (named, or
    added by the page's more-public-names marker); `air_runtime.images` is rendered whole;
    the local workspace's names are named one by one."""
    import air_runtime
    import air_runtime.local

    page = (REFERENCE / "air_runtime.md").read_text()
    assert "<!-- more-public-names: air_runtime -->" in page
    assert re.search(
        r"^::: air_runtime\.images\n\s+options:\n(\s+\S.*\n)*\s+filters: public", page, re.M
    )
    rendered = _rendered("air_runtime.md")
    missing = [name for name in air_runtime.__all__ if not _covered(name, rendered)]
    missing += [
        f"air_runtime.local.{name}"
        for name in air_runtime.local.__all__
        if not _covered(name, _documented("air_runtime.md"))
        # The local workspace's building blocks for tests and benchmarks, not for users.
        and name not in ("create_app", "endpoint_key", "registry_program", "serve")
    ]
    assert not missing, missing


def test_every_dagster_name_is_in_its_reference() -> None:
    """Every name of `dagster_air.__all__`: named in the page, or rendered by the page's
    more-public-names marker."""
    import dagster_air

    page = (REFERENCE / "dagster.md").read_text()
    assert "<!-- more-public-names: dagster_air -->" in page
    rendered = _rendered("dagster.md")
    missing = [name for name in dagster_air.__all__ if f"dagster_air.{name}" not in rendered]
    assert not missing, missing


def test_every_operator_trigger_hook_link_and_group_is_in_its_reference() -> None:
    from airflow.sdk import BaseHook, BaseOperator, BaseOperatorLink, TaskGroup
    from airflow.triggers.base import BaseTrigger
    from airflow_air.get_provider_info import get_provider_info

    info = get_provider_info()
    modules = {
        module
        for kind in ("operators", "hooks", "triggers")
        for entry in info[kind]
        for module in entry["python-modules"]
    } | {link.rsplit(".", 1)[0] for link in info["extra-links"]}
    kinds = (BaseOperator, BaseTrigger, BaseHook, BaseOperatorLink, TaskGroup)
    documented = _documented("airflow.md")
    missing = []
    for module_name in sorted(modules):
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and value.__module__ == module_name
                and not name.startswith("_")
                and issubclass(value, kinds)
                and f"{module_name}.{name}" not in documented
            ):
                missing.append(f"{module_name}.{name}")
    assert not missing, missing


@pytest.mark.slow
def test_the_site_builds_strict_with_every_airo_command(tmp_path: Path) -> None:
    """`mkdocs build --strict` (a broken link, anchor or reference fails it), and the
    generated pages hold what the command line and the provider define."""
    from airflow_air.get_provider_info import get_provider_info

    from air_runtime.cli import build_parser

    site = tmp_path / "site"
    out = subprocess.run(
        [
            str(Path(sys.executable).with_name("mkdocs")),
            "build",
            "--strict",
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": str(Path(sys.executable).parent), "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    airo_page = (site / "reference" / "airo.html").read_text()
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    for name in commands.choices:
        assert f"<code>airo {name}</code>" in airo_page, name
    config_page = (site / "reference" / "airflow-config.html").read_text()
    for option in get_provider_info()["config"]["air"]["options"]:
        assert f"<code>{option}</code>" in config_page, option
    for page in (site / "reference").glob("*.html"):
        assert "::: " not in page.read_text(), f"{page.name}: a reference was not rendered"


def test_the_dagster_reference_lists_every_field_of_the_resource() -> None:
    import dagster_air

    spec = importlib.util.spec_from_file_location(
        "airo_reference_fields", ROOT / "docs" / "hooks" / "airo_reference.py"
    )
    assert spec and spec.loader
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    markdown = hooks.on_page_markdown((REFERENCE / "dagster.md").read_text(), None, None, None)
    for name, field in dagster_air.AirWorkspace.model_fields.items():
        assert f"| `{name}` |" in markdown, name
        assert field.description, f"AirWorkspace.{name} has no description"
