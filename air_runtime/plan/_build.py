"""Workload(s) -> SubmissionPlan. Pure: no I/O, deterministic given the inputs.

The launch directory layout and file names are part of the platform contract (workload.md
§4): the server-side launcher finds the side files next to each command path.
"""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
import re
import uuid
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

import yaml

from air_runtime._errors import Problem, WorkloadError
from air_runtime.plan._models import (
    CodeSnapshot,
    ImageRequirement,
    Stage,
    SubmissionPlan,
    UploadFile,
)
from air_runtime.workload import DockerImage, Environment, SecretRef, Workload
from air_runtime.workload._yaml import plain_scalar_tag

RUN_IF_VALUES = (
    "ALL_SUCCESS", "AT_LEAST_ONE_SUCCESS", "NONE_FAILED", "ALL_DONE",
    "AT_LEAST_ONE_FAILED", "ALL_FAILED",
)  # fmt: skip
_TASK_KEY_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_SUFFIX_RE = re.compile(r"^[0-9a-f]{16}$")


def home_dir(user_name: str) -> str:
    return f"/Workspace/Users/{user_name}"


def default_launch_suffix(idempotency_token: str) -> str:
    """Derived from the token, so a resubmit with the same token rewrites the same folder."""
    return hashlib.sha256(idempotency_token.encode("utf-8")).hexdigest()[:16]


def launch_dir(home: str, workload: Workload, suffix: str) -> str:
    folder = f"{workload.mlflow_run_name or workload.experiment_name}_{suffix}"
    return f"{home}/.air/cli_launch/{workload.experiment_name}/{folder}"


def environment_spec(environment: Environment) -> dict[str, Any]:
    """``environments[].spec`` of the submit body (workload.md §5)."""
    spec: dict[str, Any]
    if environment.is_base_environment:
        spec = {"base_environment": f"workspace-base-environments/{environment.version}"}
    else:
        spec = {"environment_version": environment.version}
    if environment.dependencies:
        spec["dependencies"] = list(environment.dependencies)
    return spec


def _json_bytes(entries: list[dict[str, str]]) -> bytes:
    """``json.dumps(entries, indent=2)`` and a newline, as bytes.

    Written directly for the usual case (objects of strings): with ``indent``, json.dumps
    uses its pure-Python encoder, a large share of planning time. Strings are quoted by the
    same C function json.dumps uses."""
    if entries and all(entries):
        quote = encode_basestring_ascii
        try:
            objects = ",\n".join(
                "  {\n"
                + ",\n".join(f"    {quote(k)}: {quote(v)}" for k, v in entry.items())
                + "\n  }"
                for entry in entries
            )
        except TypeError:  # a key or value that is not a string: json.dumps converts it
            pass
        else:
            return f"[\n{objects}\n]\n".encode("ascii")
    return (json.dumps(entries, indent=2) + "\n").encode("utf-8")


def _env_files(
    folder: str, plain: dict[str, str], secrets: dict[str, SecretRef]
) -> list[UploadFile]:
    files = []
    if plain:
        files.append(
            UploadFile(
                f"{folder}/env_vars.json",
                _json_bytes([{"name": k, "value": plain[k]} for k in sorted(plain)]),
            )
        )
    if secrets:
        files.append(
            UploadFile(
                f"{folder}/secret_env_vars.json",
                _json_bytes(
                    [
                        {"name": k, "secret_scope": secrets[k].scope, "secret_key": secrets[k].key}
                        for k in sorted(secrets)
                    ]
                ),
            )
        )
    return files


def _script(command: str) -> bytes:
    return (command if command.endswith("\n") else command + "\n").encode("utf-8")


# Strings that yaml.safe_dump writes as they are (no quotes, no line folding, simple keys).
_PLAIN_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,63}")
_TAGS = {
    bool: "tag:yaml.org,2002:bool",
    int: "tag:yaml.org,2002:int",
    float: "tag:yaml.org,2002:float",
    str: "tag:yaml.org,2002:str",
}


