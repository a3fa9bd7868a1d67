"""The MLflow runs of the workspace: each task attempt has one (`ai_runtime_task_output.
mlflow_run_id`), and training code logs params, metric histories, tags and the run's status
to it, as the MLflow tracking REST API keeps them (https://mlflow.org/docs/latest/rest-api.html,
https://docs.databricks.com/api/workspace/experiments); its log artifacts are each node's
output (`log_artifacts`).

A param is written once: logging it again with another value is refused, as MLflow refuses
it. A metric keeps every point; `runs/get` shows the newest point of each key (the largest
step, then the latest timestamp, as MLflow's latest-metric rule)."""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_runtime import _progress
from air_runtime.local._errors import invalid, not_found
from air_runtime.local._logs import LogBook
from air_runtime.local._request_params import int_param
from air_runtime.local._security import private_dir, write_private
from air_runtime.local._store import MetricPoint, ParamConflict, Store, TaskRun, TokenTables
from air_runtime.local.mlflow.log_artifacts import artifact_uri, node_chunks, nodes

# MLflow's documented limits: keys up to 250 characters, param values up to 6000.
_MAX_KEY = 250
_MAX_PARAM_VALUE = 6000
_MAX_TAG_VALUE = 8000
# log-batch: at most 1000 metrics, 100 params, 100 tags per request (MLflow's limits).
_BATCH_LIMITS = {"metrics": 1000, "params": 100, "tags": 100}
RUN_STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")


def _key(item: dict[str, Any], what: str) -> str:
    key = item.get("key")
    if not isinstance(key, str) or not key:
        raise invalid(f"{what} key is required.")
    if len(key) > _MAX_KEY:
        raise invalid(f"{what} key {key[:40]!r}... is longer than {_MAX_KEY} characters.")
    return key


def _metric(item: dict[str, Any]) -> MetricPoint:
    key = _key(item, "Metric")
    value = item.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise invalid(f"Metric {key!r} needs a numeric value, got {value!r}.")
    try:
        number = float(value)  # "NaN" and "Infinity" arrive as strings in JSON
    except ValueError:
        raise invalid(f"Metric {key!r} needs a numeric value, got {value!r}.") from None
    timestamp, step = item.get("timestamp"), item.get("step", 0)
    try:
        return MetricPoint(key, number, int(timestamp), int(step or 0))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise invalid(f"Metric {key!r} needs an integer timestamp and step.") from None


def _pair(item: dict[str, Any], what: str, limit: int) -> tuple[str, str]:
    key = _key(item, what)
    value = item.get("value")
    if value is None:
        value = ""
    value = str(value)
    if len(value) > limit:
        raise invalid(f"{what} {key!r} has a value longer than {limit} characters.")
    return key, value


_RUN_ID_RE = re.compile(r"[0-9a-f]{32}")
_NODE_DIR_RE = re.compile(r"^logs/node_(\d+)$")
CHUNK_PATH_RE = re.compile(r"^logs/node_(\d+)/logs-(\d+)\.chunk\.txt$")


@dataclass(frozen=True)
class MlflowRun:
    """An MLflow run as `runs/get` shows it: its task attempt's state, and what the
    training code set with `runs/update`."""

    run_id: str
    task: TaskRun
    run_name: str
    experiment_id: Any
    status: str
    start_time: int
    end_time: int | None
    artifact_uri: str


