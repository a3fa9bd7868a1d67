"""Every code and shell block of the documentation runs as written (doc_blocks.py says how
blocks are found and marked).

- A shell block runs against a fresh local workspace (with the GPU pools `pool-a10` and
  `team-a10` the pages name) in a fresh HOME, so the workspace's token file is where the
  pages say; only its address stands in for `http://127.0.0.1:8765` and the last run's id for
  `RUN_ID`. `airo` commands run in this process (`airo workspace` commands are parsed and
  turned into workspace options, not served: the test's workspace stands in for them); other
  commands, and commands with shell syntax, run in bash with the repository's `.venv/bin`
  first on PATH; commands of an Airflow deployment (`airflow ...`, `python -m
  airflow_air.pools`) with a migrated metadata database and its connections.
- A python block runs as a program with the same HOME and workspace; a Dag block marked
  `dag-test` also runs each of its Dags with `dag.test()`, a Dagster block marked
  `materialize` materializes every asset of its `defs`, one marked `backfill` every partition
  of its `defs` as one range run, as a `BackfillPolicy.single_run()` backfill does.
- Every block runs in a folder where `examples/` and `dags/` are the repository's, so relative
  paths work as they do from a clone and nothing is written into the repository.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from doc_blocks import DOCS_HOST, EXECUTED, ROOT, Block, all_blocks

from air_runtime import load_workload
from air_runtime.cli import build_parser
from air_runtime.cli import main as airo
from air_runtime.local import LocalWorkspace, start_local_workspace

BLOCKS = all_blocks()
# The GPU pools the pages name: the local workspace's example and the sweep's team pool.
GPU_POOLS = [
    {"pool_id": "pool-a10", "accelerator_type": "GPU_1xA10", "accelerator_count": 4},
    {"pool_id": "team-a10", "accelerator_type": "GPU_1xA10", "accelerator_count": 4},
]
# Shell commands that need an Airflow deployment's metadata database and connection.
AIRFLOW_COMMANDS = ("airflow ", "python -m airflow_air.pools")
# Markers of blocks that run (the others are parsed or loaded only).
RUNS = (None, "dag-test", "materialize", "backfill")
SHELL_SYNTAX = (">", "|", "$(", "&&", ";", "`")
# Blocks that start Airflow or Dagster (imports of seconds, DagBags, definitions) or a
# process per command are slow by the rule of tests/conftest.py.
SLOW_WORDS = ("airflow", "dagster", "python -m")


def _is_slow(block: Block) -> bool:
    if block.marker in ("dag-test", "materialize", "backfill"):
        return True
    if block.marker is not None or block.language not in EXECUTED:
        return False
    if block.language == "python":
        return True
    return any(word in block.body for word in SLOW_WORDS) or any(
        not command.startswith("airo ") or any(s in command for s in SHELL_SYNTAX)
        for command in block.commands
    )


def _param(block: Block) -> object:
    marks = [pytest.mark.slow] if _is_slow(block) else []
    return pytest.param(block, id=block.id, marks=marks)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME, the only variables of a workspace the ones the test sets, and a working
    folder whose examples/ and dags/ are the repository's."""
    home = tmp_path / "home"
    (home / ".local" / "share").mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    for name in ("examples", "dags"):
        (work / name).symlink_to(ROOT / name)
    for key in list(os.environ):
        if key.startswith(("AIRO_", "DATABRICKS_", "DAGSTER_", "AIRFLOW_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.chdir(work)
    return home


@pytest.fixture
def docs_workspace(home: Path) -> Iterator[LocalWorkspace]:
    with start_local_workspace(
        data_dir=home / ".local" / "share" / "airo" / "workspace",
        gpu_pools=GPU_POOLS,
        image_delay_s=0.2,
        retry_interval_s=0.05,
    ) as workspace:
        yield workspace


def _environment(home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRO_", "DATABRICKS_", "DAGSTER_", "AIRFLOW_", "VIRTUAL_ENV"))
    }
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        AIRFLOW_HOME=str(home / "airflow"),
        NO_COLOR="1",
        # The pages' Dagster definitions name HF_TOKEN in secret_env: it must be set where
        # they load, as the Dagster guide says.
        HF_TOKEN="anything",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.defpath}",
    )
    return env


