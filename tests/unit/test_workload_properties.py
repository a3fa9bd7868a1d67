"""Property tests: nothing but WorkloadError ever escapes, and valid plans round-trip."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from air_runtime._errors import WorkloadError
from air_runtime.plan import SubmissionPlan, build_plan
from air_runtime.workload import load_workload

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
near_names = st.one_of(
    names, st.text(max_size=12), st.sampled_from(["1bad", "a-b", "", "x.y", "exp"])
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 40),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=20),
)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually a plausible value, sometimes garbage: near-valid workloads."""
    return st.one_of(strategy, strategy, strategy, anything)


accelerators = st.sampled_from(
    ["GPU_1xA10", "GPU_1xH100", "GPU_8xH100", "GPU_8xB300", "gpu_1xa10", "TPU"]
)
compute = st.fixed_dictionaries(
    {
        "accelerator_type": maybe(accelerators),
        "num_accelerators": maybe(st.sampled_from([1, 2, 3, 8, 16, 0, -8])),
    },
    optional={
        "pool_id": maybe(st.text(min_size=1, max_size=10)),
        "priority_class": maybe(st.sampled_from(["normal", "CRITICAL", "best_effort", "x"])),
    },
)
environment = st.fixed_dictionaries(
    {},
    optional={
        "version": maybe(
            st.sampled_from([5, 6, "6", "databricks_ai_v5", "databricks_ai_v4", "DATABRICKS_AI_V7"])
        ),
        "dependencies": maybe(
            st.lists(st.sampled_from(["torch==2.6.0", "pyyaml", ""]), max_size=3)
        ),
        "docker_image": maybe(
            st.fixed_dictionaries(
                {
                    "url": maybe(
                        st.sampled_from(
                            [
                                "ubuntu",
                                "myorg/repo:1",
                                "ghcr.io/a/b",
                                "docker.io/a/b@sha256:" + "a" * 64,
                            ]
                        )
                    )
                },
                optional={
                    "tag_policy": st.sampled_from(["auto", "latest", "never"]),
                    "credentials_scope": st.just("s"),
                    "credentials_key": st.just("k"),
                },
            )
        ),
        "unity_catalog_image": maybe(st.sampled_from(["main.rl.trl:0.24.0", "bad"])),
    },
)
env_values = st.one_of(
    st.text(max_size=10),
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.sampled_from(["{{secrets/a/b}}", "{{secrets/bad}}"]),
)
container = st.fixed_dictionaries(
    {
        "name": maybe(near_names),
        "unity_catalog_image": maybe(st.sampled_from(["main.rl.vllm:0.20.0", "x:1"])),
        "command": maybe(st.sampled_from(["serve", "train", " "])),
    },
    optional={
        "ranks": maybe(st.lists(st.integers(-1, 3), max_size=3)),
        "environment_variables": maybe(
            st.fixed_dictionaries(
                {"variables": st.dictionaries(near_names, env_values, max_size=3)}
            )
        ),
        "docker_image": st.just({"url": "a/b"}),
    },
)
workloads = st.fixed_dictionaries(
    {"experiment_name": maybe(near_names), "compute": maybe(compute)},
    optional={
        "command": maybe(st.sampled_from(["echo hi", "python train.py", "", "a\nb"])),
        "containers": maybe(st.lists(container, min_size=0, max_size=3)),
        "environment": maybe(environment),
        "env_variables": maybe(st.dictionaries(near_names, env_values, max_size=3)),
        "secrets": maybe(
            st.dictionaries(near_names, st.sampled_from(["a/b", "a/b/c", "ab", "s/k"]), max_size=3)
        ),
        "parameters": maybe(st.dictionaries(st.text(max_size=5), anything, max_size=3)),
        "max_retries": maybe(st.integers(-1, 5)),
        "timeout_minutes": maybe(st.integers(0, 100)),
        "idempotency_token": maybe(st.text(max_size=70)),
        "code_source": maybe(
            st.fixed_dictionaries(
                {"root_path": st.sampled_from([".", "src"])},
                optional={
                    "include_paths": st.lists(st.sampled_from(["a", "../b"]), max_size=2),
                    "remote_volume": st.sampled_from(["/Volumes/a/b/c", "/x"]),
                },
            )
        ),
        "mlflow_run_name": maybe(near_names),
        "mlflow_artifact_location": maybe(st.sampled_from(["/Volumes/a", "dbfs:/a", "s3://x"])),
        "permissions": maybe(
            st.lists(
                st.fixed_dictionaries(
                    {"user_name": st.just("u"), "level": st.sampled_from(["CAN_VIEW", "X"])}
                ),
                max_size=2,
            )
        ),
        "usage_policy_id": maybe(st.sampled_from(["12345678-1234-1234-1234-1234567890ab", "nope"])),
        "typo_field": anything,
    },
)


def _check_plan_round_trip(source: Any) -> None:
    try:
        workload = load_workload(source)
    except WorkloadError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert isinstance(problem.path, str) and problem.message
        return
    plan = build_plan(workload, user_name="someone@example.com", idempotency_token="prop")
    data = json.loads(json.dumps(plan.to_json()))
    assert SubmissionPlan.from_json(data) == plan
    json.dumps(plan.redacted())
    same = workload.with_overrides({})
    assert same.model_dump(exclude={"source_text"}) == workload.model_dump(exclude={"source_text"})


