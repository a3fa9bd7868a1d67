"""Workload(s) -> SubmissionPlan. Pure: no I/O, deterministic given the inputs.

The launch directory layout and file names are part of the platform contract (docs/spec/workload.md
§4): the server-side launcher finds the side files next to each command path.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from air_runtime._errors import Problem, WorkloadError
from air_runtime.plan._models import (
    CodeSnapshot,
    ImageRequirement,
    Stage,
    SubmissionPlan,
    UploadFile,
)
from air_runtime.plan._workflow import check_stages
from air_runtime.plan._writers import command_script, go_json, hyperparameters_yaml
from air_runtime.platform import MAX_IDEMPOTENCY_TOKEN_LENGTH
from air_runtime.workload import (
    DockerImage,
    Environment,
    SecretRef,
    Workload,
)

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
    """``environments[].spec`` of the submit body (docs/spec/workload.md §5)."""
    spec: dict[str, Any]
    if environment.is_base_environment:
        spec = {"base_environment": f"workspace-base-environments/{environment.version}"}
    else:
        spec = {"environment_version": environment.version}
    if environment.dependencies:
        spec["dependencies"] = list(environment.dependencies)
    return spec


def _env_files(
    folder: str, plain: dict[str, str], secrets: dict[str, SecretRef]
) -> list[UploadFile]:
    files = []
    if plain:
        files.append(
            UploadFile(
                f"{folder}/env_vars.json",
                go_json([{"name": k, "value": plain[k]} for k in sorted(plain)]),
            )
        )
    if secrets:
        files.append(
            UploadFile(
                f"{folder}/secret_env_vars.json",
                go_json(
                    [
                        {"name": k, "secret_scope": secrets[k].scope, "secret_key": secrets[k].key}
                        for k in sorted(secrets)
                    ]
                ),
            )
        )
    return files


def _copy_json(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, immutable scalars); copy.deepcopy is several
    times slower and the bodies have no shared or cyclic parts to preserve."""
    if type(value) is dict:
        return {k: _copy_json(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy_json(v) for v in value]
    return value


def _code_snapshot(workload: Workload, task_key: str) -> CodeSnapshot | None:
    source = workload.code_source
    if source is None:
        return None
    git = source.git
    return CodeSnapshot(
        task_key=task_key,
        root_path=source.root_path,
        base_dir=workload.base_dir,
        include_paths=tuple(source.include_paths or ()),
        remote_volume=source.remote_volume,
        git_commit=git.commit if git else None,
        git_branch=git.branch if git else None,
    )


class _StagePlan:
    """Everything one task contributes to the plan."""

    def __init__(self, workload: Workload, directory: str, token: str, task_key: str) -> None:
        self.workload = workload
        self.directory = directory
        self.files: list[UploadFile] = []
        self.folders: list[str] = [directory]
        w = workload
        self.files.append(
            UploadFile(f"{directory}/training_config.yaml", w.source_text.encode("utf-8"))
        )
        if w.command is not None:
            self.files.append(UploadFile(f"{directory}/command.sh", command_script(w.command)))
        params = hyperparameters_yaml(w.parameters) if w.parameters else None
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
                self.files.append(
                    UploadFile(f"{folder}/command.sh", command_script(container.command))
                )
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
        # code_source_path names the archive by its content: the client sets it once the
        # snapshot is packed (plan.submit_body_with_code).
        self.snapshot = _code_snapshot(w, task_key)
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

        # The preflight body as the CLI builds it (validateconfig.go): max_retries and the
        # usage policy only when the workload sets them.
        run_options: dict[str, Any] = {"idempotency_token": token}
        if w.max_retries_given:
            run_options["max_retries"] = w.max_retries
        if w.timeout_minutes is not None:
            run_options["timeout_minutes"] = w.timeout_minutes
        if w.usage_policy_name is not None:
            run_options["usage_policy_name"] = w.usage_policy_name
        if w.usage_policy_id is not None:
            run_options["usage_policy_id"] = w.usage_policy_id
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
    home: str | None,
) -> SubmissionPlan:
    home = home.rstrip("/") if home else home_dir(user_name)
    parts = {
        s.task_key: _StagePlan(
            s.workload, launch_dir(home, s.workload, suffixes[s.task_key]), token, s.task_key
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
    if not token or len(token) > MAX_IDEMPOTENCY_TOKEN_LENGTH:
        raise WorkloadError(
            [
                Problem(
                    "idempotency_token",
                    f"idempotency token must be 1-{MAX_IDEMPOTENCY_TOKEN_LENGTH} characters, "
                    f"got {len(token)}",
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
    home: str | None = None,
    run_name: str | None = None,
) -> SubmissionPlan:
    """The plan of a single-workload run (docs/spec/workload.md §4-§5). ``home`` replaces the user's
    workspace folder (the CLI's DATABRICKS_INTERNAL_USER_WORKSPACE_DIR, runlaunch.go);
    ``run_name`` the run's name (the experiment name, as the CLI sends, when not given)."""
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
    if run_name is not None and not run_name.strip():
        raise WorkloadError(
            [Problem("run_name", "run_name must not be blank", "name the run or leave it unset")]
        )
    return _assemble(
        [stage],
        run_name=run_name or workload.experiment_name,
        user_name=user_name,
        token=token,
        suffixes={stage.task_key: suffix},
        single=True,
        home=home,
    )


def build_workflow_plan(
    stages: Sequence[Stage],
    *,
    run_name: str,
    user_name: str,
    idempotency_token: str | None = None,
    launch_suffix: str | None = None,
    home: str | None = None,
) -> SubmissionPlan:
    """One runs/submit with a task per stage (docs/spec/workload.md §6).

    Each stage gets its own launch directory; its suffix is derived from the run's suffix and
    the task key, so two stages of the same experiment never share a folder.
    """
    stages = list(stages)
    check_stages(stages)
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
        stages,
        run_name=run_name,
        user_name=user_name,
        token=token,
        suffixes=suffixes,
        single=False,
        home=home,
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
    """A deterministic token (64 hex characters) for one logical submission (docs/spec/workload.md §6).

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
