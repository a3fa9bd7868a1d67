"""Every rule of docs/spec/workload.md §1-§3: one valid and one invalid case at least."""

from __future__ import annotations

from typing import Any

import pytest
from workload_cases import minimal, only_problem, problems_of

from air_runtime.workload import SecretRef, load_workload

UUID = "12345678-1234-1234-1234-1234567890ab"
TWO_CONTAINERS = [
    {
        "name": "inference",
        "ranks": [0],
        "unity_catalog_image": "main.rl.vllm:0.20.0",
        "command": "serve",
    },
    {
        "name": "trainer",
        "ranks": [1],
        "unity_catalog_image": "main.rl.trl:0.24.0",
        "command": "train",
    },
]
TWO_NODES = {"accelerator_type": "GPU_1xA10", "num_accelerators": 2}


def containers_workload(containers: list[dict[str, Any]], **changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "command": ...,
        "compute": TWO_NODES,
        "containers": containers,
        **changes,
    }
    return minimal(**fields)


# (test id, workload, expected path, expected text in the message)
INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    ("experiment missing", minimal(experiment_name=...), "experiment_name", "required"),
    ("experiment chars", minimal(experiment_name="my exp"), "experiment_name", "'my exp'"),
    ("experiment non-ascii", minimal(experiment_name="expé"), "experiment_name", "ASCII"),
    ("experiment too long", minimal(experiment_name="a" * 101), "experiment_name", "1-100"),
    ("experiment not str", minimal(experiment_name=5), "experiment_name", "must be a string"),
    ("compute missing", minimal(compute=...), "compute", "compute is required"),
    ("compute not mapping", minimal(compute="GPU_1xA10"), "compute", "must be a mapping"),
    (
        "accelerator unknown",
        minimal(compute={"accelerator_type": "gpu_1xa10", "num_accelerators": 1}),
        "compute.accelerator_type",
        "'gpu_1xa10'",
    ),
    (
        "accelerator missing",
        minimal(compute={"num_accelerators": 1}),
        "compute.accelerator_type",
        "required",
    ),
    (
        "count missing",
        minimal(compute={"accelerator_type": "GPU_1xA10"}),
        "compute.num_accelerators",
        "required",
    ),
    (
        "count zero",
        minimal(compute={"accelerator_type": "GPU_1xA10", "num_accelerators": 0}),
        "compute.num_accelerators",
        ">= 1, got 0",
    ),
    (
        "count bool",
        minimal(compute={"accelerator_type": "GPU_1xA10", "num_accelerators": True}),
        "compute.num_accelerators",
        "integer",
    ),
    (
        "count multiple",
        minimal(compute={"accelerator_type": "GPU_8xH100", "num_accelerators": 12}),
        "compute.num_accelerators",
        "for GPU_8xH100 must be a multiple of 8, got 12",
    ),
    (
        "pool too long",
        minimal(compute={**TWO_NODES, "pool_id": "p" * 256}),
        "compute.pool_id",
        "255",
    ),
    (
        "priority unknown",
        minimal(compute={**TWO_NODES, "pool_id": "p", "priority_class": "urgent"}),
        "compute.priority_class",
        "'urgent'",
    ),
    (
        "priority needs pool",
        minimal(compute={**TWO_NODES, "priority_class": "normal"}),
        "compute.priority_class",
        "requires compute.pool_id",
    ),
    (
        "version v4",
        minimal(environment={"version": "databricks_ai_v4"}),
        "environment.version",
        "N >= 5",
    ),
    ("version junk", minimal(environment={"version": "latest"}), "environment.version", "'latest'"),
    (
        "version float",
        minimal(environment={"version": 6.5}),
        "environment.version",
        "number or a string",
    ),
    (
        "deps string",
        minimal(environment={"dependencies": "torch==2.6.0"}),
        "environment.dependencies",
        "must be a list of pip requirements, got a string",
    ),
    (
        "deps item",
        minimal(environment={"dependencies": ["torch", 3]}),
        "environment.dependencies[1]",
        "string",
    ),
    (
        "docker + deps",
        minimal(environment={"docker_image": {"url": "a/b:1"}, "dependencies": ["x"]}),
        "environment.docker_image",
        "cannot be combined with environment.dependencies",
    ),
    (
        "docker + version",
        minimal(environment={"docker_image": {"url": "a/b:1"}, "version": 6}),
        "environment.docker_image",
        "cannot be combined with environment.version",
    ),
    (
        "uc + deps",
        minimal(environment={"unity_catalog_image": "a.b.c:1", "dependencies": ["x"]}),
        "environment.unity_catalog_image",
        "cannot be combined with environment.dependencies",
    ),
    (
        "docker ecr",
        minimal(environment={"docker_image": {"url": "1.dkr.ecr.eu-west-1.amazonaws.com/r:1"}}),
        "environment.docker_image.url",
        "Docker Hub is required",
    ),
    (
        "docker ghcr",
        minimal(environment={"docker_image": {"url": "ghcr.io/o/r:1"}}),
        "environment.docker_image.url",
        "GitHub Container Registry",
    ),
    (
        "docker string",
        minimal(environment={"docker_image": "a/b:1"}),
        "environment.docker_image",
        "mapping with url",
    ),
    (
        "docker url missing",
        minimal(environment={"docker_image": {}}),
        "environment.docker_image.url",
        "required",
    ),
    (
        "tag policy",
        minimal(environment={"docker_image": {"url": "a/b", "tag_policy": "always"}}),
        "environment.docker_image.tag_policy",
        "'always'",
    ),
    (
        "creds half",
        minimal(
            environment={
                "docker_image": {"url": "a/b", "tag_policy": "latest", "credentials_scope": "s"}
            }
        ),
        "environment.docker_image.credentials_scope",
        "requires environment.docker_image.credentials_key",
    ),
    (
        "creds without latest",
        minimal(
            environment={
                "docker_image": {"url": "a/b", "credentials_scope": "s", "credentials_key": "k"}
            }
        ),
        "environment.docker_image.credentials_scope",
        "only used with tag_policy: latest",
    ),
    (
        "uc image form",
        minimal(environment={"unity_catalog_image": "main.vllm:1"}),
        "environment.unity_catalog_image",
        "<catalog>.<schema>.<image>:<tag>",
    ),
    ("command blank", minimal(command="   "), "command", "must not be blank"),
    ("command too long", minimal(command="echo\n" * 1001), "command", "1002 lines, more than 1000"),
    ("command 1000 lines and a break", minimal(command="echo\n" * 1000), "command", "1001 lines"),
    ("command not string", minimal(command=["a"]), "command", "must be a string"),
    (
        "neither command nor containers",
        minimal(command=...),
        "command",
        "one of command or containers",
    ),
    ("env name", minimal(env_variables={"1BAD": "x"}), "env_variables.1BAD", "'1BAD' is invalid"),
    ("env value list", minimal(env_variables={"A": [1]}), "env_variables.A", "single value"),
    ("env not mapping", minimal(env_variables=["A=1"]), "env_variables", "must be a mapping"),
    ("secret two slashes", minimal(secrets={"T": "a/b/c"}), "secrets.T", "exactly one '/'"),
    ("secret no slash", minimal(secrets={"T": "ab"}), "secrets.T", "exactly one '/'"),
    ("secret empty part", minimal(secrets={"T": "a/"}), "secrets.T", "exactly one '/'"),
    (
        "secret and env",
        minimal(env_variables={"T": "x"}, secrets={"T": "a/b"}),
        "secrets.T",
        "in both env_variables and secrets",
    ),
    (
        "code root missing",
        minimal(code_source={"remote_volume": "/Volumes/a/b/c"}),
        "code_source.root_path",
        "required",
    ),
    (
        "code volume",
        minimal(code_source={"root_path": ".", "remote_volume": "/mnt/x"}),
        "code_source.remote_volume",
        "must start with /Volumes/",
    ),
    (
        "code include empty",
        minimal(code_source={"root_path": ".", "include_paths": []}),
        "code_source.include_paths",
        "non-empty list",
    ),
    (
        "code include dotdot",
        minimal(code_source={"root_path": ".", "include_paths": ["../x"]}),
        "code_source.include_paths[0]",
        "'..'",
    ),
    (
        "code include absolute",
        minimal(code_source={"root_path": ".", "include_paths": ["/etc"]}),
        "code_source.include_paths[0]",
        "relative",
    ),
    (
        "code git both",
        minimal(code_source={"root_path": ".", "git": {"branch": "m", "commit": "abc"}}),
        "code_source.git",
        "exactly one of branch or commit",
    ),
    (
        "code git none",
        minimal(code_source={"root_path": ".", "git": {}}),
        "code_source.git",
        "neither",
    ),
    (
        "code nested type",
        minimal(code_source={"type": "git", "snapshot": {"root_path": "."}}),
        "code_source.type",
        "'git'",
    ),
    (
        "code nested bad",
        minimal(
            code_source={"type": "snapshot", "snapshot": {"root_path": ".", "include_paths": []}}
        ),
        "code_source.snapshot.include_paths",
        "non-empty",
    ),
    ("retries negative", minimal(max_retries=-1), "max_retries", ">= 0, got -1"),
    ("retries string", minimal(max_retries="3"), "max_retries", "integer"),
    ("timeout zero", minimal(timeout_minutes=0), "timeout_minutes", ">= 1, got 0"),
    (
        "token long",
        minimal(idempotency_token="t" * 65),
        "idempotency_token",
        "65 characters, more than 64",
    ),
    ("parameters list", minimal(parameters=[1, 2]), "parameters", "must be a mapping"),
    ("mlflow run name", minimal(mlflow_run_name="a b"), "mlflow_run_name", "'a b'"),
    (
        "mlflow dir",
        minimal(mlflow_experiment_directory="/Users/x"),
        "mlflow_experiment_directory",
        "/Workspace",
    ),
    (
        "mlflow artifacts",
        minimal(mlflow_artifact_location="s3://b/x"),
        "mlflow_artifact_location",
        "dbfs:/",
    ),
    (
        "permission two principals",
        minimal(permissions=[{"user_name": "a", "group_name": "g", "level": "CAN_VIEW"}]),
        "permissions[0]",
        "exactly one of",
    ),
    (
        "permission no principal",
        minimal(permissions=[{"level": "CAN_VIEW"}]),
        "permissions[0]",
        "got none",
    ),
    (
        "permission no level",
        minimal(permissions=[{"user_name": "a"}]),
        "permissions[0].level",
        "required",
    ),
    (
        "permission level",
        minimal(permissions=[{"user_name": "a", "level": "CAN_FLY"}]),
        "permissions[0].level",
        "'CAN_FLY'",
    ),
    (
        "policy both",
        minimal(usage_policy_name="n", usage_policy_id=UUID),
        "usage_policy_id",
        "mutually exclusive",
    ),
    ("policy uuid", minimal(usage_policy_id="not-a-uuid"), "usage_policy_id", "not a UUID"),
    (
        "policy name long",
        minimal(usage_policy_name="p" * 128),
        "usage_policy_name",
        "at most 127 characters, got 128",
    ),
    ("unknown top key", minimal(comand="x"), "comand", "unknown key 'comand'"),
    (
        "unknown compute key",
        minimal(compute={**TWO_NODES, "num_gpus": 2}),
        "compute.num_gpus",
        "unknown key",
    ),
    (
        "unknown environment key",
        minimal(environment={"verison": 6}),
        "environment.verison",
        "unknown key",
    ),
    # containers
    (
        "both command and containers",
        containers_workload(TWO_CONTAINERS, command="x"),
        "containers",
        "mutually exclusive",
    ),
    ("containers empty", containers_workload([]), "containers", "must not be empty"),
    ("containers not list", containers_workload({"a": 1}), "containers", "must be a list"),  # type: ignore[arg-type]
    (
        "container name missing",
        containers_workload([{**TWO_CONTAINERS[0], "name": ...}, TWO_CONTAINERS[1]]),
        "containers[0].name",
        "required",
    ),
    (
        "container name hyphen",
        containers_workload([{**TWO_CONTAINERS[0], "name": "my-c"}, TWO_CONTAINERS[1]]),
        "containers[0].name",
        "'my-c' is invalid",
    ),
    (
        "container name long",
        containers_workload([{**TWO_CONTAINERS[0], "name": "a" * 17}, TWO_CONTAINERS[1]]),
        "containers[0].name",
        "more than 16",
    ),
    (
        "container name dup",
        containers_workload([TWO_CONTAINERS[0], {**TWO_CONTAINERS[1], "name": "inference"}]),
        "containers[1].name",
        "already used by containers[0]",
    ),
    (
        "container command missing",
        containers_workload([{**TWO_CONTAINERS[0], "command": ...}, TWO_CONTAINERS[1]]),
        "containers[0].command",
        "required",
    ),
    (
        "container command blank",
        containers_workload([{**TWO_CONTAINERS[0], "command": ""}, TWO_CONTAINERS[1]]),
        "containers[0].command",
        "blank",
    ),
    (
        "container uc missing",
        containers_workload([{**TWO_CONTAINERS[0], "unity_catalog_image": ...}, TWO_CONTAINERS[1]]),
        "containers[0].unity_catalog_image",
        "required",
    ),
    (
        "container uc form",
        containers_workload(
            [{**TWO_CONTAINERS[0], "unity_catalog_image": "vllm:1"}, TWO_CONTAINERS[1]]
        ),
        "containers[0].unity_catalog_image",
        "<catalog>.<schema>.<image>:<tag>",
    ),
    (
        "env docker with containers",
        containers_workload(TWO_CONTAINERS, environment={"docker_image": {"url": "a/b"}}),
        "environment.docker_image",
        "not allowed together with containers",
    ),
    (
        "env uc with containers",
        containers_workload(TWO_CONTAINERS, environment={"unity_catalog_image": "a.b.c:1"}),
        "environment.unity_catalog_image",
        "not allowed together with containers",
    ),
    (
        "rank out of range",
        containers_workload([TWO_CONTAINERS[0], {**TWO_CONTAINERS[1], "ranks": [1, 2]}]),
        "containers[1].ranks",
        "rank 2 of container 'trainer' is out of range",
    ),
    (
        "rank twice",
        containers_workload([{**TWO_CONTAINERS[0], "ranks": [0, 1]}, TWO_CONTAINERS[1]]),
        "containers[1].ranks",
        "rank 1 is assigned to containers 'inference' and 'trainer'",
    ),
    (
        "rank missing",
        minimal(
            command=...,
            compute={"accelerator_type": "GPU_1xA10", "num_accelerators": 3},
            containers=TWO_CONTAINERS,
        ),
        "containers",
        "rank 2 is not assigned",
    ),
    (
        "ranks required with two",
        containers_workload([{**TWO_CONTAINERS[0], "ranks": ...}, TWO_CONTAINERS[1]]),
        "containers[0].ranks",
        "required when there is more than one container",
    ),
    (
        "ranks not ints",
        containers_workload([{**TWO_CONTAINERS[0], "ranks": ["0"]}, TWO_CONTAINERS[1]]),
        "containers[0].ranks",
        "list of node ranks",
    ),
    (
        "rank repeated in one",
        containers_workload([{**TWO_CONTAINERS[0], "ranks": [0, 0]}, TWO_CONTAINERS[1]]),
        "containers[0].ranks",
        "listed twice",
    ),
    (
        "secret ref malformed",
        containers_workload(
            [
                {
                    **TWO_CONTAINERS[0],
                    "environment_variables": {"variables": {"K": "{{secrets/a}}"}},
                },
                TWO_CONTAINERS[1],
            ]
        ),
        "containers[0].environment_variables.variables.K",
        "malformed secret reference",
    ),
    (
        "env files rejected",
        containers_workload(
            [
                {**TWO_CONTAINERS[0], "environment_variables": {"files": ["a.env"]}},
                TWO_CONTAINERS[1],
            ]
        ),
        "containers[0].environment_variables.files",
        "not supported",
    ),
    # --- today's CLI (cmd/air/runconfig.go, compute.go, runconfig_load.go) ---
    (
        "code mixed forms",
        minimal(code_source={"type": "snapshot", "root_path": ".", "snapshot": {"root_path": "."}}),
        "code_source.snapshot",
        "mixes the nested snapshot: form with root_path",
    ),
    (
        "code type null",
        minimal(code_source={"type": None, "root_path": "."}),
        "code_source.type",
        "must be 'snapshot'",
    ),
    (
        "git remote true",
        minimal(code_source={"root_path": ".", "git": {"branch": "main", "remote": True}}),
        "code_source.git.remote",
        "git.remote is no longer supported",
    ),
    (
        "git remote name",
        minimal(code_source={"root_path": ".", "git": {"commit": "abc", "remote": "origin"}}),
        "code_source.git.remote",
        "use git.commit",
    ),
    (
        "git remote list",
        minimal(code_source={"root_path": ".", "git": {"commit": "abc", "remote": ["o"]}}),
        "code_source.git.remote",
        "boolean or a remote name string",
    ),
    (
        "git branch chars",
        minimal(code_source={"root_path": ".", "git": {"branch": "main; rm -rf /"}}),
        "code_source.git.branch",
        "invalid git.branch format",
    ),
    (
        "pool blank after trim",
        minimal(compute={**TWO_NODES, "pool_id": "   "}),
        "compute.pool_id",
        "blank",
    ),
    (
        "uc image dot in part",
        minimal(environment={"unity_catalog_image": "main.rl.v.llm:1"}),
        "environment.unity_catalog_image",
        "'<catalog>.<schema>.<image>:<tag>'",
    ),
    (
        "uc image space",
        minimal(environment={"unity_catalog_image": "main.rl.vllm :1"}),
        "environment.unity_catalog_image",
        "'<catalog>.<schema>.<image>:<tag>'",
    ),
    (
        "uc image two tags",
        minimal(environment={"unity_catalog_image": "main.rl.vllm:1:2"}),
        "environment.unity_catalog_image",
        "'<catalog>.<schema>.<image>:<tag>'",
    ),
    (
        "uc + empty deps",
        minimal(environment={"unity_catalog_image": "a.b.c:1", "dependencies": []}),
        "environment.unity_catalog_image",
        "environment.dependencies",
    ),
    (
        "uc + version",
        minimal(environment={"unity_catalog_image": "a.b.c:1", "version": 6}),
        "environment.unity_catalog_image",
        "environment.version",
    ),
    (
        "version prefix only",
        minimal(environment={"version": "databricks_ai_v"}),
        "environment.version",
        "must be an integer, optionally prefixed with databricks_ai_v",
    ),
    (
        "container unknown key",
        containers_workload([{**TWO_CONTAINERS[0], "rank": [0]}, TWO_CONTAINERS[1]]),
        "containers[0].rank",
        "unknown key 'rank'",
    ),
]


