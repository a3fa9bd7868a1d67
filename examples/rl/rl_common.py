"""Pieces shared by the toy RL scripts: hyperparameters, the output folder, logging.

The scripts run as separate containers of one workload; each finds this module next to
itself because Python puts the script's folder first on ``sys.path``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

HYPERPARAMETERS_FILE = "hyperparameters.yaml"
METRICS_FILE = "metrics.json"


def log(role: str, message: str) -> None:
    # No timestamp: the platform stamps every log record. Flushed at once so it streams live.
    print(f"[{role} rank={os.environ.get('POD_RANK', '?')}] {message}", flush=True)


def load_hyperparameters(path: str | os.PathLike[str] = HYPERPARAMETERS_FILE) -> dict[str, Any]:
    """Read ``hyperparameters.yaml`` (the platform puts it next to the command); {} when absent."""
    file = Path(path)
    if not file.is_file():
        return {}
    text = file.read_text(encoding="utf-8")
    try:
        import yaml
    except ImportError:  # an interpreter without PyYAML: flat "key: value" files still work
        return _parse_flat_yaml(text)
    data = yaml.safe_load(text)
    return data if isinstance(data, dict) else {}


def _parse_flat_yaml(text: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for line in text.splitlines():
        if ":" not in line or line.startswith((" ", "#", "-")):
            continue
        key, _, raw = line.partition(":")
        raw = raw.strip().strip("'\"")
        for cast in (int, float):
            try:
                values[key.strip()] = cast(raw)
                break
            except ValueError:
                continue
        else:
            values[key.strip()] = raw
    return values


def output_root() -> Path:
    """This user's folder for the pipeline's outputs, ``~/.cache/airo-rl``: never one folder
    shared by every user of the machine (the ranks get HOME, so an orchestrator process of
    the same user finds the same folder)."""
    return Path.home() / ".cache" / "airo-rl"


def output_dir() -> Path:
    """``$RL_OUTPUT_DIR``, shared by the trainer (writer) and the evaluation (reader): an
    absolute path as it is, a relative one under ``output_root()``, unset the root itself."""
    given = os.environ.get("RL_OUTPUT_DIR") or ""
    return (output_root() / given).resolve()


def make_private_dir(path: Path) -> Path:
    """Create ``path`` and each missing parent with mode 0700 (``mkdir(parents=True)`` gives
    the parents the umask's mode instead); an existing folder is left as it is."""
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # made meanwhile by another rank
            continue
        folder.chmod(0o700)  # whatever the umask
    return path


def fail(role: str, message: str, code: int = 2) -> None:
    log(role, f"ERROR: {message}")
    sys.exit(code)
