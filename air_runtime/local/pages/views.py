"""What the run pages show, read from the workspace's state: runs, their task attempts, the
containers of each attempt and each node's state, exit code and last log lines.

Plain data for the templates (`templates/`); nothing here renders HTML, and every value is
escaped by the templates (names and log lines come from workloads).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from air_runtime._checkpoints import ENV_CHECKPOINT_DIR, FolderContents
from air_runtime._diagnosis import diagnose
from air_runtime._states import TaskState
from air_runtime.local._errors import ApiError
from air_runtime.local._logs import Record
from air_runtime.local._store import ACTIVE_LIFE_CYCLES, Run, TaskRun, now_ms
from air_runtime.local._workspace_state import WorkspaceState
from air_runtime.local.runs.execution import roles, topology
from air_runtime.local.runs.run_json import task_json, termination_details

TAIL_LINES = 40  # last lines of each node's log on a page


@dataclass
class NodeView:
    index: int
    container: str
    state: str  # PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED, NOT STARTED, LOST, SIMULATED
    exit_code: int | None
    lines: list[str]
    after_ns: int  # time of the last line shown: the live tail asks for later ones
    log_url: str


@dataclass
class ContainerView:
    name: str
    image: str
    ranks: list[int]
    command_path: str
    nodes: list[NodeView]


@dataclass
class Progress:
    """State, result and times of a run or of a task attempt."""

    life_cycle_state: str
    result_state: str | None
    state_message: str
    start: str
    end: str
    duration: str
    active: bool
    termination: str  # the API's status.termination_details: "USER_CANCELED (SUCCESS)"


def _termination(record: Run | TaskRun) -> str:
    details = termination_details(record)
    if details is None or details["code"] == "SUCCESS":
        return ""
    return f"{details['code']} ({details['type']})"


def _progress(record: Run | TaskRun) -> dict[str, Any]:
    """The `Progress` fields of a run or of a task run."""
    return {
        "termination": _termination(record),
        "life_cycle_state": record.life_cycle_state,
        "result_state": record.result_state,
        "state_message": record.state_message or "",
        "start": clock(record.start_time),
        "end": clock(record.end_time),
        "duration": duration(record.start_time, record.end_time),
        "active": record.life_cycle_state in ACTIVE_LIFE_CYCLES,
    }


@dataclass
class AttemptView(Progress):
    task_key: str
    task_run_id: int
    attempt_number: int
    gpu_hours: float
    accelerator_type: str
    accelerator_count: int
    node_count: int
    experiment_id: str
    experiment_path: str
    mlflow_run_id: str
    launch_folder: str
    code_source_path: str
    depends_on: list[str]
    run_if: str
    error_trace: str
    containers: list[ContainerView] = field(default_factory=list)
    # "45% · ~2h 15m left" while the attempt runs and logs progress to MLflow (eta.go).
    training_progress: str = ""
    # Why a failed attempt failed, in one line (the core's diagnosis of its nodes' lines).
    diagnosis: str = ""
    # The task's task runs counted from 0 as `airo logs` counts them (a repair's re-run
    # counts on: the platform's attempt_number starts at 0 again), and which repair ran it.
    try_number: int = 0
    repair: int = 0
    # The newest checkpoint in the task's AIRO_CHECKPOINT_DIR: "step 70 (/Volumes/...)".
    checkpoint: str = ""

    @property
    def url(self) -> str:
        return f"/jobs/runs/{self.task_run_id}"

    @property
    def label(self) -> str:
        """``attempt 2 (repair 1)``: as ``airo logs`` labels the task run's lines."""
        return f"attempt {self.try_number}" + (f" (repair {self.repair})" if self.repair else "")


@dataclass
class TaskView:
    """A task of a run: its newest attempt in full, the earlier ones as links."""

    latest: AttemptView
    attempts: list[AttemptView]
    gpu_hours: float


@dataclass
class RunView(Progress):
    run_id: int
    run_name: str
    gpu_hours: float
    mode: str
    tasks: list[TaskView]

    @property
    def diagnosis(self) -> str:
        """The first failed task's diagnosis, named for the run's headline."""
        return next((t.latest.diagnosis for t in self.tasks if t.latest.diagnosis), "")

    @property
    def url(self) -> str:
        return f"/jobs/runs/{self.run_id}"


