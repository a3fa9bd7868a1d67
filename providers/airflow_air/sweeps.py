"""A sweep of trials of mixed sizes, capped in accelerators.

Airflow takes one ``pool_slots`` for every task instance of a mapped task, so a mapped
sweep cannot weigh each trial by its accelerators. ``mapped_by_size`` splits one list of
trials into one mapped ``AirRunOperator`` per accelerator count, each holding that many
slots of ``pool`` per trial: with the pool sized in accelerators (``python -m
airflow_air.pools POOL --accelerators``), the scheduler never starts trials asking for more
accelerators than the GPU pool reserves, and none waits at the platform for capacity::

    trials = [{"compute.num_accelerators": 1, "env_variables.LR": "0.1"},
              {"compute.num_accelerators": 2, "env_variables.LR": "0.01"}, ...]
    by_size = mapped_by_size("trial", workload=WORKLOAD, trials=trials, pool="gpu_sweep")
    by_size.values() >> pick_best()

Imports nothing heavy: it runs when the Dag file is parsed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_air._accelerators import parse_time_accelerators


def _dag_folders() -> list[str]:
    """The folders a relative workload file is looked up in: the Dag being defined's."""
    try:
        from airflow.sdk.definitions._internal.contextmanager import DagContext
    except ImportError:  # pragma: no cover - another Task SDK layout
        return []
    dag = DagContext.get_current()
    if dag is None:
        return []
    searchpath = dag.template_searchpath or []
    return [str(dag.folder), *([searchpath] if isinstance(searchpath, str) else searchpath)]


def trials_by_size(
    workload: Any, trials: Sequence[Mapping[str, Any]], folders: Sequence[str] = ()
) -> dict[int, list[Mapping[str, Any]]]:
    """``trials`` (each an ``overrides`` mapping) grouped by the accelerators each asks for,
    in their order; a ``ValueError`` naming a trial whose count is not known at parse time."""
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for index, trial in enumerate(trials):
        count = parse_time_accelerators(workload, trial, folders)
        if count is None:
            raise ValueError(
                f"trial {index} ({dict(trial)!r}): its compute.num_accelerators is not known "
                "when the Dag file is parsed (templated or missing); give it literally"
            )
        groups.setdefault(count, []).append(trial)
    return dict(sorted(groups.items()))


def mapped_by_size(
    task_id: str,
    *,
    workload: Any,
    trials: Sequence[Mapping[str, Any]],
    pool: str,
    **partial_kwargs: Any,
) -> dict[int, Any]:
    """One mapped ``AirRunOperator`` per accelerator count among ``trials``
    (``<task_id>_<n>_accelerators``, expanded over the trials of that size as ``overrides``),
    each trial holding ``n`` slots of ``pool``. ``partial_kwargs`` go to every ``partial``.
    Returns the mapped tasks by accelerator count."""
    from airflow_air.operators import AirRunOperator

    if "pool_slots" in partial_kwargs:
        raise ValueError("mapped_by_size sets pool_slots from each trial's accelerators")
    groups = trials_by_size(workload, trials, _dag_folders())
    return {
        count: AirRunOperator.partial(
            task_id=f"{task_id}_{count}_accelerators",
            workload=workload,
            pool=pool,
            pool_slots=count,
            **partial_kwargs,
        ).expand(overrides=[dict(t) for t in group])
        for count, group in groups.items()
    }