def _drop_ellipsis(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_ellipsis(v) for k, v in value.items() if v is not ...}
    if isinstance(value, list):
        return [_drop_ellipsis(v) for v in value]
    return value


@pytest.mark.parametrize(
    ("workload", "path", "text"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid(workload: dict[str, Any], path: str, text: str) -> None:
    problems = problems_of(_drop_ellipsis(workload))
    matching = [p for p in problems if p.path == path]
    assert matching, f"no problem at {path}: {[str(p) for p in problems]}"
    assert any(text in p.message for p in matching), [str(p) for p in matching]
    assert all(p.hint for p in problems), "every problem says what to do"
    assert all(p.line is None for p in problems), "dict input has no lines"


def test_docker_image_per_container_says_unity_catalog() -> None:
    container = {**TWO_CONTAINERS[0], "docker_image": {"url": "a/b"}}
    problems = problems_of(containers_workload([container, TWO_CONTAINERS[1]]))
    (problem,) = [p for p in problems if p.path == "containers[0].docker_image"]
    assert "not supported" in problem.message
    assert "Unity Catalog" in (problem.hint or "")


def test_did_you_mean() -> None:
    problem = only_problem(minimal(enviroment={"version": 6}))
    assert problem.path == "enviroment"
    assert problem.hint == "did you mean 'environment'?"
    far = only_problem(minimal(zzz=1))
    assert "valid keys here" in (far.hint or "")
    nested = only_problem(minimal(compute={**TWO_NODES, "acelerator_type": "x"}))
    assert nested.path == "compute.acelerator_type"
    assert nested.hint == "did you mean 'accelerator_type'?"


def test_accelerator_suggestion_and_list() -> None:
    problem = only_problem(
        minimal(compute={"accelerator_type": "GPU_8xH10", "num_accelerators": 8})
    )
    assert "GPU_1xA10, GPU_1xH100, GPU_8xH100, GPU_8xB300" in (problem.hint or "")
    assert "did you mean 'GPU_8xH100'" in (problem.hint or "")


# -- valid forms and normalization --------------------------------------------------------


def test_minimal_defaults() -> None:
    w = load_workload(minimal())
    assert w.max_retries == 3
    assert w.environment.version == "6"
    assert w.environment.dependencies == ()
    assert w.containers is None
    assert (w.num_nodes, w.gpus_per_node) == (1, 1)
    assert w.parameters == {} and w.secrets == {} and w.env_variables == {}


@pytest.mark.parametrize(
    ("accelerator", "count", "nodes", "per_node"),
    [
        ("GPU_1xA10", 3, 3, 1),
        ("GPU_1xH100", 1, 1, 1),
        ("GPU_8xH100", 16, 2, 8),
        ("GPU_8xB300", 8, 1, 8),
    ],
)
def test_nodes(accelerator: str, count: int, nodes: int, per_node: int) -> None:
    w = load_workload(minimal(compute={"accelerator_type": accelerator, "num_accelerators": count}))
    assert (w.num_nodes, w.gpus_per_node) == (nodes, per_node)


def test_priority_upper_case_with_pool() -> None:
    w = load_workload(
        minimal(compute={**TWO_NODES, "pool_id": "pool-1", "priority_class": "best_effort"})
    )
    assert w.compute.priority_class == "BEST_EFFORT"
    assert w.compute.pool_id == "pool-1"
    # compute.go: both trimmed, priority upper-cased
    w = load_workload(
        minimal(compute={**TWO_NODES, "pool_id": "  pool-2 ", "priority_class": " critical "})
    )
    assert (w.compute.pool_id, w.compute.priority_class) == ("pool-2", "CRITICAL")


@pytest.mark.parametrize(
    "code_source",
    [
        {
            "type": "snapshot",
            "root_path": ".",
            "include_paths": ["train.py"],
        },  # legacy: fields under it
        {"type": "snapshot", "snapshot": {"root_path": "."}},
        {"root_path": ".", "git": {"commit": "abc", "remote": False}},
        {"root_path": ".", "git": {"branch": "release/1.2", "remote": ""}},
        {"root_path": ".", "git": {"commit": "abc", "remote": None}},
    ],
)
def test_code_source_forms_of_todays_cli(code_source: dict[str, Any]) -> None:
    """runconfig.go: the legacy type: snapshot with the fields directly under it, the nested
    form, and git.remote false or empty are all accepted."""
    w = load_workload(minimal(code_source=code_source))
    assert w.code_source is not None and w.code_source.root_path == "."


def test_container_files_may_be_an_empty_list_and_ranks_keep_their_order() -> None:
    containers = [
        {
            **TWO_CONTAINERS[0],
            "ranks": [2, 0],
            "environment_variables": {"files": [], "variables": {"A": "1"}},
        },
        {**TWO_CONTAINERS[1], "ranks": [1]},
    ]
    w = load_workload(
        containers_workload(
            containers, compute={"accelerator_type": "GPU_1xA10", "num_accelerators": 3}
        )
    )
    assert w.containers is not None
    assert w.containers[0].ranks == (2, 0)  # as written (runsubmit.go submittedContainers)
    assert w.containers[0].env_variables == {"A": "1"}


@pytest.mark.parametrize(
    "image", ["main.rl.vllm:0.20.0", "Main.R-L.v_llm:Latest", "cat.sch.img:v1.2-rc+3"]
)
def test_unity_catalog_image_names_are_checked_structurally(image: str) -> None:
    # runconfig.go unityCatalogImageRe: no '.', ':' or whitespace inside a part
    assert (
        load_workload(
            minimal(environment={"unity_catalog_image": image})
        ).environment.unity_catalog_image
        == image
    )


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        (5, "5"),
        ("6", "6"),
        ("07", "07"),
        ("databricks_ai_v5", "databricks_ai_v5"),
        ("DataBricks_AI_V6", "databricks_ai_v6"),
        ("databricks_ai_v05", "databricks_ai_v05"),
        (0, "0"),
    ],
)
def test_versions(given: Any, normal: str) -> None:
    w = load_workload(minimal(environment={"version": given}))
    assert w.environment.version == normal


