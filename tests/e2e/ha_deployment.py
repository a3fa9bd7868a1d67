"""The production-shaped Airflow deployment of docs/deployments.md, as a test fixture.

Two schedulers, two triggerers, two Celery workers, a DAG processor and the API server, on
PostgreSQL (metadata database and Celery result backend) with a Redis broker. The settings
and commands are read from the page's runnable block (the one marked for
tests/e2e/test_airflow_ha.py), so the tests run what the page documents; only the values
that belong to this host are put in: ``AIRFLOW_HOME``, the database, the Redis database,
free ports instead of the documented ones, and fresh secrets.

Failures a test can make:

- ``freeze`` / ``thaw``: SIGSTOP / SIGCONT to a component's whole process group (a triggerer
  is its supervisor, its trigger runner child and its log server): a triggerer that stops
  heartbeating, as in a long GC pause or a stopped container;
- ``crash``: SIGKILL of the component's main process only, as ``kill -9 <pid>`` or the
  OOM killer does. Airflow leaves processes behind then (``leftovers``): the log server
  (``airflow serve-logs``) of a triggerer, so a restarted triggerer's log server cannot
  bind its port. ``start_service`` kills what a crashed component left in its process group
  before it starts the component again;
- ``kill_service`` (from ``AirflowDeployment``): SIGKILL of the whole group, a machine
  that dies with every process on it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from airflow_deployment import REPO_ROOT, AirflowDeployment
from managed_process import ManagedProcess, free_port, wait_for

DOC_PAGE = REPO_ROOT / "docs" / "deployments.md"
DOC_MARKER = "<!-- docs-test: script tests/e2e/test_airflow_ha.py -->"
DOCUMENTED_API_PORT = "8080"
# The values of the documented block that belong to the host it runs on: replaced here.
HOST_SPECIFIC = frozenset(
    {
        "AIRFLOW_HOME",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__CELERY__BROKER_URL",
        "AIRFLOW__CELERY__RESULT_BACKEND",
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__API__SECRET_KEY",
    }
)
LOG_PORT_SETTINGS = (
    "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT",
    "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT",
)


@dataclass(frozen=True)
class Component:
    """One documented ``airflow`` command started in the background."""

    name: str  # scheduler1, triggerer2, worker1, api-server, dag-processor
    args: list[str]  # after ``airflow``
    env: dict[str, str]  # the assignments before the command


@dataclass(frozen=True)
class DocumentedDeployment:
    env: dict[str, str]
    setup: list[list[str]] = field(default_factory=list)  # e.g. ["db", "migrate"]
    components: list[Component] = field(default_factory=list)

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)


def documented_block(text: str | None = None) -> str:
    text = DOC_PAGE.read_text() if text is None else text
    (block,) = re.findall(re.escape(DOC_MARKER) + r"\n```bash\n(.*?)```", text, flags=re.S)
    return str(block)


def documented_deployment(text: str | None = None) -> DocumentedDeployment:
    """The exports, the one-off commands and the components of the documented block."""
    env: dict[str, str] = {}
    setup: list[list[str]] = []
    components: list[Component] = []
    seen: dict[str, int] = {}
    for line in documented_block(text).replace("\\\n", " ").splitlines():
        tokens = shlex.split(line, comments=True)
        if not tokens:
            continue
        if tokens == ["set", "-m"]:
            continue  # job control: a process group per component, as ManagedProcess does
        if tokens[0] == "export":
            env.update(_assignments(tokens[1:]))
            continue
        command_env = _assignments(tokens)
        rest = tokens[len(command_env) :]
        if not rest or rest[0] != "airflow":
            raise ValueError(f"documented block: not an airflow command: {line!r}")
        background = rest[-1] == "&"
        args = rest[1:-1] if background else rest[1:]
        if not background:
            setup.append(args)
            continue
        if "--celery-hostname" in args:
            name = args[args.index("--celery-hostname") + 1].split("@")[0]
        else:
            base = args[0]
            seen[base] = seen.get(base, 0) + 1
            name = f"{base}{seen[base]}" if base in ("scheduler", "triggerer") else base
        components.append(Component(name, args, command_env))
    return DocumentedDeployment(env, setup, components)


def _assignments(tokens: Sequence[str]) -> dict[str, str]:
    """The leading ``NAME=value`` tokens."""
    pairs: dict[str, str] = {}
    for token in tokens:
        name, sep, value = token.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
            break
        pairs[name] = value
    return pairs


class HADeployment(AirflowDeployment):
    """The documented deployment, in ``root``, against ``database_dsn`` and ``broker_url``."""

    def __init__(
        self,
        root: Path,
        *,
        database_dsn: str,
        broker_url: str,
        dag_folders: Mapping[str, Path],
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.documented = documented_deployment()
        documented_env = dict(self.documented.env)
        clash = set(extra_env or {}) & set(documented_env)
        if clash:
            raise ValueError(f"the test would change documented settings: {sorted(clash)}")
        super().__init__(
            root,
            executor=documented_env["AIRFLOW__CORE__EXECUTOR"],
            database_dsn=database_dsn,
            dag_folders=dag_folders,
            extra_env=extra_env,
            parallelism=int(documented_env["AIRFLOW__CORE__PARALLELISM"]),
        )
        here = f"127.0.0.1:{self.port}"
        for name, value in documented_env.items():
            if name in HOST_SPECIFIC:
                continue  # AirflowDeployment set this host's own (home, database, secrets)
            self.env[name] = value.replace(f"127.0.0.1:{DOCUMENTED_API_PORT}", here)
        self.env["AIRFLOW__CELERY__BROKER_URL"] = broker_url
        self.env["AIRFLOW__CELERY__RESULT_BACKEND"] = "db+" + database_dsn
        self.component_env: dict[str, dict[str, str]] = {}
        self.log_ports: dict[str, int] = {}
        for component in self.documented.components:
            own = dict(component.env)
            for setting in LOG_PORT_SETTINGS:
                if setting in own:
                    own[setting] = str(free_port())
                    self.log_ports[component.name] = int(own[setting])
            self.component_env[component.name] = own
        self.triggerer_jobs: dict[str, int] = {}  # component name -> its current job id
        self._jobs_seen: set[int] = set()
        self.crashed: dict[str, ManagedProcess] = {}
        self.left_behind: dict[str, list[str]] = {}  # what each crash left, for the record

    # -- lifecycle ---------------------------------------------------------------------

    def migrate(self, timeout: float = 180) -> None:
        if self.documented.setup != [["db", "migrate"]]:
            raise ValueError(f"unexpected one-off commands: {self.documented.setup}")
        super().migrate(timeout)

    def start(
        self, extra_services: Sequence[tuple[str, Sequence[str], Mapping[str, str]]] = ()
    ) -> None:
        triggerers = []
        for component in self.documented.components:
            args = [str(self.port) if a == DOCUMENTED_API_PORT else a for a in component.args]
            if component.name.startswith("triggerer"):
                triggerers.append((component.name, args))
                continue
            self._spawn(component.name, args, self.component_env[component.name])
        # One triggerer at a time: its job id (a trigger's ``triggerer_id``) is the newest.
        for name, args in triggerers:
            self._spawn(name, args, self.component_env[name])
            self._learn_triggerer_job(name)
        wait_for(
            self._healthy,
            timeout=180,
            what="every documented component up",
            processes=self.processes,
            interval=1,
        )

    def _healthy(self) -> bool:
        alive = self.alive_jobs()
        workers = [p for p in self.processes if p.name.startswith("worker")]
        return (
            super()._healthy()
            and len(alive.get("SchedulerJob", [])) >= 2
            and len(alive.get("TriggererJob", [])) >= 2
            and all("ready." in p.tail(400) for p in workers)
        )

    def _learn_triggerer_job(self, name: str) -> None:
        # A crashed triggerer's job stays "running" in the database (nobody ends it): only a
        # job id never seen before is the new process's.
        def new_job() -> int | None:
            ids = [j for j in self.alive_jobs().get("TriggererJob", []) if j not in self._jobs_seen]
            return max(ids) if ids else None

        job_id = wait_for(
            new_job,
            timeout=180,
            what=f"{name} registered as a triggerer",
            processes=self.processes,
            interval=1,
        )
        self._jobs_seen.add(job_id)
        self.triggerer_jobs[name] = job_id

    def alive_jobs(self) -> dict[str, list[int]]:
        """Running jobs by type (SchedulerJob, TriggererJob...), from the REST API."""
        body = self.api("GET", "/jobs", params={"job_state": "running", "limit": 100})
        jobs: dict[str, list[int]] = {}
        for job in body["jobs"]:
            jobs.setdefault(str(job["job_type"]), []).append(int(job["id"]))
        return jobs

    def job(self, job_id: int) -> dict[str, Any]:
        body = self.api("GET", "/jobs", params={"limit": 100, "order_by": "-id"})
        return next(dict(j) for j in body["jobs"] if int(j["id"]) == job_id)

    def process(self, name: str) -> ManagedProcess:
        return next(p for p in reversed(self.processes) if p.name.split("#")[0] == name)

    def triggerer_name(self, job_id: int | None) -> str | None:
        return next((n for n, j in self.triggerer_jobs.items() if j == job_id), None)

    # -- failures ----------------------------------------------------------------------

    def freeze(self, name: str) -> None:
        """SIGSTOP to the component's whole process group: it stops, heartbeats included."""
        os.killpg(self.process(name).popen.pid, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        os.killpg(self.process(name).popen.pid, signal.SIGCONT)

    def crash(self, name: str) -> list[str]:
        """SIGKILL of the component's main process only; returns what is left of its group."""
        proc = self.process(name)
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(timeout=30)
        self.processes.remove(proc)
        self.crashed[name] = proc
        self.left_behind[name] = _group_members(proc.popen.pid)
        return self.left_behind[name]

    def start_service(self, name: str) -> ManagedProcess:
        crashed = self.crashed.pop(name, None)
        if crashed is not None:
            self.left_behind[name] = _group_members(crashed.popen.pid)
            # The leftovers of a crash (its log server holds the port) go first.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(crashed.popen.pid, signal.SIGKILL)
            wait_for(
                lambda: not _group_members(crashed.popen.pid),
                timeout=30,
                what=f"{name}'s leftovers gone",
            )
        self._service_args.setdefault(
            name, (self.documented.component(name).args, self.component_env[name])
        )
        proc = super().start_service(name)
        if name.startswith("triggerer"):
            self._learn_triggerer_job(name)
        return proc

    def stop(self) -> None:
        for proc in self.crashed.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
        self.crashed.clear()
        for proc in self.processes:  # a frozen group would ignore SIGTERM until resumed
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGCONT)
        super().stop()

    # -- observation -------------------------------------------------------------------

    def mapped_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of the Dag run (mapped ones each), all pages."""
        found: list[dict[str, Any]] = []
        while True:
            body = self.api(
                "GET",
                f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
                params={"limit": 100, "offset": len(found)},
            )
            found += body["task_instances"]
            if not body["task_instances"] or len(found) >= body["total_entries"]:
                return found

    def log_server_answers(self, name: str) -> bool:
        """Whether the component's own log server answers on its port (any HTTP status)."""
        try:
            httpx.get(f"http://127.0.0.1:{self.log_ports[name]}/log/", timeout=5)
        except httpx.HTTPError:
            return False
        return True


def _group_members(pgid: int) -> list[str]:
    members = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(" ".join(proc.info["cmdline"] or [])[:80])
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def wait_quiet(
    deployment: HADeployment,
    counters: Any,
    *,
    quiet_s: float = 5.0,
    timeout: float = 300.0,
) -> None:
    """Until the workspace's request counters and the deployment's queued and running task
    instances stay the same for ``quiet_s`` (``counters()`` returns the workspace's)."""

    def snapshot() -> tuple[Any, ...]:
        body = deployment.api(
            "GET",
            "/dags/~/dagRuns/~/taskInstances",
            params={"state": ["queued", "running", "scheduled"], "limit": 1},
        )
        return (sum(counters()["requests"].values()), body["total_entries"])

    deadline = time.monotonic() + timeout
    last, since = snapshot(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the deployment did not go quiet in {timeout:.0f} s")
        time.sleep(1)
        now = snapshot()
        if now != last:
            last, since = now, time.monotonic()
