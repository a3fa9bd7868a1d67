"""Golden plans of the examples: the exact submit body and the exact uploaded files.

Regenerate after an intended change with ``AIRO_UPDATE_GOLDEN=1 pytest tests/unit/test_plan_golden.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from air_runtime.plan import build_plan
from air_runtime.workload import load_workload

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml")) + sorted(
    (REPO / "examples" / "rl").glob("*.yaml")
)


def _golden_view(path: Path) -> dict[str, Any]:
    plan = build_plan(
        load_workload(path), user_name="someone@example.com", idempotency_token="golden-token"
    )
    data = plan.redacted()
    # the checkout location must not leak into the golden files
    for snapshot in data["code_snapshots"]:
        snapshot["base_dir"] = os.path.relpath(snapshot["base_dir"], REPO)
    return data


@pytest.mark.parametrize(
    "path", EXAMPLES, ids=[str(p.relative_to(REPO / "examples")) for p in EXAMPLES]
)
def test_example_plan_matches_golden(path: Path) -> None:
    golden = GOLDEN / (
        str(path.relative_to(REPO / "examples")).replace("/", "__").removesuffix(".yaml") + ".json"
    )
    actual = _golden_view(path)
    if os.environ.get("AIRO_UPDATE_GOLDEN") == "1":
        golden.write_text(json.dumps(actual, indent=2, sort_keys=False) + "\n")
    assert golden.exists(), f"missing {golden}: run with AIRO_UPDATE_GOLDEN=1"
    expected = json.loads(golden.read_text())
    assert actual["submit_body"] == expected["submit_body"]
    assert {f["path"]: f["content"] for f in actual["files"]} == {
        f["path"]: f["content"] for f in expected["files"]
    }
    assert actual == expected


def test_examples_are_all_covered() -> None:
    names = {p.name for p in EXAMPLES}
    assert {
        "single_node.yaml",
        "torchrun_two_nodes.yaml",
        "docker_image.yaml",
        "unity_catalog_image.yaml",
        "grpo_two_containers.yaml",
        "evaluate.yaml",
    } <= names


def test_rl_example_shape() -> None:
    w = load_workload(REPO / "examples" / "rl" / "grpo_two_containers.yaml")
    assert w.num_nodes == 2
    assert w.containers is not None
    assert [(c.name, c.ranks, c.unity_catalog_image) for c in w.containers] == [
        ("inference", (0,), "main.rl.vllm:0.8.5"),
        ("trainer", (1,), "main.rl.pytorch:2.6.0-cuda12.4-cudnn9-runtime"),
    ]
    assert w.env_variables == {"MODEL_ID": "Qwen/Qwen2.5-0.5B-Instruct"}
    assert {k: str(v) for k, v in w.secrets.items()} == {"HF_TOKEN": "research/hf_token"}
    assert w.parameters == {"learning_rate": 0.05, "epochs": 5, "rollouts_per_epoch": 16}
    assert w.code_source is not None and w.base_dir == str(REPO / "examples" / "rl")
    evaluate = load_workload(REPO / "examples" / "rl" / "evaluate.yaml")
    assert (evaluate.compute.accelerator_type, evaluate.num_nodes) == ("GPU_1xA10", 1)
    assert evaluate.parameters == {"min_reward": 0.5}
