"""Where an ``AirRunOperator``'s workload comes from: its rendered text, dict or file, a
relative file being looked up in the Dag folder and then ``template_searchpath`` (as
Airflow's template loader does). Imports nothing beyond the standard library until a
workload is loaded (the operators module imports it when a Dag file is parsed)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from air_runtime import Workload
    from airflow_air.operators import AirRunOperator

WORKLOAD_EXTENSIONS = (".yaml", ".yml")


def search_folders(task: AirRunOperator) -> list[str]:
    """Where a relative workload path is looked up: the Dag folder, then
    ``template_searchpath``."""
    roots: list[str] = []
    dag = task.dag if task.has_dag() else None
    if dag is not None:
        roots.append(dag.folder)
        searchpath = dag.template_searchpath or []
        roots.extend([searchpath] if isinstance(searchpath, str) else searchpath)
    return [str(root) for root in roots]


def workload_path(task: AirRunOperator) -> str | None:
    """The absolute path of the workload file, or None for text/dicts (or not found)."""
    path = task.workload_file
    if not path:
        return None
    if os.path.isabs(path):
        return path
    for root in search_folders(task):
        candidate = os.path.join(root, path)
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def load_task_workload(
    task: AirRunOperator,
    workload: Any = None,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
) -> Workload:
    """Validate the rendered workload (raises the core's ``WorkloadError``). ``workload`` /
    ``overrides`` default to the operator's (rendered) fields."""
    from air_runtime import load_workload

    source = task.workload if workload is None else workload
    overrides = task.overrides if workload is None else overrides
    path = workload_path(task)
    base_dir = os.path.dirname(path) if path is not None else None
    if isinstance(source, str) and source == task.workload_file:
        # Templating did not replace the path (e.g. rendering skipped): load the file.
        if path is not None:
            source = path
    elif isinstance(source, str) and source.endswith(WORKLOAD_EXTENSIONS):
        source = source + "\n"  # rendered text ending in ".yaml" must not look like a path
    # Rendered text is named by its file in messages; text given inline by the task.
    name = path or task.workload_file or f"{task.task_id}.workload"
    return load_workload(source, overrides or None, base_dir=base_dir, source_name=name)