def test_version_with_dependencies_and_alone() -> None:
    w = load_workload(minimal(environment={"version": 5, "dependencies": ["torch==2.6.0"]}))
    assert w.environment.dependencies == ("torch==2.6.0",)
    assert load_workload(minimal(environment={"dependencies": ["x"]})).environment.version == "6"


def test_docker_image_normal_form_and_policy() -> None:
    w = load_workload(
        minimal(
            environment={
                "docker_image": {
                    "url": "myorg/train",
                    "tag_policy": "latest",
                    "credentials_scope": "s",
                    "credentials_key": "k",
                }
            }
        )
    )
    image = w.environment.docker_image
    assert image is not None
    assert image.url == "docker.io/myorg/train:latest"
    assert (image.tag_policy, image.credentials_scope, image.credentials_key) == (
        "latest",
        "s",
        "k",
    )
    assert load_workload(
        minimal(environment={"docker_image": {"url": "ubuntu"}})
    ).environment.docker_image.url == (  # type: ignore[union-attr]
        "docker.io/library/ubuntu:latest"
    )


def test_unity_catalog_image() -> None:
    w = load_workload(minimal(environment={"unity_catalog_image": "main.rl.trl:0.24.0"}))
    assert w.environment.unity_catalog_image == "main.rl.trl:0.24.0"


