"""Checks of `config:validate` and `runs/submit` bodies.

Workload rules (accelerator types, GPU counts, container ranks, env names, run options) are
owned by `air_runtime.workload`: the wire body is mapped back to a workload mapping and
checked there, so there is one implementation of each rule; task keys and `run_if` values
are `air_runtime.plan`'s. Only the wire-level shape (deployments, command paths, task graph)
is checked here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from air_runtime._errors import WorkloadError
from air_runtime.plan import RUN_IF_VALUES
from air_runtime.platform import ENV_NAME_RE, MAX_IDEMPOTENCY_TOKEN_LENGTH, TASK_KEY_RE
from air_runtime.workload import load_workload

Errors = list[dict[str, str]]
_CODE = "INVALID_PARAMETER_VALUE"
_DEPLOYMENT = "task.deployments[0]"
# What the service refuses that the CLI does not check itself: paths, codes and messages
# as acceptance/air/run-backend-error/test.toml records the service's answer.
MAX_ACCELERATOR_COUNT = 1024


def _error(path: str, message: str, code: str = _CODE) -> dict[str, str]:
    return {"path": path, "message": message, "code": code}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _wire_shape(task: Any) -> tuple[Errors, dict[str, Any] | None]:
    """Shape checks only the wire has; returns the deployment when it is usable."""
    if not isinstance(task, dict):
        return [_error("task", "must be an object (the ai_runtime_task)")], None
    deployments = task.get("deployments")
    if not isinstance(deployments, list) or len(deployments) != 1:
        return [_error("task.deployments", "exactly one deployment is required")], None
    deployment = deployments[0]
    if not isinstance(deployment, dict) or not isinstance(deployment.get("compute"), dict):
        return [_error(f"{_DEPLOYMENT}.compute", "compute is required")], None
    errors: Errors = []
    has_command = "command_path" in deployment
    containers = deployment.get("containers")
    if has_command == bool(containers):
        errors.append(_error(_DEPLOYMENT, "set exactly one of command_path and containers"))
    if has_command:
        errors += _command_path_errors(
            deployment.get("command_path"), f"{_DEPLOYMENT}.command_path"
        )
    if containers is not None:
        if not isinstance(containers, list):
            errors.append(_error(f"{_DEPLOYMENT}.containers", "must be a list"))
        else:
            for i, container in enumerate(containers):
                path = f"{_DEPLOYMENT}.containers[{i}]"
                if not isinstance(container, dict):
                    errors.append(_error(path, "must be an object"))
                    continue
                errors += _command_path_errors(
                    container.get("command_path"), f"{path}.command_path"
                )
    return errors, deployment


def _command_path_errors(value: Any, path: str) -> Errors:
    if not isinstance(value, str) or not value.strip():
        return [_error(path, "a command path is required (the uploaded command.sh)")]
    if not value.startswith("/"):
        return [_error(path, f"must be an absolute workspace path, got {value!r}")]
    return []


def _as_workload(body: dict[str, Any], deployment: dict[str, Any]) -> dict[str, Any]:
    task = body.get("task") or {}
    compute = deployment["compute"]
    mapping: dict[str, Any] = {
        "experiment_name": task.get("experiment") or "validate",
        "compute": {
            "accelerator_type": compute.get("accelerator_type"),
            "num_accelerators": compute.get("accelerator_count"),
        },
    }
    containers = deployment.get("containers")
    if isinstance(containers, list) and containers:
        mapping["containers"] = []
        for container in containers:
            item: dict[str, Any] = {"name": container.get("name"), "command": "bash command.sh"}
            if "ranks" in container:
                item["ranks"] = container["ranks"]
            if "unity_catalog_image_path" in container:
                item["unity_catalog_image"] = container["unity_catalog_image_path"]
            mapping["containers"].append(item)
    else:
        mapping["command"] = "bash command.sh"
    if task.get("docker_image_url"):
        mapping["environment"] = {"docker_image": {"url": task["docker_image_url"]}}
    elif task.get("unity_catalog_image_path"):
        mapping["environment"] = {"unity_catalog_image": task["unity_catalog_image_path"]}
    options = body.get("run_options")
    if isinstance(options, dict):
        for name in (
            "max_retries",
            "timeout_minutes",
            "idempotency_token",
            "env_variables",
            "secrets",
        ):
            if name in options:
                mapping[name] = options[name]
    return mapping


_WORKLOAD_TO_WIRE = (
    ("compute.num_accelerators", f"{_DEPLOYMENT}.compute.accelerator_count"),
    ("compute.accelerator_type", f"{_DEPLOYMENT}.compute.accelerator_type"),
    ("compute", f"{_DEPLOYMENT}.compute"),
    ("containers", f"{_DEPLOYMENT}.containers"),
    ("experiment_name", "task.experiment"),
    ("environment.docker_image.url", "task.docker_image_url"),
    ("environment.docker_image", "task.docker_image_url"),
    ("environment.unity_catalog_image", "task.unity_catalog_image_path"),
    ("max_retries", "run_options.max_retries"),
    ("timeout_minutes", "run_options.timeout_minutes"),
    ("idempotency_token", "run_options.idempotency_token"),
    ("env_variables", "run_options.env_variables"),
    ("secrets", "run_options.secrets"),
)


def _wire_path(path: str) -> str:
    for workload_path, wire_path in _WORKLOAD_TO_WIRE:
        if path == workload_path or path.startswith((workload_path + ".", workload_path + "[")):
            wired = wire_path + path[len(workload_path) :]
            return wired.replace(".unity_catalog_image", ".unity_catalog_image_path").replace(
                "_path_path", "_path"
            )
    return path


def _workload_errors(mapping: dict[str, Any]) -> Errors:
    try:
        load_workload(mapping)
    except WorkloadError as exc:
        return [
            _error(_wire_path(p.path), f"{p.message} {p.hint}" if p.hint else p.message)
            for p in exc.problems
        ]
    return []


def _pool_errors(compute: dict[str, Any], pools: Sequence[dict[str, Any]]) -> Errors:
    """The GPU pool a run names must be one of the workspace's, of its accelerator type:
    the pool is a reservation of the workspace (pools.go), and which accelerators it
    offers is the server's to enforce (compute.go gpuTypes)."""
    pool_id = compute.get("provisioned_capacity_id")
    if not isinstance(pool_id, str):
        return []
    path = "deployments[0].compute.provisioned_capacity_id"
    pool = next((p for p in pools if p["pool_id"] == pool_id.strip()), None)
    if pool is None:
        return [
            _error(
                path,
                f"provisioned_capacity_id {pool_id[:255]!r} is not a GPU pool of this workspace.",
                "NOT_FOUND",
            )
        ]
    if compute.get("accelerator_type") != pool["accelerator_type"]:
        return [
            _error(
                "deployments[0].compute.accelerator_type",
                f"accelerator_type must be {pool['accelerator_type']}, the type of GPU pool "
                f"{pool['pool_id']}, but was {compute.get('accelerator_type')}.",
                "FAILED_PRECONDITION",
            )
        ]
    count = compute.get("accelerator_count")
    if _is_int(count) and count > pool["accelerator_count"]:
        return [
            _error(
                "deployments[0].compute.accelerator_count",
                f"accelerator_count must be at most {pool['accelerator_count']}, the "
                f"accelerators of GPU pool {pool['pool_id']}, but was {count}.",
                "OUT_OF_RANGE",
            )
        ]
    return []


