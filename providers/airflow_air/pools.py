"""Keep a sweep within a GPU pool: an Airflow pool with one slot per accelerator (or per
trial) the GPU pool reserves.

A hyperparameter sweep (``AirRunOperator.partial(...).expand(...)``) starts every trial at
once unless something caps it. Two caps, both counted by the scheduler before a trial's run
is submitted:

- ``max_active_tis_per_dagrun`` (or ``max_active_tis_per_dag``) on the operator: at most that
  many trials of one sweep (of all its runs) at a time. Deferred tasks count as active
  (Airflow 3.2 and later), so a trial waiting in the triggerer keeps its place.
- an Airflow pool sized from the team's GPU pool (the reservation ``airo pools get`` shows),
  with ``include_deferred`` so a trial waiting in the triggerer holds its slots. Every sweep
  using the pool shares the cap, across Dag runs and Dags. In accelerators (``--accelerators``:
  ``slots = reserved accelerators``), each task holding ``pool_slots="accelerators"`` (its
  workload's count; one mapped task per size, ``airflow_air.sweeps.mapped_by_size``), so
  trials of mixed sizes never ask for more than the reservation; or in trials of one size
  (``slots = reserved accelerators // accelerators per trial``). ``size_airflow_pool`` reads
  the GPU pool through the core client and creates or resizes the Airflow pool; run it where
  the metadata database is reachable (a deployment's setup, ``python -m airflow_air.pools``, a
  test), not in a task: Airflow 3 tasks have no database access.

    python -m airflow_air.pools gpu_sweep --gpu-pool team-a10 --accelerators
    python -m airflow_air.pools gpu_sweep --gpu-pool team-a10 --accelerators-per-trial 1

The slot count is the reservation, not what is idle right now: other work on the GPU pool
makes trials queue at the platform (``waiting for GPU capacity`` in the task log) rather than
fail. Resize the Airflow pool when the reservation changes.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any

from airflow_air._lookups import BlockingCall, Lookup
from airflow_air.exceptions import AirConfigurationError
from airflow_air.hooks import AirHook

if TYPE_CHECKING:
    from air_runtime import GpuPool

DEFAULT_CONN_ID = AirHook.default_conn_name


class MetadataDatabaseHook(AirHook):
    """``AirHook`` for commands that run beside the scheduler: outside a task the Task SDK
    finds a connection only in the environment and the secrets backends, while a deployment's
    own connections are in its metadata database, which such a command may read."""

    def connection_lookup(self) -> Lookup[Any]:
        try:
            return (yield from super().connection_lookup())
        except AirConfigurationError:
            from airflow.models.connection import Connection

            read = functools.partial(
                Connection.get_connection_from_secrets, self.databricks_conn_id
            )
            try:
                return (yield BlockingCall(read))
            except Exception:
                pass
            raise


def trial_slots(gpu_pool: GpuPool, accelerators_per_trial: int) -> int:
    """How many trials of ``accelerators_per_trial`` accelerators the pool's reservation
    holds at once; a ``ValueError`` naming the pool when it cannot hold one."""
    if accelerators_per_trial < 1:
        raise ValueError(f"accelerators_per_trial must be at least 1, got {accelerators_per_trial}")
    slots = gpu_pool.reserved_accelerators // accelerators_per_trial
    if slots < 1:
        raise ValueError(
            f"GPU pool {gpu_pool.pool_id} reserves {gpu_pool.reserved_accelerators} "
            f"{gpu_pool.accelerator_type} accelerators, fewer than one trial's "
            f"{accelerators_per_trial}"
        )
    return slots


def accelerator_slots(gpu_pool: GpuPool) -> int:
    """One slot per accelerator the pool reserves (for tasks holding
    ``pool_slots="accelerators"``); a ``ValueError`` naming the pool when it reserves none."""
    if gpu_pool.reserved_accelerators < 1:
        raise ValueError(f"GPU pool {gpu_pool.pool_id} reserves no accelerators")
    return gpu_pool.reserved_accelerators


def size_airflow_pool(
    airflow_pool: str,
    *,
    gpu_pool_id: str | None,
    accelerators_per_trial: int | None,
    databricks_conn_id: str = DEFAULT_CONN_ID,
) -> int:
    """Create or resize the Airflow pool ``airflow_pool`` from the GPU pool ``gpu_pool_id``
    (None: the workspace's only pool), counting deferred tasks: ``trial_slots`` for
    ``accelerators_per_trial``, else (None) ``accelerator_slots``. Returns the slots. Needs
    the metadata database (see the module docstring)."""
    from airflow.models.pool import Pool

    with MetadataDatabaseHook(databricks_conn_id).get_client() as client:
        gpu_pool = client.get_gpu_pool(gpu_pool_id)
    if accelerators_per_trial is None:
        slots = accelerator_slots(gpu_pool)
        unit = "one slot per accelerator"
    else:
        slots = trial_slots(gpu_pool, accelerators_per_trial)
        unit = f"{accelerators_per_trial} per trial"
    Pool.create_or_update_pool(
        name=airflow_pool,
        slots=slots,
        description=(
            f"GPU pool {gpu_pool.pool_id}: {gpu_pool.reserved_accelerators} "
            f"{gpu_pool.accelerator_type} accelerators, {unit}"
        ),
        include_deferred=True,
    )
    return slots


def main(argv: list[str] | None = None) -> int:
    """``python -m airflow_air.pools AIRFLOW_POOL --gpu-pool ID (--accelerators |
    --accelerators-per-trial N)``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m airflow_air.pools",
        description="size an Airflow pool from a Databricks AI Runtime GPU pool",
    )
    parser.add_argument("airflow_pool", help="the Airflow pool the sweep's tasks name")
    parser.add_argument("--gpu-pool", help="the GPU pool id (default: the workspace's only pool)")
    unit = parser.add_mutually_exclusive_group(required=True)
    unit.add_argument(
        "--accelerators",
        action="store_true",
        help="one slot per reserved accelerator (tasks with pool_slots='accelerators')",
    )
    unit.add_argument(
        "--accelerators-per-trial", type=int, help="one slot per trial of this many accelerators"
    )
    parser.add_argument("--conn-id", default=DEFAULT_CONN_ID, help="the databricks connection")
    args = parser.parse_args(argv)
    from air_runtime import AirError

    try:
        slots = size_airflow_pool(
            args.airflow_pool,
            gpu_pool_id=args.gpu_pool,
            accelerators_per_trial=args.accelerators_per_trial,
            databricks_conn_id=args.conn_id,
        )
    except (ValueError, AirError) as exc:  # no such pool, several pools, too small
        print(f"error: {exc}", file=sys.stderr)
        return 2
    what = "accelerators" if args.accelerators_per_trial is None else "trials"
    print(f"Airflow pool {args.airflow_pool}: {slots} slots, in {what} (deferred tasks count)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
