"""Every validation rule of docs/spec/workload.md §1-§3, applied to the raw mapping.

The checker walks the whole mapping and keeps going after a problem, so the user sees every
mistake at once, each with its dotted path and a hint. It returns the normalized data the
models are built from.
"""

from __future__ import annotations

from typing import Any

from air_runtime._errors import Problem
from air_runtime.platform import GPUS_PER_NODE, MAX_IDEMPOTENCY_TOKEN_LENGTH
from air_runtime.workload._check_base import NAME_RE, Report, Section, _short, _type_name
from air_runtime.workload._check_code_source import CodeSourceRules
from air_runtime.workload._check_compute import ComputeRules
from air_runtime.workload._check_containers import ContainerRules
from air_runtime.workload._check_environment import EnvironmentRules
from air_runtime.workload._check_run_options import RunOptionRules
from air_runtime.workload._check_variables import VariableRules
from air_runtime.workload._yaml import SourceMarks

TOP_LEVEL_KEYS = (
    "experiment_name", "compute", "environment", "command", "containers", "env_variables",
    "secrets", "code_source", "max_retries", "timeout_minutes", "idempotency_token",
    "parameters", "mlflow_run_name", "mlflow_experiment_directory", "mlflow_artifact_location",
    "permissions", "usage_policy_name", "usage_policy_id",
)  # fmt: skip


class Checker(Section):
    """Every rule: the top-level fields here, each block by its own section (one module per
    block of the YAML, as the CLI keeps one file per block), all reporting into one
    ``Report``; ``workload`` walks the whole mapping."""

    def __init__(self, marks: SourceMarks | None = None) -> None:
        super().__init__(Report(marks))
        self.variables = VariableRules(self.report)
        self.compute = ComputeRules(self.report)
        self.environment = EnvironmentRules(self.report)
        self.containers = ContainerRules(self.report, self.variables, self.environment)
        self.code_source = CodeSourceRules(self.report)
        self.run_options = RunOptionRules(self.report)

    @property
    def problems(self) -> list[Problem]:
        return self.report.problems

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

        compute = self.compute.compute(data.get("compute"), "compute" in data)
        if compute is not None:
            out["compute"] = compute
        nodes = (
            compute["num_accelerators"] // GPUS_PER_NODE[compute["accelerator_type"]]
            if compute
            else None
        )

        has_containers = "containers" in data and data["containers"] is not None
        environment = (
            self.environment.environment(data.get("environment"), has_containers)
            if "environment" in data
            else None
        )
        if environment is not None:
            out["environment"] = environment

        env_vars = self.variables.env_variables(data.get("env_variables", {}), "env_variables")
        secrets = self.variables.secrets(data.get("secrets", {}), "secrets")
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
            containers = self.containers.containers(data["containers"], nodes)
            if containers is not None:
                out["containers"] = containers
        elif "containers" in data:
            self.add(
                "containers",
                "containers must be a list, got nothing (null)",
                "list the containers or remove the key",
            )

        if "code_source" in data:
            code = self.code_source.code_source(data["code_source"])
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
                if len(token) > MAX_IDEMPOTENCY_TOKEN_LENGTH:
                    self.add(
                        "idempotency_token",
                        f"idempotency_token is {len(token)} characters, more than "
                        f"{MAX_IDEMPOTENCY_TOKEN_LENGTH}",
                        f"use a token of at most {MAX_IDEMPOTENCY_TOKEN_LENGTH} characters "
                        "(e.g. a hash)",
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
        self.run_options.mlflow(data, out)
        if "permissions" in data:
            perms = self.run_options.permissions(data["permissions"])
            if perms is not None:
                out["permissions"] = perms
        self.run_options.usage_policy(data, out)
        return out