def _service_limits(
    body: dict[str, Any], deployment: dict[str, Any], pools: Sequence[dict[str, Any]]
) -> Errors:
    """The accelerator ceiling, the workspace's GPU pools and the characters of variable
    names, reported the way the service does (paths relative to the task and the run
    options)."""
    errors: Errors = _pool_errors(deployment["compute"], pools)
    count = deployment["compute"].get("accelerator_count")
    if _is_int(count) and count > MAX_ACCELERATOR_COUNT:
        errors.append(
            _error(
                "deployments[0].compute.accelerator_count",
                f"accelerator_count must be at most {MAX_ACCELERATOR_COUNT}, but was {count}.",
                "OUT_OF_RANGE",
            )
        )
    options = body.get("run_options")
    variables = options.get("env_variables") if isinstance(options, dict) else None
    for name in variables if isinstance(variables, dict) else ():
        if not ENV_NAME_RE.match(str(name)):
            errors.append(
                _error(
                    f"env_variables[{name}]",
                    f"env_variables[{name}] contains characters that are not allowed.",
                    "DISALLOWED_CHARACTERS",
                )
            )
    return errors


def validate_config(body: Any, pools: Sequence[dict[str, Any]] = ()) -> Errors:
    """The `errors` of a config:validate answer (empty when the task would be accepted)
    in a workspace with these GPU pools."""
    if not isinstance(body, dict):
        return [_error("", "the body must be a JSON object")]
    errors, deployment = _wire_shape(body.get("task"))
    if deployment is None:
        return errors
    limits = _service_limits(body, deployment, pools)
    mapping = _as_workload(body, deployment)
    if isinstance(mapping.get("env_variables"), dict):
        # Refused names are reported once, in the service's words (above).
        mapping["env_variables"] = {
            k: v for k, v in mapping["env_variables"].items() if ENV_NAME_RE.match(str(k))
        }
    return errors + limits + _workload_errors(mapping)


