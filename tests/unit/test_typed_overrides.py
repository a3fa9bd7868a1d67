"""Overrides typed by the workload's schema: a text where the schema wants an integer, a
number or a boolean (what an Airflow template renders, a Dagster config string, a quoted
``airo --override``) is converted before validation; a text that is none is refused with
the usual problem (field path, fix, the override that set it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from air_runtime import WorkloadError, load_workload
from air_runtime.cli import main as airo
from air_runtime.workload._typed_overrides import _convert_text, typed_override

BASE = {
    "experiment_name": "typed",
    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
    "command": "true",
}
TWO_CONTAINERS = {
    "experiment_name": "typed",
    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 2},
    "containers": [
        {"name": "a", "ranks": [0], "unity_catalog_image": "main.s.a:1", "command": "true"},
        {"name": "b", "ranks": [1], "unity_catalog_image": "main.s.b:1", "command": "true"},
    ],
}


def test_a_rendered_number_is_the_integer_the_schema_wants() -> None:
    workload = load_workload(
        BASE,
        {"compute.num_accelerators": "2", "max_retries": "0", "timeout_minutes": " 30 "},
    )
    assert workload.compute.num_accelerators == 2
    assert (workload.max_retries, workload.timeout_minutes) == (0, 30)
    # training_config.yaml carries the typed value, as the workspace will read it
    assert "num_accelerators: 2\n" in workload.source_text
    assert "timeout_minutes: 30\n" in workload.source_text


def test_text_inside_an_overridden_mapping_or_list_is_typed_too() -> None:
    workload = load_workload(
        BASE, {"compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": "2.0"}}
    )
    assert workload.compute.num_accelerators == 2
    containers = load_workload(TWO_CONTAINERS, {"containers[1].ranks": ["1"]}).containers
    assert containers is not None and containers[1].ranks == (1,)


def test_what_dagster_and_airo_give_are_typed_the_same_way(tmp_path: Path, capsys) -> None:
    # Dagster's config overrides go through Workload.with_overrides
    workload = load_workload(BASE).with_overrides({"compute.num_accelerators": "2"})
    assert workload.compute.num_accelerators == 2
    # airo --override: a quoted YAML value is text until the schema types it
    assert load_workload(BASE, ['compute.num_accelerators="2"']).compute.num_accelerators == 2
    path = tmp_path / "w.yaml"
    path.write_text(
        "experiment_name: typed\ncompute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
        "command: 'true'\n"
    )
    assert airo(["validate", str(path), "--override", "max_retries='2'"]) == 0
    assert airo(["validate", str(path), "--override", "max_retries=some"]) == 1
    assert "max_retries (set by override 'max_retries')" in capsys.readouterr().out


def test_text_stays_text_where_the_schema_allows_text() -> None:
    workload = load_workload(
        BASE,
        {
            "env_variables.GPUS": "2",  # environment variables are strings on the wire
            "parameters.learning_rate": "0.1",  # free-form: the training code decides
            "environment.version": "6",  # an integer or a string
        },
    )
    assert workload.env_variables == {"GPUS": "2"}
    assert workload.parameters == {"learning_rate": "0.1"}
    assert workload.environment.version == "6"


@pytest.mark.parametrize("given", ["two", "2.5", "", "1e3", "{{ params.gpus }}"])
def test_a_text_that_is_no_integer_is_the_usual_problem(given: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        load_workload(BASE, {"compute.num_accelerators": given})
    (problem,) = caught.value.problems
    assert problem.path == "compute.num_accelerators"
    assert problem.override == "compute.num_accelerators"
    assert "must be an integer" in problem.message and problem.hint


@pytest.mark.parametrize(
    ("text", "types", "value"),
    [
        ("True", {"boolean"}, True),
        ("off", {"boolean"}, False),
        ("maybe", {"boolean"}, "maybe"),
        ("-3", {"integer"}, -3),
        ("2.50", {"number"}, 2.5),
        ("4", {"number"}, 4),
        ("nan", {"number"}, "nan"),
        ("7", {"integer", "boolean"}, 7),
    ],
)
def test_each_schema_type_reads_its_text(text: str, types: set[str], value: object) -> None:
    converted = _convert_text(text, types)
    assert converted == value and type(converted) is type(value)


def test_a_path_the_schema_does_not_know_is_left_alone() -> None:
    assert typed_override(["no_such_field"], "2") == "2"
    assert typed_override(["compute", "num_accelerators"], "3") == 3
