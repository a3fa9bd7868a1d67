"""``make demo``: the toy RL pipeline end to end on a local workspace.

Starts a local workspace in a temporary folder with two Distribution registry servers (a
stand-in Docker Hub holding generated ``vllm/vllm-openai`` and ``pytorch/pytorch`` images,
and the workspace's stand-in Artifact Registry), runs the two-stage RL pipeline
(``examples/rl``: a policy server and a trainer on two nodes, then an evaluation gate)
directly with the client, through Airflow (``dags/rl_pipeline.py`` with ``airflow dags
test``) and through Dagster (the RL assets of ``examples/dagster``), then reads every run
back from the workspace over its REST API and prints a summary. Each stage first copies the
two images into Unity Catalog (``main.rl.*``), registry to registry, and trains on the
copies: the workspace refuses a run whose images are not in its Artifact Registry. The orchestrators run in
their own processes with throw-away homes, as a user would run them; this module imports
neither.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import httpx

from air_runtime import AirClient, AirError, RunState, Stage, TaskState, load_workload
from air_runtime.workload import GPUS_PER_NODE

REPO_ROOT = Path(__file__).resolve().parents[1]
RL_DIR = REPO_ROOT / "examples" / "rl"
TRAIN_YAML = RL_DIR / "grpo_two_containers.yaml"
EVALUATE_YAML = RL_DIR / "evaluate.yaml"
AIRFLOW_DAG_ID = "rl_pipeline"
DAGSTER_PROJECT = REPO_ROOT / "examples" / "dagster"
DAGSTER_MODULE = "air_examples.definitions"
DAGSTER_ASSETS = ("air_images", "grpo", "evaluate")

STAGES = ("client", "airflow", "dagster")
# The images of grpo_two_containers.yaml: source on the stand-in Docker Hub -> artifact.
RL_IMAGES = {
    "vllm/vllm-openai:v0.8.5": "vllm:0.8.5",
    "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime": None,
}
STAGE_TIMEOUT_SECONDS = 150.0
LOG_TAIL_LINES = 3
# Secrets the example workloads reference get this value: nothing real is needed on CPU.
PLACEHOLDER_SECRET = "demo-placeholder-not-a-secret"


@dataclass
class StageOutcome:
    name: str
    ok: bool
    seconds: float
    detail: str
    run_ids: list[int] = field(default_factory=list)
    log_path: Path | None = None


class Console:
    """Terse progress lines; colour only on a terminal."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.colour = out.isatty() and os.environ.get("NO_COLOR") is None

    def _paint(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.colour else text

    def line(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def heading(self, text: str) -> None:
        self.line()
        self.line(self._paint(text, "1"))

    def status(self, ok: bool) -> str:
        return self._paint(" ok ", "32") if ok else self._paint("FAIL", "31")

    def dim(self, text: str) -> str:
        return self._paint(text, "2")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stages",
        default=",".join(STAGES),
        help=f"comma-separated subset of {', '.join(STAGES)} (default: all)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary folder (workspace data, logs)"
    )
    parser.add_argument(
        "--serve",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep the local workspace serving its run pages after the summary, until "
        "Enter or Ctrl-C (default: when run on a terminal)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=STAGE_TIMEOUT_SECONDS,
        help="seconds each stage may take (default: %(default)s)",
    )
    parser.add_argument(
        "--simulate",
        type=float,
        metavar="SECONDS",
        default=None,
        help="start the local workspace in simulate mode: no rank processes, every run stays "
        "RUNNING for SECONDS and then succeeds (shows the orchestration without training)",
    )


def run(args: argparse.Namespace) -> int:
    stages = [s.strip() for s in str(args.stages).split(",") if s.strip()]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        print(f"unknown stage(s) {unknown}; choose from {list(STAGES)}", file=sys.stderr)
        return 2
    if not TRAIN_YAML.is_file():
        print(f"{TRAIN_YAML} is missing: run the demo from a source checkout", file=sys.stderr)
        return 2
    work_dir = Path(tempfile.mkdtemp(prefix="airo-demo-"))
    try:
        serve = args.serve if args.serve is not None else sys.stdin.isatty() and sys.stdout.isatty()
        demo = Demo(
            work_dir,
            Console(sys.stdout),
            timeout=float(args.timeout),
            simulate=args.simulate,
            serve=serve,
        )
        return demo.run(stages)
    finally:
        if args.keep:
            print(f"\nkept {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)


class Demo:
    def __init__(
        self,
        work_dir: Path,
        console: Console,
        *,
        timeout: float,
        simulate: float | None = None,
        serve: bool = False,
    ) -> None:
        self.work_dir = work_dir
        self.console = console
        self.timeout = timeout
        self.simulate = simulate
        self.serve = serve
        self.source_registry = self.artifact_registry = ""

    def run(self, stages: Sequence[str]) -> int:
        from air_runtime.local import start_local_workspace

        started = time.monotonic()
        c = self.console
        c.heading("Local workspace")
        mode: dict[str, Any] = {}
        if self.simulate is not None:
            mode = {"mode": "simulate", "simulate": {"running_s": self.simulate}}
        with (
            start_local_workspace(data_dir=self.work_dir / "workspace", **mode) as workspace,
            contextlib.ExitStack() as registries,
        ):
            c.line(f"  serving the Databricks REST API at {workspace.host}")
            if self.simulate is not None:
                c.line(f"  simulate mode: every run stays RUNNING for {self.simulate:g}s")
            self._start_registries(workspace, registries)
            client = AirClient(workspace.host, workspace.token)
            try:
                stored = store_placeholder_secrets(client, (TRAIN_YAML, EVALUATE_YAML))
                if stored:
                    c.line(f"  stored placeholder secrets for {', '.join(stored)}")
                runners: dict[str, Callable[[], StageOutcome]] = {
                    "client": lambda: self._run_with_client(client),
                    "airflow": lambda: self._run_with_airflow(workspace.host, workspace.token),
                    "dagster": lambda: self._run_with_dagster(workspace.host, workspace.token),
                }
                outcomes = []
                for name in stages:
                    known = self._run_ids(client)
                    stage_started = time.monotonic()
                    try:
                        outcome = runners[name]()
                    except AirError as exc:  # a failed stage is reported, the others still run
                        outcome = StageOutcome(
                            name,
                            False,
                            time.monotonic() - stage_started,
                            f"{type(exc).__name__}: {exc}",
                        )
                    outcome.run_ids = sorted(self._run_ids(client) - known)
                    outcomes.append(outcome)
                    c.line(f"  [{c.status(outcome.ok)}] {outcome.detail} ({outcome.seconds:.1f}s)")
                    if not outcome.ok and outcome.log_path is not None:
                        c.line(
                            c.dim(f"         last lines of {outcome.log_path} (--keep keeps it):")
                        )
                        for text in _tail_lines(outcome.log_path, 15):
                            c.line(c.dim(f"         | {text}"))
                self._print_runs(client, outcomes)
                self._serve_pages(workspace.host)
            finally:
                client.close()
        ok = all(o.ok for o in outcomes)
        c.heading("Result")
        for outcome in outcomes:
            c.line(f"  [{c.status(outcome.ok)}] {outcome.name:<8} {outcome.seconds:6.1f}s")
        c.line(
            f"  {'all stages succeeded' if ok else 'some stages FAILED'} "
            f"in {time.monotonic() - started:.1f}s; local workspace stopped"
        )
        return 0 if ok else 1

    def _start_registries(self, workspace: Any, stack: contextlib.ExitStack) -> None:
        from image_fixtures.image_builder import push_generated_image
        from image_fixtures.registry_server import (
            registry_program,
            start_artifact_registry,
            start_registry_server,
        )

        if registry_program() is None:
            raise SystemExit(
                "docker-registry (the Distribution registry server) is not installed: "
                "`make services` installs it (apt-get install docker-registry)"
            )
        hub = stack.enter_context(start_registry_server(self.work_dir / "hub"))
        artifact_registry = stack.enter_context(
            start_artifact_registry(workspace, self.work_dir / "artifact-registry")
        )
        self.source_registry, self.artifact_registry = hub.host, artifact_registry.host
        for seed, source in enumerate(RL_IMAGES):
            repository, _, tag = source.partition(":")
            push_generated_image(
                hub.host,
                repository,
                tag,
                platforms=("linux/amd64", "linux/arm64"),
                seed=seed,
                workdir=self.work_dir / "build",
            )
        self.console.line(
            f"  stand-in Docker Hub at {hub.host} (holding {', '.join(RL_IMAGES)}), "
            f"stand-in Artifact Registry at {artifact_registry.host}"
        )

    # -- stages --------------------------------------------------------------------------

    def _run_with_client(self, client: AirClient) -> StageOutcome:
        self.console.heading("Python client: one multi-task run (train -> evaluate)")
        started = time.monotonic()
        # This run's own output folder, as the Airflow DAG and the Dagster assets do.
        from air_runtime.images import push_image

        output = {"env_variables.RL_OUTPUT_DIR": str(self.work_dir / "rl_output")}
        images: dict[str, str] = {}  # train on what was copied
        for number, (source, artifact) in enumerate(RL_IMAGES.items()):
            pushed = push_image(
                client,
                f"{self.source_registry}/{source}",
                catalog="main",
                schema="rl",
                artifact=artifact,
                registry_host=self.artifact_registry,
                state_dir=self.work_dir / "uploads",
            )
            self.console.line(
                f"  copied {source} to {pushed.unity_catalog_image} "
                f"({pushed.copy.bytes_sent} bytes sent)"
            )
            images[f"containers[{number}].unity_catalog_image"] = pushed.unity_catalog_image
        stages = [
            Stage("train", load_workload(TRAIN_YAML, {**output, **images})),
            Stage("evaluate", load_workload(EVALUATE_YAML, output), depends_on=("train",)),
        ]
        submitted = client.submit_workload(stages, run_name="rl_pipeline_client")
        self.console.line(f"  submitted run {submitted.run_id}: {submitted.run_page_url}")
        state = client.wait(submitted.run_id, timeout=self.timeout, poll_interval=0.5)
        return StageOutcome(
            "client",
            state.is_success,
            time.monotonic() - started,
            f"run {state.run_id} {_result(state)}",
        )

    def _run_with_airflow(self, host: str, token: str) -> StageOutcome:
        self.console.heading(f"Airflow: `airflow dags test {AIRFLOW_DAG_ID}` (dag.test, SQLite)")
        home = self.work_dir / "airflow"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update(
            AIRFLOW_HOME=str(home),
            XDG_CACHE_HOME=str(self.work_dir / "cache"),
            AIRFLOW__CORE__DAGS_FOLDER=str(REPO_ROOT / "dags"),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
            # `dags test` runs triggers in its own process, with no scheduler whose race the
            # first-poll delay keeps clear of (see airflow_air.triggers).
            AIRFLOW__AIR__TRIGGER_FIRST_POLL_DELAY="0.5",
            AIRFLOW_CONN_DATABRICKS_DEFAULT=json.dumps(
                {"conn_type": "databricks", "host": host, "password": token}
            ),
            # rl_pipeline hands HF_TOKEN from this connection to the workload as a secret.
            AIRFLOW_CONN_HF_DEFAULT=json.dumps(
                {"conn_type": "generic", "password": PLACEHOLDER_SECRET}
            ),
        )
        airflow = str(Path(sys.executable).with_name("airflow"))
        return self._run_commands(
            "airflow",
            [
                [airflow, "db", "migrate"],
                # The DAG's output_root param, so the run writes inside the demo's folder.
                [
                    airflow,
                    "dags",
                    "test",
                    AIRFLOW_DAG_ID,
                    "--conf",
                    json.dumps(
                        {
                            "output_root": str(self.work_dir / "rl_output"),
                            "source_registry": self.source_registry,
                            "artifact_registry_host": self.artifact_registry,
                        }
                    ),
                ],
            ],
            env,
            success=f"Airflow DAG {AIRFLOW_DAG_ID} succeeded",
            failure=f"Airflow DAG {AIRFLOW_DAG_ID} failed",
        )

    def _run_with_dagster(self, host: str, token: str) -> StageOutcome:
        self.console.heading(
            f"Dagster: materialize {', '.join(DAGSTER_ASSETS)} (examples/dagster, in-process)"
        )
        home = self.work_dir / "dagster"
        home.mkdir()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DAGSTER", "AIRO_", "DATABRICKS_"))
        }
        # DATABRICKS_HOST/DATABRICKS_TOKEN select the local workspace in examples/dagster's
        # resources, as they would for airo.
        env.update(
            DAGSTER_HOME=str(home),
            XDG_CACHE_HOME=str(self.work_dir / "cache"),
            DATABRICKS_HOST=host,
            DATABRICKS_TOKEN=token,
            HF_TOKEN=PLACEHOLDER_SECRET,
            RL_OUTPUT_ROOT=str(self.work_dir / "rl_output" / "dagster"),
            # The example's image asset copies from these (see its rl_pipeline.py).
            RL_SOURCE_REGISTRY=self.source_registry,
            AIRO_ARTIFACT_REGISTRY=self.artifact_registry,
        )
        dagster = str(Path(sys.executable).with_name("dagster"))
        command = [
            dagster, "asset", "materialize",
            "-m", DAGSTER_MODULE,
            "-d", str(DAGSTER_PROJECT),
            "--select", ",".join(DAGSTER_ASSETS),
            # One process: a process per step would only add start-up time here.
            "--config-json", json.dumps({"execution": {"config": {"in_process": {}}}}),
        ]  # fmt: skip
        return self._run_commands(
            "dagster",
            [command],
            env,
            success="Dagster materialized " + ", ".join(DAGSTER_ASSETS),
            failure="Dagster materialization failed",
        )

    def _run_commands(
        self,
        name: str,
        commands: Sequence[Sequence[str]],
        env: dict[str, str],
        *,
        success: str,
        failure: str,
    ) -> StageOutcome:
        """Run commands one after another, output to a log file, within the stage timeout."""
        log_path = self.work_dir / f"{name}.log"
        started = time.monotonic()
        deadline = started + self.timeout
        with log_path.open("wb") as log:
            for argv in commands:
                shown = " ".join([Path(argv[0]).name, *argv[1:]]).replace(f"{REPO_ROOT}/", "")
                self.console.line(self.console.dim(f"  $ {shown}"))
                code = _run_bounded(argv, env, log, cwd=REPO_ROOT, deadline=deadline)
                if code != 0:
                    reason = "timed out" if code is None else f"exit code {code}"
                    return StageOutcome(
                        name,
                        False,
                        time.monotonic() - started,
                        f"{failure} ({reason})",
                        log_path=log_path,
                    )
        return StageOutcome(name, True, time.monotonic() - started, success, log_path=log_path)

    def _serve_pages(self, host: str) -> None:
        """Keep the workspace up for its run pages (the links above) until Enter or Ctrl-C."""
        c = self.console
        token_file = self.work_dir / "workspace" / "token"
        if not self.serve:
            c.line(c.dim("  (`python -m demo --serve` keeps the run pages above served)"))
            return
        c.heading("Run pages")
        c.line(f"  open {host}/jobs/runs or a run page above in a browser; log in with the")
        c.line(f"  token in {token_file}")
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            if sys.stdin.isatty():
                c.line("  press Enter (or Ctrl-C) to stop the local workspace")
                with contextlib.suppress(EOFError):
                    input()
            else:
                c.line("  Ctrl-C stops the local workspace")
                threading.Event().wait()
        except KeyboardInterrupt:
            c.line()
        finally:
            signal.signal(signal.SIGTERM, previous)

    # -- summary -------------------------------------------------------------------------

    @staticmethod
    def _run_ids(client: AirClient) -> set[int]:
        ids: set[int] = set()
        page_token = None
        while True:
            runs, page_token = client.list_runs(active_only=False, limit=25, page_token=page_token)
            ids.update(r.run_id for r in runs)
            if not page_token:
                return ids

    def _print_runs(self, client: AirClient, outcomes: Sequence[StageOutcome]) -> None:
        c = self.console
        c.heading("Runs, as the workspace reports them (GET /api/2.2/jobs/runs/get)")
        for outcome in outcomes:
            if not outcome.run_ids:
                c.line(f"  {outcome.name}: no run reached the workspace")
            for run_id in outcome.run_ids:
                state = client.get_run(run_id)
                c.line(
                    f"  {outcome.name}: run {state.run_id} {state.run_name!r} {_result(state)} "
                    f"in {_duration(state.start_time, state.end_time)}"
                )
                c.line(f"    run page: {state.run_page_url}")
                specs = _task_specs(client, run_id)
                for task in state.tasks:
                    self._print_task(client, task, specs.get(task.task_key, {}))

    def _print_task(self, client: AirClient, task: TaskState, spec: dict[str, Any]) -> None:
        c = self.console
        c.line(
            f"    task {task.task_key:<10} {_result(task):<10} "
            f"{_duration(task.start_time, task.end_time):>6}  (task run {task.run_id}, "
            f"attempt {task.attempt_number})"
        )
        if task.run_id is None:
            return
        c.line(f"      task run page: {client.host}/jobs/runs/{task.run_id}")
        for node, label in _node_labels(spec):
            try:
                records = list(client.iter_logs(task.run_id, node=node))
            except Exception as exc:  # logs are a courtesy: never fail the summary on them
                c.line(c.dim(f"      logs unavailable: {exc}"))
                return
            if not records:
                c.line(f"      {label}: no log lines yet")
                continue
            shown = min(LOG_TAIL_LINES, len(records))
            c.line(f"      {label}: {len(records)} log lines, last {shown}:")
            for record in records[-LOG_TAIL_LINES:]:
                c.line(c.dim(f"        {_clock(record.time_unix_nano)} {record.body.rstrip()}"))


def _task_specs(client: AirClient, run_id: int) -> dict[str, dict[str, Any]]:
    """Each task's submitted ``ai_runtime_task`` as runs/get returns it (containers, ranks).

    The client's ``RunState`` keeps only states, so this one read goes to the REST API as is.
    """
    response = httpx.get(
        f"{client.host}/api/2.2/jobs/runs/get",
        params={"run_id": run_id},
        headers=client.credentials.headers(),
        timeout=30,
    )
    response.raise_for_status()
    return {t["task_key"]: t.get("ai_runtime_task") or {} for t in response.json().get("tasks", [])}


def _node_labels(spec: dict[str, Any]) -> list[tuple[int, str]]:
    """(node rank, what runs there) for every node of a task's deployment."""
    deployment = (spec.get("deployments") or [{}])[0]
    containers = deployment.get("containers") or []
    if containers:
        return sorted(
            (rank, f"container {c['name']} (rank {rank})")
            for c in containers
            for rank in c.get("ranks") or []
        )
    count = int((deployment.get("compute") or {}).get("accelerator_count") or 1)
    gpus = GPUS_PER_NODE.get(str((deployment.get("compute") or {}).get("accelerator_type")), 1)
    return [(rank, f"node {rank}") for rank in range(max(1, count // gpus))]


def store_placeholder_secrets(client: AirClient, workload_files: Sequence[Path]) -> list[str]:
    """Give every secret the workloads reference a harmless value, so they can start."""
    refs = sorted({str(ref) for p in workload_files for ref in load_workload(p).secrets.values()})
    for ref in refs:
        scope, key = ref.split("/", 1)
        client.ensure_secret_scope(scope)
        client.put_secret(scope, key, PLACEHOLDER_SECRET)
    return refs


def _run_bounded(
    argv: Sequence[str], env: dict[str, str], log: BinaryIO, *, cwd: Path, deadline: float
) -> int | None:
    """Run one command in its own process group; None when it had to be killed at the deadline."""
    proc = subprocess.Popen(
        list(argv),
        env=env,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None
    finally:
        # The group may hold orphans (task runners, run workers) even after a clean exit.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the served workspace as Ctrl-C does


def _result(state: RunState | TaskState) -> str:
    return state.result_state or state.life_cycle_state


def _duration(start_ms: int | None, end_ms: int | None) -> str:
    if not start_ms or not end_ms:
        return "-"
    return f"{(end_ms - start_ms) / 1000:.1f}s"


def _clock(time_unix_nano: int) -> str:
    return datetime.fromtimestamp(time_unix_nano / 1e9).strftime("%H:%M:%S")


def _tail_lines(path: Path, lines: int) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []
