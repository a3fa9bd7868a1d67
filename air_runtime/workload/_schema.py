"""JSON Schema of the workload YAML, for editors (``# yaml-language-server: $schema=...``).

Its shape is written by hand rather than derived from the models (the models hold the
normal form, e.g. ``SecretRef``, while editors need the form users type); its patterns are
the validator's own constants.
"""

from __future__ import annotations

from typing import Any

from air_runtime.platform import ENV_NAME_RE, MAX_IDEMPOTENCY_TOKEN_LENGTH
from air_runtime.workload._check_base import NAME_RE
from air_runtime.workload._check_code_source import GIT_REF_RE
from air_runtime.workload._check_containers import CONTAINER_NAME_RE
from air_runtime.workload._check_environment import UC_IMAGE_RE
from air_runtime.workload._models import GPUS_PER_NODE, PERMISSION_LEVELS, PRIORITY_CLASSES

# The patterns are the validator's own (one rule, two readers).
_NAME = {"type": "string", "pattern": NAME_RE.pattern}
_ENV_NAME = ENV_NAME_RE.pattern
_UC_IMAGE = {
    "type": "string",
    "pattern": UC_IMAGE_RE.pattern,
    "description": "<catalog>.<schema>.<image>:<tag>",
}
_COMMAND = {"type": "string", "minLength": 1, "description": "shell script, at most 1000 lines"}
_SCALAR = {"type": ["string", "number", "boolean"]}


def _obj(
    properties: dict[str, Any], required: tuple[str, ...] = (), **extra: Any
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    schema.update(extra)
    return schema


def workload_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the workload file."""
    principal = {"type": "string", "minLength": 1}
    code_source_fields = {
        "root_path": {"type": "string", "minLength": 1},
        "remote_volume": {"type": "string", "pattern": "^/Volumes/"},
        "include_paths": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "minLength": 1},
        },
        "git": _obj(
            {
                "branch": {"type": "string", "pattern": GIT_REF_RE.pattern},
                "commit": {"type": "string"},
                # runconfig.go: only false or empty; the local copy is always packed
                "remote": {"enum": [False, "", None]},
            },
            oneOf=[{"required": ["branch"]}, {"required": ["commit"]}],
        ),
    }
    code_source_flat = _obj(code_source_fields)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Databricks AI Runtime workload",
        **_obj(
            {
                "experiment_name": _NAME,
                "compute": _obj(
                    {
                        "accelerator_type": {"enum": list(GPUS_PER_NODE)},
                        "num_accelerators": {
                            "type": "integer",
                            "minimum": 1,
                            "description": "total GPUs, a multiple of GPUs per node",
                        },
                        "pool_id": {"type": "string", "minLength": 1, "maxLength": 255},
                        "priority_class": {
                            "type": "string",
                            "enum": [*PRIORITY_CLASSES, *(p.lower() for p in PRIORITY_CLASSES)],
                        },
                    },
                    ("accelerator_type", "num_accelerators"),
                ),
                "environment": _obj(
                    {
                        "version": {
                            "anyOf": [
                                {"type": "integer", "minimum": 0},
                                {
                                    "type": "string",
                                    "pattern": r"^(\d+|[Dd][Aa][Tt][Aa][Bb][Rr][Ii][Cc][Kk][Ss]_[Aa][Ii]_[Vv]\d+)$",
                                },
                            ]
                        },
                        "dependencies": {
                            "type": "array",
                            "items": {"type": "string", "minLength": 1},
                        },
                        "docker_image": _obj(
                            {
                                "url": {
                                    "type": "string",
                                    "minLength": 1,
                                    "description": "Docker Hub image, e.g. myorg/repo:tag",
                                },
                                "tag_policy": {"enum": ["auto", "latest"]},
                                "credentials_scope": {"type": "string"},
                                "credentials_key": {"type": "string"},
                            },
                            ("url",),
                        ),
                        "unity_catalog_image": _UC_IMAGE,
                    }
                ),
                "command": _COMMAND,
                "containers": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {
                            "name": {
                                "type": "string",
                                "pattern": CONTAINER_NAME_RE.pattern,
                                "maxLength": 16,
                            },
                            "ranks": {
                                "type": "array",
                                "items": {"type": "integer", "minimum": 0},
                                "minItems": 1,
                            },
                            "unity_catalog_image": _UC_IMAGE,
                            "command": _COMMAND,
                            "environment_variables": _obj(
                                {
                                    "variables": {
                                        "type": "object",
                                        "propertyNames": {"pattern": _ENV_NAME},
                                        "additionalProperties": _SCALAR,
                                    },
                                    # the CLI takes an empty list only
                                    "files": {"type": "array", "maxItems": 0},
                                }
                            ),
                        },
                        ("name", "unity_catalog_image", "command"),
                    ),
                },
                "env_variables": {
                    "type": "object",
                    "propertyNames": {"pattern": _ENV_NAME},
                    "additionalProperties": _SCALAR,
                },
                "secrets": {
                    "type": "object",
                    "propertyNames": {"pattern": _ENV_NAME},
                    "additionalProperties": {"type": "string", "pattern": r"^[^/]+/[^/]+$"},
                },
                "code_source": {
                    "anyOf": [
                        code_source_flat,
                        # the legacy form: type: snapshot with the fields directly under it
                        _obj({"type": {"const": "snapshot"}, **code_source_fields}, ("type",)),
                        _obj(
                            {"type": {"const": "snapshot"}, "snapshot": code_source_flat},
                            ("type", "snapshot"),
                        ),
                    ]
                },
                "max_retries": {"type": "integer", "minimum": 0, "default": 3},
                "timeout_minutes": {"type": "integer", "minimum": 1},
                "idempotency_token": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_IDEMPOTENCY_TOKEN_LENGTH,
                },
                "parameters": {"type": "object"},
                "mlflow_run_name": _NAME,
                "mlflow_experiment_directory": {"type": "string", "pattern": "^/Workspace"},
                "mlflow_artifact_location": {"type": "string", "pattern": "^(dbfs:/|/Volumes/)"},
                "permissions": {
                    "type": "array",
                    "items": _obj(
                        {
                            "user_name": principal,
                            "group_name": principal,
                            "service_principal_name": principal,
                            "level": {"enum": list(PERMISSION_LEVELS)},
                        },
                        ("level",),
                        oneOf=[
                            {"required": [p]}
                            for p in ("user_name", "group_name", "service_principal_name")
                        ],
                    ),
                },
                "usage_policy_name": {"type": "string", "minLength": 1},
                "usage_policy_id": {"type": "string", "format": "uuid"},
            },
            ("experiment_name", "compute"),
            oneOf=[{"required": ["command"]}, {"required": ["containers"]}],
        ),
    }
