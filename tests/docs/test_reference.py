"""The reference pages cover the public surface, and the site builds with nothing missing.

The pages name objects for mkdocstrings (`::: module.Name`); a public name (in the
``__all__`` of a public module) added without a line in a page, or a more-public-names
marker that renders it, fails here, not silently in the site."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from doc_blocks import ROOT

REFERENCE = ROOT / "docs" / "reference"


# The importable packages; every module of theirs whose dotted name has no part starting
# with "_" and that declares ``__all__`` is public, and each name of it is in the reference.
PACKAGES = ("air_runtime", "airflow_air", "dagster_air")


def _documented(page: str) -> set[str]:
    return set(re.findall(r"^::: ([\w.]+)", (REFERENCE / page).read_text(), flags=re.M))


def _rendered(page: str) -> set[str]:
    """The objects the page names once the site's hooks have filled it in (each
    more-public-names marker becomes one `::: package.Name` per name the page lacks)."""
    spec = importlib.util.spec_from_file_location(
        "airo_reference_hooks", ROOT / "docs" / "hooks" / "airo_reference.py"
    )
    assert spec and spec.loader
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    markdown = hooks.on_page_markdown((REFERENCE / page).read_text(), None, None, None)
    return set(re.findall(r"^::: ([\w.]+)", markdown, flags=re.M))


def _resolve(path: str) -> object:
    """The object a `::: dotted.path` names: the longest importable module, then attributes."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for part in parts[end:]:
            found = getattr(found, part)
        return found
    raise ModuleNotFoundError(path)


def _public_modules() -> list[ModuleType]:
    """Every public module of PACKAGES that declares ``__all__``."""
    found = []
    pending = [importlib.import_module(name) for name in PACKAGES]
    while pending:
        module = pending.pop()
        if "__all__" in vars(module):
            found.append(module)
        for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
            if not info.name.startswith("_"):
                pending.append(importlib.import_module(f"{module.__name__}.{info.name}"))
    return sorted(found, key=lambda m: m.__name__)


def test_every_public_name_is_in_the_reference() -> None:
    """Each name of each public module's ``__all__`` (dunders such as ``__version__`` aside)
    is on a reference page as the site renders it: named by a `::: path` that leads to that
    very object under that name (a line of the page, or one a more-public-names marker
    adds), or exported by a module the page renders whole."""
    named: dict[str, list[object]] = {}
    whole: list[ModuleType] = []
    for page in sorted(REFERENCE.glob("*.md")):
        for path in _rendered(page.name):
            found = _resolve(path)
            if isinstance(found, ModuleType):
                whole.append(found)
            else:
                named.setdefault(path.rsplit(".", 1)[-1], []).append(found)
    modules = _public_modules()
    assert {"air_runtime", "air_runtime.local", "airflow_air", "dagster_air"} <= {
        m.__name__ for m in modules
    }
    missing = [
        f"{module.__name__}.{name}"
        for module in modules
        for name in module.__all__
        if not (name.startswith("__") and name.endswith("__"))
        and not any(getattr(module, name) is found for found in named.get(name, ()))
        and not any(name in getattr(w, "__all__", ()) and w is module for w in whole)
    ]
    assert not missing, missing


def test_a_module_rendered_whole_shows_its_public_names_only() -> None:
    page = (REFERENCE / "air_runtime.md").read_text()
    assert re.search(
        r"^::: air_runtime\.images\n\s+options:\n(\s+\S.*\n)*\s+filters: public", page, re.M
    )


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
