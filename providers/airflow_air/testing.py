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

A mapped task whose trials ask for different accelerator counts while naming an Airflow
pool is a problem: Airflow gives every map index the same ``pool_slots``, so the pool and
the sizes cannot both hold (``airflow_air.sweeps.mapped_by_size`` builds one mapped task per
size instead).

Mapped tasks (``AirRunOperator.partial(...).expand(...)`` / ``.expand_kwargs(...)``) are
checked once per expanded value, as Airflow expands them (``dag_id.task_id[<map index>]``):
every element of a literal list, every item of a literal dict, the product of several
expanded arguments. Values that come from an upstream task's XCom are only known at run
time: such a task is reported as a note (and its ``partial()`` workload is checked when it
is complete without them), and the task checks its workload when it runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
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


@dataclass
class DagWorkloadReport:
    """What ``check_dag_workloads`` found: the valid workloads (by ``dag_id.task_id``, with
    ``[map index]`` for a mapped task), the problems, and notes on what only runs can check."""

    workloads: dict[str, Workload] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def _air_task_kind(task: Any) -> str | None:
    """``"task"`` for an AirRunOperator, ``"mapped"`` for a mapped one, else None."""
    from airflow_air.operators import AirRunOperator

    if isinstance(task, AirRunOperator):
        return "task"
    operator_class = getattr(task, "operator_class", None)
    if isinstance(operator_class, type) and issubclass(operator_class, AirRunOperator):
        return "mapped"
    return None


def _expanded_operators(task: Any) -> tuple[list[tuple[int, Any]], list[str]]:
    """The operators a mapped task expands into at parse time, with their map indexes, and
    the names of the expanded arguments that come from XCom (then no operator)."""
    from types import SimpleNamespace

    expand_input = task.expand_input  # what `.expand(...)` / `.expand_kwargs(...)` was given
    value = expand_input.value
    items = value.items() if isinstance(value, dict) else [("expand_kwargs", value)]
    from_xcom = [name for name, arg in items if hasattr(arg, "resolve")]
    if not from_xcom and not isinstance(value, dict):  # expand_kwargs([...]) of literals
        from_xcom = [f"expand_kwargs[{i}]" for i, v in enumerate(value) if hasattr(v, "resolve")]
    if from_xcom:
        return [], from_xcom
    import math

    # Airflow's count: the product of the lengths of expand()'s arguments, or the length of
    # expand_kwargs()'s list.
    count = math.prod(len(v) for v in value.values()) if isinstance(value, dict) else len(value)
    operators = []
    for map_index in range(count):
        resolved, _ = expand_input.resolve({"ti": SimpleNamespace(map_index=map_index)})
        operators.append((map_index, task.unmap(resolved)))
    return operators, []


def _check(task: Any, where: str, context: Mapping[str, Any] | None, report: Any) -> None:
    from air_runtime import AirError
    from airflow_air.exceptions import AirConfigurationError

    try:
        report.workloads[where] = render_sample(task, context)
    except (AirError, AirConfigurationError) as exc:
        report.problems[where] = str(exc)
    except Exception as exc:  # a template that fails with the sample values
        report.problems[where] = f"cannot render the workload: {type(exc).__name__}: {exc}"


def _check_mapped(
    task: Any, where: str, context: Mapping[str, Any] | None, report: DagWorkloadReport
) -> None:
    try:
        operators, from_xcom = _expanded_operators(task)
    except Exception as exc:  # Airflow would fail to expand it the same way
        report.problems[where] = f"cannot expand the mapped task: {type(exc).__name__}: {exc}"
        return
    if from_xcom:
        names = ", ".join(from_xcom)
        note = f"expanded from XCom at run time ({names}): each value is checked when its task runs"
        partial = dict(task.partial_kwargs)
        if "workload" in partial and "workload" not in from_xcom:
            try:
                base = task.unmap({})
            except Exception:
                base = None
            if base is not None:
                if "overrides" in from_xcom:
                    base.overrides = None
                _check(base, where, context, report)
                if where in report.workloads:
                    note += "; the partial() workload without them is valid"
        report.notes[where] = note
        return
    if not operators:
        report.notes[where] = "expands to no task instances"
    for map_index, operator in operators:
        _check(operator, f"{where}[{map_index}]", context, report)
    _check_pool_weight(task, where, [f"{where}[{i}]" for i, _ in operators], report)