def _run_airo_workspace(command: str) -> None:
    from air_runtime.local._server import options_from_arguments

    args = build_parser().parse_args(shlex.split(command, comments=True)[1:])
    assert options_from_arguments(args).mode in ("execute", "simulate"), command


def _parse_airo(command: str) -> None:
    try:
        build_parser().parse_args(shlex.split(command, comments=True)[1:])
    except SystemExit as exit_:
        raise AssertionError(f"airo does not take: {command}") from exit_


def _validate_yaml(block: Block) -> None:
    document = yaml.safe_load(block.body)
    assert document is not None, block.id
    if isinstance(document, dict) and "compute" in document and "experiment_name" in document:
        load_workload(block.body, base_dir=ROOT / "examples")
    if isinstance(document, dict) and document.get("type") == "dagster_air.AirWorkloadComponent":
        # What `dg check yaml` checks: the attributes against the component's schema.
        import jsonschema

        from dagster_air import AirWorkloadComponent

        schema = AirWorkloadComponent.get_model_cls().model_json_schema()
        errors = [
            e.message
            for e in jsonschema.Draft202012Validator(schema).iter_errors(
                document.get("attributes") or {}
            )
        ]
        assert errors == [], (block.id, errors)


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS if b.marker == "skip"])
def test_blocks_marked_not_runnable_still_parse(block: Block) -> None:
    assert block.detail, f"{block.id}: say why the block cannot run here"
    if block.language == "python":
        ast.parse(block.body)
    elif block.language in ("sh", "bash"):
        subprocess.run(["bash", "-n"], input=block.body, text=True, check=True)
        for command in block.commands:
            if command.startswith("airo "):
                _parse_airo(command)
    elif block.language == "yaml":
        _validate_yaml(block)
    elif block.language == "json":
        json.loads(block.body)


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS if b.marker == "script"])
def test_scripts_are_run_by_the_test_they_name(block: Block) -> None:
    test_file = ROOT / block.detail
    assert test_file.is_file(), f"{block.id}: no test file {block.detail}"
    relative = str(block.path.relative_to(ROOT))
    assert relative in test_file.read_text(), f"{block.detail} does not read {relative}"
    subprocess.run(["bash", "-n"], input=block.body, text=True, check=True)


@pytest.mark.parametrize(
    "block", [_param(b) for b in BLOCKS if b.marker is None and b.language in ("yaml", "json")]
)
def test_yaml_and_json_blocks_load(block: Block) -> None:
    if block.language == "json":
        json.loads(block.body)
    else:
        _validate_yaml(block)


# Appended to a block marked `materialize`: every asset of its `defs`, in this process.
MATERIALIZE = """

result = defs.resolve_implicit_global_asset_job_def().execute_in_process()
assert result.success
materialized = sorted({e.asset_key.to_user_string() for e in result.get_asset_materialization_events()})
assert materialized, "nothing was materialized"
print("materialized", materialized)
"""


# Appended to a block marked `backfill`: every partition of its `defs` as one range run (the
# run a BackfillPolicy.single_run() backfill launches: the range tags), on the instance of
# DAGSTER_HOME (an accelerator pool needs its concurrency slots).
BACKFILL = """

import dagster as _dg

_job = defs.resolve_implicit_global_asset_job_def()
_keys = _job.partitions_def.get_partition_keys()
with _dg.DagsterInstance.get() as _instance:
    result = _job.execute_in_process(
        instance=_instance,
        tags={
            "dagster/asset_partition_range_start": _keys[0],
            "dagster/asset_partition_range_end": _keys[-1],
        },
    )
assert result.success
_done = {e.partition for e in result.get_asset_materialization_events()}
assert _done == set(_keys), (_done, _keys)
print("backfilled", sorted(_done))
"""