def test_env_values_from_dict_are_text() -> None:
    w = load_workload(minimal(env_variables={"RANK": 0, "X": 1.5, "B": True, "S": "s"}))
    assert w.env_variables == {"RANK": "0", "X": "1.5", "B": "true", "S": "s"}


def test_secrets_are_refs() -> None:
    w = load_workload(minimal(secrets={"HF_TOKEN": "research/hf_token"}))
    ref = w.secrets["HF_TOKEN"]
    assert ref == SecretRef(scope="research", key="hf_token")
    assert str(ref) == "research/hf_token"


def test_code_source_forms() -> None:
    flat = load_workload(
        minimal(
            code_source={
                "root_path": "src",
                "remote_volume": "/Volumes/a/b/c/",
                "include_paths": ["train.py", "lib/"],
            }
        )
    )
    assert flat.code_source is not None
    assert flat.code_source.remote_volume == "/Volumes/a/b/c"
    assert flat.code_source.include_paths == ("train.py", "lib/")
    nested = load_workload(
        minimal(code_source={"type": "snapshot", "snapshot": {"root_path": "src"}})
    )
    assert nested.code_source is not None and nested.code_source.root_path == "src"
    git = load_workload(minimal(code_source={"root_path": ".", "git": {"branch": "main"}}))
    assert git.code_source is not None and git.code_source.git is not None
    assert git.code_source.git.branch == "main"


