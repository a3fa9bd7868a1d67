"""Accelerator caps: a Dagster pool counted in accelerators (``accelerator_pool``).

Dagster's pools count steps, one slot each (dagster#12299, #12470, #34092), so a pool cannot
keep 1- and 2-accelerator partitions of one asset within a GPU pool's reservation. Here a
step holds **one slot of its ``accelerator_pool`` per accelerator** its remote runs ask for at
once, taken through the instance's concurrency slots (the same tables, queue and UI page as
Dagster's pools) before it submits, and given back once its runs have ended.

- *All or nothing.* A step takes its N slots while holding the pool's admission slot
  (``<pool>/admission``, one slot): only one step at a time queues for slots of the pool, so
  two steps never each hold part of what they need and wait for each other. Steps are
  admitted in the order they asked (Dagster's queue: priority, then time): a 2-accelerator
  step is not passed over forever by 1-accelerator ones, at the price of a 1-accelerator step
  waiting behind it while one slot is free.
- *Where it waits.* In the step, before anything is submitted: the platform never sees a run
  it cannot start. Each check reads the step's own queue entry in the instance's database
  (never the workspace), the first after a second, then less often, up to every
  ``MAX_CHECK_S`` (Dagster's own pool wait grows to 15 s).
- *Size.* A pool without a limit is sized on first use from the GPU pool's reservation (the
  workloads' ``compute.pool_id``, else the workspace's only pool); set it yourself
  (``dagster instance concurrency set <pool> N``) to keep room for other work.
- *A range larger than the pool.* A range run (``BackfillPolicy.single_run()``) whose
  partitions together ask for more accelerators than the pool has is not refused: its
  partitions are queued in lanes within the one run (``queue_in_lanes``), a partition
  starting once the one before it in its lane has ended, whatever its result, so the run
  never holds more than the pool's slots. One submission still, each partition its own task.
- *Cleanup.* Slots are given back when the step ends, however it ends. Slots and queue
  entries of a Dagster run that has ended (its worker died) are given back by a step waiting
  for them at its first check and every check after, as Dagster's run monitoring does
  (``free_slots_after_run_end_seconds``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dagster as dg
from dagster._core.storage.dagster_run import FINISHED_STATUSES

from air_runtime import Workload

if TYPE_CHECKING:  # the plan's module imports this one through the workflow's
    from ._plan import PlannedRun, StepPlan, TaskRow

ADMISSION_SUFFIX = "/admission"
FIRST_CHECK_S = 1.0
MAX_CHECK_S = 10.0
_GROWTH = 1.5
# Larger groups of dependent tasks are counted as if every task ran at once.
_EXACT_PEAK_TASKS = 16


def admission_pool(pool: str) -> str:
    return f"{pool}{ADMISSION_SUFFIX}"


def peak_accelerators(tasks: Mapping[str, tuple[int, Sequence[str]]]) -> int:
    """The most accelerators a run's tasks (task key -> (accelerators, task keys it depends
    on)) hold at once: a task starts once those it depends on have ended, so tasks on one
    line of dependencies never overlap. Independent groups (a range run's partitions) add up."""
    parents = {k: [d for d in deps if d in tasks] for k, (_, deps) in tasks.items()}
    ancestors: dict[str, set[str]] = {}

    def ancestors_of(key: str) -> set[str]:
        if key not in ancestors:
            ancestors[key] = set()  # a cycle ends here (the plan refuses them anyway)
            found: set[str] = set()
            for parent in parents[key]:
                found |= {parent, *ancestors_of(parent)}
            ancestors[key] = found
        return ancestors[key]

    for key in tasks:
        ancestors_of(key)
    total = 0
    for group in _components(parents):
        weight = {k: tasks[k][0] for k in group}
        if len(group) > _EXACT_PEAK_TASKS:
            total += sum(weight.values())
            continue
        total += _heaviest_antichain(
            group, weight, lambda a, b: a in ancestors[b] or b in ancestors[a]
        )
    return total


def queue_in_lanes(groups: Sequence[tuple[str, int]], limit: int) -> list[list[str]] | None:
    """Lanes of ``groups`` (a range run's partitions, each with the most accelerators its own
    tasks hold at once), run one after another within a lane and side by side across lanes,
    so that together they never hold more than ``limit``: the sum of each lane's largest
    group. The largest groups open lanes while they fit; each other group joins the lane of
    at least its size holding the fewest groups. Within a lane, groups keep their order.
    None when a group alone holds more than ``limit``."""
    if any(size > limit for _, size in groups):
        return None
    order = {name: i for i, (name, _) in enumerate(groups)}
    widths: list[int] = []
    lanes: list[list[str]] = []
    for name, size in sorted(groups, key=lambda g: (-g[1], order[g[0]])):
        if sum(widths) + size <= limit:
            widths.append(size)
            lanes.append([name])
            continue
        fits = [i for i, width in enumerate(widths) if width >= size]
        lanes[min(fits, key=lambda i: (len(lanes[i]), i))].append(name)
    return [sorted(lane, key=order.__getitem__) for lane in lanes]


def _components(parents: Mapping[str, Sequence[str]]) -> list[list[str]]:
    links: dict[str, set[str]] = {k: set() for k in parents}
    for key, ps in parents.items():
        for parent in ps:
            links[key].add(parent)
            links[parent].add(key)
    seen: set[str] = set()
    groups = []
    for start in parents:
        if start in seen:
            continue
        group, frontier = [], [start]
        seen.add(start)
        while frontier:
            key = frontier.pop()
            group.append(key)
            for other in links[key] - seen:
                seen.add(other)
                frontier.append(other)
        groups.append(sorted(group))
    return groups


def _heaviest_antichain(
    keys: list[str], weight: Mapping[str, int], related: Callable[[str, str], bool]
) -> int:
    best = 0

    def extend(start: int, chosen: list[str], total: int) -> None:
        nonlocal best
        best = max(best, total)
        for i in range(start, len(keys)):
            key = keys[i]
            if not any(related(key, c) for c in chosen):
                extend(i + 1, [*chosen, key], total + weight[key])

    extend(0, [], 0)
    return best


def gpu_pools_of(workloads: Iterable[Workload]) -> set[str | None]:
    """The GPU pools the workloads name (None: the workspace's only pool)."""
    return {w.compute.pool_id for w in workloads}


@dataclass
class AcceleratorClaim:
    """The slots one step holds of its accelerator pool (see the module docstring)."""

    instance: dg.DagsterInstance
    pool: str
    run_id: str
    step_key: str
    count: int
    log: dg.DagsterLogManager
    sleep: Callable[[float], None] = time.sleep
    held: list[tuple[str, str]] = field(default_factory=list)  # (pool, entry) claimed or queued
    waited_s: float = 0.0

    @property
    def entries(self) -> list[str]:
        return [f"{self.step_key}[accelerator {i + 1}/{self.count}]" for i in range(self.count)]

    def acquire(self, limit: int) -> None:
        """Wait for ``count`` slots of the pool's ``limit``, all at once. Raises ``dg.Failure``
        when the pool can never hold them."""
        storage = self.instance.event_log_storage
        if self.count > limit:
            raise dg.Failure(
                description=(
                    f"this step's runs ask for {self.count} accelerators at once, more than "
                    f"the {limit} slots of accelerator pool {self.pool}: it would never be "
                    "admitted (give the pool more slots, or the workload fewer accelerators)"
                ),
                allow_retries=False,
            )
        gate = admission_pool(self.pool)
        if storage.get_concurrency_info(gate).slot_count != 1:
            self._set_first_limit(gate, 1)
        started = time.monotonic()
        # Entries of their own: Dagster frees a step's slots by (run, step key), and the
        # step's own op pool (``pool=``) holds one under the step key itself.
        turn = f"{self.step_key}[admission]"
        self._wait(gate, turn, "its turn")
        try:
            for entry in self.entries:
                self._wait(self.pool, entry, f"{self.count} accelerators")
        finally:
            self._free(gate, turn)
        self.waited_s = time.monotonic() - started
        waited = f" after waiting {self.waited_s:.0f}s" if self.waited_s >= 1 else ""
        self.log.info(
            f"holding {self.count} of the {limit} slots of accelerator pool {self.pool}{waited}"
        )

    def release(self) -> None:
        """Give back every slot and queue entry (idempotent)."""
        for pool, entry in list(reversed(self.held)):
            self._free(pool, entry)

    def limit(self, size: Callable[[], tuple[int, str]]) -> int:
        """The pool's slots; ``size()`` gives (slots, where from) for a pool without a limit,
        which then gets that one."""
        info = self.instance.event_log_storage.get_concurrency_info(self.pool)
        if info.limit is not None or info.slot_count:
            return info.limit if info.limit is not None else info.slot_count
        slots, source = size()
        theirs = self._set_first_limit(self.pool, slots)
        if theirs is not None:
            return theirs
        self.log.info(
            f"accelerator pool {self.pool} had no limit: {slots} slots, one per accelerator "
            f"{source} reserves (change it with dagster instance concurrency set)"
        )
        return slots

    def _set_first_limit(self, pool: str, slots: int) -> int | None:
        """Give ``pool`` its first limit: None when this step set it, else the limit a step
        of another run set first (Dagster's storage reads, then inserts the limit's row, so
        two steps starting together can both insert: the second one fails)."""
        storage = self.instance.event_log_storage
        try:
            storage.set_concurrency_slots(pool, slots)
        except Exception:
            info = storage.get_concurrency_info(pool)
            if info.limit is None:
                raise
            return info.limit
        return None

    def _wait(self, pool: str, entry: str, what: str) -> None:
        storage = self.instance.event_log_storage
        self.held.append((pool, entry))
        interval = FIRST_CHECK_S
        told = False
        while not storage.claim_concurrency_slot(pool, self.run_id, entry).is_claimed:
            # Slots a dead run still holds come back at once, not once the wait has grown.
            if self._free_ended_runs(pool):
                continue
            if not told:
                told = True
                self.log.info(
                    f"waiting for {what} of accelerator pool {self.pool} "
                    f"({self._holders(pool)}) before submitting"
                )
            self.sleep(interval)
            interval = min(interval * _GROWTH, MAX_CHECK_S)

    def _holders(self, pool: str) -> str:
        """Who holds the pool's slots, this step's own run left out."""
        info = self.instance.event_log_storage.get_concurrency_info(pool)
        theirs = [s for s in info.claimed_slots if s.run_id != self.run_id]
        mine = len(info.claimed_slots) - len(theirs)
        held = f"; this step holds {mine}" if mine else ""
        if not theirs:
            return f"{info.slot_count} slots{held}"
        runs = ", ".join(sorted({s.run_id for s in theirs}))
        return f"{len(theirs)} of {info.slot_count} slots held by run(s) {runs}{held}"

    def _free(self, pool: str, entry: str) -> None:
        self.instance.event_log_storage.free_concurrency_slot_for_step(self.run_id, entry)
        if (pool, entry) in self.held:
            self.held.remove((pool, entry))

    def _free_ended_runs(self, pool: str) -> bool:
        """Give back what Dagster runs that have ended still hold of ``pool``; whether any
        was."""
        storage = self.instance.event_log_storage
        info = storage.get_concurrency_info(pool)
        entries = {(s.run_id, s.step_key) for s in info.claimed_slots}
        entries |= {(p.run_id, p.step_key) for p in info.pending_steps}
        runs = {run for run, _ in entries} - {self.run_id}
        if not runs:
            return False
        ended = {
            r.dagster_run.run_id: r.dagster_run.status.value
            for r in self.instance.get_run_records(
                dg.RunsFilter(run_ids=sorted(runs), statuses=list(FINISHED_STATUSES))
            )
        }
        freed = False
        for run, entry in sorted(entries):
            if run in ended:
                storage.free_concurrency_slot_for_step(run, entry)
                freed = True
                self.log.warning(
                    f"gave back {entry} of pool {pool}, held by Dagster run {run}, which "
                    f"ended ({ended[run]}) without giving it back"
                )
        return freed


def lanes_of(
    plan: StepPlan, workloads: Mapping[str, Workload], limit: int
) -> tuple[dict[str, tuple[str, ...]], list[tuple[PlannedRun, list[list[str]]]]]:
    """The lanes of a range run whose partitions together hold more accelerators than the
    pool's ``limit`` (each run of its wave its share): a partition's first tasks wait for
    the partition before it in its lane to end, whatever its result; one submission still,
    each partition its task. Returns, by task key, the tasks of the partition it is queued
    behind, and the lanes of each run queued (``queue_in_lanes``)."""
    waits: dict[str, tuple[str, ...]] = {}
    queued: list[tuple[PlannedRun, list[list[str]]]] = []
    for run, sharing in plan.scope.runs_to_queue(plan):
        share = max(1, limit // sharing)
        rows = plan.rows_of(run)
        tasks = {
            r.task_key: (workloads[r.task_key].compute.num_accelerators, r.depends_on) for r in rows
        }
        if peak_accelerators(tasks) <= share:
            continue
        by_partition: dict[str, list[TaskRow]] = {}
        for row in rows:
            by_partition.setdefault(str(row.partition), []).append(row)
        sizes = [
            (p, peak_accelerators({r.task_key: tasks[r.task_key] for r in mine}))
            for p, mine in by_partition.items()
        ]
        lanes = queue_in_lanes(sizes, max(share, max(size for _, size in sizes)))
        if lanes is None:
            continue  # a partition alone is larger than the pool: refused when acquiring
        for lane in lanes:
            for before, after in itertools.pairwise(lane):
                waits_for = tuple(r.task_key for r in by_partition[before])
                for row in by_partition[after]:
                    if not row.depends_on:
                        waits[row.task_key] = waits_for
        queued.append((run, lanes))
    return waits, queued


def step_accelerators(
    plan: StepPlan, workloads: Mapping[str, Workload], waits: Mapping[str, tuple[str, ...]]
) -> int:
    """The most accelerators the step's runs hold at once: the runs of a wave run at once,
    a wave starts once the one before ended."""
    return max(
        sum(
            peak_accelerators(
                {
                    row.task_key: (
                        workloads[row.task_key].compute.num_accelerators,
                        row.depends_on + waits.get(row.task_key, ()),
                    )
                    for row in plan.rows_of(plan.runs[number])
                }
            )
            for number in wave
        )
        for wave in plan.waves
    )
