"""``airo validate``, ``airo plan`` and ``airo schema``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from air_runtime.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml")) + sorted(
    (REPO / "examples" / "rl").glob("*.yaml")
)
BAD = (
    "experiment_name: x\ncompute: {accelerator_type: GPU_8xH100, num_accelerators: 12}\ncomand: x\n"
)


def test_validate_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *map(str, EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert out.count(": OK") == len(EXAMPLES)


def test_validate_reports_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert main(["validate", str(bad), str(EXAMPLES[0])]) == 1
    out = capsys.readouterr().out
    assert "bad.yaml: 3 problem(s)" in out
    assert (
        "compute.num_accelerators (line 2:59): compute.num_accelerators for GPU_8xH100 must be a multiple of 8, got 12"
        in out
    )
    assert "did you mean 'command'?" in out


def test_validate_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert main(["validate", "--json", str(bad)]) == 1
    (result,) = json.loads(capsys.readouterr().out)
    assert result["valid"] is False
    paths = {p["path"]: p for p in result["problems"]}
    assert paths["comand"]["line"] == 3 and paths["comand"]["column"] == 1
    assert paths["comand"]["hint"] == "did you mean 'command'?"


def test_validate_with_override(capsys: pytest.CaptureFixture[str]) -> None:
    single = REPO / "examples" / "single_node.yaml"
    assert main(["validate", str(single), "--override", "compute.num_accelerators=0"]) == 1
    assert "compute.num_accelerators" in capsys.readouterr().out


def test_plan_text(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "examples" / "rl" / "grpo_two_containers.yaml"
    assert main(["plan", str(path), "--user", "me@example.com", "--idempotency-token", "t1"]) == 0
    out = capsys.readouterr().out
    assert (
        "/Workspace/Users/me@example.com/.air/cli_launch/grpo_two_containers/grpo_two_containers_"
        in out
    )
    assert "containers/inference/command.sh" in out
    assert "POST /api/2.2/jobs/runs/submit" in out
    assert '"secret_scope":"research"' in out


def test_plan_json_with_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "examples" / "single_node.yaml"
    code = main(
        [
            "plan",
            str(path),
            "--json",
            "--override",
            "compute.num_accelerators=2",
            "--override",
            "env_variables.EXTRA=1.50",
            "--idempotency-token",
            "t1",
        ]
    )
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    task = plan["submit_body"]["tasks"][0]
    assert task["ai_runtime_task"]["deployments"][0]["compute"]["accelerator_count"] == 2
    env = next(f for f in plan["files"] if f["path"].endswith("/env_vars.json"))
    assert {"name": "EXTRA", "value": "1.50"} in json.loads(env["content"])
    assert plan["idempotency_token"] == "t1"


def test_plan_of_invalid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert main(["plan", str(bad)]) == 1
    assert "3 problem(s)" in capsys.readouterr().err


def test_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["properties"]["compute"]["required"] == ["accelerator_type", "num_accelerators"]


def test_console_script_validates_examples() -> None:
    airo = Path(sys.executable).parent / "airo"
    result = subprocess.run(
        [str(airo), "validate", *map(str, EXAMPLES)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": OK") == len(EXAMPLES)


TEMPLATED = """experiment_name: exp_{{ params.name }}
compute:
  accelerator_type: GPU_8xH100
  num_accelerators: {{ params.gpus }}
environment:
  version: 6
env_variables:
  TOKEN: "{{secrets/scope/key}}"
command: echo {{ ds }} {{ macros.ds_add(ds, 1) }} {{ var.value.missing }}
"""


def test_validate_renders_jinja_workloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The repository's Dag workload renders with the sample context.
    assert main(["validate", str(REPO / "dags" / "workloads" / "nightly_torchrun.yaml")]) == 0
    templated = tmp_path / "templated.yaml"
    templated.write_text(TEMPLATED)
    capsys.readouterr()
    # A placeholder where a number belongs: the line is named and --context is the fix.
    assert main(["validate", str(templated)]) == 1
    out = capsys.readouterr().out
    assert f"{templated}: 1 problem(s)" in out
    assert "compute.num_accelerators (line 4:21)" in out and "--context KEY=VALUE" in out
    assert main(["validate", str(templated), "--context", "params.gpus=16"]) == 0
    # An override's problem names the override, not a line of the file.
    assert (
        main(
            [
                "validate",
                str(templated),
                "--context",
                "params.gpus=16",
                "--override",
                "compute.num_accelerators=12",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert "compute.num_accelerators (set by override 'compute.num_accelerators')" in out
    broken = tmp_path / "broken.yaml"
    broken.write_text("experiment_name: x\n{% if %}\n")
    assert main(["validate", "--json", str(broken)]) == 1
    (result,) = json.loads(capsys.readouterr().out)
    assert result["file"] == str(broken) and result["problems"][0]["line"] == 2
    assert "Jinja syntax error" in result["problems"][0]["message"]


def test_workload_text_is_named_by_its_source() -> None:
    from air_runtime import WorkloadError, load_workload

    with pytest.raises(WorkloadError) as caught:
        load_workload(BAD, {"compute.accelerator_type": "GPU_9xZ"}, source_name="dags/train.yaml")
    assert caught.value.source == "dags/train.yaml"
    assert str(caught.value).startswith("invalid workload dags/train.yaml: ")
    assert "<text>" not in str(caught.value)
    (override,) = [p for p in caught.value.problems if p.override]
    assert override.override == "compute.accelerator_type" and override.line is None
