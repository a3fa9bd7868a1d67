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


def output_dir() -> Path:
    """``$RL_OUTPUT_DIR``, shared by the trainer (writer) and the evaluation (reader)."""
    return Path(os.environ.get("RL_OUTPUT_DIR") or "rl_output").resolve()


def fail(role: str, message: str, code: int = 2) -> None:
    log(role, f"ERROR: {message}")
    sys.exit(code)