def test_scalar_options() -> None:
    w = load_workload(
        minimal(
            max_retries=0,
            timeout_minutes=1,
            idempotency_token="  tok  ",
            parameters={"a": {"b": [1, 2]}},
            mlflow_run_name="run-1",
            mlflow_experiment_directory="/Workspace/Users/x/exp",
            mlflow_artifact_location="/Volumes/c/s/v/art",
            usage_policy_id=UUID,
        )
    )
    assert (w.max_retries, w.timeout_minutes, w.idempotency_token) == (0, 1, "tok")
    assert w.parameters == {"a": {"b": [1, 2]}}
    assert w.mlflow_artifact_location == "dbfs:/Volumes/c/s/v/art"
    assert (
        load_workload(minimal(mlflow_artifact_location="dbfs:/x")).mlflow_artifact_location
        == "dbfs:/x"
    )
    assert w.usage_policy_id == UUID
    assert load_workload(minimal(usage_policy_name="team")).usage_policy_name == "team"


def test_permissions() -> None:
    # levels are sent as written (runpermissions.go permissionAccessControl)
    w = load_workload(
        minimal(
            permissions=[
                {"group_name": "ml", "level": "can_manage_run"},
                {"service_principal_name": "sp", "level": "CAN_VIEW"},
            ]
        )
    )
    assert [p.to_access_control() for p in w.permissions] == [
        {"group_name": "ml", "permission_level": "can_manage_run"},
        {"service_principal_name": "sp", "permission_level": "CAN_VIEW"},
    ]


