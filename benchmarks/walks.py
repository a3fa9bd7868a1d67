"""The walk of one submission through an orchestrator package, traced.

A reader following one run through the code moves from file to file; this counts the moves.
Two walks, each against the local workspace:

- **airflow**: one ``AirRunOperator`` task through ``execute`` under ``dag.test()``;
- **dagster**: one step materializing an AI Runtime asset (``dg.materialize``).

The walk follows one hook the orchestrator calls (``AirRunOperator.execute``; the asset's
body) until it returns. A *stop* is the first call of a function of the package from a frame
in another of its files; calls into one file that follow each other with no stop elsewhere
between them are one stop (a hook built and asked for its client, ``AirHook(c).get_client()``,
is one visit to ``hooks.py``); a *return* is a stop in a file the walk had already entered.
Repeated calls of the same function from the same file count once, so a loop over log lines
is one stop. Only the thread that runs the task or step is traced (the wait's background loop is
the core's). The goal of issue 24: each file entered once, in order (returns = 0).

    python -m benchmarks.walks [--show]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks._common import REPO, RESULTS

PACKAGES = {
    "airflow": REPO / "providers" / "airflow_air",
    "dagster": REPO / "dagster_air",
}

WORKLOAD = textwrap.dedent(
    """\
    experiment_name: walk
    compute:
      accelerator_type: GPU_1xA10
      num_accelerators: 1
    max_retries: 0
    command: echo walked
    """
)


class Walk:
    """Records the stops of the calling thread in the files under ``root``."""

    def __init__(self, root: Path, start: str) -> None:
        self.root = str(root) + os.sep
        self.start = start  # the function of ``root`` the walk follows (its qualname)
        self.stops: list[tuple[str, str, bool]] = []  # (file, function, a return)
        self.calls = 0  # first calls into another file, before consecutive ones are merged
        self.entries: list[tuple[str, str]] = []  # hooks the orchestrator called
        self._seen: set[tuple[str, str, str]] = set()
        self._entered: set[str] = set()
        self._thread = threading.get_ident()

    def _within_start(self, frame: FrameType | None) -> bool:
        while frame is not None:
            code = frame.f_code
            if code.co_qualname == self.start and code.co_filename.startswith(self.root):
                return True
            frame = frame.f_back
        return False

    def _ours(self, frame: FrameType | None) -> str | None:
        while frame is not None:
            path = frame.f_code.co_filename
            if path.startswith(self.root):
                return path[len(self.root) :]
            frame = frame.f_back
        return None

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call" or threading.get_ident() != self._thread:
            return
        path = frame.f_code.co_filename
        if not path.startswith(self.root):
            return
        if not self._within_start(frame):
            return
        here = path[len(self.root) :]
        caller = self._ours(frame.f_back)
        if caller == here or frame.f_code.co_name.startswith("<"):  # lambdas, comprehensions
            return
        name = frame.f_code.co_qualname
        edge = (caller or "", here, name)
        if edge in self._seen:
            return
        self._seen.add(edge)
        if caller is None:  # the orchestrator calling the hook: where the walk starts
            self.entries.append((here, name))
        else:
            self.calls += 1
            if self.stops and self.stops[-1][0] == here:  # the same visit goes on
                self.stops[-1] = (here, f"{self.stops[-1][1]}, {name}", self.stops[-1][2])
            else:
                self.stops.append((here, name, here in self._entered))
        self._entered.add(here)

    def run(self, body: Callable[[], Any]) -> Any:
        sys.setprofile(self.profile)
        try:
            return body()
        finally:
            sys.setprofile(None)

    def summary(self) -> dict[str, Any]:
        return {
            "stops": len(self.stops),
            "returns": sum(1 for s in self.stops if s[2]),
            "files": len(self._entered),
            "calls": self.calls,
            "entries": [f"{here}:{name}" for here, name in self.entries],
            "sequence": [
                f"{here}:{name}" + (" (return)" if again else "")
                for here, name, again in self.stops
            ],
        }


def _airflow_walk(host: str, token: str, tmp: Path) -> dict[str, Any]:
    # Airflow reads its configuration when first imported.
    os.environ.update(
        {
            "AIRFLOW_HOME": str(tmp),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp / 'airflow.db'}",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__AIR__DEFAULT_POLL_INTERVAL": "0.2",
            "AIRFLOW__AIR__TRIGGER_FIRST_POLL_DELAY": "0.1",
            "AIRFLOW_CONN_DATABRICKS_DEFAULT": json.dumps(
                {"conn_type": "databricks", "host": host, "password": token}
            ),
        }
    )
    # dag.test() runs a Dag of a bundle: the walk's Dag file in the dags folder.
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "walk.yaml").write_text(WORKLOAD)
    (dags / "walk.py").write_text(
        textwrap.dedent(
            """\
            import pendulum
            from airflow.sdk import DAG
            from airflow_air.operators import AirRunOperator

            with DAG("walk", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
                AirRunOperator(task_id="train", workload="walk.yaml")
            """
        )
    )
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    from airflow.utils.db import initdb

    initdb()
    spec = importlib.util.spec_from_file_location("walk_dag", dags / "walk.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = module.dag
    walk = Walk(PACKAGES["airflow"], "AirRunOperator.execute")
    run = walk.run(dag.test)
    assert str(run.state) in {"success", "DagRunState.SUCCESS"}, run.state
    return walk.summary()


def _dagster_walk(host: str, token: str, tmp: Path) -> dict[str, Any]:
    import dagster as dg

    from dagster_air import AirStage, AirWorkspace, build_air_assets

    workload = tmp / "walk.yaml"
    workload.write_text(WORKLOAD)
    assets = build_air_assets(AirStage(key="walk", workload=str(workload)))
    resource = AirWorkspace(host=host, token=token, poll_interval=0.2)
    walk = Walk(PACKAGES["dagster"], "air_assets.<locals>._air_assets")
    with dg.instance_for_test() as instance:
        result = walk.run(
            lambda: dg.materialize(
                [assets], resources={"air_workspace": resource}, instance=instance
            )
        )
    assert result.success
    return walk.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="?", choices=["airflow", "dagster"], default=None)
    parser.add_argument("--show", action="store_true", help="print each stop")
    args = parser.parse_args()
    from air_runtime.local import start_local_workspace

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workspace = start_local_workspace(data_dir=Path(tmp) / "workspace")
        try:
            for which, walk in (("airflow", _airflow_walk), ("dagster", _dagster_walk)):
                if args.which not in (None, which):
                    continue
                Path(tmp, which).mkdir()
                results[which] = walk(workspace.host, workspace.token, Path(tmp) / which)
        finally:
            workspace.stop()
    for which, summary in results.items():
        print(
            f"{which}: {summary['stops']} stops, {summary['returns']} returns, "
            f"{summary['files']} files, {len(summary['entries'])} entries"
        )
        if args.show:
            for line in summary["entries"]:
                print("    entry", line)
            for line in summary["sequence"]:
                print("   ", line)
    if args.which is None:
        (RESULTS / "walks.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
