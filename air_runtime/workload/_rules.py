"""Every validation rule of workload.md §1-§3, applied to the raw mapping.

The checker walks the whole mapping and keeps going after a problem, so the user sees every
mistake at once, each with its dotted path and a hint. It returns the normalized data the
models are built from.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from typing import Any

from air_runtime._docker_ref import DockerRefError, normalize_docker_ref
from air_runtime._errors import Problem
from air_runtime.workload._models import (
    GPUS_PER_NODE,
    PERMISSION_LEVELS,
    PRINCIPAL_FIELDS,
    PRIORITY_CLASSES,
    default_environment_version,
)
from air_runtime.workload._yaml import SourceMarks, child_path

TOP_LEVEL_KEYS = (
    "experiment_name", "compute", "environment", "command", "containers", "env_variables",
    "secrets", "code_source", "max_retries", "timeout_minutes", "idempotency_token",
    "parameters", "mlflow_run_name", "mlflow_experiment_directory", "mlflow_artifact_location",
    "permissions", "usage_policy_name", "usage_policy_id",
)  # fmt: skip
COMPUTE_KEYS = ("accelerator_type", "num_accelerators", "pool_id", "priority_class")
ENVIRONMENT_KEYS = ("version", "dependencies", "docker_image", "unity_catalog_image")
DOCKER_IMAGE_KEYS = ("url", "tag_policy", "credentials_scope", "credentials_key")
CONTAINER_KEYS = ("name", "ranks", "unity_catalog_image", "command", "environment_variables")
CODE_SOURCE_KEYS = ("root_path", "remote_volume", "include_paths", "git")
GIT_KEYS = ("branch", "commit")
PERMISSION_KEYS = (*PRINCIPAL_FIELDS, "level")

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTAINER_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
UC_IMAGE_RE = re.compile(
    r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+:[A-Za-z0-9_][A-Za-z0-9_.-]*$"
)
SECRET_TEMPLATE_RE = re.compile(r"^\{\{secrets/([^/{}\s]+)/([^/{}\s]+)\}\}$")
VERSION_RE = re.compile(r"^databricks_ai_v(\d+)$")
UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
MAX_COMMAND_LINES = 1000
# Far above any AI Runtime allocation: a guard against a typo (GPUs per node multiplied in
# twice, a missing unit) that would otherwise build a submit body listing millions of ranks.
MAX_NODES = 2048
MAX_CONTAINER_NAME = 16

_UC_PER_CONTAINER_HINT = (
    "Docker images are not supported per container: publish the image to Unity Catalog and "
    "set unity_catalog_image: <catalog>.<schema>.<image>:<tag>"
)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {_short(value)}"
    return f"{type(value).__name__} {value!r}"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def scalar_text(value: Any) -> str | None:
    """Literal text of an environment variable value given as a Python scalar (dict input)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


