"""Builds (or brings up to date) the venv of ``make test-next``: the project with the newest
pre-release of apache-airflow (its core and Task SDK, which it pins exactly, come with it) and
the newest Dagster release its tooling installs with, everything else as new as
pyproject.toml allows.

Resolved again on every call, so a new beta is picked up without a lock; only what changed is
installed. The requirements are pyproject.toml's (dependencies, every extra, the dev group)
with the upper bounds of the apache-airflow* and dagster* ones left out: the next minor is what
this venv is for. Pre-releases are allowed for apache-airflow, apache-airflow-core and
apache-airflow-task-sdk only, never for the rest of the tree.

    python scripts/venv_next.py VENV UV
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEXT_MINORS = ("apache-airflow", "dagster")
PRE_RELEASES = ("apache-airflow", "apache-airflow-core", "apache-airflow-task-sdk")
SHOWN = (
    "apache-airflow",
    "apache-airflow-core",
    "apache-airflow-task-sdk",
    "apache-airflow-providers-databricks",
    "apache-airflow-providers-standard",
    "dagster",
    "dagster-pipes",
    "dagster-dg-cli",
)


def requirements() -> list[str]:
    """pyproject.toml's requirements, the orchestrators' upper bounds left out."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += [r for r in extra if not r.startswith(f"{project['name']}[")]
    reqs += [r for r in pyproject["dependency-groups"]["dev"] if isinstance(r, str)]
    out = []
    for req in reqs:
        name = re.match(r"[A-Za-z0-9_.-]+", req)
        if name and name.group(0).lower().startswith(NEXT_MINORS):
            req = re.sub(r",?\s*<[^,;]*", "", req)
        out.append(req)
    return out


def main(venv: Path, uv: str) -> None:
    python = venv / "bin" / "python"
    subprocess.run(
        [uv, "venv", "-q", "--allow-existing", "--python", sys.executable, venv], check=True
    )
    (venv / "requirements.in").write_text("\n".join(requirements()) + "\n")
    pre = [arg for name in PRE_RELEASES for arg in ("--prerelease-package", f"{name}=allow")]
    # --upgrade: the pins of the last call are no preference, the newest versions are wanted.
    lock: list[str | Path] = ["-o", venv / "requirements.txt", "--upgrade"]
    subprocess.run(
        [uv, "pip", "compile", "-q", venv / "requirements.in", *pre, "--python", python, *lock],
        check=True,
    )
    # Bytecode compiled at install, as for .venv (see the Makefile).
    sync: list[str | Path] = [uv, "pip", "sync", "-q", "--compile-bytecode", "--python", python]
    subprocess.run([*sync, venv / "requirements.txt"], check=True)
    subprocess.run(
        [uv, "pip", "install", "-q", "--no-deps", "--python", python, "-e", ROOT], check=True
    )
    packages = ["air_runtime", "providers", "dagster_air", "demo"]
    subprocess.run([python, "-m", "compileall", "-q", *packages], cwd=ROOT, check=True)
    pins = dict(
        line.split("==", 1)
        for line in (venv / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith(("#", " "))
    )
    print(f"{venv}: " + " ".join(f"{name}=={pins[name]}" for name in SHOWN if name in pins))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
