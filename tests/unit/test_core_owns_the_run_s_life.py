"""Rules import-linter cannot state (they are about calls, not imports): the steps of a
run's life that the core owns are never taken by an orchestrator itself."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORCHESTRATORS = [ROOT / "providers" / "airflow_air", ROOT / "dagster_air"]

# The end of a try: the run's lines copied, the submission's keys deleted. Only the core's
# ``end_of_try_flow`` does both in an Airflow try. The calls allowed, each where it is made:
END_OF_TRY_CALLS = {"iter_run_logs", "finish", "afinish", "finish_flow"}
ALLOWED = {
    # A worker that waits follows the running run's lines as they come (no copy at the end).
    ("airflow_air/_logs.py", "LogStreamer._follow", "iter_run_logs"),
    # A repair the workspace refused: the run's keys go before it is submitted anew.
    ("airflow_air/workflow.py", "StageRerun._rerun", "finish"),
    # A Dagster step finishes its submissions (no try ends there: its runs end with it).
    ("dagster_air/_step.py", "AirStep._execute", "finish"),
    ("dagster_air/_step.py", "AirStep._interrupted", "finish"),
    # Pipes and the step log follow a running run's lines.
    ("dagster_air/_watch.py", "_follow_logs", "iter_run_logs"),
}


def _calls(path: Path) -> list[tuple[str, str, int]]:
    """(enclosing function, called attribute, line) of each call of an end-of-try step."""
    found = []

    def walk(node: ast.AST, where: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = [*where, child.name]
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr in END_OF_TRY_CALLS
            ):
                found.append((".".join(where), child.func.attr, child.lineno))
            walk(child, inner)

    walk(ast.parse(path.read_text(), str(path)), [])
    return found


def test_no_orchestrator_copies_a_run_s_lines_or_deletes_its_keys_at_the_end_of_a_try():
    found = []
    for package in ORCHESTRATORS:
        for path in sorted(package.rglob("*.py")):
            where = path.relative_to(package.parent).as_posix()
            for function, name, line in _calls(path):
                if (where, function, name) not in ALLOWED:
                    found.append(f"{where}:{line} {function} calls {name}")
    assert found == [], "the end of a try is the core's (air_runtime.end_of_try_flow)"


def _twins(source: str, filename: str) -> list[str]:
    """``x / ax`` for each function ``x`` defined beside an ``ax`` in ``source``."""
    tree = ast.parse(source, filename)
    names = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    return [f"{filename}: {name} / a{name}" for name in sorted(names) if f"a{name}" in names]


def test_no_sync_and_async_twins_in_the_airflow_provider():
    """A function ``x`` beside an ``ax`` doing the same from a trigger's loop: the step is
    written once, as a flow the core's two clients run, or as a lookup of Airflow's
    connections and variables that ``run_lookups`` and ``run_lookups_in_loop`` perform
    (``airflow_air._lookups``)."""
    twins = []
    for path in sorted((ROOT / "providers" / "airflow_air").rglob("*.py")):
        twins += _twins(path.read_text(), path.name)
    assert twins == []


def test_a_planted_twin_is_found():
    planted = """
class Hook:
    def prices(self): ...

    async def aprices(self): ...


def _connection(): ...


async def a_connection(): ...
"""
    assert _twins(planted, "hooks.py") == [
        "hooks.py: _connection / a_connection",
        "hooks.py: prices / aprices",
    ]