def validate_submit(body: Any, pools: Sequence[dict[str, Any]] = ()) -> Errors:
    """Problems of a runs/submit body; the task graph plus each task's config:validate."""
    if not isinstance(body, dict):
        return [_error("", "the body must be a JSON object")]
    errors: Errors = []
    token = body.get("idempotency_token")
    if token is not None and (
        not isinstance(token, str) or len(token.strip()) > MAX_IDEMPOTENCY_TOKEN_LENGTH
    ):
        errors.append(
            _error(
                "idempotency_token",
                f"must be a string of at most {MAX_IDEMPOTENCY_TOKEN_LENGTH} characters",
            )
        )
    timeout = body.get("timeout_seconds")
    if timeout is not None and (not _is_int(timeout) or timeout < 0):
        errors.append(_error("timeout_seconds", f"must be an integer >= 0, got {timeout!r}"))
    environment_keys, environment_errors = _environments(body.get("environments"))
    errors += environment_errors
    tasks = body.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return [*errors, _error("tasks", "at least one task is required")]
    keys: list[str] = []
    for i, task in enumerate(tasks):
        path = f"tasks[{i}]"
        if not isinstance(task, dict):
            errors.append(_error(path, "must be an object"))
            keys.append("")
            continue
        key = task.get("task_key")
        # The Jobs API's task_key: ASCII letters, digits, '-' and '_', at most 100 (the CLI
        # checks it before submitting: runconfig.go taskKeyRe, validateExperimentName).
        if not isinstance(key, str) or not TASK_KEY_RE.match(key):
            errors.append(
                _error(f"{path}.task_key", f"must match {TASK_KEY_RE.pattern}, got {key!r}")
            )
        elif key in keys:
            errors.append(_error(f"{path}.task_key", f"duplicate task key {key!r}"))
        keys.append(key if isinstance(key, str) else "")
    graph: dict[str, list[str]] = {}
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            continue
        path = f"tasks[{i}]"
        run_if = task.get("run_if", "ALL_SUCCESS")
        if run_if not in RUN_IF_VALUES:
            errors.append(
                _error(
                    f"{path}.run_if", f"must be one of {', '.join(RUN_IF_VALUES)}, got {run_if!r}"
                )
            )
        deps: list[str] = []
        for j, dep in enumerate(task.get("depends_on") or []):
            dep_key = dep.get("task_key") if isinstance(dep, dict) else None
            if dep_key not in keys or dep_key == task.get("task_key"):
                errors.append(
                    _error(f"{path}.depends_on[{j}]", f"unknown upstream task key {dep_key!r}")
                )
            else:
                deps.append(str(dep_key))
        graph[str(task.get("task_key"))] = deps
        for name in ("max_retries", "min_retry_interval_millis", "timeout_seconds"):
            value = task.get(name)
            if value is not None and (
                not _is_int(value) or value < (-1 if name == "max_retries" else 0)
            ):
                errors.append(
                    _error(f"{path}.{name}", f"must be a non-negative integer, got {value!r}")
                )
        environment_key = task.get("environment_key")
        if environment_key is not None and environment_key not in environment_keys:
            # The task's environment_key ties it to the environment that carries its runtime
            # (runsubmit.go); a key no environment declares leaves the task without one.
            errors.append(
                _error(
                    f"{path}.environment_key",
                    f"environment key {str(environment_key)[:100]!r} is not declared in "
                    "environments",
                )
            )
        ai = task.get("ai_runtime_task")
        if ai is None:
            errors.append(
                _error(
                    path,
                    "the local workspace runs ai_runtime_task tasks only; "
                    f"found {', '.join(k for k in task if k.endswith('_task')) or 'none'}",
                )
            )
            continue
        for problem in validate_config({"task": ai}, pools):
            where = problem["path"]
            if where.startswith("task"):
                problem["path"] = where.replace("task", f"{path}.ai_runtime_task", 1)
            else:
                problem["path"] = f"{path}.ai_runtime_task.{where}"
            errors.append(problem)
    if _has_cycle(graph):
        errors.append(_error("tasks", "depends_on forms a cycle"))
    return errors


