"""What a user learns before a run (definition errors, YAML options) and the messages of runs
the workspace refuses."""

from __future__ import annotations

import dataclasses
import inspect

import dagster as dg
import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox
from dagster_checks import counters, failure_data, workload

from dagster_air import (
    AirAssetOptions,
    AirStage,
    AirWorkspace,
    air_workload_asset,
    build_air_assets,
)


def test_partition_coverage_is_checked_when_the_definitions_load():
    sweep = dg.StaticPartitionsDefinition(["lr_small", "lr_large"])
    with pytest.raises(dg.DagsterInvalidDefinitionError) as raised:
        build_air_assets(
            AirStage(key="sweep", workload=workload("sweep", "true")),
            partitions_def=sweep,
            partition_parameters={"lr_small": {"lr": 0.01}, "lr_lage": {"lr": 0.1}},
        )
    message = str(raised.value)
    assert "without an entry in partition_parameters: lr_large" in message
    assert "of no partition: lr_lage" in message


def test_python_factories_take_checks_pool_retries_backfill_and_io_manager():
    @air_workload_asset(
        workload=workload("trained", "true"),
        check_specs=["reward_ok", dg.AssetCheckSpec("loss_ok", asset="trained", blocking=True)],
        pool="gpu",
        retry_policy=dg.RetryPolicy(max_retries=2),
        backfill_policy=dg.BackfillPolicy.single_run(),
        io_manager_key="stage_outputs",
        partitions_def=dg.StaticPartitionsDefinition(["a"]),
        group_name="training",
    )
    def trained(context, air):
        yield from air.run()

    assert {k.name for k in trained.check_keys} == {"reward_ok", "loss_ok"}
    assert trained.op.pool == "gpu"
    assert trained.op.retry_policy.max_retries == 2
    assert trained.backfill_policy == dg.BackfillPolicy.single_run()
    assert trained.get_io_manager_key_for_asset_key(dg.AssetKey("trained")) == "stage_outputs"
    assert trained.specs_by_key[dg.AssetKey("trained")].group_name == "training"

    # check_specs among a stage's asset attributes no longer reach AssetSpec (a TypeError).
    stages = build_air_assets(
        AirStage(
            key="stage",
            workload=workload("stage", "true"),
            asset_attributes={"check_specs": ["done"], "group_name": "g"},
        )
    )
    assert {k.name for k in stages.check_keys} == {"done"}


def test_the_factories_take_their_options_as_one_object():
    options = AirAssetOptions(
        pool="gpu",
        retry_policy=dg.RetryPolicy(max_retries=2),
        backfill_policy=dg.BackfillPolicy.single_run(),
        partitions_def=dg.StaticPartitionsDefinition(["a"]),
    )
    built = build_air_assets(AirStage(key="built", workload=workload("built", "true")),
                             options=options)  # fmt: skip

    @air_workload_asset(workload=workload("decorated", "true"), options=options)
    def decorated(context, air):
        yield from air.run()

    for assets in (built, decorated):
        assert assets.op.pool == "gpu"
        assert assets.op.retry_policy.max_retries == 2
        assert assets.backfill_policy == dg.BackfillPolicy.single_run()
        assert assets.partitions_def == dg.StaticPartitionsDefinition(["a"])

    # The options are listed once, in AirAssetOptions: neither factory's signature nor the
    # component's attributes name one; the factories take them by name through
    # AirAssetOptions, and the component embeds it whole as `options`.
    names = {field.name for field in dataclasses.fields(AirAssetOptions)}
    for factory in (build_air_assets, air_workload_asset):
        assert not names & set(inspect.signature(factory).parameters), factory
    from dagster_air import AirWorkloadComponent

    attributes = set(AirWorkloadComponent.get_model_cls().model_json_schema()["properties"])
    assert not names & attributes and "options" in attributes
    by_name = build_air_assets(
        AirStage(key="by_name", workload=workload("by_name", "true")), pool="gpu", max_gpu_hours=2
    )
    assert by_name.op.pool == "gpu"
    with pytest.raises(dg.DagsterInvalidDefinitionError, match=r"unknown option.*max_gpu_hour\b"):
        build_air_assets(AirStage(key="typo", workload=workload("typo", "true")), max_gpu_hour=2)

    # Both ways at once: which would win is not obvious.
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="not both"):
        build_air_assets(
            AirStage(key="both", workload=workload("both", "true")), options=options, pool="cpu"
        )


