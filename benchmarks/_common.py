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


def _load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on Linux
        return []


def machine_info() -> dict[str, Any]:
    versions: dict[str, str] = {}
    for name in _PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            continue
    load = _load_average()
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


# Read when a benchmark's process starts, before it adds load of its own: what else ran.
LOAD_BEFORE = _load_average()

MET_RULE = (
    "met when more than half of the kept runs met the target (the median run meets it); "
    "each run's own verdict is its `met`"
)


# What the benchmarks write: not the code they measure.
_OUTPUTS = ("benchmarks/results", "docs/performance.md")


def git_commit(path: Path | None = None) -> str:
    """The checked-out commit (``+dirty`` when tracked files other than the benchmarks' own
    outputs differ: a run rewrites its result and plot before the next one starts), or, with
    ``path``, the commit that last changed that file."""
    if path is not None:
        found = subprocess.run(
            ["git", "log", "-1", "--format=%h", "--", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        return found.stdout.strip()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "diff", "--quiet", "HEAD", "--", ".", *(f":!{p}" for p in _OUTPUTS)],
        cwd=REPO,
        capture_output=True,
        check=False,
    ).returncode
    return f"{head}+dirty" if dirty else head


def kept_runs(path: Path) -> list[dict[str, Any]]:
    """The runs a result file keeps. A file written before runs were kept becomes its one run,
    dated by its machine record and attributed to the commit that stored it."""
    if not path.exists():
        return []
    stored = json.loads(path.read_text())
    if "runs" in stored:
        return list(stored["runs"])
    machine = stored.get("machine") or {}
    result = {k: v for k, v in stored.items() if k not in ("id", "machine")}
    return [
        {
            "date": machine.get("measured_at"),
            "commit": git_commit(path),
            "commit_is": "the commit that stored this result (recorded before runs were kept)",
            "load_before": None,
            "met": verdict(stored.get("met")),
            "machine": machine,
            "result": result,
        }
    ]


def verdict(met: Any) -> bool:
    """A result's ``met``: a bool, or one bool per part of the target (all must hold)."""
    if isinstance(met, dict):
        return bool(met) and all(verdict(value) for value in met.values())
    return met is True


def met_over_runs(runs: Sequence[dict[str, Any]]) -> bool:
    """``MET_RULE``."""
    return sum(verdict(run.get("met")) for run in runs) * 2 > len(runs)


def write_result(bench_id: str, payload: dict[str, Any]) -> Path:
    """Write this run's result beside every earlier run of the same file.

    The top-level fields are this run's (what summaries read); ``runs`` keeps every run with
    its date, commit, the load average before it started and its raw figures, and ``met`` is
    decided over all of them (``MET_RULE``). A result with ``partial`` (rows kept while a long
    run is measured) is replaced by the next write. A benchmark that keeps its runs itself passes
    ``runs``, ``met`` and ``met_rule``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{bench_id.lower()}.json"
    machine = machine_info()
    if "runs" in payload:
        record = {"id": bench_id, **payload, "machine": machine}
    else:
        run = {
            "date": machine["measured_at"],
            "commit": git_commit(),
            "load_before": LOAD_BEFORE,
            "met": verdict(payload.get("met")),
            "machine": machine,
            "result": payload,
        }
        earlier = kept_runs(path)
        if earlier and earlier[-1].get("result", {}).get("partial"):
            earlier.pop()  # the same run's rows kept while it was measured: this one follows
        runs = [*earlier, run]
        record = {
            "id": bench_id,
            **payload,
            "machine": machine,
            "runs": runs,
            "met_rule": MET_RULE,
            "met": met_over_runs(runs),
        }
    path.write_text(json.dumps(record, indent=2, sort_keys=False, default=_jsonable) + "\n")
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