class MlflowRuns:
    def __init__(self, store: Store, logbook: LogBook) -> None:
        self._store = store
        self._logbook = logbook

    def find_task(self, run_id: str) -> TaskRun | None:
        """The task attempt whose MLflow run this is."""
        if not _RUN_ID_RE.fullmatch(run_id or ""):
            return None
        return self._store.runs.task_of_mlflow_run(run_id)

    def task_of(self, run_id: str) -> TaskRun:
        task = self.find_task(run_id)
        if task is None:
            raise not_found(f"Run '{run_id}' not found.")
        return task

    def get(self, run_id: str) -> MlflowRun:
        task = self.task_of(run_id)
        run = self._store.runs.get(task.run_id)
        spec = run.spec(task.task_key) if run is not None else {}
        logged = self._store.mlflow.status(run_id)
        # The attempt's state decides, until training code set one while it runs.
        ended = bool(task.end_time)
        status = "FINISHED" if ended else "RUNNING"
        if ended and task.result_state in ("CANCELED", "TIMEDOUT"):
            status = "KILLED"
        elif ended and task.result_state != "SUCCESS":
            status = "FAILED"
        if logged is not None and not ended:
            status = logged.status
        return MlflowRun(
            run_id=run_id,
            task=task,
            run_name=(logged.run_name if logged is not None else None) or task.task_key,
            experiment_id=task.mlflow_ids.get("mlflow_experiment_id"),
            status=status,
            start_time=task.start_time,
            end_time=(logged.end_time if logged is not None else None) or task.end_time or None,
            artifact_uri=artifact_uri(spec, task.output),
        )

    # --- what training code logs ------------------------------------------------------

    def log(
        self,
        run_id: str,
        *,
        metrics: Any = (),
        params: Any = (),
        tags: Any = (),
    ) -> None:
        """Log a batch to a task's run: checked whole first, then written at once."""
        self.task_of(run_id)
        for name, items in (("metrics", metrics), ("params", params), ("tags", tags)):
            if not isinstance(items, list | tuple) or not all(isinstance(i, dict) for i in items):
                raise invalid(f"{name} must be a list of objects.")
            if len(items) > _BATCH_LIMITS[name]:
                raise invalid(f"A batch holds at most {_BATCH_LIMITS[name]} {name}.")
        points = [_metric(m) for m in metrics]
        pairs = [_pair(p, "Param", _MAX_PARAM_VALUE) for p in params]
        tag_pairs = [_pair(t, "Tag", _MAX_TAG_VALUE) for t in tags]
        try:
            self._store.mlflow.log(run_id, pairs, tag_pairs, points)
        except ParamConflict as conflict:
            raise invalid(
                f"Changing param values is not allowed. Param with key='{conflict.key}' was "
                f"already logged with value='{conflict.logged}' for run ID='{run_id}'. "
                f"Attempted logging new value '{conflict.value}'."
            ) from None

    def update(self, run_id: str, status: Any, end_time: Any, run_name: Any) -> MlflowRun:
        """`runs/update`: what is given of status, end time and name."""
        self.task_of(run_id)
        end = None if end_time is None else int_param(end_time, "end_time")
        if status is not None and status not in RUN_STATUSES:
            raise invalid(f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}.")
        name = run_name if isinstance(run_name, str) else None
        self._store.mlflow.set_status(run_id, status, end, name)
        return self.get(run_id)

    def params(self, run_id: str) -> list[dict[str, str]]:
        return [{"key": k, "value": v} for k, v in self._store.mlflow.params(run_id)]

    def tags(self, run_id: str) -> list[dict[str, str]]:
        return [{"key": k, "value": v} for k, v in self._store.mlflow.tags(run_id)]

    def latest_metrics(self, run_id: str) -> list[MetricPoint]:
        latest: dict[str, MetricPoint] = {}
        for point in self._store.mlflow.points(run_id):  # the newest of a key comes last
            latest[point.key] = point
        return list(latest.values())

    def history(
        self, run_id: str, key: str, after: int, limit: int
    ) -> tuple[list[MetricPoint], int]:
        """Points of one metric in the order they were logged, from sequence ``after`` on;
        with the sequence to continue from (0 when there are no more)."""
        return self._store.mlflow.history(run_id, key, after, limit)

    def progress(self, run_id: str) -> _progress.TrainingProgress | None:
        """The run's progress as the CLI estimates it from what it logged (eta.go)."""
        params = dict(self._store.mlflow.params(run_id))
        if not _progress.has_total(params):
            return None
        points = [
            _progress.MetricPoint(p.value, p.step, p.timestamp)
            for p in self._store.mlflow.points(run_id, _progress.PROGRESS_METRIC)
        ]
        return _progress.compute_progress(params, points)

    def experiment_path(self, experiment_id: str) -> str:
        return self._store.mlflow.experiment_path(experiment_id) or ""

    # --- log artifacts (each node's output) -------------------------------------------

    def artifacts(self, task: TaskRun, path: str) -> list[dict[str, Any]]:
        """The listing of one folder of a task run's artifacts (reads files: off the loop)."""
        path = path.strip("/")
        if path in ("", "logs"):
            found = nodes(self._logbook, task.task_run_id)
            entries = [{"path": f"logs/node_{n}", "is_dir": True} for n in found]
            return entries if path == "logs" else [{"path": "logs", "is_dir": True}]
        match = _NODE_DIR_RE.match(path)
        if match is None:
            return []
        chunks = node_chunks(self._logbook, task.task_run_id, int(match.group(1)))
        return [
            {"path": f"{path}/logs-{i}.chunk.txt", "is_dir": False, "file_size": len(chunk)}
            for i, chunk in enumerate(chunks)
        ]

    def artifact(self, task: TaskRun, path: str) -> bytes:
        """One chunk file of a task run's artifacts (reads files: off the loop)."""
        match = CHUNK_PATH_RE.match(path)
        if match is None:
            raise not_found("No such artifact.")
        node, index = int(match.group(1)), int(match.group(2))
        chunks = node_chunks(self._logbook, task.task_run_id, node)
        if index >= len(chunks):
            raise not_found("No such artifact.")
        return chunks[index]


def rank_tracking_env(
    tokens: TokenTables,
    host: str,
    principal: str,
    ids: dict[str, str],
    lifetime_s: float,
    folder: Path,
) -> tuple[dict[str, str], str]:
    """The variables a rank's MLflow client logs to its attempt's run with, and the token
    they lead to. The MLflow client reads `MLFLOW_TRACKING_URI=databricks` as "the
    workspace the Databricks SDK's default auth finds" (mlflow.utils.databricks_utils) and
    resumes `MLFLOW_RUN_ID` in `mlflow.start_run()`; the SDK finds this workspace and the
    token in the config file DATABRICKS_CONFIG_FILE names (its DEFAULT profile), written
    0600 in the attempt's private folder. DATABRICKS_CONFIG_PROFILE names that profile: with
    DATABRICKS_HOST set and no profile named, the SDK's default auth skips the config file
    (databricks-sdk ``Config._known_file_config_loader``), finds no credentials, and every
    MLflow call warns "Failed to create databricks SDK workspace client ... Falling back to
    legacy authentication". The token is the attempt's own, issued here and
    revoked when the attempt ends, and is not in the environment: a variable named
    DATABRICKS_TOKEN in a rank is never a credential of the machine running the workspace."""
    token = f"dapi-rank-{secrets.token_hex(16)}"
    tokens.add_access_token(token, principal, time.time() + lifetime_s)
    config = private_dir(folder) / "databrickscfg"
    write_private(config, f"[DEFAULT]\nhost = {host}\ntoken = {token}\n")
    env = {
        "MLFLOW_TRACKING_URI": "databricks",
        "MLFLOW_EXPERIMENT_ID": ids["mlflow_experiment_id"],
        "MLFLOW_RUN_ID": ids["mlflow_run_id"],
        "DATABRICKS_HOST": host,
        "DATABRICKS_CONFIG_FILE": str(config),
        "DATABRICKS_CONFIG_PROFILE": "DEFAULT",
    }
    return env, token