def _environments(value: Any) -> tuple[set[str], Errors]:
    """The declared environment keys, and the problems of `environments`."""
    if value is None:
        return set(), []
    if not isinstance(value, list):
        return set(), [_error("environments", "must be a list")]
    keys: set[str] = set()
    errors: Errors = []
    for i, item in enumerate(value):
        key = item.get("environment_key") if isinstance(item, dict) else None
        if not isinstance(key, str) or not key:
            errors.append(_error(f"environments[{i}].environment_key", "is required"))
        elif key in keys:
            errors.append(_error(f"environments[{i}].environment_key", f"duplicate key {key!r}"))
        else:
            keys.add(key)
        if isinstance(item, dict) and not isinstance(item.get("spec", {}), dict):
            errors.append(_error(f"environments[{i}].spec", "must be an object"))
    return keys, errors


def _has_cycle(graph: dict[str, list[str]]) -> bool:
    state: dict[str, int] = {}

    def visit(node: str) -> bool:
        if state.get(node) == 1:
            return True
        if state.get(node) == 2:
            return False
        state[node] = 1
        if any(visit(dep) for dep in graph.get(node, [])):
            return True
        state[node] = 2
        return False

    return any(visit(node) for node in graph)


def run_if_verdict(run_if: str, upstream: list[str]) -> str | None:
    """None when the task should run, else the result state it gets without running."""
    succeeded = [r in ("SUCCESS", "EXCLUDED") for r in upstream]
    failed = [r not in ("SUCCESS", "EXCLUDED") for r in upstream]
    if not upstream or run_if == "ALL_DONE":
        return None
    if run_if == "ALL_SUCCESS":
        return None if all(succeeded) else "UPSTREAM_FAILED"
    if run_if == "NONE_FAILED":
        return None if not any(failed) else "UPSTREAM_FAILED"
    if run_if == "AT_LEAST_ONE_SUCCESS":
        return None if any(r == "SUCCESS" for r in upstream) else "EXCLUDED"
    if run_if == "ALL_FAILED":
        return None if all(failed) else "EXCLUDED"
    if run_if == "AT_LEAST_ONE_FAILED":
        return None if any(failed) else "EXCLUDED"
    return "EXCLUDED"
