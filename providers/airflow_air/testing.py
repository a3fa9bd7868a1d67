"""Check every AI Runtime workload of a Dag folder before anything runs.

In a test of the Dag repository::

    from airflow_air.testing import validate_dag_workloads

    def test_workloads():
        validate_dag_workloads("dags/")

or from a shell: ``python -m airflow_air.testing dags/``.

Each ``AirRunOperator`` of each Dag (workflow stages included) has its templated fields
rendered the way the task renders them (the workload file found through the Dag folder and
``template_searchpath``, its ``overrides``, ``params`` from the Dag and the task), with the
core's sample context for the run's values (``air_runtime.sample_template_context``: ``ds``,
``run_id``...; other names render as ``sample``), then validated by the core as at run time.
Dag import errors are reported too. Nothing talks to a workspace.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from air_runtime import Workload
    from airflow_air.operators import AirRunOperator


class DagWorkloadError(ValueError):
    """Some workloads of the Dag folder are invalid; ``problems`` maps each Dag file or
    ``dag_id.task_id`` to its message."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        self.problems = dict(problems)
        lines = [f"{len(self.problems)} Dag task(s) or file(s) with problems:"]
        for where, message in self.problems.items():
            lines.append(f"{where}: {message}")
        super().__init__("\n".join(lines))


def _dag_bag(dag_folder: str) -> Any:
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # pragma: no cover - older Airflow 3 minors
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]
    return DagBag(dag_folder=dag_folder, safe_mode=False)


def _params(task: Any) -> dict[str, Any]:
    params = getattr(task, "params", None) or {}
    dump = getattr(params, "dump", None)
    return dict(dump() if callable(dump) else params)


def render_sample(task: AirRunOperator, context: Mapping[str, Any] | None = None) -> Workload:
    """``task``'s workload rendered with the sample context and validated (raises the
    core's ``WorkloadError`` or ``AirConfigurationError`` for a missing file)."""
    from air_runtime import sample_template_context, workload_template_environment

    extra: dict[str, Any] = {"dag": task.dag, "task": task, "params": _params(task)}
    extra.update(context or {})
    sample = sample_template_context(extra)
    env = workload_template_environment(task.get_template_env(task.dag), sample=True)
    rendered = {
        name: task.render_template(getattr(task, name), sample, env, set())  # type: ignore[arg-type]
        for name in ("workload", "overrides")
    }
    return task.load_workload(rendered["workload"], rendered["overrides"])


def validate_dag_workloads(
    dag_folder: str | os.PathLike[str], *, context: Mapping[str, Any] | None = None
) -> dict[str, Workload]:
    """Validate the workload of every ``AirRunOperator`` in the Dag files of ``dag_folder``.

    Returns the validated workloads by ``dag_id.task_id``; raises ``DagWorkloadError``
    listing every Dag file that does not import and every invalid workload (the file it
    came from, and the override key for a value an override set). ``context`` adds names to
    the sample context (``{"params": {"gpus": 16}}``).
    """
    from air_runtime import AirError
    from airflow_air.exceptions import AirConfigurationError
    from airflow_air.operators import AirRunOperator

    bag = _dag_bag(os.fspath(dag_folder))
    problems: dict[str, str] = {
        str(path): str(error).strip().splitlines()[-1] for path, error in bag.import_errors.items()
    }
    workloads: dict[str, Workload] = {}
    for dag_id in sorted(bag.dags):
        for task in bag.dags[dag_id].tasks:
            if not isinstance(task, AirRunOperator):
                continue
            where = f"{dag_id}.{task.task_id}"
            try:
                workloads[where] = render_sample(task, context)
            except (AirError, AirConfigurationError) as exc:
                problems[where] = str(exc)
            except Exception as exc:  # a template that fails with the sample values
                problems[where] = f"cannot render the workload: {type(exc).__name__}: {exc}"
    if problems:
        raise DagWorkloadError(problems)
    return workloads


def main(argv: list[str] | None = None) -> int:
    """``python -m airflow_air.testing DAG_FOLDER``: print each task's result; exit 1 on problems."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m airflow_air.testing",
        description="validate every AI Runtime workload of a Dag folder",
    )
    parser.add_argument("dag_folder")
    args = parser.parse_args(argv)
    try:
        workloads = validate_dag_workloads(args.dag_folder)
    except DagWorkloadError as exc:
        print(exc, file=sys.stderr)
        return 1
    for where in workloads:
        print(f"{where}: OK")
    if not workloads:
        print(f"{args.dag_folder}: no AirRunOperator tasks found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
