"""The provider's plugin (``airflow_air.plugin``): the task modules loaded once per Airflow
component that loads plugins, so the task processes it forks inherit them. Each case runs in
a fresh interpreter that forks its task process: what counts is which process imported which
module."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

# A component loading its plugins as the scheduler and the triggerer do (``Job.__init__``),
# then forking a task process as the LocalExecutor's supervisor does; in that process, what
# the execute of a try that submits and defers imports: a real submit to the workspace, the
# trigger it defers on. A finder first in ``sys.meta_path`` records which process imported
# each module of ours (finders are asked only for a module not imported yet).
SUBMITTING_TRY = """
import json, os, sys
imports = []
class Recorder:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("air_runtime", "airflow_air"):
            imports.append((os.getpid(), name))
        return None
sys.meta_path.insert(0, Recorder())
{before_plugins}
from airflow import plugins_manager
plugins, errors = plugins_manager._get_plugins()
component = os.getpid()
read, write = os.pipe()
if os.fork():
    os.close(write)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    _, status = os.wait()
    print(report)
    sys.exit(os.waitstatus_to_exitcode(status))
os.close(read)
from airflow.sdk.execution_time import task_runner
task_runner.SUPERVISOR_COMMS = object()  # a task process talks to its supervisor
loaded = set(sys.modules)
from air_runtime import AirClient, Submission, SubmissionKey, load_workload
from airflow_air._openlineage import with_parent_job_env
from airflow_air._workload_source import load_task_workload
from airflow_air.triggers import AirRunTrigger
workload = load_workload({{"experiment_name": "e", "command": "python t.py",
    "compute": {{"accelerator_type": "GPU_1xA10", "num_accelerators": 1}}}})
with AirClient(os.environ["HOST"], token=os.environ["TOKEN"]) as client:
    client.prefetch_identity()
    key = SubmissionKey("airflow", "ns", "plugin_dag", "run", os.environ["TASK"], None)
    submitted = Submission(key).submit(client, workload, "0.0")
AirRunTrigger(submitted.run_id, run_page_url=submitted.run_page_url,
    databricks_conn_id="c", poll_interval=5).serialize()
with os.fdopen(write, "w") as pipe:
    pipe.write(json.dumps({{
        "plugins": [p.name for p in plugins],
        "errors": errors,
        "preloaded": "airflow_air._task_run" in loaded,
        "imported_by_the_try": sorted(
            m for m in set(sys.modules) - loaded
            if m.split(".")[0] in ("air_runtime", "airflow_air")
        ),
        "imported_by_the_component": sorted({{m for pid, m in imports if pid == component}}),
        "imported_in_the_task_process": sorted({{m for pid, m in imports if pid == os.getpid()}}),
        "task_process_is_another": os.getpid() != component,
    }}))
os._exit(0)
"""


def _run(local_workspace, tmp_path, task: str, before_plugins: str = "", **env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SUBMITTING_TRY.format(before_plugins=before_plugins)],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "HOST": local_workspace.host,
            "TOKEN": local_workspace.token,
            "TASK": task,
            **env,
        },
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_component_that_loaded_the_plugin_leaves_a_submitting_try_nothing_to_import(
    local_workspace, tmp_path
):
    from airflow_air.plugin import TASK_MODULES

    result = _run(local_workspace, tmp_path, "preloaded")
    assert "airflow_air" in result["plugins"], result
    assert not [e for e in result["errors"] if "airflow_air" in e], result
    assert result["preloaded"], result
    assert result["imported_by_the_try"] == [], result
    # Imported by the component, inherited by the task process it forked, which imported
    # nothing of ours.
    assert result["task_process_is_another"], result
    assert set(TASK_MODULES) <= set(result["imported_by_the_component"]), result
    assert result["imported_in_the_task_process"] == [], result


def test_turned_off_the_try_imports_its_own_modules(local_workspace, tmp_path):
    result = _run(local_workspace, tmp_path, "off", AIRFLOW__AIR__PRELOAD_TASK_MODULES="False")
    assert "airflow_air" in result["plugins"], result
    assert not result["preloaded"], result
    assert "air_runtime.plan" in result["imported_by_the_try"], result
    assert "air_runtime.plan" in result["imported_in_the_task_process"], result


def test_a_task_process_never_preloads(local_workspace, tmp_path):
    """A process that talks to a supervisor (a task, a trigger runner, a Dag file parse)
    loads plugins too (the task runner's macros): it imports only what its task needs."""
    supervised = (
        "from airflow.sdk.execution_time import task_runner; "
        "task_runner.SUPERVISOR_COMMS = object()"
    )
    result = _run(local_workspace, tmp_path, "supervised", before_plugins=supervised)
    assert "airflow_air" in result["plugins"], result
    assert not result["preloaded"], result
    assert "airflow_air._task_run" not in result["imported_by_the_component"], result