def _plain_yaml(value: Any) -> str | None:
    """How ``yaml.safe_dump`` writes the scalar ``value`` in block style, when that is a
    plain word read back with the same type; None otherwise (bool before int: a subclass)."""
    kind = type(value)
    if kind is bool:
        text = "true" if value else "false"
    elif kind is int:
        text = str(value)
    elif kind is float:
        if not math.isfinite(value):
            return None
        text = repr(value).lower()  # SafeRepresenter.represent_float
        if "." not in text and "e" in text:
            text = text.replace("e", ".0e", 1)
    elif kind is str:
        if not _PLAIN_WORD.fullmatch(value):
            return None
        text = value
    else:
        return None
    return text if plain_scalar_tag(text) == _TAGS[kind] else None


def _plain_yaml_lines(mapping: dict[Any, Any], indent: str, out: list[str]) -> bool:
    for key, value in mapping.items():
        name = _plain_yaml(key) if type(key) is str else None
        if name is None:
            return False
        if type(value) is dict and value:
            out.append(f"{indent}{name}:\n")
            if not _plain_yaml_lines(value, indent + "  ", out):
                return False
            continue
        text = "null" if value is None else _plain_yaml(value)
        if text is None:
            return False
        out.append(f"{indent}{name}: {text}\n")
    return True


def _hyperparameters(parameters: dict[str, Any]) -> bytes:
    # Parameters are mostly names and numbers: those are written directly, the same text
    # safe_dump gives (its pure-Python emitter is slow, and libyaml's writes some strings
    # differently); anything else (lists, quoted or long strings) goes through safe_dump.
    lines: list[str] = []
    if parameters and _plain_yaml_lines(parameters, "", lines):
        return "".join(lines).encode("utf-8")
    return yaml.safe_dump(
        parameters, sort_keys=False, allow_unicode=True, default_flow_style=False
    ).encode("utf-8")


