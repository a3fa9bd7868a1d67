"""MLflow fields, permissions and usage policies (docs/spec/workload.md §1)."""

from __future__ import annotations

import re
from typing import Any

from air_runtime.workload._check_base import NAME_RE, Section, _short, _type_name
from air_runtime.workload._models import PERMISSION_LEVELS, PRINCIPAL_FIELDS

PERMISSION_KEYS = (*PRINCIPAL_FIELDS, "level")
UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)

# runconfig.go: 127, the server-side max_length of the policy name filter
MAX_USAGE_POLICY_NAME = 127


class RunOptionRules(Section):
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
                    if level.strip().upper() in PERMISSION_LEVELS:
                        # sent as written (runpermissions.go permissionAccessControl)
                        entry["level"] = level
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
            if name is not None and len(name.strip()) > MAX_USAGE_POLICY_NAME:
                # runconfig.go: the server's limit on the policy name filter
                self.add(
                    "usage_policy_name",
                    f"usage_policy_name must be at most {MAX_USAGE_POLICY_NAME} characters, "
                    f"got {len(name.strip())}",
                    "copy the policy's name exactly, or give usage_policy_id",
                )
            elif name is not None:
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
