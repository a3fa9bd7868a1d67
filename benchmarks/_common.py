"""Helpers shared by the benchmark scripts: results files, machine facts, statistics."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
PYTHON = sys.executable

_PACKAGES = (
    "air-orchestration",
    "apache-airflow",
    "apache-airflow-providers-databricks",
    "httpx",
    "aiohttp",
    "pydantic",
    "uvicorn",
    "dagster",
)


def machine_info() -> dict[str, Any]:
    versions: dict[str, str] = {}
    for name in _PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            continue
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on Linux
        load = []
    return {
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average": load,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "versions": versions,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def median(values: Iterable[float]) -> float:
    items = list(values)
    return statistics.median(items) if items else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, round(q / 100 * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def parser_for(doc: str | None) -> argparse.ArgumentParser:
    """The command line of one benchmark module: its docstring's first line and --quick."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter trials")
    return parser


def write_result(bench_id: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{bench_id.lower()}.json"
    payload = {"id": bench_id, **payload, "machine": machine_info()}
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=_jsonable) + "\n")
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | tuple):
        return list(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def run_child(
    args: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 600
) -> Any:
    """Run ``python -m <args>`` in a fresh process; its last stdout line is JSON."""
    completed = subprocess.run(
        [PYTHON, *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(
            f"benchmark child {' '.join(args)} failed with code {completed.returncode}:\n"
            f"{completed.stderr[-3000:]}"
        )
    return json.loads(lines[-1])


def fmt(value: float, digits: int = 3) -> str:
    if value != value:  # NaN
        return "n/a"
    return f"{value:.{digits}g}"