def test_lower_case_level_is_linted() -> None:
    from air_runtime.workload import lint_workload

    w = load_workload(
        minimal(
            permissions=[
                {"group_name": "ml", "level": "can_view"},
                {"user_name": "a", "level": "CAN_MANAGE"},
            ]
        )
    )
    assert lint_workload(w) == [
        "permissions[0].level 'can_view' is sent as written: the workspace knows CAN_VIEW; write it that way"
    ]


def test_containers_merge() -> None:
    containers = [
        {
            **TWO_CONTAINERS[0],
            "environment_variables": {
                "variables": {
                    "SHARED": "inference",
                    "WANDB_KEY": "{{secrets/research/wandb}}",
                    "HF_TOKEN": "plain",
                }
            },
        },
        {
            **TWO_CONTAINERS[1],
            "environment_variables": {"variables": {"MODEL_ID": "{{secrets/s/model}}"}},
        },
    ]
    w = load_workload(
        containers_workload(
            containers,
            env_variables={"MODEL_ID": "m", "SHARED": "top"},
            secrets={"HF_TOKEN": "research/hf_token"},
        )
    )
    plain, secret = w.container_env("inference")
    assert plain == {"HF_TOKEN": "plain", "MODEL_ID": "m", "SHARED": "inference"}
    assert secret == {"WANDB_KEY": SecretRef(scope="research", key="wandb")}
    plain, secret = w.container_env("trainer")
    assert plain == {"SHARED": "top"}
    assert secret == {
        "HF_TOKEN": SecretRef(scope="research", key="hf_token"),
        "MODEL_ID": SecretRef(scope="s", key="model"),
    }
    with pytest.raises(KeyError):
        w.container_env("nope")


