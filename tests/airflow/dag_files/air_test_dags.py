"""Dags used by the provider tests (command and behaviour chosen through params)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def workload(name: str, nodes: int = 1) -> dict:
    return {
        "experiment_name": name,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": nodes},
        "max_retries": 0,
        "command": "{{ params.command }}",
    }


def single_dag(dag_id: str, **operator_kwargs) -> DAG:
    with DAG(dag_id, schedule=None, start_date=START, params={"command": "echo ok"}) as dag:
        AirRunOperator(
            task_id="run",
            workload=workload(dag_id),
            poll_interval=0.2,
            **operator_kwargs,
        )
    return dag


sync_dag = single_dag("air_test_sync", deferrable=False)
deferred_dag = single_dag("air_test_deferred", deferrable=True)
# The first try defers before its submit; the trigger submits the planned run.
trigger_submit_dag = single_dag(
    "air_test_submit_in_triggerer", deferrable=True, submit_in_triggerer=True
)
trigger_submit_secret_dag = single_dag(
    "air_test_submit_in_triggerer_secrets",
    deferrable=True,
    submit_in_triggerer=True,
    secret_env={"HF_TOKEN": "conn:hf_test:password"},
    secret_scope="air-tests-trigger-submit",
)
timeout_dag = single_dag(
    "air_test_deferred_timeout", deferrable=True, execution_timeout=timedelta(seconds=15)
)
crash_dag = single_dag(
    "air_test_crash", deferrable=False, retries=2, retry_delay=timedelta(seconds=0)
)
secret_dag = single_dag(
    "air_test_secrets",
    deferrable=False,
    secret_env={"HF_TOKEN": "conn:hf_test:password", "API_KEY": "var:air_test_api_key"},
    secret_scope="air-tests",
)
deferred_secret_dag = single_dag(
    "air_test_secrets_deferred",
    deferrable=True,
    secret_env={"HF_TOKEN": "conn:hf_test:password"},
    secret_scope="air-tests-deferred",
)
resumed_secret_dag = single_dag(
    "air_test_secrets_resumed",
    deferrable=True,
    finish_in_triggerer=False,  # a success resumes in a worker, which deletes the keys
    secret_env={"HF_TOKEN": "conn:hf_test:password"},
    secret_scope="air-tests-resumed",
)

with (
    DAG(
        "air_test_workflow",
        schedule=None,
        start_date=START,
        params={"first": "echo first", "second": "echo second"},
    ) as workflow_dag,
    AirWorkflowTaskGroup("pipeline", run_name="air_test_workflow"),
):
    first = AirRunOperator(
        task_id="first",
        workload={**workload("first"), "command": "{{ params.first }}"},
        poll_interval=0.2,
    )
    second = AirRunOperator(
        task_id="second",
        workload={**workload("second"), "command": "{{ params.second }}"},
        poll_interval=0.2,
        deferrable=True,
    )
    first >> second

with DAG("air_test_images", schedule=None, start_date=START) as images_dag:
    from airflow_air.operators import AirRegisterImageOperator

    AirRegisterImageOperator(
        task_id="public_deferred", image="ubuntu:24.04", deferrable=True, poll_interval=0.1
    )
    AirRegisterImageOperator(
        task_id="private_with_connection",
        image="acme/private-trainer:1.0",
        docker_conn_id="dockerhub_test",
        poll_interval=0.1,
    )

# Unity Catalog target: copy from the stand-in Docker Hub, then train on the copy.
with DAG(
    "air_test_uc_image",
    schedule=None,
    start_date=START,
    params={"source_registry": "", "artifact_registry_host": ""},
) as uc_image_dag:
    from airflow_air.operators import AirRegisterImageOperator

    copy_image = AirRegisterImageOperator(
        task_id="copy_image",
        image="{{ params.source_registry }}/acme/trainer:3.0",
        catalog="main",
        schema="ml",
        artifact="trainer:3.0",
        registry_host="{{ params.artifact_registry_host }}",
        docker_conn_id="hub_test",
    )
    train_on_copy = AirRunOperator(
        task_id="train",
        workload={
            **workload("air_test_uc_image"),
            "command": "echo training on the copied image",
            "environment": {"unity_catalog_image": "main.ml.placeholder:0"},
        },
        # The default is what definition-time checks render (no XCom there).
        overrides={
            "environment.unity_catalog_image": (
                "{{ ti.xcom_pull(task_ids='copy_image') | default('main.ml.trainer:3.0') }}"
            )
        },
        poll_interval=0.2,
    )
    copy_image >> train_on_copy

# Redaction: failing workloads that print an Airflow secret, waited on in the worker (logs
# streamed), in the triggerer, and as workflow stages (one of each).
REDACTION_SECRET_ENV = {"HF_TOKEN": "conn:hf_redact:password", "API_KEY": "var:air_redact_key"}
redaction_sync_dag = single_dag(
    "air_test_redaction_sync",
    deferrable=False,
    secret_env=REDACTION_SECRET_ENV,
    secret_scope="air-tests",
)
redaction_deferred_dag = single_dag(
    "air_test_redaction_deferred",
    deferrable=True,
    secret_env=REDACTION_SECRET_ENV,
    secret_scope="air-tests",
)
with (
    DAG(
        "air_test_redaction_workflow",
        schedule=None,
        start_date=START,
        params={"command": "exit 1"},
    ) as redaction_workflow_dag,
    AirWorkflowTaskGroup("pipeline", run_name="air_test_redaction_workflow"),
):
    for _stage, _deferrable in (("stage_sync", False), ("stage_deferred", True)):
        AirRunOperator(
            task_id=_stage,
            workload=workload(_stage),
            poll_interval=0.2,
            secret_env=REDACTION_SECRET_ENV,
            secret_scope="air-tests",
            deferrable=_deferrable,
        )

# OpenLineage: the workload's volumes become datasets, the run's ids a run facet; the command
# prints the parent job info the operator passes on.
with DAG("air_test_openlineage", schedule=None, start_date=START) as openlineage_dag:
    AirRunOperator(
        task_id="train",
        workload={
            "experiment_name": "lineage",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "env_variables": {
                "DATA_DIR": "/Volumes/main/ml/data",
                "OUTPUT_DIR": "/Volumes/main/ml/out/{{ run_id | replace(':', '-') }}",
            },
            "command": 'echo "parent=$OPENLINEAGE_PARENT_ID root=$OPENLINEAGE_ROOT_PARENT_ID"',
        },
        poll_interval=0.2,
    )


# Every way the provider reaches a workspace, in one Dag run: a run waited on in the worker
# and one in the triggerer, a workflow with a stage of each kind, and an image registration
# waited on in the triggerer (tests/airflow/test_airflow_connections.py). Each rank prints
# a line naming its task and rank.
def every_path_workload(name: str, nodes: int, wait: str) -> dict:
    return {**workload(name, nodes), "command": f"{wait}; echo line-of-{name}-$POD_RANK"}


def _touch_marker(context) -> None:
    from pathlib import Path

    Path(context["params"]["marker"]).touch()


with DAG(
    "air_test_every_path",
    schedule=None,
    start_date=START,
    params={"marker": "/nonexistent/air-test-every-path"},
) as every_path_dag:
    from airflow_air.operators import AirRegisterImageOperator

    _image = AirRegisterImageOperator(
        task_id="image", image="ubuntu:24.04", deferrable=True, poll_interval=0.1
    )
    _sync = AirRunOperator(
        task_id="sync",
        workload=every_path_workload("sync", 2, "sleep 1"),
        poll_interval=0.2,
        deferrable=False,
    )
    _deferred = AirRunOperator(
        task_id="deferred",
        # Still running when the operator looks, right after its submit.
        workload=every_path_workload("deferred", 2, "sleep 4"),
        poll_interval=0.2,
        deferrable=True,
    )
    with AirWorkflowTaskGroup("pipeline", run_name="air_test_every_path") as _pipeline:
        _stage_sync = AirRunOperator(
            task_id="stage_sync",
            workload=every_path_workload("stage_sync", 1, "sleep 1"),
            poll_interval=0.2,
        )
        _stage_deferred = AirRunOperator(
            task_id="stage_deferred",
            # Its task starts when stage_sync's ends and goes on until the Airflow task has
            # started (the marker), however long that takes: there is a wait to defer.
            workload=every_path_workload(
                "stage_deferred",
                2,
                "for i in $(seq 600); do [ -f '{{ params.marker }}' ] && break; sleep 0.1; done;"
                " sleep 2",
            ),
            poll_interval=0.2,
            deferrable=True,
            on_execute_callback=_touch_marker,
        )
        _stage_sync >> _stage_deferred
    _image >> _sync >> _deferred >> _pipeline
