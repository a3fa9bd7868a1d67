"""``Workload``, the validated workload, and ``load_workload``, which makes one: source
(path, YAML text or mapping) + overrides -> every rule applied, every problem reported at
once. The model only fixes the shape and keeps the result immutable; whatever is derived
from a workload (``with_overrides``, ``with_secrets``) goes through the loader again."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError
from yaml.nodes import Node

from air_runtime._errors import Problem, WorkloadError
from air_runtime.workload._go_yaml import encode_go_yaml, go_yaml_dump, override_node, set_node
from air_runtime.workload._models import (
    CodeSource,
    Compute,
    Container,
    Environment,
    Permission,
    SecretRef,
    _Frozen,
)
from air_runtime.workload._rules import Checker
from air_runtime.workload._source import (
    _apply_override,
    _parse_overrides,
    _read_source,
    _split_path,
)
from air_runtime.workload._typed_overrides import typed_override
from air_runtime.workload._yaml import MAX_BYTES, YamlLoadError


class Workload(_Frozen):
    experiment_name: str
    compute: Compute
    environment: Environment = Field(default_factory=Environment)
    command: str | None = None
    containers: tuple[Container, ...] | None = None
    env_variables: dict[str, str] = {}
    secrets: dict[str, SecretRef] = {}
    code_source: CodeSource | None = None
    max_retries: int = 3
    timeout_minutes: int | None = None
    idempotency_token: str | None = None
    parameters: dict[str, Any] = {}
    mlflow_run_name: str | None = None
    mlflow_experiment_directory: str | None = None
    mlflow_artifact_location: str | None = None
    permissions: tuple[Permission, ...] = ()
    usage_policy_name: str | None = None
    usage_policy_id: str | None = None
    source_text: str = ""
    base_dir: str | None = None

    # the mapping that was validated (overrides applied), to derive new workloads from
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def gpus_per_node(self) -> int:
        return self.compute.gpus_per_node

    @property
    def num_nodes(self) -> int:
        return self.compute.num_nodes

    @property
    def max_retries_given(self) -> bool:
        """Whether the workload sets max_retries itself (the default is 3)."""
        return "max_retries" in self._raw

    def container(self, name: str) -> Container:
        for container in self.containers or ():
            if container.name == name:
                return container
        raise KeyError(f"no container named {name!r}")

    def container_env(self, name: str) -> tuple[dict[str, str], dict[str, SecretRef]]:
        """Plain and secret variables of one container after the merge of docs/spec/workload.md §3."""
        container = self.container(name)
        own = set(container.env_variables) | set(container.secrets)
        plain = {k: v for k, v in self.env_variables.items() if k not in own}
        secret = {k: v for k, v in self.secrets.items() if k not in own}
        plain.update(container.env_variables)
        secret.update(container.secrets)
        return dict(sorted(plain.items())), dict(sorted(secret.items()))

    def raw_mapping(self) -> dict[str, Any]:
        """A copy of the mapping this workload was validated from."""
        return copy.deepcopy(self._raw)

    def with_overrides(self, overrides: Mapping[str, Any] | Sequence[str]) -> Workload:
        return load_workload(self.raw_mapping(), overrides, base_dir=self.base_dir)

    def with_env_variables(self, values: Mapping[str, str]) -> Workload:
        """Add plain environment variables the workload does not set itself (as a variable or
        a secret, top-level or in a container): an orchestrator's additions never replace the
        author's values. The plan builder writes them like any other (env_vars.json)."""
        own = set(self.env_variables) | set(self.secrets)
        for container in self.containers or ():
            own |= set(container.env_variables) | set(container.secrets)
        added = {k: str(v) for k, v in values.items() if k not in own}
        if not added:
            return self
        raw = self.raw_mapping()
        existing = raw.get("env_variables")
        raw["env_variables"] = {**(existing if isinstance(existing, dict) else {}), **added}
        return load_workload(raw, base_dir=self.base_dir)

    def with_secrets(self, refs: Mapping[str, str]) -> Workload:
        """Add ``NAME -> "scope/key"`` secrets; a plain variable of the same NAME is replaced."""
        raw = self.raw_mapping()
        env = raw.get("env_variables")
        if isinstance(env, dict):
            for name in refs:
                env.pop(name, None)
            if not env:
                raw.pop("env_variables")
        existing = raw.get("secrets")
        secrets: dict[str, Any] = existing if isinstance(existing, dict) else {}
        raw["secrets"] = {**secrets, **{k: str(v) for k, v in refs.items()}}
        return load_workload(raw, base_dir=self.base_dir)


def _to_models(
    normalized: dict[str, Any], source_text: str, base_dir: str | None, label: str | None
) -> Workload:
    try:
        return Workload.model_validate(
            {**normalized, "source_text": source_text, "base_dir": base_dir}
        )
    except ValidationError as exc:
        # A rule the checker missed; still report it as a workload problem.
        problems = [
            Problem(".".join(str(p) for p in err["loc"]), err["msg"], "check this field")
            for err in exc.errors()
        ]
        raise WorkloadError(problems, label) from None