def test_single_container_without_ranks_gets_all() -> None:
    w = load_workload(
        minimal(
            command=...,
            compute={"accelerator_type": "GPU_1xA10", "num_accelerators": 3},
            containers=[{k: v for k, v in TWO_CONTAINERS[0].items() if k != "ranks"}],
        )
    )
    assert w.containers is not None
    assert w.containers[0].ranks == (0, 1, 2)


def test_containers_with_environment_version_allowed() -> None:
    w = load_workload(
        containers_workload(TWO_CONTAINERS, environment={"version": 6, "dependencies": ["x"]})
    )
    assert w.environment.dependencies == ("x",)
    assert w.containers is not None and [c.ranks for c in w.containers] == [(0,), (1,)]


def test_all_problems_reported() -> None:
    data = {
        "experiment_name": "bad name",
        "compute": {"accelerator_type": "GPU_8xH100", "num_accelerators": 12},
        "environment": {"dependencies": "torch"},
        "command": " ",
        "max_retries": -2,
        "secrets": {"A": "nope"},
        "extra": 1,
    }
    paths = {p.path for p in problems_of(data)}
    assert paths == {
        "experiment_name",
        "compute.num_accelerators",
        "environment.dependencies",
        "command",
        "max_retries",
        "secrets.A",
        "extra",
    }