def _write_component(sandbox, name: str, attributes: dict) -> None:
    folder = sandbox.defs_folder_path / name
    folder.mkdir()
    (folder / "defs.yaml").write_text(
        yaml.safe_dump({"type": "dagster_air.AirWorkloadComponent", "attributes": attributes})
    )


def test_component_yaml_options_and_load_time_errors(monkeypatch):
    monkeypatch.delenv("NOT_SET_TOKEN_VAR", raising=False)
    inline = workload("inline", "true")
    with create_defs_folder_sandbox() as sandbox:
        _write_component(
            sandbox,
            "trained",
            {
                "workload": inline,
                "checks": [{"name": "reward_ok"}, {"name": "loss_ok", "blocking": True}],
                "op": {"pool": "gpu"},
                "options": {
                    "retry_policy": {"max_retries": 3, "delay": 5, "backoff": "EXPONENTIAL"},
                    "backfill_policy": {"type": "multi_run", "max_partitions_per_run": 4},
                    "io_manager_key": "stage_outputs",
                    "partitions_def": {"type": "static", "partition_keys": ["a", "b"]},
                    "partition_parameters": {"a": {"x": 1}, "b": {"x": 2}},
                },
                "stages": None,
            },
        )
        with sandbox.build_all_defs() as defs:
            (assets,) = list(defs.assets or [])
            assert {
                k.name: s.blocking for k, s in {s.key: s for s in assets.check_specs}.items()
            } == {
                "reward_ok": False,
                "loss_ok": True,
            }
            assert assets.op.pool == "gpu"
            assert assets.op.retry_policy.max_retries == 3
            assert assets.op.retry_policy.backoff == dg.Backoff.EXPONENTIAL
            assert assets.backfill_policy == dg.BackfillPolicy.multi_run(4)

    # A partition without parameters, and a workspace variable that is not set: both
    # reported when the definitions load (what `dg check defs` runs).
    for attributes, expected in [
        (
            {
                "workload": inline,
                "options": {
                    "partitions_def": {"type": "static", "partition_keys": ["a", "b"]},
                    "partition_parameters": {"a": {"x": 1}},
                },
            },
            "without an entry in partition_parameters: b",
        ),
        # A defs.yaml written before the options were one field: each key's new place.
        (
            {"workload": inline, "pool": "gpu", "max_gpu_hours": 3},
            "moved under `options:` or `op:`: `max_gpu_hours` -> `options.max_gpu_hours`, "
            "`pool` -> `op.pool`",
        ),
        (
            {
                "workload": inline,
                "workspace": {"host": "http://x", "token_env": "NOT_SET_TOKEN_VAR"},
            },
            "NOT_SET_TOKEN_VAR (token_env)",
        ),
    ]:
        with create_defs_folder_sandbox() as sandbox:
            _write_component(sandbox, "broken", attributes)
            with pytest.raises(Exception) as raised, sandbox.build_all_defs():
                pass
            assert expected in _full_text(raised.value)


def _full_text(error: BaseException) -> str:
    texts = []
    while error is not None:
        texts.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(texts)


def test_a_wrong_token_is_reported_as_the_token_with_and_without_secrets(
    local_workspace, instance, monkeypatch
):
    monkeypatch.setenv("TEST_SECRET_FOR_TOKEN", "hf_value_never_stored")
    wrong = AirWorkspace(host=local_workspace.host, token="dapi-wrong-token-value")
    with_secret = build_air_assets(
        AirStage(key="with_secret", workload=workload("with_secret", "true")),
        secret_env={"HF_TOKEN": "TEST_SECRET_FOR_TOKEN"},
    )
    without = build_air_assets(AirStage(key="without", workload=workload("without", "true")))
    for assets in (with_secret, without):
        result = dg.materialize(
            [assets], resources={"air_workspace": wrong}, instance=instance, raise_on_error=False
        )
        description = failure_data(result).user_failure_data.description
        assert "refused the credentials" in description, description
        assert "secret scope" not in description and "refused the workload" not in description
    assert counters(local_workspace)["runs_created"] == 0