def clock(ms: int | None) -> str:
    """Epoch milliseconds as this machine's local time (the workspace runs here)."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def duration(start_ms: int | None, end_ms: int | None) -> str:
    if not start_ms:
        return "-"
    seconds = max(0, round(((end_ms or now_ms()) - start_ms) / 1000))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{hours}h {minutes}m {seconds}s" if hours else f"{minutes}m {seconds}s"
    return text if minutes or hours else f"{seconds}s"


def _node_state(
    state: WorkspaceState, task: TaskRun, mode: str, node: int
) -> tuple[str, int | None]:
    record = state.logbook.exit_record(task.task_run_id, node)
    if record is not None:
        code = int(record["exit_code"])
        if record.get("stopped"):
            return "STOPPED", code
        return ("SUCCEEDED" if code == 0 else "FAILED"), code
    life_cycle = task.life_cycle_state
    if life_cycle in ("RUNNING", "TERMINATING"):
        return "RUNNING", None
    if life_cycle in ACTIVE_LIFE_CYCLES:
        return "PENDING", None
    if mode == "simulate":
        return "SIMULATED", None  # a scripted timeline starts no process
    # Ended without a record: set-up failed before any process started, or the workspace
    # stopped while the processes ran (see RunEngine.recover).
    return ("LOST" if task.pgids else "NOT STARTED"), None


def _launch_folder(command_path: str, containers: bool) -> str:
    folder = PurePosixPath(command_path).parent
    if containers and folder.parent.name == "containers":
        folder = folder.parent.parent  # <launch dir>/containers/<name>/command.sh
    return str(folder)


def attempt_view(
    state: WorkspaceState,
    task: TaskRun,
    spec: dict[str, Any],
    mode: str,
    *,
    with_logs: bool = True,
) -> AttemptView:
    task_run_id = task.task_run_id
    api = task_json(task, spec, "")
    attempt = TaskState.from_api(api)
    ids = task.mlflow_ids
    experiment_id = str(ids.get("mlflow_experiment_id") or "")
    experiment_path = state.mlflow.experiment_path(experiment_id) if experiment_id else ""
    ai = spec.get("ai_runtime_task") or {}
    deployment = (ai.get("deployments") or [{}])[0]
    compute = deployment.get("compute") or {}
    has_containers = bool(deployment.get("containers"))
    view = AttemptView(
        task_key=task.task_key,
        task_run_id=task_run_id,
        attempt_number=task.attempt_number,
        gpu_hours=attempt.gpu_hours(now_ms()),
        **_progress(task),
        accelerator_type=str(compute.get("accelerator_type") or "-"),
        accelerator_count=int(compute.get("accelerator_count") or 0),
        node_count=attempt.node_count,
        experiment_id=experiment_id,
        experiment_path=experiment_path,
        mlflow_run_id=str(ids.get("mlflow_run_id") or ""),
        launch_folder="",
        code_source_path=str(ai.get("code_source_path") or ""),
        depends_on=[str(d.get("task_key")) for d in spec.get("depends_on") or []],
        run_if=str(spec.get("run_if") or "ALL_SUCCESS"),
        error_trace=str(task.output.get("error_trace") or ""),
    )
    if view.active and view.mlflow_run_id:
        progress = state.mlflow.progress(view.mlflow_run_id)
        view.training_progress = progress.detailed() if progress else ""
    if not deployment.get("compute"):
        return view  # not a task this workspace could run: nothing more to show
    nodes, _, _ = topology(spec)
    view.node_count = nodes
    for role in roles(spec):
        if not view.launch_folder:
            view.launch_folder = _launch_folder(role.command_path, has_containers)
        name = role.name or "command"
        container = ContainerView(
            name=name,
            image=role.image or "-",
            ranks=role.ranks,
            command_path=role.command_path,
            nodes=[],
        )
        for node in role.ranks:
            node_state, code = _node_state(state, task, mode, node)
            records = state.logbook.last_records(task_run_id, node, TAIL_LINES) if with_logs else []
            container.nodes.append(
                NodeView(
                    index=node,
                    container=name,
                    state=node_state,
                    exit_code=code,
                    lines=[str(r.get("body", "")) for r in records],
                    after_ns=int(records[-1]["time_unix_nano"]) if records else 0,
                    log_url=f"/jobs/runs/{task_run_id}/logs/{node}",
                )
            )
        view.containers.append(container)
    if with_logs and task.result_state not in (None, "SUCCESS", "CANCELED"):
        view.diagnosis = _diagnosis(view, spec)
    if with_logs:
        view.checkpoint = _newest_checkpoint(state, spec)
    return view


def _newest_checkpoint(state: WorkspaceState, spec: dict[str, Any]) -> str:
    """The newest checkpoint in the folder the task's ranks were given (its first role's
    ``AIRO_CHECKPOINT_DIR``, as submitted next to its command), as ``airo get`` shows it."""
    first = next(iter(roles(spec)), None)
    if first is None:
        return ""
    try:
        variables = json.loads(
            state.workspace.read(str(PurePosixPath(first.command_path).parent / "env_vars.json"))
        )
        folder = next(str(v.get("value")) for v in variables if v.get("name") == ENV_CHECKPOINT_DIR)
        if not folder.startswith("/Volumes/"):
            return ""
        newest = FolderContents.of(folder, state.volumes.list(folder)).newest
    except (ApiError, StopIteration, ValueError, TypeError, AttributeError):
        return ""
    return f"{newest.describe()} ({newest.path})" if newest is not None else ""


def _diagnosis(view: AttemptView, spec: dict[str, Any]) -> str:
    nodes = [n for c in view.containers for n in c.nodes]
    failed = next((n.index for n in nodes if n.state == "FAILED"), None)
    retries = spec.get("max_retries")
    found = diagnose(
        {n.index: n.lines for n in nodes},
        task_key=view.task_key,
        attempt_number=view.attempt_number,
        max_retries=retries if isinstance(retries, int) else None,
        failed_node=failed,
        state_message=view.state_message,
    )
    return found.headline() if found is not None else ""


def run_view(state: WorkspaceState, run: Run, *, with_logs: bool = True) -> RunView:
    # Every task run of each task, a repair's too (Jobs repair_history), in the order they
    # ran: by repair, then attempt.
    ranks = {
        r.repair_id: n
        for n, r in enumerate(
            (r for r in state.runs.repairs(run.run_id) if r.kind != "ORIGINAL"), 1
        )
    }
    by_key: dict[str, list[AttemptView]] = {}
    for task in state.runs.tasks(run.run_id):
        view = attempt_view(state, task, run.spec(task.task_key), run.mode, with_logs=False)
        view.repair = ranks.get(task.repair_id, 0)
        by_key.setdefault(task.task_key, []).append(view)
    tasks = []
    for attempts in by_key.values():
        attempts.sort(key=lambda a: (a.repair, a.attempt_number))
        for number, view in enumerate(attempts):
            view.try_number = number
        newest = attempts[-1]
        if with_logs:
            found = state.runs.find_task(newest.task_run_id)
            assert found is not None
            full = attempt_view(state, found, run.spec(newest.task_key), run.mode)
            full.try_number, full.repair = newest.try_number, newest.repair
            attempts[-1] = newest = full
        tasks.append(TaskView(newest, attempts, sum(a.gpu_hours for a in attempts)))
    return RunView(
        run_id=run.run_id,
        run_name=run.run_name,
        gpu_hours=sum(t.gpu_hours for t in tasks),
        mode=run.mode,
        **_progress(run),
        tasks=tasks,
    )


def task_run_view(
    state: WorkspaceState, task: TaskRun
) -> tuple[RunView, AttemptView, list[AttemptView]]:
    """The run a task attempt belongs to (without logs), the attempt in full, and every
    attempt of its task."""
    run = state.runs.find_run(task.run_id)
    assert run is not None
    parent = run_view(state, run, with_logs=False)
    key = task.task_key
    attempt = attempt_view(state, task, run.spec(key), run.mode)
    siblings = next((t.attempts for t in parent.tasks if t.latest.task_key == key), [attempt])
    same = next((a for a in siblings if a.task_run_id == task.task_run_id), None)
    if same is not None:
        attempt.try_number, attempt.repair = same.try_number, same.repair
    return parent, attempt, siblings


def new_lines(
    state: WorkspaceState, task_run_id: int, node: int, after_ns: int, limit: int
) -> list[Record]:
    """The records of one node's log after `after_ns` (the live tail of a page)."""
    records, _ = state.logbook.page([task_run_id], node, start_ns=after_ns + 1, size=limit)
    return records
