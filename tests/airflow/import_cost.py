"""Parse-time cost of the operator modules (target P2), measured side by side.

    .venv/bin/python tests/airflow/import_cost.py [runs]

For each module: the median over fresh processes of (time to import ``airflow.sdk`` and then
the module) minus (time to import ``airflow.sdk`` alone), both measured inside the process.
Prints JSON. Not a test: wall-clock numbers only mean something side by side.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

MODULES = {
    "airflow_air.operators": "from airflow_air.operators import AirRunOperator",
    "airflow.providers.databricks.operators.databricks": (
        "from airflow.providers.databricks.operators.databricks import DatabricksSubmitRunOperator"
    ),
}
PROBE = (
    "import time; t0 = time.perf_counter(); import airflow.sdk; t1 = time.perf_counter(); "
    "{stmt}; t2 = time.perf_counter(); print(t1 - t0, t2 - t1)"
)


def measure(stmt: str, runs: int) -> dict[str, float]:
    base, extra = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(stmt=stmt)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        base.append(float(out[-2]))
        extra.append(float(out[-1]))
    return {
        "import_airflow_sdk_ms": round(statistics.median(base) * 1000, 1),
        "added_ms_median": round(statistics.median(extra) * 1000, 1),
        "added_ms_min": round(min(extra) * 1000, 1),
    }


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    print(json.dumps({name: measure(stmt, runs) for name, stmt in MODULES.items()}, indent=2))


if __name__ == "__main__":
    main()
