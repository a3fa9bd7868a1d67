"""A submission's run name and rank variables, from its key alone."""

from __future__ import annotations

import re

import pytest

from air_runtime import PartitionRange, SubmissionKey, decode_name_part
from air_runtime._run_names import encode_name_part
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
    assert key.run_name("sweep") == "sweep--gpu_sweep--manual_20261203T070000--g_trial--3"
    assert key.environment() == {
        "AIRO_ORCHESTRATOR": "airflow",
        "AIRO_PIPELINE": "gpu_sweep",
        "AIRO_ORCHESTRATOR_RUN_ID": "manual__2026-12-03T07:00:00+00:00",
        "AIRO_TASK": "g.trial",
        "AIRO_MAP_INDEX": "3",
    }


def test_a_partition_key_is_a_partition_and_an_unmapped_task_has_no_index():
    key = SubmissionKey("dagster", "ns", "job", "r", "train", "2026-01-01|lr=0.1")
    # Encoded, not mangled: "|", "=" and "." are "_" and their hex code.
    assert key.run_name("exp") == "exp--job--r--train--2026-01-01_7clr_3d0_2e1"
    assert key.environment()["AIRO_PARTITION_KEY"] == "2026-01-01|lr=0.1"
    plain = SubmissionKey("airflow", "ns", "dag", "r", "train")
    assert plain.run_name("exp") == "exp--dag--r--train"
    assert "AIRO_MAP_INDEX" not in plain.environment()


def test_a_long_name_keeps_task_and_index_within_the_rule_and_stays_distinct():
    def key(pipeline: str) -> SubmissionKey:
        return SubmissionKey("airflow", "ns", pipeline, "r", "trial", 12)

    first = key("p" * 90 + "a").run_name("e" * 100)
    second = key("p" * 90 + "b").run_name("e" * 100)
    for name in (first, second):
        assert NAME_RULE.match(name), name
        assert "--r--trial--12--" in name
    assert first != second
    huge = SubmissionKey("airflow", "ns", "p", "r", "t" * 100, 1).run_name("e")
    assert NAME_RULE.match(huge) and len(huge) == 100


def test_identify_adds_the_variables_without_replacing_the_authors():
    key = SubmissionKey("airflow", "ns", "dag", "r", "train", 0)
    workload, name = key.identify(_workload(env_variables={"AIRO_TASK": "mine"}), None)
    assert name == "sweep--dag--r--train--0"
    assert workload.env_variables["AIRO_TASK"] == "mine"
    assert workload.env_variables["AIRO_MAP_INDEX"] == "0"
    stages, name = key.identify([Stage("a", _workload()), Stage("b", _workload())], "pipeline")
    assert name == "pipeline--dag--r--train--0"
    assert all(s.workload.env_variables["AIRO_PIPELINE"] == "dag" for s in stages)
    assert [s.workload.env_variables["AIRO_STAGE"] for s in stages] == ["a", "b"]


KEYS = [
    "lr-0.05",
    "lr_0.05",
    "lr-0_05",  # read the same as the first once mangled: never once encoded
    "2026-01-01|lr=0.1",
    "a/b/c",
    "zürich-β",
    "-leading",
    "trailing-",
    "two--dashes",
    "a_to_b",
    "3keys",
    "_2e",  # looks like an escape
    " ",
]


@pytest.mark.parametrize("key", KEYS)
def test_a_partition_key_round_trips_through_its_name(key):
    encoded = encode_name_part(key)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", encoded), encoded
    assert "--" not in encoded and not encoded.startswith("-") and not encoded.endswith("-")
    assert decode_name_part(encoded) == key
    name = SubmissionKey("dagster", "ns", "job", "4f9c2e1a-1111-2222-3333-444455556666",
                         "train", key).run_name("exp")  # fmt: skip
    assert NAME_RULE.match(name), name
    assert name == f"exp--job--4f9c2e1a--train--{encoded}"
    assert decode_name_part(name.split("--")[-1]) == key


def test_keys_that_read_alike_get_names_of_their_own():
    names = {encode_name_part(k) for k in KEYS}
    assert len(names) == len(KEYS)
    assert encode_name_part("lr-0.05") == "lr-0_2e05"  # readable: only the "." is encoded
    assert encode_name_part("2026-01-01") == "2026-01-01"


def test_a_range_names_its_first_and_last_keys_and_how_many():
    key = SubmissionKey("dagster", "ns", "job", "r", "sweep", "lr-0.01...lr-0.05",
                        partitions=PartitionRange("lr-0.01", "lr-0.05", 3))  # fmt: skip
    name = key.run_name("exp")
    assert name == "exp--job--r--sweep--lr-0_2e01_to_lr-0_2e05_3keys"
    shown = name.split("--")[-1]
    first, rest = shown.split("_to_", 1)
    last, count = rest.rsplit("_", 1)
    assert (decode_name_part(first), decode_name_part(last), count) == (
        "lr-0.01",
        "lr-0.05",
        "3keys",
    )
    # Keys holding "_to_" or ending in "keys" cannot be mistaken for a range's markers.
    odd = PartitionRange("a_to_b", "c_9keys", 2).name()
    first, rest = odd.split("_to_", 1)
    last, count = rest.rsplit("_", 1)
    assert (decode_name_part(first), decode_name_part(last), count) == (
        "a_to_b",
        "c_9keys",
        "2keys",
    )
    # The index (the idempotency token's input) is not what the name shows.
    assert key.idempotency_token(0) == SubmissionKey(
        "dagster", "ns", "job", "r", "sweep", "lr-0.01...lr-0.05"
    ).idempotency_token(0)
    # One partition whose index carries more (a digest of kept rows) shows the key alone.
    kept = SubmissionKey("dagster", "ns", "job", "r", "sweep", "lr-0.01+0a1b2c3d",
                         partitions=PartitionRange("lr-0.01", "lr-0.01"))  # fmt: skip
    assert kept.run_name("exp") == "exp--job--r--sweep--lr-0_2e01"


def test_a_name_too_long_keeps_the_run_and_the_index_before_the_task():
    key = SubmissionKey("dagster", "ns", "j" * 50, "4f9c2e1a-1111-2222-3333-444455556666",
                        "t" * 80, "lr-0.05")  # fmt: skip
    name = key.run_name("e" * 50)
    assert NAME_RULE.match(name) and len(name) == 100
    assert "--4f9c2e1a--" in name and "--lr-0_2e05--" in name
    assert name != SubmissionKey("dagster", "ns", "j" * 50, "4f9c2e1a-1111-2222-3333-444455556666",
                                 "t" * 80, "lr-0.06").run_name("e" * 50)  # fmt: skip


def test_a_submission_carries_what_its_name_shows_and_an_older_release_reads_it_back():
    from air_runtime import Submission

    ranged = SubmissionKey("dagster", "ns", "job", "r", "sweep", "a...c",
                           partitions=PartitionRange("a", "c", 3))  # fmt: skip
    again = Submission.from_json(Submission(ranged).to_json())
    assert again.key.partitions == PartitionRange("a", "c", 3)
    assert again.key.run_name("exp") == ranged.run_name("exp")
    # Without partitions the key is what a release without the field wrote and reads.
    plain = Submission(SubmissionKey("airflow", "ns", "dag", "r", "t", 1)).to_json()
    assert "partitions" not in plain["key"]
