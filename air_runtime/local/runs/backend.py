"""The one-time runs of the Jobs API: what may be submitted (the service's checks, images
registered and in the Artifact Registry, ranks this machine can run), read, cancelled and
repaired. The `RunEngine` runs what is accepted."""

from __future__ import annotations

from typing import Any

from air_runtime.local._errors import invalid, not_found
from air_runtime.local._faults import Counters
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._store import Repair, Run, Store, TaskRun
from air_runtime.local.images.backend import ImageRegistry
from air_runtime.local.images.catalog_images import CatalogImages
from air_runtime.local.runs.engine import SUCCESSFUL, RunEngine
from air_runtime.local.runs.execution import topology
from air_runtime.local.runs.validation import validate_submit


class Runs:
    def __init__(
        self,
        store: Store,
        engine: RunEngine,
        images: ImageRegistry,
        catalog_images: CatalogImages,
        options: WorkspaceOptions,
        counters: Counters,
    ) -> None:
        self._store = store
        self._engine = engine
        self._images = images
        self._catalog_images = catalog_images
        self._options = options
        self._counters = counters

    # --- submit -----------------------------------------------------------------------

    async def submit(self, body: dict[str, Any], host: str) -> int:
        """Accept and start a run (or find the one its idempotency token made before);
        ``host`` is where its ranks reach this workspace's MLflow."""
        token = body.get("idempotency_token")
        token = token.strip() if isinstance(token, str) and token.strip() else None
        self._check_runnable(body)
        await self._catalog_images.check_submit(body)
        run_id, created = self._store.runs.create(body, token, self._options.mode)
        self._counters.count_submit(token, created)
        if created:
            self._engine.tracking_host = host
            self._engine.start(run_id)
        return run_id

    def _check_runnable(self, body: dict[str, Any]) -> None:
        problems = [
            f"{e['path']}: {e['message']}" for e in validate_submit(body, self._options.gpu_pools)
        ]
        if problems:
            raise invalid("; ".join(problems))
        for i, task in enumerate(body["tasks"]):
            ai = task["ai_runtime_task"]
            image = ai.get("docker_image_url")
            if image:
                registration = self._images.get(image)
                if registration is None or registration["state"] != "AVAILABLE":
                    now = registration["state"] if registration else "not registered"
                    raise invalid(
                        f"tasks[{i}]: Docker image {image} is {now} in this workspace; register "
                        "it first (`airo images register` or POST "
                        "/api/2.0/ai-compute-manager/images) and wait until it is AVAILABLE."
                    )
            nodes, _, _ = topology(task)
            limit = self._options.max_local_ranks
            if self._options.mode == "execute" and nodes > limit:
                raise invalid(
                    f"tasks[{i}]: {nodes} node ranks exceed the {limit} this local workspace "
                    "runs on one machine (option max_local_ranks); use fewer accelerators or "
                    "simulate mode."
                )

    # --- reading ----------------------------------------------------------------------

    def find(self, ident: int) -> Run | TaskRun:
        """The run, or the task run, of that id (run ids and task run ids never collide)."""
        found = self._store.runs.get(ident) or self._store.runs.task(ident)
        if found is None:
            raise not_found(f"Run {ident} does not exist.")
        return found

    def find_run(self, ident: int) -> Run | None:
        return self._store.runs.get(ident)

    def find_task(self, task_run_id: int) -> TaskRun | None:
        return self._store.runs.task(task_run_id)

    def tasks(self, run_id: int) -> list[TaskRun]:
        return self._store.runs.tasks(run_id)

    def repairs(self, run_id: int) -> list[Repair]:
        return self._store.runs.repairs(run_id)

    def spec_of(self, task: TaskRun) -> dict[str, Any]:
        """The submitted task a task run runs."""
        run = self._store.runs.get(task.run_id)
        assert run is not None  # runs are never deleted
        return run.spec(task.task_key)

    def output_of(self, ident: int) -> TaskRun:
        """The task run `runs/get-output` answers for: the one named, or the newest of a
        run's only task."""
        task = self._store.runs.task(ident)
        if task is not None:
            return task
        if self._store.runs.get(ident) is None:
            raise not_found(f"Run {ident} does not exist.")
        tasks = self._store.runs.tasks(ident)
        if len({t.task_key for t in tasks}) != 1:
            raise invalid(
                "Retrieving the output of runs with multiple tasks is not supported. "
                "Retrieve the output of each task run (tasks[].run_id) instead."
            )
        return tasks[-1]

    def newest(
        self,
        *,
        active_only: bool = False,
        completed_only: bool = False,
        before_run_id: int | None = None,
        start_time_from: int | None = None,
        start_time_to: int | None = None,
        limit: int,
    ) -> tuple[list[Run], bool]:
        """Runs newest first, at most `limit` of them, and whether more are left."""
        return self._store.runs.newest(
            active_only=active_only,
            completed_only=completed_only,
            before_run_id=before_run_id,
            start_time_from=start_time_from,
            start_time_to=start_time_to,
            limit=limit,
        )

    # --- cancel and repair ------------------------------------------------------------

    def cancel(self, ident: int) -> None:
        """Cancel the run (a task run's id cancels its run)."""
        if self._store.runs.get(ident) is None:
            task = self._store.runs.task(ident)
            if task is None:
                raise invalid(f"Run {ident} does not exist.")
            ident = task.run_id
        self._engine.cancel(ident)

    def repair(
        self,
        run_id: int,
        rerun_tasks: list[str],
        *,
        all_failed: bool,
        dependents: bool,
        latest_repair_id: int | None,
    ) -> int:
        """Re-run tasks of an ended run as new task runs of the same run (Jobs
        ``runs/repair``); the id of the repair."""
        run = self._store.runs.get(run_id)
        if run is None:
            raise not_found(f"Run {run_id} does not exist.")
        if run.active:
            raise invalid(
                f"Run {run_id} is still in progress: a run can be repaired once it has ended."
            )
        if self._options.refuse_repair:
            raise invalid(f"Run {run_id} cannot be repaired in this workspace.")
        if rerun_tasks and all_failed:
            raise invalid("Only one of rerun_tasks or rerun_all_failed_tasks can be used.")
        specs = {t["task_key"]: (i, t) for i, t in enumerate(run.task_specs)}
        unknown = sorted(set(rerun_tasks) - set(specs))
        if unknown:
            raise invalid(f"Run {run_id} has no task {', '.join(unknown)}.")
        newest = {t.task_key: t for t in self._store.runs.tasks(run_id)}  # oldest first
        chosen = set(rerun_tasks)
        if all_failed:
            chosen |= {k for k, r in newest.items() if r.result_state not in SUCCESSFUL}
        while dependents:
            more = {
                key
                for key, (_, spec) in specs.items()
                if key not in chosen
                and any(d["task_key"] in chosen for d in spec.get("depends_on") or [])
            }
            chosen |= more
            dependents = bool(more)
        if not chosen:
            raise invalid(f"Run {run_id}: no task to repair (every task succeeded).")
        current = self._store.runs.latest_repair_id(run_id)
        if latest_repair_id != current:
            if latest_repair_id is None:
                raise invalid(
                    "The latest repair ID needs to be provided in order to create a new repair."
                )
            raise invalid(
                f"latest_repair_id {latest_repair_id} is not the latest repair of run {run_id}"
                + (f" ({current})." if current is not None else " (it has none).")
            )
        positions = {key: specs[key][0] for key in sorted(chosen, key=lambda k: specs[k][0])}
        repair_id = self._store.runs.create_repair(run_id, positions, latest_repair_id)
        if repair_id is None:  # another repair won the race
            raise invalid(f"Run {run_id} was repaired meanwhile; read its repair_history.")
        self._engine.start(run_id)
        return repair_id