def load_workload(
    source: str | os.PathLike[str] | Mapping[str, Any],
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    source_name: str | None = None,
) -> Workload:
    """Load and validate a workload; raise ``WorkloadError`` listing every problem.

    ``source`` is a file path (a str naming an existing file or ending in .yaml/.yml), YAML
    text, or a mapping of the same structure. ``overrides`` are dotted paths applied to the
    raw mapping before validation: ``{"compute.num_accelerators": 16}`` or
    ``["compute.num_accelerators=16"]`` (values of the ``K=V`` form are YAML scalars).

    ``source_text`` (uploaded as training_config.yaml) is the YAML tree after the overrides,
    re-encoded as the CLI's go-yaml writes it (comments dropped, key order and each value's
    style kept); for a mapping, the mapping in go-yaml's layout.

    ``source_name`` names YAML text or a mapping in messages (``WorkloadError.source``), e.g.
    the file a template was rendered from; a path names itself.
    """
    label: str | None = None
    try:
        folder = os.fspath(base_dir) if base_dir is not None else None
        try:
            raw, marks, text, folder, label = _read_source(source, folder)
        except YamlLoadError as exc:
            raise WorkloadError([exc.problem], source_name) from None
        if source_name is not None and label in ("<text>", "<mapping>"):
            label = source_name
        if not isinstance(raw, dict):
            raise WorkloadError(
                [
                    Problem(
                        "",
                        f"the workload must be a mapping of fields, got {type(raw).__name__}",
                        "start with experiment_name: ..., compute: ..., command: ...",
                        1,
                        1,
                    )
                ],
                label,
            )
        items, problems = _parse_overrides(overrides)
        applied: list[tuple[list[str | int], Node]] = []
        for key, value, value_text in items:
            typed = typed_override(_split_path(key) or [], value)
            if typed != value:  # text where the schema wants a number or a boolean
                value, value_text = typed, None
            error = _apply_override(raw, key, value)
            if error:
                problems.append(
                    Problem(
                        f"overrides.{key}",
                        error,
                        "give a dotted path such as compute.num_accelerators",
                        override=key,
                    )
                )
            else:
                applied.append((_split_path(key) or [], override_node(value_text, value)))
                marks.overridden.add(key)
                for table in (marks.values, marks.keys):
                    for path in [
                        p for p in table if p == key or p.startswith((key + ".", key + "["))
                    ]:
                        del table[path]
        checker = Checker(marks)
        normalized = checker.workload(raw)
        problems.extend(checker.problems)
        if problems or normalized is None:
            # in file order, so the list reads top to bottom; located problems first
            problems.sort(key=lambda p: (p.line is None, p.line or 0, p.column or 0))
            raise WorkloadError(problems, label)
        # runconfig_load.go: the tree after overrides, comments stripped, go-yaml's layout
        if marks.root is None:
            text = go_yaml_dump(raw)
        else:
            for parts, node in applied:
                set_node(marks.root, parts, node)
            text = encode_go_yaml(marks.root)
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_BYTES:  # runupload.go maxConfigYAMLBytes: the run page renders it
            raise WorkloadError(
                [
                    Problem(
                        "",
                        f"training_config.yaml would be {size / (1024 * 1024):.2f} MB, over the "
                        "1 MB limit",
                        "reduce parameters or command (move data into code_source or a volume)",
                    )
                ],
                label,
            )
        workload = _to_models(normalized, text, folder, label)
        workload._raw = raw
        return workload
    except WorkloadError:
        raise
    except RecursionError:
        raise WorkloadError(
            [Problem("", "the workload nests too deeply", "flatten the structure")], label
        ) from None
    except Exception as exc:  # never leak parser/model internals to callers
        raise WorkloadError(
            [
                Problem(
                    "",
                    f"cannot read the workload: {type(exc).__name__}: {exc}",
                    "check the workload structure",
                )
            ],
            label,
        ) from None


def lint_workload(workload: Workload) -> list[str]:
    """Warnings that do not block a submit."""
    warnings: list[str] = []
    for i, permission in enumerate(workload.permissions):
        if permission.level != permission.level.strip().upper():
            # Sent as written, as the CLI does (runpermissions.go); the permissions API
            # knows the upper-case names only.
            warnings.append(
                f"permissions[{i}].level {permission.level!r} is sent as written: the workspace "
                f"knows {permission.level.strip().upper()}; write it that way"
            )
    image = workload.environment.docker_image
    if image is not None and workload.command:
        for line in workload.command.splitlines():
            words = line.strip().split()
            if len(words) >= 2 and words[0] in ("python", "python3", "bash", "sh", "torchrun"):
                script = next((w for w in words[1:] if not w.startswith("-")), None)
                if (
                    script
                    and not script.startswith(("/", "$", '"$', "'$", "~"))
                    and ("/" in script or script.endswith((".py", ".sh")))
                ):
                    warnings.append(
                        f"command runs the relative path {script!r} with docker image {image.url}: "
                        "the platform ignores the image's WORKDIR, so use an absolute path "
                        '(or "$CODE_SOURCE_PATH/...")'
                    )
    return warnings
