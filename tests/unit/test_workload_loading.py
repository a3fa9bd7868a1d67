"""YAML safety, source locations, overrides and the derived-workload methods."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
from workload_cases import minimal, only_problem, problems_of

from air_runtime._errors import WorkloadError
from air_runtime.workload import SecretRef, lint_workload, load_workload, workload_json_schema

VALID_YAML = textwrap.dedent(
    """\
    experiment_name: exp
    compute:
      accelerator_type: GPU_1xA10
      num_accelerators: 2
    env_variables:
      RANK: 0
      X: 1.50
      B: yes
      T: true
      N: 0x1F
      Q: "quoted"
    command: |
      echo hi
    """
)
# VALID_YAML as the CLI uploads it (runconfig_load.go: go-yaml v3's layout, styles kept)
VALID_YAML_AS_UPLOADED = textwrap.dedent(
    """\
    experiment_name: exp
    compute:
        accelerator_type: GPU_1xA10
        num_accelerators: 2
    env_variables:
        RANK: 0
        X: 1.50
        B: yes
        T: true
        N: 0x1F
        Q: "quoted"
    command: |
        echo hi
    """
)


def test_env_values_keep_literal_text() -> None:
    w = load_workload(VALID_YAML)
    assert w.env_variables == {
        "RANK": "0",
        "X": "1.50",
        "B": "yes",
        "T": "true",
        "N": "0x1F",
        "Q": "quoted",
    }
    assert w.source_text == VALID_YAML_AS_UPLOADED


def test_container_variables_keep_literal_text() -> None:
    text = VALID_YAML.replace("command: |\n  echo hi\n", "") + textwrap.dedent(
        """\
        containers:
          - name: only
            unity_catalog_image: a.b.c:1
            environment_variables:
              variables: {PORT: 08000, FLAG: off}
            command: run
        """
    )
    w = load_workload(text)
    assert w.containers is not None
    assert w.containers[0].env_variables == {"PORT": "08000", "FLAG": "off"}
    assert w.containers[0].ranks == (0, 1)


def test_problem_lines_and_columns() -> None:
    text = textwrap.dedent(
        """\
        experiment_name: exp
        compute:
          accelerator_type: GPU_8xH100
          num_accelerators: 12
        command: echo
        containers:
          - name: inference
            ranks: [0]
            unity_catalog_image: main.rl.vllm:0.20.0
            command: serve
          - name: trainer
            ranks: [0, 5]
            unity_catalog_image: main.rl.trl
            command: train
        comand: x
        """
    )
    problems = {p.path: p for p in problems_of(text)}
    assert (
        problems["compute.num_accelerators"].line,
        problems["compute.num_accelerators"].column,
    ) == (4, 21)
    assert "must be a multiple of 8, got 12" in problems["compute.num_accelerators"].message
    assert (problems["containers"].line, problems["containers"].column) == (7, 3)
    assert problems["containers[1].unity_catalog_image"].line == 13
    assert (problems["comand"].line, problems["comand"].column) == (15, 1)
    assert problems["comand"].hint == "did you mean 'command'?"
    assert "line 4:21" in str(WorkloadError(list(problems.values())))


def test_rank_problem_line() -> None:
    text = textwrap.dedent(
        """\
        experiment_name: exp
        compute: {accelerator_type: GPU_1xA10, num_accelerators: 2}
        containers:
          - name: a
            ranks: [0]
            unity_catalog_image: m.r.a:1
            command: a
          - name: b
            ranks: [0, 3]
            unity_catalog_image: m.r.b:1
            command: b
        """
    )
    problems = problems_of(text)
    by_message = {p.message: p for p in problems}
    out_of_range = next(p for m, p in by_message.items() if "rank 3" in m)
    assert (out_of_range.path, out_of_range.line, out_of_range.column) == (
        "containers[1].ranks",
        9,
        12,
    )
    twice = next(
        p for m, p in by_message.items() if "rank 0 is assigned to containers 'a' and 'b'" in m
    )
    assert twice.line == 9
    unassigned = next(p for m, p in by_message.items() if "rank 1 is not assigned" in m)
    assert unassigned.path == "containers"


def test_file_path_source_and_base_dir(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(VALID_YAML)
    w = load_workload(str(path))
    assert w.base_dir == str(tmp_path.resolve())
    assert load_workload(path).source_text == VALID_YAML_AS_UPLOADED
    assert load_workload(VALID_YAML, base_dir=tmp_path).base_dir == str(tmp_path)
    problem = only_problem(str(tmp_path / "missing.yaml"))
    assert "cannot read" in problem.message


def test_billion_laughs_is_refused_fast() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    bomb = "\n".join(lines) + "\n"
    start = time.perf_counter()
    problem = only_problem(bomb)
    assert time.perf_counter() - start < 1.0
    assert "expands to more than" in problem.message


def test_merge_key_bomb_is_refused_fast() -> None:
    lines = ["a0: &a0 {k0: 1, k1: 1, k2: 1, k3: 1, k4: 1, k5: 1, k6: 1, k7: 1, k8: 1, k9: 1}"]
    for i in range(1, 10):
        merges = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} {{<<: [{merges}], z{i}: 1}}")
    start = time.perf_counter()
    problems_of("\n".join(lines))
    assert time.perf_counter() - start < 1.0


def test_merge_keys_work() -> None:
    text = "base: &b {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
    problems = problems_of(text + "experiment_name: e\ncompute: {<<: *b}\ncommand: x\n")
    assert [p.path for p in problems] == ["base"]  # only the unknown key: the merge itself is fine


def test_recursive_alias_is_refused() -> None:
    problem = only_problem("experiment_name: &a [*a]\n")
    assert "deeper" in problem.message or "expands" in problem.message


def test_deep_nesting_is_refused() -> None:
    # beyond the parser's own limit, and just beyond ours (64 levels)
    parser = only_problem("parameters: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nesting depth" in parser.message and parser.line == 1
    ours = only_problem("parameters: " + "[" * 65 + "]" * 65 + "\n")
    assert ours.message == "the document nests deeper than 64 levels"
    within = only_problem(VALID_YAML + "parameters: " + "[" * 64 + "]" * 64 + "\n")
    assert within.path == "parameters" and "mapping" in within.message  # read, then checked


def test_over_one_mebibyte_is_refused() -> None:
    text = VALID_YAML + "# " + "x" * (1024 * 1024) + "\n"
    problem = only_problem(text)
    assert "1 MiB" in problem.message
    assert "1 MiB" in only_problem(text.encode()).message


def test_big_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (1024 * 1024 + 1))
    assert "1 MiB" in only_problem(path).message


def test_non_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(VALID_YAML.encode() + b"# caf\xe9\n")
    assert "UTF-8" in only_problem(path).message
    assert "UTF-8" in only_problem(b"experiment_name: \xff\xfe\n").message


@pytest.mark.parametrize(
    "text",
    [
        "- a\n- b\n",
        "just a string\n",
        "",
        "# only a comment\n",
        "a: [1, 2\n",
        "a: !!python/object/apply:os.system ['echo pwned']\n",
        "a: !custom 1\n",
        "a: !!set {x, y}\n",
        "--- {a: 1}\n--- {b: 2}\n",
        "{[1]: 2}\n",
        "a: 1\na: 2\n",
        "\t- x",
        "a: *undefined\n",
    ],
)
def test_bad_documents_raise_only_workload_error(text: str) -> None:
    problems = problems_of(text)
    assert all(p.message for p in problems)


def test_syntax_error_has_location() -> None:
    problem = only_problem("experiment_name: x\ncompute: [1, 2\n")
    assert problem.line is not None and problem.line >= 2
    assert "YAML syntax error" in problem.message


def test_python_tags_never_run(tmp_path: Path) -> None:
    """The tag would create a file if it ran; the one problem is the tag itself (an unknown
    key ``a`` alone would be a problem at the same place, ran or not)."""
    trace = tmp_path / "ran"
    problem = only_problem(f"a: !!python/object/apply:os.system ['touch {trace}']\n")
    assert (problem.path, problem.line) == ("a", 1)
    assert "unsupported YAML tag" in problem.message and "python/object/apply" in problem.message
    assert not trace.exists()


@pytest.mark.parametrize("source", [42, None, ["a"], 3.5, object()])
def test_non_workload_sources(source: object) -> None:
    with pytest.raises(WorkloadError):
        load_workload(source)  # type: ignore[arg-type]


# -- overrides ----------------------------------------------------------------------------


def test_overrides_strings_and_mapping() -> None:
    w = load_workload(
        VALID_YAML,
        [
            "compute.num_accelerators=4",
            "env_variables.FOO=bar",
            "parameters.lr=0.1",
            "env_variables.X=1.50",
            "max_retries=0",
        ],
    )
    assert w.compute.num_accelerators == 4
    assert w.env_variables["FOO"] == "bar"
    assert w.env_variables["X"] == "1.50"
    assert w.parameters == {"lr": 0.1}
    assert w.max_retries == 0
    assert "num_accelerators: 4" in w.source_text
    m = load_workload(minimal(), {"compute.num_accelerators": 3, "parameters.nested.deep": [1]})
    assert m.num_nodes == 3
    assert m.parameters == {"nested": {"deep": [1]}}


def test_override_into_list() -> None:
    data = minimal(
        command=...,
        compute={"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        containers=[{"name": "a", "unity_catalog_image": "a.b.c:1", "command": "x"}],
    )
    w = load_workload(data, ["containers[0].command=echo changed"])
    assert w.containers is not None and w.containers[0].command == "echo changed"


def test_bad_override_paths() -> None:
    problems = problems_of(VALID_YAML, ["command.x=1", "no_equals", "containers[3].name=x", "..=1"])
    paths = [p.path for p in problems]
    assert "overrides.command.x" in paths
    assert "overrides.no_equals" in paths
    assert "overrides.containers[3].name" in paths
    assert "overrides..." in paths


def test_override_that_breaks_a_rule_is_reported_at_its_path() -> None:
    problem = only_problem(VALID_YAML, ["compute.num_accelerators=0"])
    assert problem.path == "compute.num_accelerators"
    assert problem.line is None  # the value does not come from the file
    problem = only_problem(VALID_YAML, ["compute.num_gpus=2"])
    assert problem.path == "compute.num_gpus"


def test_with_overrides_and_with_secrets() -> None:
    w = load_workload(VALID_YAML)
    w2 = w.with_overrides({"compute.num_accelerators": 4})
    assert (w.num_nodes, w2.num_nodes) == (2, 4)
    w3 = w.with_secrets({"RANK": "scope/rank", "HF_TOKEN": "research/hf"})
    assert "RANK" not in w3.env_variables
    assert w3.secrets == {
        "RANK": SecretRef(scope="scope", key="rank"),
        "HF_TOKEN": SecretRef(scope="research", key="hf"),
    }
    with pytest.raises(WorkloadError):
        w.with_secrets({"BAD": "no-slash"})


def test_dict_source_text_is_yaml_dump() -> None:
    w = load_workload(minimal(command="echo a\necho b\n"))
    assert "command: |" in w.source_text
    assert load_workload(w.source_text).command == "echo a\necho b\n"
    for odd in ("0\x85", "a\tb\nc", "x\r\ny", "trailing  \nspace  \n"):
        assert load_workload(minimal(command=odd)).source_text
        assert load_workload(load_workload(minimal(command=odd)).source_text).command == odd


def test_lint_relative_path_with_docker_image() -> None:
    docker = {"docker_image": {"url": "myorg/train:1"}}
    w = load_workload(minimal(environment=docker, command="python train.py --lr 1"))
    (warning,) = lint_workload(w)
    assert "train.py" in warning and "WORKDIR" in warning
    assert (
        lint_workload(load_workload(minimal(environment=docker, command="python /app/train.py")))
        == []
    )
    assert lint_workload(load_workload(minimal(command="python train.py"))) == []


def test_json_schema_accepts_examples() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    schema = workload_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    root = Path(__file__).resolve().parents[2] / "examples"
    files = sorted(root.glob("*.yaml")) + sorted(root.glob("rl/*.yaml"))
    assert len(files) >= 5
    for path in files:
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, (path, errors[0].message)
    assert list(validator.iter_errors({"experiment_name": "x", "compute": {}, "comand": "x"}))


def test_with_env_variables_adds_only_what_the_workload_does_not_set() -> None:
    from air_runtime import build_plan

    base = load_workload(
        {
            "experiment_name": "env",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "env_variables": {"MINE": "kept"},
            "secrets": {"TOKEN": "scope/key"},
            "command": "env",
        }
    )
    added = base.with_env_variables({"MINE": "other", "TOKEN": "plain", "NEW": "1"})
    assert added.env_variables == {"MINE": "kept", "NEW": "1"}
    assert "TOKEN" in added.secrets and base.env_variables == {"MINE": "kept"}
    assert base.with_env_variables({"MINE": "other"}) is base
    plan = build_plan(added, user_name="me@example.com", idempotency_token="t")
    (env_file,) = [f for f in plan.files if f.path.endswith("/env_vars.json")]
    assert b'{"name":"NEW","value":"1"}' in env_file.content


def test_override_values_are_yaml_and_keep_their_style_in_the_uploaded_config() -> None:
    """runconfig_override.go parseOverrideNode: the value is YAML (a list stays a list);
    variables keep their text (runconfig.go decodes them into strings)."""
    w = load_workload(
        VALID_YAML, ["parameters.layers=[64, 32]", "env_variables.X=2.50", "env_variables.Y=a: b"]
    )
    assert w.parameters == {"layers": [64, 32]}
    assert (w.env_variables["X"], w.env_variables["Y"]) == ("2.50", "a: b")
    assert "    X: 2.50\n" in w.source_text and '    Y: "a: b"\n' in w.source_text
    assert w.source_text.endswith("parameters:\n    layers: [64, 32]\n")