def _copy_json(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, immutable scalars); copy.deepcopy is several
    times slower and the bodies have no shared or cyclic parts to preserve."""
    if type(value) is dict:
        return {k: _copy_json(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy_json(v) for v in value]
    return value


def _code_snapshot(workload: Workload, directory: str) -> CodeSnapshot | None:
    source = workload.code_source
    if source is None:
        return None
    root = source.root_path
    if workload.base_dir is not None and not posixpath.isabs(root) and not root.startswith("/"):
        root = posixpath.normpath(posixpath.join(workload.base_dir.replace("\\", "/"), root))
    if source.remote_volume:
        target = f"{source.remote_volume}/{workload.experiment_name}/{posixpath.basename(directory)}/code_source.tar.gz"
    else:
        target = f"{directory}/code_source.tar.gz"
    return CodeSnapshot(root, tuple(source.include_paths or ()), target)


class _StagePlan:
    """Everything one task contributes to the plan."""

    def __init__(self, workload: Workload, directory: str, token: str) -> None:
        self.workload = workload
        self.directory = directory
        self.files: list[UploadFile] = []
        self.folders: list[str] = [directory]
        w = workload
        self.files.append(
            UploadFile(f"{directory}/training_config.yaml", w.source_text.encode("utf-8"))
        )
        if w.command is not None:
            self.files.append(UploadFile(f"{directory}/command.sh", _script(w.command)))
        params = _hyperparameters(w.parameters) if w.parameters else None
        if params is not None:
            self.files.append(UploadFile(f"{directory}/hyperparameters.yaml", params))
        self.files.extend(_env_files(directory, w.env_variables, w.secrets))

        compute: dict[str, Any] = {
            "accelerator_type": w.compute.accelerator_type,
            "accelerator_count": w.compute.num_accelerators,
        }
        if w.compute.pool_id:
            compute["provisioned_capacity_id"] = w.compute.pool_id
        deployment: dict[str, Any] = {"compute": compute}
        if w.containers:
            self.folders.append(f"{directory}/containers")
            entries = []
            for container in w.containers:
                folder = f"{directory}/containers/{container.name}"
                self.folders.append(folder)
                self.files.append(UploadFile(f"{folder}/command.sh", _script(container.command)))
                if params is not None:
                    self.files.append(UploadFile(f"{folder}/hyperparameters.yaml", params))
                self.files.extend(_env_files(folder, *w.container_env(container.name)))
                entries.append(
                    {
                        "name": container.name,
                        "ranks": list(container.ranks),
                        "command_path": f"{folder}/command.sh",
                        "unity_catalog_image_path": container.unity_catalog_image,
                    }
                )
            deployment["containers"] = entries
        else:
            deployment["command_path"] = f"{directory}/command.sh"

        task: dict[str, Any] = {"experiment": w.experiment_name, "deployments": [deployment]}
        self.snapshot = _code_snapshot(w, directory)
        if self.snapshot is not None:
            task["code_source_path"] = self.snapshot.target_path
        optional = {
            "mlflow_run": w.mlflow_run_name,
            "mlflow_experiment_directory": w.mlflow_experiment_directory,
            "mlflow_artifact_location": w.mlflow_artifact_location,
            "docker_image_url": w.environment.docker_image.url
            if w.environment.docker_image
            else None,
            "unity_catalog_image_path": w.environment.unity_catalog_image,
            "priority_class": w.compute.priority_class,
        }
        task.update({k: v for k, v in optional.items() if v is not None})
        self.ai_runtime_task = task
        self.environment = environment_spec(w.environment)

        run_options: dict[str, Any] = {"idempotency_token": token, "max_retries": w.max_retries}
        if w.timeout_minutes is not None:
            run_options["timeout_minutes"] = w.timeout_minutes
        if w.env_variables:
            run_options["env_variables"] = dict(sorted(w.env_variables.items()))
        if w.secrets:
            run_options["secrets"] = {k: str(v) for k, v in sorted(w.secrets.items())}
        # a copy: callers may adjust one body without changing the other
        self.preflight = _copy_json(
            {"task": task, "run_options": run_options, "environment": self.environment}
        )

    def task(self, task_key: str, environment_key: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "task_key": task_key,
            "run_if": "ALL_SUCCESS",
            "environment_key": environment_key,
            "max_retries": self.workload.max_retries,
        }
        if self.workload.max_retries > 0:
            body["retry_on_timeout"] = True
        body["ai_runtime_task"] = self.ai_runtime_task
        return body


def _check_stages(stages: Sequence[Stage]) -> None:
    problems: list[Problem] = []
    if not stages:
        raise WorkloadError(
            [
                Problem(
                    "stages", "a workflow needs at least one stage", "pass one Stage per workload"
                )
            ]
        )
    keys: dict[str, int] = {}
    for i, stage in enumerate(stages):
        path = f"stages[{i}]"
        if not isinstance(stage, Stage) or not isinstance(stage.workload, Workload):
            problems.append(
                Problem(
                    path, f"{path} is not a Stage with a Workload", "use Stage(task_key, workload)"
                )
            )
            continue
        if not isinstance(stage.task_key, str) or not _TASK_KEY_RE.match(stage.task_key):
            problems.append(
                Problem(
                    f"{path}.task_key",
                    f"task_key {stage.task_key!r} is invalid",
                    "use 1-100 characters of A-Z a-z 0-9 _ -",
                )
            )
        elif stage.task_key in keys:
            problems.append(
                Problem(
                    f"{path}.task_key",
                    f"task_key {stage.task_key!r} is already used by stages[{keys[stage.task_key]}]",
                    "give every stage a unique task_key",
                )
            )
        else:
            keys[stage.task_key] = i
        if stage.run_if not in RUN_IF_VALUES:
            problems.append(
                Problem(
                    f"{path}.run_if",
                    f"unknown run_if {stage.run_if!r}",
                    f"one of {', '.join(RUN_IF_VALUES)}",
                )
            )
    if problems:
        raise WorkloadError(problems)
    for i, stage in enumerate(stages):
        for dep in stage.depends_on:
            if dep not in keys:
                problems.append(
                    Problem(
                        f"stages[{i}].depends_on",
                        f"stage {stage.task_key!r} depends on unknown stage {dep!r}",
                        f"known stages: {', '.join(keys)}",
                    )
                )
            elif dep == stage.task_key:
                problems.append(
                    Problem(
                        f"stages[{i}].depends_on",
                        f"stage {stage.task_key!r} depends on itself",
                        "remove it from depends_on",
                    )
                )
    if problems:
        raise WorkloadError(problems)
    # Kahn's algorithm: whatever cannot be ordered is on a cycle.
    remaining = {s.task_key: set(s.depends_on) for s in stages}
    while True:
        ready = [k for k, deps in remaining.items() if not deps]
        if not ready:
            break
        for key in ready:
            del remaining[key]
        for deps in remaining.values():
            deps.difference_update(ready)
    if remaining:
        raise WorkloadError(
            [
                Problem(
                    "stages",
                    f"the stages {', '.join(sorted(remaining))} depend on each other in a cycle",
                    "remove one of the depends_on entries of the cycle",
                )
            ]
        )


def _single(values: Sequence[str | None], what: str) -> str | None:
    distinct = sorted({v for v in values if v is not None})
    if len(distinct) > 1:
        raise WorkloadError(
            [
                Problem(
                    what,
                    f"the stages set different {what} values: {', '.join(distinct)}",
                    f"use one {what} for the whole run",
                )
            ]
        )
    return distinct[0] if distinct else None


def _random_token() -> str:
    return uuid.uuid4().hex


def _assemble(
    stages: Sequence[Stage],
    *,
    run_name: str,
    user_name: str,
    token: str,
    suffixes: dict[str, str],
    single: bool,
) -> SubmissionPlan:
    home = home_dir(user_name)
    parts = {
        s.task_key: _StagePlan(
            s.workload, launch_dir(home, s.workload, suffixes[s.task_key]), token
        )
        for s in stages
    }
    specs = [parts[s.task_key].environment for s in stages]
    same_env = all(spec == specs[0] for spec in specs)
    env_keys = {s.task_key: "default" if same_env else f"env_{s.task_key}" for s in stages}

    body: dict[str, Any] = {"run_name": run_name, "idempotency_token": token}
    if single:
        minutes = stages[0].workload.timeout_minutes
        if minutes is not None:
            body["timeout_seconds"] = minutes * 60
    policy_id = _single([s.workload.usage_policy_id for s in stages], "usage_policy_id")
    policy_name = _single([s.workload.usage_policy_name for s in stages], "usage_policy_name")
    if policy_id and policy_name:
        raise WorkloadError(
            [
                Problem(
                    "usage_policy_name",
                    "the stages mix usage_policy_name and usage_policy_id",
                    "use the same usage policy in every stage",
                )
            ]
        )
    if policy_id:
        body["budget_policy_id"] = policy_id
    if same_env:
        body["environments"] = [{"environment_key": "default", "spec": specs[0]}]
    else:
        body["environments"] = [
            {"environment_key": env_keys[s.task_key], "spec": parts[s.task_key].environment}
            for s in stages
        ]
    tasks = []
    for stage in stages:
        task = parts[stage.task_key].task(stage.task_key, env_keys[stage.task_key])
        if not single:
            task["run_if"] = stage.run_if
            if stage.depends_on:
                task = {
                    "task_key": task["task_key"],
                    "depends_on": [{"task_key": d} for d in stage.depends_on],
                    **{k: v for k, v in task.items() if k != "task_key"},
                }
            if stage.workload.timeout_minutes is not None:
                task["timeout_seconds"] = stage.workload.timeout_minutes * 60
        tasks.append(task)
    body["tasks"] = tasks

    folders: list[str] = []
    files: list[UploadFile] = []
    snapshots: list[CodeSnapshot] = []
    permissions: list[dict[str, Any]] = []
    images: dict[str, ImageRequirement] = {}
    for stage in stages:
        part = parts[stage.task_key]
        folders.extend(f for f in part.folders if f not in folders)
        files.extend(part.files)
        if part.snapshot is not None:
            snapshots.append(part.snapshot)
        for perm in stage.workload.permissions:
            entry = perm.to_access_control()
            if entry not in permissions:
                permissions.append(entry)
        if stage.workload.environment.docker_image is not None:
            image = stage.workload.environment.docker_image
            images[image.url] = _merge_image(images.get(image.url), image)
    return SubmissionPlan(
        run_name=run_name,
        idempotency_token=token,
        home=home,
        launch_dirs={s.task_key: parts[s.task_key].directory for s in stages},
        folders=tuple(folders),
        files=tuple(files),
        code_snapshots=tuple(snapshots),
        preflight_bodies=tuple(parts[s.task_key].preflight for s in stages),
        submit_body=body,
        docker_images=tuple(sorted(images)),
        permissions=tuple(permissions),
        usage_policy_name=policy_name,
        image_requirements=tuple(images[url] for url in sorted(images)),
    )


def _merge_image(known: ImageRequirement | None, image: DockerImage) -> ImageRequirement:
    """One requirement per image: ``latest`` wins over ``auto`` (a stage that wants the
    re-pushed tag gets it, and so do the others in the same run), the first credentials win."""
    wanted = ImageRequirement(
        image.url, image.tag_policy, image.credentials_scope, image.credentials_key
    )
    if known is None or (known.tag_policy == "auto" and wanted.tag_policy == "latest"):
        return wanted
    return known


def _check_token(token: str) -> str:
    token = token.strip()
    if not token or len(token) > 64:
        raise WorkloadError(
            [
                Problem(
                    "idempotency_token",
                    f"idempotency token must be 1-64 characters, got {len(token)}",
                    "use make_idempotency_token(...) or a short unique string",
                )
            ]
        )
    return token


def _check_user(user_name: str) -> None:
    if not isinstance(user_name, str) or not user_name.strip() or "/" in user_name:
        raise WorkloadError(
            [
                Problem(
                    "user_name",
                    f"invalid workspace user name {user_name!r}",
                    "pass the userName of the current user (e.g. someone@example.com)",
                )
            ]
        )


def _check_suffix(suffix: str) -> str:
    if not _SUFFIX_RE.match(suffix):
        raise WorkloadError(
            [
                Problem(
                    "launch_suffix",
                    f"launch suffix {suffix!r} must be 16 lower-case hex digits",
                    "leave it unset to derive it from the idempotency token",
                )
            ]
        )
    return suffix


def build_plan(
    workload: Workload,
    *,
    user_name: str,
    idempotency_token: str | None = None,
    launch_suffix: str | None = None,
) -> SubmissionPlan:
    """The plan of a single-workload run (workload.md §4-§5)."""
    if not isinstance(workload, Workload):
        raise WorkloadError(
            [
                Problem(
                    "",
                    f"expected a Workload, got {type(workload).__name__}",
                    "load it with load_workload(...)",
                )
            ]
        )
    _check_user(user_name)
    token = _check_token(idempotency_token or workload.idempotency_token or _random_token())
    suffix = (
        _check_suffix(launch_suffix) if launch_suffix is not None else default_launch_suffix(token)
    )
    stage = Stage(workload.experiment_name, workload)
    return _assemble(
        [stage],
        run_name=workload.experiment_name,
        user_name=user_name,
        token=token,
        suffixes={stage.task_key: suffix},
        single=True,
    )


def build_workflow_plan(
    stages: Sequence[Stage],
    *,
    run_name: str,
    user_name: str,
    idempotency_token: str | None = None,
    launch_suffix: str | None = None,
) -> SubmissionPlan:
    """One runs/submit with a task per stage (workload.md §6).

    Each stage gets its own launch directory; its suffix is derived from the run's suffix and
    the task key, so two stages of the same experiment never share a folder.
    """
    stages = list(stages)
    _check_stages(stages)
    _check_user(user_name)
    if not isinstance(run_name, str) or not run_name.strip():
        raise WorkloadError(
            [Problem("run_name", "run_name must not be blank", "name the workflow run")]
        )
    token = _check_token(idempotency_token or _random_token())
    base = (
        _check_suffix(launch_suffix) if launch_suffix is not None else default_launch_suffix(token)
    )
    suffixes = {
        s.task_key: hashlib.sha256(f"{base}/{s.task_key}".encode()).hexdigest()[:16] for s in stages
    }
    return _assemble(
        stages, run_name=run_name, user_name=user_name, token=token, suffixes=suffixes, single=False
    )


def make_idempotency_token(
    orchestrator: str,
    pipeline_id: str,
    run_id: str,
    task_key: str,
    map_index: int | str | None = None,
    generation: int | str = 0,
    *,
    namespace: str | None = None,
) -> str:
    """A deterministic token (64 hex characters) for one logical submission (workload.md §6).

    ``generation`` changes when a human clears/re-materializes or after a terminal failure;
    an automatic retry of a crashed worker keeps it, and so gets the same run back.

    ``namespace`` names the orchestrator deployment (an Airflow metadata database, a Dagster
    instance): two deployments sharing a workspace run the same pipeline with the same run
    ids (``scheduled__<date>``), and without it would get each other's runs back. Without a
    namespace the token is the one earlier versions computed.
    """
    parts = [orchestrator, pipeline_id, run_id, task_key, map_index, generation]
    if namespace is not None:
        parts.insert(1, namespace)
    key = json.dumps([None if p is None else str(p) for p in parts], separators=(",", ":"))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()