@pytest.mark.parametrize(
    "block",
    [_param(b) for b in BLOCKS if b.marker in RUNS and b.language == "python"],
)
def test_python_blocks_run(block: Block, home: Path, docs_workspace: LocalWorkspace) -> None:
    env = _environment(home)
    program = Path.cwd() / "block.py"
    code = block.body.replace(DOCS_HOST, docs_workspace.host)
    if block.marker in ("materialize", "backfill"):
        _store_example_secrets(docs_workspace)
        code += MATERIALIZE if block.marker == "materialize" else BACKFILL
        # What AirWorkspace() and the pages' EnvVar read: the workspace to run on.
        env.update(DATABRICKS_HOST=docs_workspace.host, DATABRICKS_TOKEN=docs_workspace.token)
    if block.marker == "backfill":
        dagster_home = home / "dagster_home"
        dagster_home.mkdir(exist_ok=True)
        (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        env["DAGSTER_HOME"] = str(dagster_home)
    program.write_text(code)
    out = subprocess.run(
        [sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, f"{block.id}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    if block.marker == "materialize":
        assert "materialized [" in out.stdout, out.stdout[-2000:]
    if block.marker == "backfill":
        assert "backfilled [" in out.stdout, out.stdout[-2000:]


def _store_example_secrets(workspace: LocalWorkspace) -> None:
    """The secret the examples' RL workloads name (research/hf_token), as a user creates it
    once in their workspace."""
    from air_runtime import AirClient
    from demo.pipeline import EVALUATE_YAML, TRAIN_YAML, store_placeholder_secrets

    with AirClient(workspace.host, workspace.token) as client:
        store_placeholder_secrets(client, (TRAIN_YAML, EVALUATE_YAML))


@pytest.mark.parametrize(
    "block", [_param(b) for b in BLOCKS if b.marker is None and b.language in ("sh", "bash")]
)
def test_shell_blocks_run(
    block: Block,
    home: Path,
    docs_workspace: LocalWorkspace,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    run_id: str | None = None
    env = _environment(home)
    if any(command.startswith(AIRFLOW_COMMANDS) for command in block.commands):
        env.update(
            _deployment_env(home, request.getfixturevalue("airflow_database"), docs_workspace)
        )
    for command in block.commands:
        command = command.replace(DOCS_HOST, docs_workspace.host)
        if "RUN_ID" in command:
            assert run_id is not None, f"{block.id}: RUN_ID before any run: {command}"
            command = command.replace("RUN_ID", run_id)
        if command.startswith("airo workspace"):
            _run_airo_workspace(command)
            continue
        if command.startswith("airo ") and not any(s in command for s in SHELL_SYNTAX):
            argv = []
            for word in shlex.split(command, comments=True)[1:]:
                argv += sorted(glob.glob(word)) if "*" in word else [word]
            code = airo(argv)
            out, err = capsys.readouterr()
        else:
            result = subprocess.run(
                ["bash", "-c", f"set -euo pipefail\n{command}"],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            code, out, err = result.returncode, result.stdout, result.stderr
        assert code == 0, f"{block.id}: {command}\n{out[-3000:]}\n{err[-3000:]}"
        if (
            command.startswith("airo run ")
            and "--dry-run" not in command
            and "--json" not in command
        ):
            run_id = out.split()[1].rstrip(":")


# Runs each Dag the file defines with dag.test(), as a Dag's author tries it.
DAG_TEST_DRIVER = """
import sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1], safe_mode=False)
assert not bag.import_errors, bag.import_errors
assert bag.dags, "the block defines no Dag"
for dag in bag.dags.values():
    run = dag.test()
    print("dag.test()", dag.dag_id, run.state)
    assert run.state == "success", f"{dag.dag_id}: {run.state}"
"""


def _airflow_env(home: Path) -> dict[str, str]:
    from cryptography.fernet import Fernet

    return {
        "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow' / 'airflow.db'}",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
    }


@pytest.fixture(scope="session")
def airflow_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty Airflow metadata database, migrated once; each Dag block gets a copy."""
    home = tmp_path_factory.mktemp("airflow-template")
    (home / "airflow").mkdir()
    env = {**_environment(home), **_airflow_env(home)}
    airflow = str(Path(sys.executable).with_name("airflow"))
    out = subprocess.run(
        [airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return home / "airflow" / "airflow.db"


def _deployment_env(home: Path, database: Path, workspace: LocalWorkspace) -> dict[str, str]:
    """A copy of the migrated metadata database in HOME's AIRFLOW_HOME, and the connections
    a deployment would hold: databricks_default to the workspace, hf_default for secret_env."""
    import shutil

    (home / "airflow").mkdir(exist_ok=True)
    shutil.copy(database, home / "airflow" / "airflow.db")
    return {
        **_airflow_env(home),
        "AIRFLOW_CONN_DATABRICKS_DEFAULT": json.dumps(
            {"conn_type": "databricks", "host": workspace.host, "password": workspace.token}
        ),
        "AIRFLOW_CONN_HF_DEFAULT": json.dumps({"conn_type": "generic", "password": "placeholder"}),
    }


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS if b.marker == "dag-test"])
def test_dag_blocks_run_with_dag_test(
    block: Block, home: Path, docs_workspace: LocalWorkspace, airflow_database: Path
) -> None:
    """The Dag file of the block in a Dag folder (its workloads/ the repository's dags/
    workloads), the connections a deployment would hold (databricks_default to the
    workspace, hf_default for secret_env), and the secrets the examples' workloads name."""
    _store_example_secrets(docs_workspace)
    dag_folder = Path.cwd() / "dag_folder"
    dag_folder.mkdir()
    (dag_folder / "workloads").symlink_to(ROOT / "dags" / "workloads")
    (dag_folder / "block_dag.py").write_text(block.body)
    env = {
        **_environment(home),
        **_deployment_env(home, airflow_database, docs_workspace),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dag_folder),
        "AIRFLOW__AIR__DEFAULT_POLL_INTERVAL": "0.5",
        # dag.test() runs triggers in this process, no scheduler to race with.
        "AIRFLOW__AIR__TRIGGER_FIRST_POLL_DELAY": "0.1",
    }
    out = subprocess.run(
        [sys.executable, "-c", DAG_TEST_DRIVER, str(dag_folder / "block_dag.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, f"{block.id}\n{out.stdout[-3000:]}\n{out.stderr[-4000:]}"
    assert out.stdout.count("dag.test()") >= 1


def test_every_code_block_runs_or_says_why_not() -> None:
    """The counts the pages are held to: a code block runs, or is marked with its reason."""
    executed = [b for b in BLOCKS if b.marker in RUNS and b.language in EXECUTED]
    marked = [b for b in BLOCKS if b.marker == "skip"]
    assert all(b.detail for b in marked)
    assert len(executed) > len(marked), "most examples must run"
    print(
        f"\n{len(BLOCKS)} code blocks: {len(executed)} executed, "
        f"({sum(b.marker == 'dag-test' for b in BLOCKS)} of them Dags run with dag.test(), "
        f"{sum(b.marker == 'materialize' for b in BLOCKS)} Dagster definitions materialized), "
        f"{sum(b.marker == 'script' for b in BLOCKS)} run by the test they name, "
        f"{sum(b.marker is None and b.language not in EXECUTED for b in BLOCKS)} loaded, "
        f"{len(marked)} marked not runnable (parsed)"
    )


def test_the_readme_links_lead_to_files() -> None:
    """The README is read on the code host, outside the site: its relative links are
    checked here, as `mkdocs build --strict` checks the pages' links."""
    import re

    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\((?!https?://|#)([^)#\s]+)", text)
    assert targets, "the README links into the site"
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert not missing, missing
