"""A submission's run name and rank variables, from its key alone."""

from __future__ import annotations

import re

from air_runtime import SubmissionKey
from air_runtime.plan import Stage
from air_runtime.workload import load_workload

NAME_RULE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")  # docs/spec/workload.md §1


def _workload(**extra):
    return load_workload(
        {
            "experiment_name": "sweep",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": "true",
            **extra,
        }
    )


def test_a_mapped_task_names_dag_task_and_index():
    key = SubmissionKey(
        "airflow", "ns", "gpu_sweep", "manual__2026-12-03T07:00:00+00:00", "g.trial", 3
    )
    assert key.run_name("sweep") == "sweep--gpu_sweep--g_trial--3"
    assert key.environment() == {
        "AIRO_ORCHESTRATOR": "airflow",
        "AIRO_PIPELINE": "gpu_sweep",
        "AIRO_ORCHESTRATOR_RUN_ID": "manual__2026-12-03T07:00:00+00:00",
        "AIRO_TASK": "g.trial",
        "AIRO_MAP_INDEX": "3",
    }


def test_a_partition_key_is_a_partition_and_an_unmapped_task_has_no_index():
    key = SubmissionKey("dagster", "ns", "job", "r", "train", "2026-01-01|lr=0.1")
    assert key.run_name("exp") == "exp--job--train--2026-01-01_lr_0_1"
    assert key.environment()["AIRO_PARTITION_KEY"] == "2026-01-01|lr=0.1"
    plain = SubmissionKey("airflow", "ns", "dag", "r", "train")
    assert plain.run_name("exp") == "exp--dag--train"
    assert "AIRO_MAP_INDEX" not in plain.environment()


def test_a_long_name_keeps_task_and_index_within_the_rule_and_stays_distinct():
    def key(pipeline: str) -> SubmissionKey:
        return SubmissionKey("airflow", "ns", pipeline, "r", "trial", 12)

    first = key("p" * 90 + "a").run_name("e" * 100)
    second = key("p" * 90 + "b").run_name("e" * 100)
    for name in (first, second):
        assert NAME_RULE.match(name), name
        assert "--trial--12--" in name
    assert first != second
    huge = SubmissionKey("airflow", "ns", "p", "r", "t" * 100, 1).run_name("e")
    assert NAME_RULE.match(huge) and len(huge) == 100


def test_identify_adds_the_variables_without_replacing_the_authors():
    key = SubmissionKey("airflow", "ns", "dag", "r", "train", 0)
    workload, name = key.identify(_workload(env_variables={"AIRO_TASK": "mine"}), None)
    assert name == "sweep--dag--train--0"
    assert workload.env_variables["AIRO_TASK"] == "mine"
    assert workload.env_variables["AIRO_MAP_INDEX"] == "0"
    stages, name = key.identify([Stage("a", _workload()), Stage("b", _workload())], "pipeline")
    assert name == "pipeline--dag--train--0"
    assert all(s.workload.env_variables["AIRO_PIPELINE"] == "dag" for s in stages)
    assert [s.workload.env_variables["AIRO_STAGE"] for s in stages] == ["a", "b"]