def _check_pool_weight(task: Any, where: str, trials: list[str], report: DagWorkloadReport) -> None:
    """A mapped sweep holds one ``pool_slots`` per trial whatever its size (Airflow takes one
    value for every map index): with trials of several sizes in a pool, either the pool is
    sized by the largest trial (GPUs idle) or trials ask the GPU pool for more than it
    reserves and wait at the platform. Said here, with what holds both."""
    pool = getattr(task, "pool", None)
    slots = getattr(task, "pool_slots", 1)
    sizes = sorted(
        {report.workloads[t].compute.num_accelerators for t in trials if t in report.workloads}
    )
    fix = "build one mapped task per size with airflow_air.sweeps.mapped_by_size"
    if slots == "accelerators":
        report.problems[where] = (
            "pool_slots='accelerators' cannot weigh a mapped task's trials (Airflow takes one "
            f"pool_slots for every map index); {fix}"
        )
    elif pool and pool != "default_pool" and len(sizes) > 1:
        report.problems[where] = (
            f"its trials ask for {' and '.join(map(str, sizes))} accelerators but each holds "
            f"{slots} slot(s) of pool {pool!r}: a pool sized in accelerators would be "
            f"overrun, one sized in trials leaves GPUs idle; {fix}"
        )


def check_dag_workloads(
    dag_folder: str | os.PathLike[str], *, context: Mapping[str, Any] | None = None
) -> DagWorkloadReport:
    """Validate the workload of every ``AirRunOperator`` in the Dag files of ``dag_folder``,
    mapped ones once per expanded value; see ``validate_dag_workloads``."""
    bag = _dag_bag(os.fspath(dag_folder))
    report = DagWorkloadReport()
    for path, error in bag.import_errors.items():
        report.problems[str(path)] = str(error).strip().splitlines()[-1]
    for dag_id in sorted(bag.dags):
        for task in bag.dags[dag_id].tasks:
            kind = _air_task_kind(task)
            where = f"{dag_id}.{task.task_id}"
            if kind == "task":
                _check(task, where, context, report)
            elif kind == "mapped":
                _check_mapped(task, where, context, report)
    return report


def validate_dag_workloads(
    dag_folder: str | os.PathLike[str], *, context: Mapping[str, Any] | None = None
) -> dict[str, Workload]:
    """Validate the workload of every ``AirRunOperator`` in the Dag files of ``dag_folder``.

    Returns the validated workloads by ``dag_id.task_id`` (``dag_id.task_id[i]`` for each
    expanded value of a mapped task); raises ``DagWorkloadError`` listing every Dag file that
    does not import and every invalid workload (the file it came from, and the override key
    for a value an override set). ``context`` adds names to the sample context
    (``{"params": {"gpus": 16}}``).
    """
    report = check_dag_workloads(dag_folder, context=context)
    if report.problems:
        raise DagWorkloadError(report.problems)
    return report.workloads


def main(argv: list[str] | None = None) -> int:
    """``python -m airflow_air.testing DAG_FOLDER``: print each task's result; exit 1 on problems."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m airflow_air.testing",
        description="validate every AI Runtime workload of a Dag folder",
    )
    parser.add_argument("dag_folder")
    args = parser.parse_args(argv)
    report = check_dag_workloads(args.dag_folder)
    for where, note in report.notes.items():
        print(f"{where}: note: {note}")
    if report.problems:
        print(DagWorkloadError(report.problems), file=sys.stderr)
        return 1
    for where in report.workloads:
        print(f"{where}: OK")
    if not report.workloads and not report.notes:
        print(f"{args.dag_folder}: no AirRunOperator tasks found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