def test_all_rank_problems_reported() -> None:
    containers = [
        {**TWO_CONTAINERS[0], "ranks": [0, 5]},
        {**TWO_CONTAINERS[1], "ranks": [0]},
        {**TWO_CONTAINERS[1], "name": "third", "ranks": [7]},
    ]
    w = minimal(
        command=...,
        compute={"accelerator_type": "GPU_1xA10", "num_accelerators": 3},
        containers=containers,
    )
    messages = [p.message for p in problems_of(w)]
    assert any("rank 5 of container 'inference' is out of range" in m for m in messages)
    assert any("rank 0 is assigned to containers 'inference' and 'trainer'" in m for m in messages)
    assert any("rank 7 of container 'third'" in m for m in messages)
    assert any("rank 1 is not assigned" in m for m in messages)
    assert any("rank 2 is not assigned" in m for m in messages)


def test_a_run_of_unassigned_ranks_is_one_problem() -> None:
    containers = [{**TWO_CONTAINERS[0], "ranks": [0, 5]}, {**TWO_CONTAINERS[1], "ranks": [7]}]
    w = minimal(
        command=...,
        compute={"accelerator_type": "GPU_1xA10", "num_accelerators": 2048},
        containers=containers,
    )
    unassigned = [p.message for p in problems_of(w) if "not assigned" in p.message]
    assert [m.split(" are", 1)[0].split(" is", 1)[0] for m in unassigned] == [
        "ranks 1..4",
        "rank 6",
        "ranks 8..2047",
    ]


def test_more_nodes_than_can_be_requested() -> None:
    w = minimal(compute={"accelerator_type": "GPU_8xH100", "num_accelerators": 10**9})
    problem = only_problem(w)
    assert problem.path == "compute.num_accelerators"
    assert "125000000 GPU_8xH100 nodes; at most 2048" in problem.message
    assert problem.hint is not None and "total number of GPUs" in problem.hint
    largest = load_workload(
        minimal(compute={"accelerator_type": "GPU_8xH100", "num_accelerators": 2048 * 8})
    )
    assert largest.num_nodes == 2048
