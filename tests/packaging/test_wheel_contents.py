"""What the wheel ships: the packages `[tool.hatch.build.targets.wheel]` lists, the run pages'
templates among them, and none of the image fixtures (real registry servers, generated images)
that only the tests, the demo and the benchmarks use."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import image_fixtures.image_builder
import image_fixtures.registry_server

REPO = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")
FIXTURES = [image_fixtures, image_fixtures.image_builder, image_fixtures.registry_server]


def _wheel_packages() -> list[Path]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [REPO / p for p in config["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]]


def _fixture_files() -> list[Path]:
    return [Path(module.__file__ or "").resolve() for module in FIXTURES]


def test_no_wheel_package_holds_an_image_fixture() -> None:
    inside = [
        f"{file.relative_to(REPO)} is in {package.relative_to(REPO)}"
        for file in _fixture_files()
        for package in _wheel_packages()
        if file.is_relative_to(package)
    ]
    assert inside == []


def test_the_wheel_has_the_templates_and_no_image_fixture(tmp_path: Path) -> None:
    subprocess.run(
        [str(UV), "build", "-q", "--wheel", "-o", str(tmp_path), str(REPO)],
        check=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    fixture_names = {file.name for file in _fixture_files() if file.name != "__init__.py"}
    shipped_fixtures = [
        name
        for name in names
        if name.startswith("image_fixtures/") or name.rsplit("/", 1)[-1] in fixture_names
    ]
    assert shipped_fixtures == []
    templates = [name for name in names if "/templates/" in name and name.endswith(".html")]
    assert any(name.startswith("air_runtime/local/") for name in templates), names
    assert any(name.endswith("/run.html") for name in templates), templates
