"""Operators that run Databricks AI Runtime workloads and register Docker images.

Importing this module is what every Dag file using the provider pays at parse time, so it
imports nothing beyond ``airflow.sdk`` and three small modules of its own (the links, where a
workload comes from, its accelerators for ``pool_slots``): the core client (httpx), the hook
and the triggers are loaded inside ``execute``. Nothing is validated at parse time
either; an invalid workload fails the task, not the Dag import (only
``pool_slots="accelerators"`` reads the workload's accelerator count then, and an unknown
count is a Dag import error).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseOperatorLink

from airflow_air._accelerators import ACCELERATORS
from airflow_air._workload_source import WORKLOAD_EXTENSIONS
from airflow_air.links import AirMlflowRunLink, AirRunLink

if TYPE_CHECKING:
    import jinja2
    from airflow.sdk import Context

    from air_runtime import AirClient, Redactor, Workload
    from airflow_air._task_run import AirTaskRun

DEFAULT_CONN_ID = "databricks_default"  # same literal as hooks.DEFAULT_CONN_ID (not imported: cost)
_DEFAULT_XCOM_BACKEND = "airflow.sdk.execution_time.xcom.BaseXCom"
# Airflow's next_method for a deferral that ended without an event (trigger timeout or crash).
_TRIGGER_FAIL = "__fail__"


def _default_deferrable() -> bool:
    from airflow.sdk import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


def _pool_slots_from_accelerators() -> bool:
    from airflow.sdk import conf

    return conf.getboolean("air", "pool_slots_from_accelerators", fallback=False)


class AirRunOperator(BaseOperator):
    """Runs a Databricks AI Runtime workload and waits for it.

    :param workload: a YAML file path (``.yaml``/``.yml``, relative to the Dag folder or
        ``template_searchpath``, or absolute; Jinja-rendered), YAML text, or a dict of the same
        structure (docs/spec/workload.md). ``{{secrets/<scope>/<key>}}`` references are kept verbatim.
    :param overrides: dotted-path overrides applied before validation, e.g.
        ``{"compute.num_accelerators": 16, "env_variables.OUT": "/tmp/{{ run_id }}"}``.
    :param secret_env: env vars whose values come from Airflow, as references:
        ``{"HF_TOKEN": "conn:hf_default:password", "WANDB_KEY": "var:wandb_key"}``. Resolved
        at execute time, masked in logs, written to a Databricks secret scope; the workload
        only carries ``scope/key``.
    :param secret_scope: the scope ``secret_env`` values are written to (default
        ``[air] default_secret_scope``).
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param poll_interval: seconds between status checks (default ``[air] default_poll_interval``).
    :param cancel_on_kill: cancel the run when the task is killed or times out.
    :param wait_for_termination: when False, return right after the submit.
    :param stream_logs: copy every node's log lines (every task attempt, labelled
        ``[<task> node N attempt A]``) into the task log: streamed while waiting in the
        worker; when the run (stage) ends, for a try that waited in the triggerer (at most
        ``[air] completed_log_lines``).
    :param finish_in_triggerer: when deferred, let the trigger end the task once the run
        succeeds (one worker run per task instead of two; the same XComs, links and log
        lines). Failures always resume in a worker. Kept in the worker when the task has
        ``outlets``, an ``on_success_callback``, ``multiple_outputs``, or the deployment has
        listeners or a custom XCom backend (``worker_finish_reason``).
    :param submit_in_triggerer: when deferrable, let a first try defer right after planning
        its run, and the trigger submit it (default ``[air] submit_in_triggerer``, False):
        the worker run skips the submit's round trips to the workspace, which is most of a
        sweep trial's worker time. The run is the same (the plan carries the generation's
        idempotency token, so a restarted trigger gets the same run back); the ``run_id`` and
        ``run_page_url`` XComs (and the live link) appear once the trigger has submitted; a
        workload the workspace refuses fails the task without retries, as in a worker. A try
        with ``secret_env``, a local code snapshot or a Docker image to register, a retry
        and a workflow stage submit in the worker.
    :param max_gpu_hours: the run's budget in GPU-hours (accelerators times elapsed time,
        every attempt of the run, retries included; for a workflow stage, its task's): once
        the run passes it, the run is cancelled and the task fails saying so, without
        retries. Checked on the states the wait reads anyway (at most a poll late; no extra
        request), in the worker or in the triggerer.
    :param failure_policy: what an attempt that fails while the platform is about to retry
        it (the workload's ``max_retries``) gets, by the class of its diagnosis
        (``air_runtime.FailurePolicy``, or a mapping such as ``{"unknown": "orchestrator"}``):
        ``platform`` lets the platform retry, ``stop`` cancels the run and fails the task
        without Airflow retries, ``orchestrator`` cancels the run and fails the task so
        that Airflow's retry takes over. Default: deterministic failures (CUDA out of
        memory, a missing command or module, ...) stop, infrastructure and unknown ones are
        retried by the platform. Each decision is the first line the task log shows of it.
        Reads the failed attempt's last lines (a few requests, only then).
    :param checkpoint_volume: the Unity Catalog volume (``/Volumes/<catalog>/<schema>/
        <volume>``) where the run's ranks keep checkpoints: each gets its task's folder in
        ``AIRO_CHECKPOINT_DIR``, the same across the platform's retries and Airflow's
        retries and clears of this task instance. Default: the connection's
        ``checkpoint_volume`` extra; ``""``: none. A volume that is missing or not writable
        fails the try before anything is submitted.
    :param checkpoint_code_version: what names the code in the checkpoint folder: a new
        value starts a new folder (another model's checkpoints would not load). Default:
        the Dag's version, new whenever the Dag's code changes; ``""``: the folder outlives
        code changes; any other text (templated, e.g. a model version): that.
    :param stop_deterministic_retries: deprecated; sets ``failure_policy``'s deterministic
        action (True: ``stop``, False: ``platform``).
    :param sweep_gpu_hours_budget: GPU-hours that all the runs of this task's Dag run may use
        together (every task and map index of it, counted from the workspace: the runs whose
        name carries ``<dag>--<dag run>``), usually set for the whole Dag through
        ``default_args``. Before a submit: once spent, nothing is submitted and the task fails
        without retries, saying what was spent and by which runs. While waiting (in the
        worker or the triggerer; one listing of the Dag run's runs per poll interval, shared
        by every wait of the process): once spent, the run (and the Dag run's other runs still
        going) is cancelled, with the cause kept next to it (``airo get`` shows it), and the
        task fails with the figure, without retries. Spending stops within one poll of the
        moment the budget is spent. The connection's ``gpu_hour_prices`` put money beside the
        figures.
    :param databricks_conn_id: Airflow connection of type ``databricks``.

    ``pool_slots`` (Airflow's own argument) also takes ``"accelerators"``: the slots of
    ``pool`` the task holds are then its workload's ``compute.num_accelerators``, read when
    the Dag file is parsed (a dict, YAML text or a file, with a literal override; a templated
    count is refused then). ``[air] pool_slots_from_accelerators = True`` makes that the
    default for tasks whose count is literal. A mapped task cannot weigh each trial (Airflow
    takes one ``pool_slots`` for all): see ``airflow_air.sweeps.mapped_by_size``.

    Retries and clears (docs/spec/workload.md §6): an automatic retry after a worker crash reattaches
    to the run the crashed try started (or returns its success); a retry after the run
    failed, and a manual clear, start a new run. See ``airflow_air._generations``.

    Inside an ``AirWorkflowTaskGroup`` the operator is one stage of a multi-task run: the
    group's submit task starts the run, and this task waits for its own stage.

    Returns ``{"run_id", "run_page_url", "result_state", "mlflow_experiment_id",
    "mlflow_run_id", "gpu_hours"}`` (``task_key`` too for a stage; ``cost`` and ``currency``
    when the connection has ``gpu_hour_prices``); ``gpu_hours`` is the accelerators times the
    duration of every attempt of the run (of the stage's task), retries included. XComs
    ``run_id`` and ``run_page_url`` are pushed right after submit; ``gpu_hours`` (and ``cost``:
    ``{"amount", "currency"}``) once the run ended.
    """

    template_fields: Sequence[str] = (
        "workload",
        "overrides",
        "secret_env",
        "secret_scope",
        "checkpoint_code_version",
    )
    template_ext: Sequence[str] = WORKLOAD_EXTENSIONS
    template_fields_renderers = {"workload": "yaml", "overrides": "json", "secret_env": "json"}
    ui_color = "#ffe8d6"
    operator_extra_links: Collection[BaseOperatorLink] = (AirRunLink(), AirMlflowRunLink())

    def __init__(
        self,
        *,
        workload: str | os.PathLike[str] | Mapping[str, Any],
        overrides: Mapping[str, Any] | Sequence[str] | None = None,
        secret_env: Mapping[str, str] | None = None,
        secret_scope: str | None = None,
        deferrable: bool | None = None,
        poll_interval: float | None = None,
        cancel_on_kill: bool = True,
        wait_for_termination: bool = True,
        stream_logs: bool = True,
        finish_in_triggerer: bool = True,
        submit_in_triggerer: bool | None = None,
        max_gpu_hours: float | None = None,
        failure_policy: Any = None,
        stop_deterministic_retries: bool | None = None,
        checkpoint_volume: str | None = None,
        checkpoint_code_version: str | None = None,
        sweep_gpu_hours_budget: float | None = None,
        databricks_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        pool_slots = kwargs.get("pool_slots")
        weigh = pool_slots == ACCELERATORS or (
            pool_slots is None and _pool_slots_from_accelerators()
        )
        if pool_slots == ACCELERATORS:
            del kwargs["pool_slots"]
        super().__init__(**kwargs)
        if isinstance(workload, os.PathLike):
            workload = os.fspath(workload)
        self.workload = workload
        # Remembered before templating replaces the path by the file's text: the workload's
        # code_source.root_path is relative to the file's folder.
        self.workload_file = (
            workload
            if isinstance(workload, str) and workload.endswith(WORKLOAD_EXTENSIONS)
            else None
        )
        self.overrides = overrides
        self.secret_env = dict(secret_env or {})
        self.secret_scope = secret_scope
        self.deferrable = _default_deferrable() if deferrable is None else deferrable
        self.poll_interval = poll_interval
        self.cancel_on_kill = cancel_on_kill
        self.wait_for_termination = wait_for_termination
        self.stream_logs = stream_logs
        self.finish_in_triggerer = finish_in_triggerer
        self.submit_in_triggerer = submit_in_triggerer  # None: [air] submit_in_triggerer
        self.max_gpu_hours = max_gpu_hours
        # Resolved (and checked) when a try starts: the policy type lives in the core,
        # which this module does not import.
        self.failure_policy = failure_policy
        self.stop_deterministic_retries = stop_deterministic_retries
        self.checkpoint_volume = checkpoint_volume
        self.checkpoint_code_version = checkpoint_code_version
        # Checked when a try starts (``air_runtime.sweep_budget``): the core is not imported here.
        self.sweep_gpu_hours_budget = sweep_gpu_hours_budget
        if weigh:
            self._weigh_by_accelerators(required=pool_slots == ACCELERATORS)
        self.databricks_conn_id = databricks_conn_id
        # Set by AirWorkflowTaskGroup when this operator is a stage of a multi-task run.
        self.workflow_submit_task_id: str | None = None
        self.workflow_task_key: str | None = None
        # The try this operator runs (``airflow_air._task_run.AirTaskRun``), set when it
        # starts: its run (to cancel when killed), lineage, link XComs and redactor. Never a
        # template field, never serialized and never pushed (the redactor holds the
        # resolved secret values).
        self.try_run: AirTaskRun | None = None

    def _weigh_by_accelerators(self, *, required: bool) -> None:
        """``pool_slots`` from the workload's accelerators, known at parse time; without
        them, a Dag import error when asked for by name, else Airflow's default stays."""
        from airflow_air._accelerators import parse_time_accelerators
        from airflow_air._workload_source import search_folders

        count = parse_time_accelerators(self.workload, self.overrides, search_folders(self))
        if count is not None:
            self.pool_slots = count
        elif required:
            raise ValueError(
                f"{self.task_id}: pool_slots='accelerators' needs compute.num_accelerators "
                "known when the Dag file is parsed (a dict, YAML text or a file, and no "
                "templated override of it); give pool_slots as a number instead"
            )

    # --- templating -----------------------------------------------------------------------

    def get_template_env(self, dag: Any = None) -> jinja2.Environment:
        from airflow_air._templating import workload_template_env

        return workload_template_env(super().get_template_env(dag))

    def render_template(
        self,
        content: Any,
        context: Context,
        jinja_env: jinja2.Environment | None = None,
        seen_oids: set[int] | None = None,
    ) -> Any:
        """Airflow's rendering; a missing workload file or a Jinja syntax error fails the task
        at once (``AirConfigurationError``), naming the file: no retry can fix either."""
        import jinja2

        try:
            return super().render_template(content, context, jinja_env, seen_oids)
        except jinja2.TemplateNotFound as exc:
            from airflow_air.exceptions import AirConfigurationError

            folders = ", ".join(self.workload_search_folders()) or "no Dag folder"
            raise AirConfigurationError(
                f"{self.task_id}: workload file {exc.name!r} not found (searched {folders}); "
                "give a path relative to the Dag folder or template_searchpath, or an "
                "absolute path"
            ) from None
        except jinja2.TemplateSyntaxError as exc:
            from airflow_air.exceptions import AirConfigurationError

            where = exc.filename or exc.name or self.workload_file or "<template>"
            raise AirConfigurationError(
                f"{self.task_id}: Jinja syntax error in {where} (line {exc.lineno}): {exc.message}"
            ) from None

    # --- workload -----------------------------------------------------------------------------

    def workload_search_folders(self) -> list[str]:
        """Where a relative workload path is looked up: the Dag folder, then
        ``template_searchpath`` (Airflow's template loader)."""
        from airflow_air._workload_source import search_folders

        return search_folders(self)

    def workload_path(self) -> str | None:
        """The absolute path of the workload file, or None for text/dicts (or not found)."""
        from airflow_air._workload_source import workload_path

        return workload_path(self)

    def load_workload(
        self, workload: Any = None, overrides: Mapping[str, Any] | Sequence[str] | None = None
    ) -> Workload:
        """Validate the rendered workload (raises the core's ``WorkloadError``). ``workload`` /
        ``overrides`` default to this operator's (rendered) fields."""
        from airflow_air._workload_source import load_task_workload

        return load_task_workload(self, workload, overrides)

    def redactor(self, client: AirClient | None = None) -> Redactor:
        """This try's ``air_runtime.Redactor``: the workspace credentials and every value of
        ``secret_env`` reference it may see (``airflow_air._secret_env.try_redactor``)."""
        if self.try_run is not None:
            return self.try_run.redactor(client)
        from airflow_air._secret_env import try_redactor

        return try_redactor(self, client)

    def workflow_stages(self) -> list[AirRunOperator]:
        """The stages of this task's workflow run, this task included (none for a plain
        task)."""
        if self.workflow_submit_task_id is None or not self.has_dag():
            return []
        return [
            other  # type: ignore[misc]
            for other in self.dag.tasks
            if getattr(other, "workflow_submit_task_id", None) == self.workflow_submit_task_id
        ]

    # --- execution (airflow_air._task_run) ------------------------------------------------

    def _start_try(self, context: Context) -> AirTaskRun:
        from airflow_air._task_run import AirTaskRun

        self.try_run = AirTaskRun(self, context)
        return self.try_run

    def _offer_links(self) -> None:
        """Keep in this try's ``operator_extra_links`` only the links Airflow should write
        as the worker run ends (``links.LinkXComs.offered``). An instance attribute of this
        try's copy: the Dag's links (serialized, shown) stay."""
        if self.try_run is not None:
            self.operator_extra_links = self.try_run.links.offered(type(self).operator_extra_links)

    def execute(self, context: Context) -> Any:
        try:
            return self._start_try(context).execute()
        finally:
            self._offer_links()

    def resume_execution(
        self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context
    ) -> Any:
        """Airflow resumes a deferred task with ``__fail__`` when its trigger timed out
        (the triggerer was down or overloaded past the deferral's timeout) or crashed; then
        neither ``execute_complete`` nor any ``on_kill`` runs, and the run would keep its GPUs.
        So the run this try deferred on is cancelled here before the task fails."""
        if next_method == _TRIGGER_FAIL and self.cancel_on_kill:
            self._cancel_deferred_run(context, next_kwargs or {})
        return super().resume_execution(next_method, next_kwargs, context)

    def _cancel_deferred_run(self, context: Context, next_kwargs: Mapping[str, Any]) -> None:
        try:
            self._start_try(context).cancel_deferred(
                next_kwargs.get("error") or "the trigger failed"
            )
        finally:
            self._offer_links()

    def worker_finish_reason(self, task_key: str | None = None) -> str | None:
        """Why a deferred success of this task must resume in a worker (None: the trigger
        may end the task itself, ``TaskSuccessEvent``). A task ended by its trigger never
        runs worker code again, so whatever users attached to that code keeps the worker:

        - ``finish_in_triggerer=False``;
        - a workflow stage (its secret keys go only once the whole run has ended);
        - ``outlets`` (asset events are emitted by the worker that ends the task);
        - ``on_success_callback`` (it would run in the DAG processor, not the worker);
        - listeners (OpenLineage, plugins): ``on_task_instance_success`` runs in the worker;
        - a custom XCom backend: the triggerer writes XComs to the metadata database;
        - ``multiple_outputs``: the worker splits the return value into keys.
        """
        if not self.finish_in_triggerer:
            return "finish_in_triggerer=False"
        if task_key is not None:
            return "a workflow stage"
        if self.outlets:
            return "the task has outlets"
        if self.on_success_callback:
            return "the task has an on_success_callback"
        if getattr(self, "multiple_outputs", False):
            return "multiple_outputs=True"
        from airflow.sdk import conf
        from airflow.sdk.listener import get_listener_manager

        if get_listener_manager().has_listeners:
            return "listeners are registered (OpenLineage or a plugin)"
        backend = conf.get("core", "xcom_backend", fallback=_DEFAULT_XCOM_BACKEND)
        if backend not in (_DEFAULT_XCOM_BACKEND, "airflow.sdk.bases.xcom.BaseXCom"):
            return f"a custom XCom backend ({backend})"
        return None

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        try:
            return self._start_try(context).resume(event)
        finally:
            self._offer_links()

    # --- OpenLineage (apache-airflow-providers-openlineage calls these; airflow_air._openlineage)

    def get_openlineage_facets_on_start(self) -> Any:
        return self._openlineage_lineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._openlineage_lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self._openlineage_lineage()

    def _openlineage_lineage(self) -> Any:
        from urllib.parse import urlsplit

        from airflow_air._openlineage import operator_lineage

        try:
            workload: Workload | None = self.load_workload()
        except Exception:  # an invalid workload fails the task; lineage has nothing to add
            workload = None
        result = (self.try_run.lineage if self.try_run is not None else None) or {}
        url = urlsplit(str(result.get("run_page_url") or ""))
        host = f"{url.scheme}://{url.netloc}" if url.netloc else None
        return operator_lineage(workload, result, host=host)

    def on_kill(self) -> None:
        """Cancel the run (the whole multi-task run for a workflow stage)."""
        run_id = self.try_run.run_to_cancel() if self.try_run is not None else None
        if not self.cancel_on_kill or run_id is None:
            return
        from airflow_air.hooks import AirHook

        try:
            from air_runtime import CancelCause

            by = self.try_run.submission_key_text() if self.try_run is not None else ""
            cause = CancelCause("orchestrator", "the Airflow task was killed", by)
            with AirHook(self.databricks_conn_id).get_client() as client:
                client.cancel(run_id, cause=cause)
            self.log.info("Cancelled run %s", run_id)
        except Exception as exc:
            self.log.warning("Could not cancel run %s: %s", run_id, self.redactor()(str(exc)))


class AirRegisterImageOperator(BaseOperator):
    """Registers a Docker Hub image for AI Runtime workloads and waits until it is AVAILABLE,
    or, with ``catalog`` and ``schema``, copies an image into Unity Catalog.

    Unity Catalog target (today's platform; ``databricks air images push``): ``image`` is the
    source (Docker Hub by default, any registry; its login from ``docker_conn_id`` or the
    worker's ``~/.docker/config.json``), copied registry to registry, without Docker, to the
    workspace's Artifact Registry as ``<catalog>.<schema>.<artifact>``. Returns that
    ``unity_catalog_image`` reference (XCom ``digest``: the manifest digest), to template
    into a downstream ``AirRunOperator``, e.g.
    ``overrides={"environment.unity_catalog_image": "{{ ti.xcom_pull('copy_image') }}"}``
    or ``{"containers[0].unity_catalog_image": ...}``.

    Idempotent: an image already AVAILABLE is not registered again unless ``refresh=True``
    (a re-pushed tag), and a registration in progress is waited on, not restarted.

    :param image: Docker Hub reference (``org/repo:tag``, ``docker.io/...``, ``ubuntu``).
    :param docker_conn_id: Airflow connection whose login/password (or token) are the Docker
        Hub credentials; they are stored as a Databricks secret through the core client.
    :param credentials_scope: an existing secret holding ``base64(user:password)``...
    :param credentials_key: ...and its key. Without either, public images need nothing.
    :param refresh: register again even when AVAILABLE.
    :param timeout: seconds to wait for AVAILABLE.
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param catalog: Unity Catalog target: the catalog...
    :param schema: ...the schema...
    :param artifact: ...and ``NAME[:TAG]`` (default: the source's name and tag).
    :param registry_host: the Artifact Registry host (default: derived from the workspace).

    Docker Hub mode returns the image's manifest digest, ``sha256:<hex>`` (pin it as ``image@<digest>``), or
    None when the platform reports none; XCom ``image`` holds the image's normal form.
    """

    template_fields: Sequence[str] = (
        "image",
        "credentials_scope",
        "credentials_key",
        "catalog",
        "schema",
        "artifact",
        "registry_host",
    )
    ui_color = "#e8f0ff"

    def __init__(
        self,
        *,
        image: str,
        docker_conn_id: str | None = None,
        credentials_scope: str | None = None,
        credentials_key: str | None = None,
        refresh: bool = False,
        timeout: float = 3600.0,
        deferrable: bool | None = None,
        poll_interval: float | None = None,
        databricks_conn_id: str = DEFAULT_CONN_ID,
        catalog: str | None = None,
        schema: str | None = None,
        artifact: str | None = None,
        registry_host: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (catalog is None) != (schema is None):
            from airflow_air.exceptions import AirConfigurationError

            raise AirConfigurationError("catalog and schema go together (the Unity Catalog target)")
        self.image = image
        self.catalog = catalog
        self.schema = schema
        self.artifact = artifact
        self.registry_host = registry_host
        self.docker_conn_id = docker_conn_id
        self.credentials_scope = credentials_scope
        self.credentials_key = credentials_key
        self.refresh = refresh
        self.timeout = timeout
        self.deferrable = _default_deferrable() if deferrable is None else deferrable
        self.poll_interval = poll_interval
        self.databricks_conn_id = databricks_conn_id
        self._redactor: Redactor | None = None

    def redactor(self) -> Redactor:
        """The registry password (and its ``user:password`` forms) and the workspace token."""
        if self._redactor is None:
            from air_runtime import Redactor

            self._redactor = Redactor()
            if self.docker_conn_id is not None:
                try:
                    from airflow.sdk import BaseHook

                    conn = BaseHook.get_connection(self.docker_conn_id)
                    password = conn.password or (conn.extra_dejson or {}).get("token")
                    self._redactor.add(password, f"{conn.login}:{password}")
                except Exception:  # the connection is checked where it is used
                    pass
        return self._redactor

    def execute(self, context: Context) -> Any:
        from airflow_air._image_registration import AirImageRegistration

        return AirImageRegistration(self, context).execute()

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        from airflow_air._image_registration import AirImageRegistration

        return AirImageRegistration(self, context).resume(event)