def test_yaml_schema_errors_name_the_nested_key():
    """The JSON schema `dg check yaml` validates with: a nested mistake is named, templates
    and valid attributes still pass."""
    import jsonschema

    from dagster_air import AirWorkloadComponent

    validator = jsonschema.Draft202012Validator(
        AirWorkloadComponent.get_model_cls().model_json_schema()
    )
    good = {
        "stages": [{"key": "a", "workload": "a.yaml", "asset": {"group_name": "g"}}],
        "options": {
            "partitions_def": {"type": "static", "partition_keys": ["x"]},
            "retry_policy": {"max_retries": 2},
        },
        "checks": [{"name": "c", "blocking": True}],
    }
    assert [e.message for e in validator.iter_errors(good)] == []
    assert [e.message for e in validator.iter_errors({**good, "asset": "{{ asset }}"})] == []
    bad = {
        "stages": [{"key": "a", "workload": "a.yaml", "asset": {"group_nam": "g"}}],
        "options": {
            "partitions_def": {"type": "static", "partition_keyz": ["x"]},
            "retry_policy": {"max_retrys": 2},
        },
    }
    errors = [(tuple(e.absolute_path), e.message) for e in validator.iter_errors(bad)]
    assert (
        ("stages", 0, "asset"),
        "Additional properties are not allowed ('group_nam' was unexpected)",
    ) in errors
    assert (
        ("options", "retry_policy"),
        "Additional properties are not allowed ('max_retrys' was unexpected)",
    ) in errors
    assert (
        ("options", "partitions_def"),
        "Additional properties are not allowed ('partition_keyz' was unexpected)",
    ) in errors
    assert not any("any of the given schemas" in m for _, m in errors)


def _fields_without_description(schema: dict) -> list[str]:
    """Every attribute of the component's schema (nested models included) that has no
    description."""
    missing = []
    models = {"AirWorkloadComponent": schema, **schema.get("$defs", {})}
    for model_name, model in models.items():
        if not model_name.startswith(("Air", "DynamicPartitions")):
            continue  # Dagster's own models (OpSpec, partitions) are Dagster's to describe
        for field, spec in (model.get("properties") or {}).items():
            if not spec.get("description"):
                missing.append(f"{model_name}.{field}")
    return missing


def test_component_conventions_op_spec_type_spec_and_described_fields(monkeypatch):
    from dagster_air import AirWorkloadComponent

    schema = AirWorkloadComponent.get_model_cls().model_json_schema()
    assert _fields_without_description(schema) == []
    spec = AirWorkloadComponent.get_spec()
    assert "gpu" in spec.tags and spec.description

    monkeypatch.setenv("TEST_OP_SECRET", "a-secret-value")
    inline = workload("inline", "true")
    with create_defs_folder_sandbox() as sandbox:
        folder = sandbox.defs_folder_path / "with_op"
        folder.mkdir()
        (folder / "defs.yaml").write_text(
            yaml.safe_dump(
                {
                    "type": "dagster_air.AirWorkloadComponent",
                    "requirements": {"env": ["TEST_OP_SECRET"]},
                    "attributes": {
                        "workload": inline,
                        "options": {
                            "secret_env": {"HF_TOKEN": "TEST_OP_SECRET"},
                            "partitions_def": {"type": "static", "partition_keys": ["a", "b"]},
                            "max_tasks_per_run": 10,
                        },
                        "op": {
                            "name": "train_op",
                            "tags": {"team": "ml"},
                            "pool": "gpu",
                            "backfill_policy": {"type": "single_run"},
                        },
                    },
                }
            )
        )
        with sandbox.build_all_defs() as defs:
            (assets,) = list(defs.assets or [])
            assert assets.op.name == "train_op"
            assert assets.op.pool == "gpu"
            assert assets.op.tags["team"] == "ml"
            assert assets.backfill_policy == dg.BackfillPolicy.single_run()

    # An environment variable read but not declared for `dg list envs`; a setting given
    # both ways: refused when the definitions load.
    for attributes, requirements, expected in [
        (
            {"workload": inline, "options": {"secret_env": {"HF_TOKEN": "TEST_OP_SECRET"}}},
            None,
            "read but not declared: TEST_OP_SECRET (options.secret_env.HF_TOKEN)",
        ),
        (
            {"workload": inline, "options": {"pool": "a"}, "op": {"pool": "b"}},
            None,
            "pool given both under `op` and under `options`",
        ),
    ]:
        with create_defs_folder_sandbox() as sandbox:
            folder = sandbox.defs_folder_path / "broken"
            folder.mkdir()
            document = {"type": "dagster_air.AirWorkloadComponent", "attributes": attributes}
            if requirements:
                document["requirements"] = requirements
            (folder / "defs.yaml").write_text(yaml.safe_dump(document))
            with pytest.raises(Exception) as raised, sandbox.build_all_defs():
                pass
            assert expected in _full_text(raised.value)