class Checker:
    """Collects problems with their source locations while normalizing the mapping."""

    def __init__(self, marks: SourceMarks | None = None) -> None:
        self.marks = marks or SourceMarks()
        self.problems: list[Problem] = []

    # -- reporting -------------------------------------------------------------------------
    def add(
        self, path: str, message: str, hint: str | None = None, *, at_key: bool = False
    ) -> None:
        mark = self._find_mark(path, at_key)
        line, column = mark if mark else (None, None)
        self.problems.append(Problem(path, message, hint, line, column))

    def _find_mark(self, path: str, at_key: bool) -> tuple[int, int] | None:
        if self.marks.overridden and self.marks.is_overridden(path):
            return None
        if at_key and path in self.marks.keys:
            return self.marks.keys[path]
        probe = path
        while True:
            if probe in self.marks.values:
                return self.marks.values[probe]
            if not probe:
                return None
            cut = max(probe.rfind("."), probe.rfind("["))
            probe = probe[:cut] if cut > 0 else ""

    # -- generic shapes --------------------------------------------------------------------
    def mapping(
        self, value: Any, path: str, allowed: Iterable[str], what: str
    ) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.add(
                path,
                f"{path or 'the workload'} must be a mapping, got {_type_name(value)}",
                f"write {what} as 'key: value' lines",
            )
            return None
        allowed = tuple(allowed)
        for key in value:
            if not isinstance(key, str):
                self.add(
                    child_path(path, key),
                    f"key {key!r} in {path or 'the workload'} must be a string",
                    f"valid keys: {', '.join(allowed)}",
                    at_key=True,
                )
            elif key not in allowed:
                self.unknown_key(path, key, allowed)
        return value

    def unknown_key(self, path: str, key: str, allowed: tuple[str, ...]) -> None:
        where = child_path(path, key)
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"valid keys here: {', '.join(allowed)}"
        self.add(where, f"unknown key {key!r} in {path or 'the workload'}", hint, at_key=True)

    def string(self, value: Any, path: str, *, blank_ok: bool = False) -> str | None:
        if not isinstance(value, str):
            self.add(path, f"{path} must be a string, got {_type_name(value)}", "quote the value")
            return None
        if not blank_ok and not value.strip():
            self.add(path, f"{path} must not be blank", "give a non-empty value or remove the key")
            return None
        return value

    def integer(self, value: Any, path: str, minimum: int) -> int | None:
        if not _is_int(value):
            self.add(
                path,
                f"{path} must be an integer, got {_type_name(value)}",
                f"write a whole number >= {minimum}",
            )
            return None
        if value < minimum:
            self.add(path, f"{path} must be >= {minimum}, got {value}", f"use a value >= {minimum}")
            return None
        return int(value)

    def command(self, value: Any, path: str) -> str | None:
        text = self.string(value, path)
        if text is None:
            return None
        lines = len(text.splitlines())
        if lines > MAX_COMMAND_LINES:
            self.add(
                path,
                f"{path} has {lines} lines, more than {MAX_COMMAND_LINES}",
                "move the script into code_source and run it from the command",
            )
            return None
        return text

    # -- the workload ----------------------------------------------------------------------
    def workload(self, raw: Any) -> dict[str, Any] | None:
        data = self.mapping(raw, "", TOP_LEVEL_KEYS, "the workload")
        if data is None:
            return None
        out: dict[str, Any] = {}

        if "experiment_name" not in data:
            self.add(
                "experiment_name",
                "experiment_name is required",
                "add experiment_name: <1-100 characters of A-Z a-z 0-9 _ ->",
            )
        else:
            name = self.string(data["experiment_name"], "experiment_name")
            if name is not None:
                if NAME_RE.match(name):
                    out["experiment_name"] = name
                else:
                    self.add(
                        "experiment_name",
                        f"experiment_name {_short(name)} must be 1-100 characters of "
                        "A-Z a-z 0-9 _ - (ASCII only)",
                        "replace spaces, dots and other characters with '_' or '-'",
                    )

        compute = self.compute(data.get("compute"), "compute" in data)
        if compute is not None:
            out["compute"] = compute
        nodes = (
            compute["num_accelerators"] // GPUS_PER_NODE[compute["accelerator_type"]]
            if compute
            else None
        )

        has_containers = "containers" in data and data["containers"] is not None
        environment = (
            self.environment(data.get("environment"), has_containers)
            if "environment" in data
            else None
        )
        if environment is not None:
            out["environment"] = environment

        env_vars = self.env_variables(data.get("env_variables", {}), "env_variables")
        secrets = self.secrets(data.get("secrets", {}), "secrets")
        for name in sorted(set(env_vars) & set(secrets)):
            self.add(
                f"secrets.{name}",
                f"{name} is in both env_variables and secrets",
                f"keep {name} in only one of them",
            )
        out["env_variables"] = env_vars
        out["secrets"] = secrets

        has_command = "command" in data and data["command"] is not None
        if has_command and has_containers:
            self.add(
                "containers",
                "command and containers are mutually exclusive",
                "use command for one script on every node, or containers for per-rank images",
            )
        elif not has_command and not has_containers:
            self.add(
                "command",
                "one of command or containers is required",
                "add command: <shell script> (or a containers list)",
            )
        if has_command:
            command = self.command(data["command"], "command")
            if command is not None:
                out["command"] = command
        if has_containers:
            containers = self.containers(data["containers"], nodes)
            if containers is not None:
                out["containers"] = containers
        elif "containers" in data:
            self.add(
                "containers",
                "containers must be a list, got nothing (null)",
                "list the containers or remove the key",
            )

        if "code_source" in data:
            code = self.code_source(data["code_source"])
            if code is not None:
                out["code_source"] = code
        if "max_retries" in data:
            value = self.integer(data["max_retries"], "max_retries", 0)
            if value is not None:
                out["max_retries"] = value
        if "timeout_minutes" in data:
            value = self.integer(data["timeout_minutes"], "timeout_minutes", 1)
            if value is not None:
                out["timeout_minutes"] = value
        if "idempotency_token" in data:
            token = self.string(data["idempotency_token"], "idempotency_token")
            if token is not None:
                token = token.strip()
                if len(token) > 64:
                    self.add(
                        "idempotency_token",
                        f"idempotency_token is {len(token)} characters, more than 64",
                        "use a token of at most 64 characters (e.g. a hash)",
                    )
                else:
                    out["idempotency_token"] = token
        if "parameters" in data:
            params = data["parameters"]
            if params is None:
                out["parameters"] = {}
            elif isinstance(params, dict):
                out["parameters"] = params
            else:
                self.add(
                    "parameters",
                    f"parameters must be a mapping, got {_type_name(params)}",
                    "write parameters as 'name: value' lines",
                )
        self.mlflow(data, out)
        if "permissions" in data:
            perms = self.permissions(data["permissions"])
            if perms is not None:
                out["permissions"] = perms
        self.usage_policy(data, out)
        return out

    def compute(self, raw: Any, present: bool) -> dict[str, Any] | None:
        if not present:
            self.add(
                "compute",
                "compute is required",
                "add compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}",
            )
            return None
        data = self.mapping(raw, "compute", COMPUTE_KEYS, "compute")
        if data is None:
            return None
        out: dict[str, Any] = {}
        gpus = None
        valid = ", ".join(GPUS_PER_NODE)
        if "accelerator_type" not in data:
            self.add(
                "compute.accelerator_type",
                "compute.accelerator_type is required",
                f"one of {valid}",
            )
        else:
            acc = self.string(data["accelerator_type"], "compute.accelerator_type")
            if acc is not None:
                if acc in GPUS_PER_NODE:
                    out["accelerator_type"] = acc
                    gpus = GPUS_PER_NODE[acc]
                else:
                    close = difflib.get_close_matches(acc, list(GPUS_PER_NODE), n=1, cutoff=0.6)
                    hint = f"valid values: {valid}" + (
                        f" (did you mean {close[0]!r}?)" if close else ""
                    )
                    self.add(
                        "compute.accelerator_type",
                        f"unknown compute.accelerator_type {_short(acc)} (names are case-sensitive)",
                        hint,
                    )
        if "num_accelerators" not in data:
            self.add(
                "compute.num_accelerators",
                "compute.num_accelerators is required",
                "give the total number of GPUs, a multiple of the GPUs per node",
            )
        else:
            count = self.integer(data["num_accelerators"], "compute.num_accelerators", 1)
            if count is not None:
                if gpus is not None and count % gpus:
                    self.add(
                        "compute.num_accelerators",
                        f"compute.num_accelerators for {out['accelerator_type']} must be a "
                        f"multiple of {gpus}, got {count}",
                        self._multiples_hint(count, gpus),
                    )
                elif gpus is not None and count // gpus > MAX_NODES:
                    self.add(
                        "compute.num_accelerators",
                        f"compute.num_accelerators {count} means {count // gpus} "
                        f"{out['accelerator_type']} nodes; at most {MAX_NODES} nodes can be "
                        "requested",
                        "num_accelerators is the total number of GPUs of the workload "
                        f"({gpus} per {out['accelerator_type']} node), not a per-node count",
                    )
                else:
                    out["num_accelerators"] = count
        pool_id = None
        if "pool_id" in data:
            pool_id = self.string(data["pool_id"], "compute.pool_id")
            if pool_id is not None:
                if len(pool_id) > 255:
                    self.add(
                        "compute.pool_id",
                        f"compute.pool_id is {len(pool_id)} characters, more than 255",
                        "copy the pool id exactly",
                    )
                else:
                    out["pool_id"] = pool_id
        if "priority_class" in data:
            prio = self.string(data["priority_class"], "compute.priority_class")
            if prio is not None:
                if prio.upper() not in PRIORITY_CLASSES:
                    self.add(
                        "compute.priority_class",
                        f"unknown compute.priority_class {_short(prio)}",
                        f"one of {', '.join(PRIORITY_CLASSES)}",
                    )
                elif "pool_id" not in data:
                    self.add(
                        "compute.priority_class",
                        "compute.priority_class requires compute.pool_id",
                        "add compute.pool_id (priority applies within provisioned capacity) "
                        "or remove priority_class",
                    )
                else:
                    out["priority_class"] = prio.upper()
        if "accelerator_type" in out and "num_accelerators" in out:
            return out
        return None

    @staticmethod
    def _multiples_hint(count: int, gpus: int) -> str:
        lower = count - count % gpus
        choices = [lower, lower + gpus] if lower else [gpus]
        return "use " + " or ".join(str(c) for c in choices) + f" ({gpus} GPUs per node)"

    def environment(self, raw: Any, has_containers: bool) -> dict[str, Any] | None:
        if raw is None:
            return None
        data = self.mapping(raw, "environment", ENVIRONMENT_KEYS, "environment")
        if data is None:
            return None
        out: dict[str, Any] = {}
        if "version" in data:
            version = self.version(data["version"])
            if version is not None:
                out["version"] = version
        if "dependencies" in data:
            deps = data["dependencies"]
            if isinstance(deps, str):
                self.add(
                    "environment.dependencies",
                    "environment.dependencies must be a list of pip requirements, got a string",
                    f"write it as a list: dependencies: [{_short(deps.strip(), 40)}] or one "
                    "'- requirement' line per package",
                )
            elif not isinstance(deps, list):
                self.add(
                    "environment.dependencies",
                    f"environment.dependencies must be a list, got {_type_name(deps)}",
                    "write one '- requirement' line per package",
                )
            else:
                ok = []
                for i, dep in enumerate(deps):
                    text = self.string(dep, f"environment.dependencies[{i}]")
                    if text is not None:
                        ok.append(text.strip())
                if len(ok) == len(deps):
                    out["dependencies"] = ok
        if "docker_image" in data:
            image = self.docker_image(data["docker_image"])
            if image is not None:
                out["docker_image"] = image
        if "unity_catalog_image" in data:
            uc = self.uc_image(data["unity_catalog_image"], "environment.unity_catalog_image")
            if uc is not None:
                out["unity_catalog_image"] = uc

        managed = [f"environment.{k}" for k in ("version", "dependencies") if k in data]
        for image_key in ("docker_image", "unity_catalog_image"):
            if image_key in data and managed:
                self.add(
                    f"environment.{image_key}",
                    f"environment.{image_key} cannot be combined with {' and '.join(managed)}",
                    "install extra packages in the image (Dockerfile) instead and remove "
                    + " and ".join(managed),
                )
        if "docker_image" in data and "unity_catalog_image" in data:
            self.add(
                "environment.unity_catalog_image",
                "environment.docker_image and environment.unity_catalog_image are mutually exclusive",
                "keep only one of them",
            )
        if has_containers:
            for image_key in ("docker_image", "unity_catalog_image"):
                if image_key in data:
                    self.add(
                        f"environment.{image_key}",
                        f"environment.{image_key} is not allowed together with containers",
                        "set unity_catalog_image on each container instead",
                    )
        if "version" not in out and not any(
            k in data for k in ("docker_image", "unity_catalog_image")
        ):
            out.setdefault("version", default_environment_version())
        return out

    def version(self, value: Any) -> str | None:
        path = "environment.version"
        hint = "use a number such as 6 or the form databricks_ai_v<N> with N >= 5"
        if _is_int(value):
            if value < 1:
                self.add(path, f"{path} must be positive, got {value}", hint)
                return None
            return str(value)
        if not isinstance(value, str):
            self.add(path, f"{path} must be a number or a string, got {_type_name(value)}", hint)
            return None
        text = value.strip().lower()
        if text.isdigit() and text.isascii():
            return value.strip()  # sent as written: "05" stays "05" (runsubmit.go)
        match = VERSION_RE.match(text)
        if match and text.isascii():
            if int(match.group(1)) < 5:
                self.add(
                    path,
                    f"{path} {_short(value)} is too old: databricks_ai_v<N> needs N >= 5",
                    hint,
                )
                return None
            return f"databricks_ai_v{int(match.group(1))}"
        self.add(path, f"{path} {_short(value)} is not a valid version", hint)
        return None

    def docker_image(self, raw: Any) -> dict[str, Any] | None:
        path = "environment.docker_image"
        if isinstance(raw, str):
            self.add(
                path,
                f"{path} must be a mapping with url, got a string",
                f"write docker_image: {{url: {raw.strip()}}}",
            )
            return None
        data = self.mapping(raw, path, DOCKER_IMAGE_KEYS, "docker_image")
        if data is None:
            return None
        out: dict[str, Any] = {}
        if "url" not in data:
            self.add(f"{path}.url", f"{path}.url is required", "give e.g. url: myorg/repo:tag")
        else:
            url = self.string(data["url"], f"{path}.url")
            if url is not None:
                try:
                    out["url"] = normalize_docker_ref(url)
                except DockerRefError as exc:
                    self.add(f"{path}.url", exc.message, exc.hint)
        policy = "auto"
        if "tag_policy" in data:
            text = self.string(data["tag_policy"], f"{path}.tag_policy")
            if text is not None:
                if text.lower() in ("auto", "latest"):
                    policy = text.lower()
                    out["tag_policy"] = policy
                else:
                    self.add(
                        f"{path}.tag_policy",
                        f"unknown {path}.tag_policy {_short(text)}",
                        "use auto or latest",
                    )
        creds = [k for k in ("credentials_scope", "credentials_key") if k in data]
        for key in creds:
            text = self.string(data[key], f"{path}.{key}")
            if text is not None:
                out[key] = text
        if len(creds) == 1:
            missing = "credentials_key" if creds[0] == "credentials_scope" else "credentials_scope"
            self.add(
                f"{path}.{creds[0]}",
                f"{path}.{creds[0]} requires {path}.{missing}",
                "give credentials_scope and credentials_key together",
            )
        elif creds and policy != "latest":
            self.add(
                f"{path}.credentials_scope",
                f"{path}.credentials_scope/credentials_key are only used with tag_policy: latest",
                "add tag_policy: latest, or register the image once and remove the credentials",
            )
        return out if "url" in out else None

    def uc_image(self, value: Any, path: str) -> str | None:
        text = self.string(value, path)
        if text is None:
            return None
        if not UC_IMAGE_RE.match(text.strip()):
            self.add(
                path,
                f"{path} {_short(text)} is not of the form <catalog>.<schema>.<image>:<tag>",
                "e.g. main.rl.vllm:0.20.0",
            )
            return None
        return text.strip()

    def env_variables(self, raw: Any, path: str) -> dict[str, str]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add(
                path,
                f"{path} must be a mapping of NAME: value, got {_type_name(raw)}",
                "write one 'NAME: value' line per variable",
            )
            return {}
        out: dict[str, str] = {}
        for name, value in raw.items():
            sub = child_path(path, name)
            if self.env_name(name, sub):
                text = scalar_text(value)
                if text is None:
                    self.add(
                        sub,
                        f"{sub} must be a single value, got {_type_name(value)}",
                        "quote the value as a string",
                    )
                else:
                    out[str(name)] = text
        return out

    def env_name(self, name: Any, path: str) -> bool:
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            self.add(
                path,
                f"environment variable name {_short(name)} is invalid",
                "names start with a letter or '_' and contain only letters, digits and '_'",
                at_key=True,
            )
            return False
        return True

    def secrets(self, raw: Any, path: str) -> dict[str, dict[str, str]]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add(
                path,
                f"{path} must be a mapping of NAME: scope/key, got {_type_name(raw)}",
                "write one 'NAME: scope/key' line per secret",
            )
            return {}
        out: dict[str, dict[str, str]] = {}
        for name, value in raw.items():
            sub = child_path(path, name)
            if not self.env_name(name, sub):
                continue
            parts = value.split("/") if isinstance(value, str) else []
            if len(parts) != 2 or not all(p.strip() for p in parts) or value != value.strip():
                self.add(
                    sub,
                    f"{sub} must be 'scope/key' with exactly one '/', got {_type_name(value)}",
                    "e.g. HF_TOKEN: research/hf_token",
                )
                continue
            out[str(name)] = {"scope": parts[0], "key": parts[1]}
        return out

    def containers(self, raw: Any, nodes: int | None) -> list[dict[str, Any]] | None:
        if not isinstance(raw, list):
            self.add(
                "containers",
                f"containers must be a list, got {_type_name(raw)}",
                "write one '- name: ...' item per container",
            )
            return None
        if not raw:
            self.add("containers", "containers must not be empty", "list at least one container")
            return None
        results: list[dict[str, Any] | None] = []
        names: dict[str, int] = {}
        for i, item in enumerate(raw):
            results.append(self.container(item, i, len(raw), names))
        ok = [c for c in results if c is not None]
        if nodes is not None:
            self.rank_partition(raw, results, nodes)
        return ok if len(ok) == len(raw) else None

    def container(
        self, raw: Any, i: int, total: int, names: dict[str, int]
    ) -> dict[str, Any] | None:
        path = f"containers[{i}]"
        if not isinstance(raw, dict):
            self.add(
                path,
                f"{path} must be a mapping, got {_type_name(raw)}",
                "give name, ranks, unity_catalog_image and command",
            )
            return None
        for key in raw:
            if key == "docker_image":
                self.add(
                    f"{path}.docker_image",
                    f"{path}.docker_image is not supported",
                    _UC_PER_CONTAINER_HINT,
                    at_key=True,
                )
            elif not isinstance(key, str) or key not in CONTAINER_KEYS:
                self.unknown_key(path, str(key), CONTAINER_KEYS)
        out: dict[str, Any] = {}
        if "name" not in raw:
            self.add(f"{path}.name", f"{path}.name is required", "give each container a short name")
        else:
            name = self.string(raw["name"], f"{path}.name")
            if name is not None:
                if not CONTAINER_NAME_RE.match(name):
                    self.add(
                        f"{path}.name",
                        f"container name {_short(name)} is invalid",
                        "use letters, digits and '_' only, starting with a letter or '_' "
                        "(no hyphens, dots or slashes: it becomes a folder name)",
                    )
                elif len(name) > MAX_CONTAINER_NAME:
                    self.add(
                        f"{path}.name",
                        f"container name {_short(name)} is {len(name)} characters, more than {MAX_CONTAINER_NAME}",
                        "use a shorter name",
                    )
                elif name in names:
                    self.add(
                        f"{path}.name",
                        f"container name {name!r} is already used by containers[{names[name]}]",
                        "give every container a unique name",
                    )
                else:
                    names[name] = i
                    out["name"] = name
        if "command" not in raw:
            self.add(
                f"{path}.command",
                f"{path}.command is required",
                "give the script this container runs",
            )
        else:
            command = self.command(raw["command"], f"{path}.command")
            if command is not None:
                out["command"] = command
        if "unity_catalog_image" not in raw:
            self.add(
                f"{path}.unity_catalog_image",
                f"{path}.unity_catalog_image is required",
                "give <catalog>.<schema>.<image>:<tag>"
                + ("; " + _UC_PER_CONTAINER_HINT if "docker_image" in raw else ""),
            )
        else:
            uc = self.uc_image(raw["unity_catalog_image"], f"{path}.unity_catalog_image")
            if uc is not None:
                out["unity_catalog_image"] = uc
        if "ranks" not in raw or raw["ranks"] is None:
            if total > 1:
                self.add(
                    f"{path}.ranks",
                    f"{path}.ranks is required when there is more than one container",
                    "list the node ranks this container runs on, e.g. ranks: [0]",
                )
        else:
            ranks = raw["ranks"]
            if _is_int(ranks):
                ranks = [ranks]
            if not isinstance(ranks, list) or not all(_is_int(r) for r in ranks):
                self.add(
                    f"{path}.ranks",
                    f"{path}.ranks must be a list of node ranks, got {_type_name(raw['ranks'])}",
                    "e.g. ranks: [0, 1]",
                )
            elif not ranks:
                self.add(f"{path}.ranks", f"{path}.ranks must not be empty", "e.g. ranks: [0]")
        if "environment_variables" in raw:
            env = self.container_env(raw["environment_variables"], f"{path}.environment_variables")
            if env is not None:
                out.update(env)
        required = ("name", "command", "unity_catalog_image")
        return out if all(k in out for k in required) else None

    def container_env(self, raw: Any, path: str) -> dict[str, Any] | None:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add(
                path,
                f"{path} must be a mapping with variables, got {_type_name(raw)}",
                "write environment_variables: {variables: {NAME: value}}",
            )
            return None
        for key in raw:
            if key == "files":
                self.add(
                    f"{path}.files",
                    f"{path}.files is not supported",
                    "put the variables under environment_variables.variables",
                    at_key=True,
                )
            elif key != "variables":
                self.unknown_key(path, str(key), ("variables",))
        variables = self.env_variables(raw.get("variables", {}), f"{path}.variables")
        plain: dict[str, str] = {}
        secrets: dict[str, dict[str, str]] = {}
        for name, value in variables.items():
            if value.startswith("{{secrets/"):
                match = SECRET_TEMPLATE_RE.match(value)
                if match is None:
                    self.add(
                        f"{path}.variables.{name}",
                        f"malformed secret reference {_short(value)}",
                        "write {{secrets/<scope>/<key>}}",
                    )
                else:
                    secrets[name] = {"scope": match.group(1), "key": match.group(2)}
            else:
                plain[name] = value
        return {"env_variables": plain, "secrets": secrets}

    def rank_partition(
        self, raw: list[Any], results: list[dict[str, Any] | None], nodes: int
    ) -> None:
        owners: dict[int, list[str]] = {}

        def label(i: int) -> str:
            item = raw[i]
            name = item.get("name") if isinstance(item, dict) else None
            return f"{name!r}" if isinstance(name, str) else f"containers[{i}]"

        for i, item in enumerate(raw):
            if not isinstance(item, dict):
                return
            ranks = item.get("ranks")
            if _is_int(ranks):
                ranks = [ranks]
            if ranks is None and len(raw) == 1:
                ranks = list(range(nodes))
            if not isinstance(ranks, list) or not all(_is_int(r) for r in ranks):
                return
            seen: set[int] = set()
            for rank in ranks:
                if rank < 0 or rank >= nodes:
                    self.add(
                        f"containers[{i}].ranks",
                        f"rank {rank} of container {label(i)} is out of range: {nodes} node(s) "
                        f"have ranks 0..{nodes - 1}",
                        "ranks are node ranks (not GPU ranks); use 0.."
                        f"{nodes - 1} or raise compute.num_accelerators",
                    )
                    continue
                if rank in seen:
                    self.add(
                        f"containers[{i}].ranks",
                        f"rank {rank} is listed twice in container {label(i)}",
                        "list each rank once",
                    )
                    continue
                seen.add(rank)
                if rank in owners:
                    self.add(
                        f"containers[{i}].ranks",
                        f"rank {rank} is assigned to containers {' and '.join([*owners[rank], label(i)])}",
                        "assign every rank to exactly one container",
                    )
                owners.setdefault(rank, []).append(label(i))
            if results[i] is not None:
                results[i]["ranks"] = sorted(seen)  # type: ignore[index]
        containers = ", ".join(label(i) for i in range(len(raw)))
        for first, last in _spans(r for r in range(nodes) if r not in owners):
            if last - first < 2:
                for rank in range(first, last + 1):
                    self.add(
                        "containers",
                        f"rank {rank} is not assigned to any container (containers: {containers})",
                        f"add {rank} to the ranks of one container",
                    )
            else:  # one problem for a run of ranks, not one per rank
                self.add(
                    "containers",
                    f"ranks {first}..{last} are not assigned to any container "
                    f"(containers: {containers})",
                    f"add {first}..{last} to the ranks of the containers",
                )

    def code_source(self, raw: Any) -> dict[str, Any] | None:
        path = "code_source"
        if isinstance(raw, dict) and "type" in raw:
            # the older nested form {type: snapshot, snapshot: {...}}
            extra = [k for k in raw if k not in ("type", "snapshot")]
            for key in extra:
                self.unknown_key(path, str(key), ("type", "snapshot"))
            if raw.get("type") != "snapshot":
                self.add(
                    f"{path}.type",
                    f"unknown {path}.type {_short(raw.get('type'))}",
                    "use type: snapshot, or the flat form code_source: {root_path: ...}",
                )
                return None
            if "snapshot" not in raw:
                self.add(
                    f"{path}.snapshot",
                    f"{path}.snapshot is required with type: snapshot",
                    "add snapshot: {root_path: .}",
                )
                return None
            raw, path = raw["snapshot"], f"{path}.snapshot"
        data = self.mapping(raw, path, CODE_SOURCE_KEYS, "code_source")
        if data is None:
            return None
        out: dict[str, Any] = {}
        ok = True
        if "root_path" in data:
            root = self.string(data["root_path"], f"{path}.root_path")
            ok = ok and root is not None
            if root is not None:
                out["root_path"] = root
        elif "git" not in data:
            self.add(
                f"{path}.root_path",
                f"{path}.root_path is required",
                "give the local folder to upload, relative to the YAML file (e.g. .)",
            )
            ok = False
        if "remote_volume" in data:
            volume = self.string(data["remote_volume"], f"{path}.remote_volume")
            if volume is not None and not volume.startswith("/Volumes/"):
                self.add(
                    f"{path}.remote_volume",
                    f"{path}.remote_volume {_short(volume)} must start with /Volumes/",
                    "e.g. /Volumes/<catalog>/<schema>/<volume>",
                )
                volume = None
            ok = ok and volume is not None
            if volume is not None:
                out["remote_volume"] = volume.rstrip("/")
        if "include_paths" in data:
            paths = data["include_paths"]
            if not isinstance(paths, list) or not paths:
                self.add(
                    f"{path}.include_paths",
                    f"{path}.include_paths must be a non-empty list, got {_type_name(paths)}",
                    "list relative paths, or remove include_paths to upload the whole root_path",
                )
                ok = False
            else:
                clean = []
                for i, item in enumerate(paths):
                    sub = f"{path}.include_paths[{i}]"
                    text = self.string(item, sub)
                    if text is None:
                        continue
                    if text.startswith("/") or ".." in text.replace("\\", "/").split("/"):
                        self.add(
                            sub,
                            f"include path {_short(text)} must be relative and must not contain '..'",
                            "give a path inside root_path",
                        )
                        continue
                    clean.append(text)
                ok = ok and len(clean) == len(paths)
                out["include_paths"] = clean
        if "git" in data:
            git = self.mapping(data["git"], f"{path}.git", GIT_KEYS, "git")
            if git is None:
                ok = False
            else:
                given = [k for k in GIT_KEYS if k in git]
                if len(given) != 1:
                    self.add(
                        f"{path}.git",
                        f"{path}.git needs exactly one of branch or commit, got "
                        f"{' and '.join(given) or 'neither'}",
                        "give branch: <name> or commit: <sha>",
                    )
                    ok = False
                else:
                    value = self.string(git[given[0]], f"{path}.git.{given[0]}")
                    ok = ok and value is not None
                    out["git"] = {given[0]: value}
        return out if ok else None

    def mlflow(self, data: dict[str, Any], out: dict[str, Any]) -> None:
        if "mlflow_run_name" in data:
            name = self.string(data["mlflow_run_name"], "mlflow_run_name")
            if name is not None:
                if NAME_RE.match(name):
                    out["mlflow_run_name"] = name
                else:
                    self.add(
                        "mlflow_run_name",
                        f"mlflow_run_name {_short(name)} must be 1-100 characters of A-Z a-z 0-9 _ -",
                        "replace other characters with '_' or '-'",
                    )
        if "mlflow_experiment_directory" in data:
            directory = self.string(
                data["mlflow_experiment_directory"], "mlflow_experiment_directory"
            )
            if directory is not None:
                if directory.startswith("/Workspace"):
                    out["mlflow_experiment_directory"] = directory
                else:
                    self.add(
                        "mlflow_experiment_directory",
                        f"mlflow_experiment_directory {_short(directory)} must start with /Workspace",
                        "e.g. /Workspace/Users/<you>/experiments",
                    )
        if "mlflow_artifact_location" in data:
            location = self.string(data["mlflow_artifact_location"], "mlflow_artifact_location")
            if location is not None:
                if location.startswith("/Volumes/"):
                    out["mlflow_artifact_location"] = "dbfs:" + location
                elif location.startswith("dbfs:/"):
                    out["mlflow_artifact_location"] = location
                else:
                    self.add(
                        "mlflow_artifact_location",
                        f"mlflow_artifact_location {_short(location)} must be a dbfs:/ or /Volumes/ path",
                        "e.g. dbfs:/Volumes/<catalog>/<schema>/<volume>/artifacts",
                    )

    def permissions(self, raw: Any) -> list[dict[str, str]] | None:
        if not isinstance(raw, list):
            self.add(
                "permissions",
                f"permissions must be a list, got {_type_name(raw)}",
                "write one '- user_name: ..., level: ...' item per principal",
            )
            return None
        out = []
        for i, item in enumerate(raw):
            path = f"permissions[{i}]"
            data = self.mapping(item, path, PERMISSION_KEYS, "a permission")
            if data is None:
                continue
            entry: dict[str, str] = {}
            principals = [k for k in PRINCIPAL_FIELDS if k in data]
            if len(principals) != 1:
                self.add(
                    path,
                    f"{path} needs exactly one of {', '.join(PRINCIPAL_FIELDS)}, got "
                    f"{' and '.join(principals) or 'none'}",
                    "one principal per item",
                )
            else:
                value = self.string(data[principals[0]], f"{path}.{principals[0]}")
                if value is not None:
                    entry[principals[0]] = value
            if "level" not in data:
                self.add(
                    f"{path}.level",
                    f"{path}.level is required",
                    f"one of {', '.join(PERMISSION_LEVELS)}",
                )
            else:
                level = self.string(data["level"], f"{path}.level")
                if level is not None:
                    if level.upper() in PERMISSION_LEVELS:
                        entry["level"] = level.upper()
                    else:
                        self.add(
                            f"{path}.level",
                            f"unknown permission level {_short(level)}",
                            f"one of {', '.join(PERMISSION_LEVELS)}",
                        )
            if len(entry) == 2:
                out.append(entry)
        return out if len(out) == len(raw) else None

    def usage_policy(self, data: dict[str, Any], out: dict[str, Any]) -> None:
        if "usage_policy_name" in data and "usage_policy_id" in data:
            self.add(
                "usage_policy_id",
                "usage_policy_name and usage_policy_id are mutually exclusive",
                "keep only one of them",
            )
        if "usage_policy_name" in data:
            name = self.string(data["usage_policy_name"], "usage_policy_name")
            if name is not None:
                out["usage_policy_name"] = name
        if "usage_policy_id" in data:
            pid = self.string(data["usage_policy_id"], "usage_policy_id")
            if pid is not None:
                if UUID_RE.match(pid.strip()):
                    out["usage_policy_id"] = pid.strip()
                else:
                    self.add(
                        "usage_policy_id",
                        f"usage_policy_id {_short(pid)} is not a UUID",
                        "copy the policy id (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) or use usage_policy_name",
                    )


def _spans(numbers: Iterable[int]) -> Iterator[tuple[int, int]]:
    """(first, last) of each run of consecutive numbers of an ascending sequence."""
    first = last = None
    for n in numbers:
        if last is not None and n == last + 1:
            last = n
            continue
        if first is not None and last is not None:
            yield first, last
        first = last = n
    if first is not None and last is not None:
        yield first, last