@SETTINGS
@given(workloads)
def test_structured_workloads_never_raise_anything_else(data: dict[str, Any]) -> None:
    _check_plan_round_trip(data)


@SETTINGS
@given(workloads)
def test_structured_workloads_as_yaml_text(data: dict[str, Any]) -> None:
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    _check_plan_round_trip(text)


@SETTINGS
@given(st.text(max_size=300))
def test_random_text_never_raises_anything_else(text: str) -> None:
    try:
        load_workload(text)
    except WorkloadError as exc:
        assert exc.problems


yaml_fragments = st.sampled_from(
    [
        "experiment_name: e\n",
        "compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n",
        "command: x\n",
        "&a [*a]\n",
        "a: &x 1\nb: *x\n",
        "<<: {a: 1}\n",
        "- 1\n",
        "? [a]\n: b\n",
        "!!binary aGk=\n",
        "key: !tag v\n",
        "\t",
        "'",
        '"\\u0000"',
        "%YAML 1.1\n---\n",
        "---\n",
        "...\n",
        "{",
        "}",
        "[",
        "]",
        ":",
        "- ",
        "  ",
        "\n",
        "env_variables: {A: 1}\n",
        "containers: [{name: a}]\n",
        "\ufeff",
        "x: 2001-12-14\n",
        "x: .inf\n",
    ]
)


@SETTINGS
@given(st.lists(yaml_fragments, max_size=8).map("".join))
def test_yaml_like_text_never_raises_anything_else(text: str) -> None:
    try:
        load_workload(text)
    except WorkloadError as exc:
        assert exc.problems


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_else(data: bytes) -> None:
    try:
        load_workload(data)  # type: ignore[arg-type]
    except WorkloadError as exc:
        assert exc.problems


@SETTINGS
@given(st.lists(st.text(max_size=30), max_size=4))
def test_random_overrides_never_raise_anything_else(overrides: list[str]) -> None:
    try:
        load_workload(
            {
                "experiment_name": "e",
                "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                "command": "x",
            },
            overrides,
        )
    except WorkloadError as exc:
        assert exc.problems


@st.composite
def valid_workloads(draw: st.DrawFn) -> dict[str, Any]:
    """Always-valid workloads, so the plan properties are exercised on many shapes."""
    per_node = {"GPU_1xA10": 1, "GPU_1xH100": 1, "GPU_8xH100": 8, "GPU_8xB300": 8}
    accelerator = draw(st.sampled_from(sorted(per_node)))
    nodes = draw(st.integers(1, 4))
    data: dict[str, Any] = {
        "experiment_name": draw(st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True)),
        "compute": {
            "accelerator_type": accelerator,
            "num_accelerators": nodes * per_node[accelerator],
        },
    }
    env_names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,6}", fullmatch=True)
    plain = draw(
        st.dictionaries(env_names, st.one_of(st.text(max_size=10), st.integers()), max_size=3)
    )
    secret = draw(st.dictionaries(env_names, st.sampled_from(["s/k", "scope/key"]), max_size=2))
    secret = {k: v for k, v in secret.items() if k not in plain}
    if plain:
        data["env_variables"] = plain
    if secret:
        data["secrets"] = secret
    if draw(st.booleans()):
        data["command"] = draw(st.text(min_size=1, max_size=40).filter(lambda s: s.strip()))
        image = draw(st.sampled_from([None, "docker", "uc", "version"]))
        if image == "docker":
            data["environment"] = {"docker_image": {"url": "myorg/repo:1"}}
        elif image == "uc":
            data["environment"] = {"unity_catalog_image": "main.s.img:1"}
        elif image == "version":
            data["environment"] = {
                "version": draw(st.sampled_from([5, "6", "databricks_ai_v7"])),
                "dependencies": ["pyyaml"],
            }
    else:
        count = draw(st.integers(1, nodes))
        ranks: list[list[int]] = [[] for _ in range(count)]
        for rank in range(nodes):
            ranks[rank % count].append(rank)
        data["containers"] = [
            {
                "name": f"c{i}",
                "ranks": r,
                "unity_catalog_image": "main.rl.img:1",
                "command": "run",
                "environment_variables": {"variables": {"V": "{{secrets/a/b}}" if i % 2 else "x"}},
            }
            for i, r in enumerate(ranks)
        ]
    if draw(st.booleans()):
        data["parameters"] = draw(
            st.dictionaries(st.text(min_size=1, max_size=5), scalars, max_size=3)
        )
    if draw(st.booleans()):
        data["code_source"] = {"root_path": ".", "include_paths": ["a.py"]}
    data["max_retries"] = draw(st.integers(0, 3))
    return data


@SETTINGS
@given(valid_workloads())
def test_valid_workloads_plan_round_trip(data: dict[str, Any]) -> None:
    workload = load_workload(data)
    plan = build_plan(workload, user_name="someone@example.com", idempotency_token="prop")
    assert SubmissionPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    # the YAML written as training_config.yaml loads back to the same workload
    assert load_workload(workload.source_text).model_dump(
        exclude={"source_text"}
    ) == workload.model_dump(exclude={"source_text"})
    task = plan.submit_body["tasks"][0]
    assert task["max_retries"] == data["max_retries"]
    assert ("retry_on_timeout" in task) == (data["max_retries"] > 0)
