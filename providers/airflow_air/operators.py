"""Operators that run Databricks AI Runtime workloads and register Docker images.

Importing this module is what every Dag file using the provider pays at parse time, so it
imports nothing beyond ``airflow.sdk`` and the small links module: the core client (httpx),
the hook and the triggers are loaded inside ``execute``. Nothing is validated at parse time
either; an invalid workload fails the task, not the Dag import.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_air.links import AirMlflowRunLink, AirRunLink

if TYPE_CHECKING:
    import jinja2
    from airflow.sdk import Context

    from air_runtime import AirClient, DockerCredential, Redactor, Workload
    from air_runtime.client import SubmissionSecrets
    from airflow_air._submission import Outcome, RedactingLog, RunRecord

DEFAULT_CONN_ID = "databricks_default"  # same literal as hooks.DEFAULT_CONN_ID (not imported: cost)
_WORKLOAD_EXTENSIONS = (".yaml", ".yml")
_DEFAULT_XCOM_BACKEND = "airflow.sdk.execution_time.xcom.BaseXCom"
# Airflow's next_method for a deferral that ended without an event (trigger timeout or crash).
_TRIGGER_FAIL = "__fail__"


def _default_deferrable() -> bool:
    from airflow.sdk import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


@contextlib.contextmanager
def _configuration_errors_fail_fast(redact: Any = str) -> Iterator[None]:
    """The core's errors a retry cannot fix (``retryable`` False: an invalid workload, a
    refused credential, a request the workspace rejects) become ``AirConfigurationError`` (an
    AirflowFailException); a failed or timed-out run stays retryable (a retry submits a new
    run). ``redact`` cleans the message (an image registration's reason may echo credentials)."""
    from air_runtime import AirError, RunFailed, RunTimeout
    from airflow_air.exceptions import AirConfigurationError

    try:
        yield
    except AirError as exc:
        if exc.retryable or isinstance(exc, RunFailed | RunTimeout):
            raise
        raise AirConfigurationError(redact(str(exc))) from exc


def _deadline(task: BaseOperator, context: Context) -> float | None:
    """Wall-clock end of ``execution_timeout`` counted from this try's start, for triggers."""
    if task.execution_timeout is None:
        return None
    import time

    started = getattr(context.get("ti"), "start_date", None)
    start = started.timestamp() if started is not None else time.time()
    return start + task.execution_timeout.total_seconds()


def _first_poll_at() -> float:
    """When a trigger created now may first ask the workspace (see ``airflow_air.triggers``)."""
    import time

    from airflow_air.hooks import first_poll_delay

    return time.time() + max(first_poll_delay(), 0.0)


def _run_has_ended(client: AirClient, run_id: int, wait_s: float = 10.0) -> bool:
    """Whether the whole run has ended; waits a little when all its tasks have."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        state = client.get_run(run_id)
        if state.is_terminal:
            return True
        tasks_done = bool(state.tasks) and all(t.is_terminal for t in state.tasks)
        if not tasks_done or time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def _defer_timeout(deadline: float | None) -> timedelta | None:
    """The deferral's timeout: the task's deadline plus ``[air] defer_timeout_grace``, the
    extra time the triggerer gets before Airflow gives up on the trigger (the trigger
    cancels the run at the deadline itself; past the grace ``resume_execution`` does)."""
    if deadline is None:
        return None
    import time

    from airflow_air.hooks import defer_timeout_grace

    return timedelta(seconds=max(deadline - time.time(), 0) + defer_timeout_grace())


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
    :param databricks_conn_id: Airflow connection of type ``databricks``.

    Retries and clears (docs/spec/workload.md §6): an automatic retry after a worker crash reattaches
    to the run the crashed try started (or returns its success); a retry after the run
    failed, and a manual clear, start a new run. See ``airflow_air._submission``.

    Inside an ``AirWorkflowTaskGroup`` the operator is one stage of a multi-task run: the
    group's submit task starts the run, and this task waits for its own stage.

    Returns ``{"run_id", "run_page_url", "result_state", "mlflow_experiment_id",
    "mlflow_run_id", "gpu_hours"}`` (``task_key`` too for a stage); ``gpu_hours`` is the
    accelerators times the duration of every attempt of the run (of the stage's task), retries
    included. XComs ``run_id`` and ``run_page_url`` are pushed right after submit.
    """

    template_fields: Sequence[str] = ("workload", "overrides", "secret_env", "secret_scope")
    template_ext: Sequence[str] = _WORKLOAD_EXTENSIONS
    template_fields_renderers = {"workload": "yaml", "overrides": "json", "secret_env": "json"}
    ui_color = "#ffe8d6"
    operator_extra_links = (AirRunLink(), AirMlflowRunLink())

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
        databricks_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(workload, os.PathLike):
            workload = os.fspath(workload)
        self.workload = workload
        # Remembered before templating replaces the path by the file's text: the workload's
        # code_source.root_path is relative to the file's folder.
        self.workload_file = (
            workload
            if isinstance(workload, str) and workload.endswith(_WORKLOAD_EXTENSIONS)
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
        self.databricks_conn_id = databricks_conn_id
        # Set by AirWorkflowTaskGroup when this operator is a stage of a multi-task run.
        self.workflow_submit_task_id: str | None = None
        self.workflow_task_key: str | None = None
        self._run_id: int | None = None
        # What this try knows of its run (the return value's fields), for OpenLineage.
        self._lineage_result: dict[str, Any] | None = None
        # The extra links' URLs of this try (airflow_air.links.remember_url).
        self.air_link_urls: dict[str, str] = {}
        # This try's redactor (see redactor()); holds the resolved secret values, so it
        # is never a template field, never serialized and never pushed.
        self._redactor: Redactor | None = None

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
        roots: list[str] = []
        dag = self.dag if self.has_dag() else None
        if dag is not None:
            roots.append(dag.folder)
            searchpath = dag.template_searchpath or []
            roots.extend([searchpath] if isinstance(searchpath, str) else searchpath)
        return [str(root) for root in roots]

    def workload_path(self) -> str | None:
        """The absolute path of the workload file, or None for text/dicts (or not found)."""
        path = self.workload_file
        if not path:
            return None
        if os.path.isabs(path):
            return path
        for root in self.workload_search_folders():
            candidate = os.path.join(root, path)
            if os.path.isfile(candidate):
                return os.path.abspath(candidate)
        return None

    def load_workload(
        self, workload: Any = None, overrides: Mapping[str, Any] | Sequence[str] | None = None
    ) -> Workload:
        """Validate the rendered workload (raises the core's ``WorkloadError``). ``workload`` /
        ``overrides`` default to this operator's (rendered) fields."""
        from air_runtime import load_workload

        source = self.workload if workload is None else workload
        overrides = self.overrides if workload is None else overrides
        path = self.workload_path()
        base_dir = os.path.dirname(path) if path is not None else None
        if isinstance(source, str) and source == self.workload_file:
            # Templating did not replace the path (e.g. rendering skipped): load the file.
            if path is not None:
                source = path
        elif isinstance(source, str) and source.endswith(_WORKLOAD_EXTENSIONS):
            source = source + "\n"  # rendered text ending in ".yaml" must not look like a path
        # Rendered text is named by its file in messages; text given inline by the task.
        name = path or self.workload_file or f"{self.task_id}.workload"
        return load_workload(source, overrides or None, base_dir=base_dir, source_name=name)

    def secret_scope_name(self, secret_scope: str | None = None) -> str:
        from airflow_air.hooks import default_secret_scope

        return secret_scope or self.secret_scope or default_secret_scope()

    def with_orchestrator_secrets(
        self,
        client: AirClient,
        workload: Workload,
        secret_env: Mapping[str, str] | None = None,
        secret_scope: str | None = None,
        *,
        context: Context,
        namespace: str,
        submit_task_id: str | None = None,
        stage: str | None = None,
        written: list[SubmissionSecrets] | None = None,
    ) -> Workload:
        """Write ``secret_env`` values to the workspace under keys of this submission alone;
        the workload gets ``scope/key`` only. The keys' location is appended to ``written``."""
        from airflow_air._secret_env import (
            resolve_secret_env,
            store_submission_secrets,
            submission_secrets,
        )

        references = self.secret_env if secret_env is None else secret_env
        if not references:
            return workload
        values = resolve_secret_env(references)
        if self._redactor is not None:
            self._redactor.add(*values.values())
        scope = self.secret_scope_name(secret_scope if secret_env is not None else None)
        secrets = submission_secrets(context, scope, namespace, submit_task_id)
        first_in_scope = written is None or all(w.scope != scope for w in written)
        refs = store_submission_secrets(
            client, secrets, values, stage=stage, sweep=first_in_scope, log=self.log
        )
        if written is not None and first_in_scope:
            written.append(secrets)
        return workload.with_secrets(refs)

    def redaction_references(self) -> dict[str, str]:
        """The ``secret_env`` references whose values must not show in this task's messages:
        its own and, for a workflow stage, those of the other stages of its run (their
        workloads share one run, and a stage's log can print a sibling's secret)."""
        references: dict[str, str] = {}
        if self.workflow_submit_task_id is not None and self.has_dag():
            for task in self.dag.tasks:
                if (
                    isinstance(task, AirRunOperator)
                    and task is not self
                    and task.workflow_submit_task_id == self.workflow_submit_task_id
                ):
                    for name, ref in (task.secret_env or {}).items():
                        if isinstance(ref, str) and "{{" not in ref:
                            references[f"{task.task_id}.{name}"] = ref
        references.update(self.secret_env or {})
        return references

    def redactor(self, client: AirClient | None = None) -> Redactor:
        """This try's ``air_runtime.Redactor``: the workspace credentials and every value of
        ``redaction_references()`` (looked up again, so a reattaching or resumed try that did
        not submit redacts them too)."""
        if self._redactor is None:
            from air_runtime import Redactor, credential_secrets
            from airflow_air._secret_env import secret_values

            values = secret_values(self.redaction_references())
            if client is not None:
                self._redactor = client.redactor.with_values(values)
            else:
                self._redactor = Redactor(values)
                try:
                    from airflow_air.hooks import AirHook

                    access = AirHook(self.databricks_conn_id).workspace_access()
                    self._redactor.add(*credential_secrets(access.credentials))
                except Exception:  # the connection is checked where it is used
                    pass
            if self._redactor.ignored:
                self.log.warning(
                    "%d secret_env value(s) are shorter than 4 characters: they are not "
                    "redacted from messages and logs (too short to tell from ordinary text)",
                    self._redactor.ignored,
                )
        return self._redactor

    def redacting_log(self, client: AirClient | None = None) -> RedactingLog:
        from airflow_air._submission import RedactingLog

        return RedactingLog(self.log, self.redactor(client))

    def effective_poll_interval(self) -> float:
        from airflow_air.hooks import default_poll_interval

        return self.poll_interval if self.poll_interval is not None else default_poll_interval()

    # --- execution ----------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        from airflow_air._deployment import deployment_namespace
        from airflow_air._secret_env import mark_submission_run
        from airflow_air._submission import own_run, push_run_xcoms
        from airflow_air.hooks import AirHook

        if self.workflow_submit_task_id is not None:
            return self._execute_stage(context)
        if self.secret_env:
            from airflow_air._secret_env import check_references

            check_references(self.secret_env)
        namespace = deployment_namespace()
        with (
            _configuration_errors_fail_fast(lambda text: self.redactor()(text)),
            AirHook(self.databricks_conn_id).get_client() as client,
        ):
            workload = self.load_workload()
            from airflow_air._openlineage import with_parent_job_env

            workload = with_parent_job_env(workload, context)
            log = self.redacting_log(client)
            prepared: list[Workload] = []
            written: list[SubmissionSecrets] = []

            def submit(token: str) -> Any:
                if not prepared:  # secrets are resolved once, and only when submitting
                    prepared.append(
                        self.with_orchestrator_secrets(
                            client, workload, context=context, namespace=namespace, written=written
                        )
                    )
                submitted = client.submit_workload(prepared[0], idempotency_token=token)
                mark_submission_run(client, written, submitted.run_id, self.log)
                return submitted

            record, _ = own_run(context, self, client, submit, log=log, namespace=namespace)
            self._run_id = record.run_id
            self._lineage_result = {"run_id": record.run_id, "run_page_url": record.run_page_url}
            push_run_xcoms(context, record.run_id, record.run_page_url)
            if not self.wait_for_termination:
                return {"run_id": record.run_id, "run_page_url": record.run_page_url}
            return self._wait(context, client, record, None)

    def _execute_stage(self, context: Context) -> Any:
        from airflow_air._submission import RunRecord, push_run_xcoms
        from airflow_air.exceptions import AirConfigurationError
        from airflow_air.hooks import AirHook
        from airflow_air.links import RUN_ID_KEY, RUN_PAGE_URL_KEY

        ti = context["ti"]
        submit_id = self.workflow_submit_task_id
        run_id = ti.xcom_pull(task_ids=submit_id, key=RUN_ID_KEY)
        if run_id is None:
            raise AirConfigurationError(
                f"workflow task {submit_id!r} recorded no run_id; it must run (and succeed) "
                f"before stage {self.task_id!r}"
            )
        url = ti.xcom_pull(task_ids=submit_id, key=RUN_PAGE_URL_KEY) or ""
        record = RunRecord(int(run_id), url, 0, 0)
        self._run_id = record.run_id
        self._lineage_result = {
            "run_id": record.run_id,
            "run_page_url": url,
            "task_key": self.workflow_task_key,
        }
        push_run_xcoms(context, record.run_id, record.run_page_url)
        self.log.info("Stage %s of run %s: %s", self.workflow_task_key, run_id, url)
        with (
            _configuration_errors_fail_fast(lambda text: self.redactor()(text)),
            AirHook(self.databricks_conn_id).get_client() as client,
        ):
            self.redactor(client)
            return self._wait(context, client, record, self.workflow_task_key)

    def _wait(
        self,
        context: Context,
        client: AirClient,
        record: RunRecord,
        task_key: str | None,
    ) -> Any:
        """Wait for the run (or stage): in the triggerer when deferrable, else in the worker.

        A run that has already ended (a retry reattaching to a finished run, a stage whose
        task was queued until after its run's task ended) is finished here without deferring:
        a trigger firing at once is what Airflow 3.3 can mistake for a killed task.
        """
        if self.deferrable:
            from airflow_air._submission import finish_sync

            state = client.get_run(record.run_id)
            if state.has_ended(task_key):
                self.log.info(
                    "Run %s%s has already ended; finishing without deferring",
                    record.run_id,
                    f" (stage {task_key})" if task_key else "",
                )
                self._copy_logs(client, record.run_id, task_key)
                return self._complete(context, finish_sync(client, state, record, task_key))
            self._defer_until_done(context, record, task_key=task_key)
        return self._wait_in_worker(context, client, record, task_key)

    def _wait_in_worker(
        self,
        context: Context,
        client: AirClient,
        record: RunRecord,
        task_key: str | None,
    ) -> Any:
        from airflow_air._submission import LogStreamer, finish_sync, wait_sync

        poll = self.effective_poll_interval()
        log = self.redacting_log(client)
        if self.stream_logs:
            with LogStreamer(client, record.run_id, log, task_key):
                state = wait_sync(client, record, poll_interval=poll, log=log, task_key=task_key)
        else:
            state = wait_sync(client, record, poll_interval=poll, log=log, task_key=task_key)
        return self._complete(context, finish_sync(client, state, record, task_key))

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

    def _defer_until_done(self, context: Context, record: RunRecord, task_key: str | None) -> None:
        from airflow_air.triggers import AirRunTrigger

        deadline = _deadline(self, context)
        secret_keys: dict[str, str] | None = None
        why_worker = self.worker_finish_reason(task_key)
        if why_worker is not None:
            self.log.info("A success resumes in a worker: %s", why_worker)
        elif self.secret_env:
            import dataclasses

            from airflow_air._deployment import deployment_namespace
            from airflow_air._secret_env import submission_secrets

            secrets = submission_secrets(context, self.secret_scope_name(), deployment_namespace())
            secret_keys = dataclasses.asdict(secrets)
        self.defer(
            trigger=AirRunTrigger(
                record.run_id,
                run_page_url=record.run_page_url,
                databricks_conn_id=self.databricks_conn_id,
                poll_interval=self.effective_poll_interval(),
                deadline=deadline,
                cancel_on_kill=self.cancel_on_kill,
                task_key=task_key,
                first_poll_at=_first_poll_at(),
                # References only: the triggerer looks the values up itself to redact them.
                secret_env=self.redaction_references() or None,
                finish_in_triggerer=why_worker is None,
                push_return_value=bool(self.do_xcom_push),
                secret_keys=secret_keys,
                stream_logs=self.stream_logs,
            ),
            method_name="execute_complete",
            timeout=_defer_timeout(deadline),
        )

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
        from airflow_air.hooks import AirHook
        from airflow_air.links import RUN_ID_KEY

        try:  # pushed by this task instance right after the submit (a stage's too)
            pulled = context["ti"].xcom_pull(task_ids=self.task_id, key=RUN_ID_KEY)
            run_id = int(pulled) if pulled is not None else None
        except Exception as exc:
            self.log.warning("Could not find the run to cancel: %s", exc)
            return
        if run_id is None:
            return
        why = next_kwargs.get("error") or "the trigger failed"
        try:
            with AirHook(self.databricks_conn_id).get_client() as client:
                if client.get_run(run_id).is_terminal:
                    return
                client.cancel(run_id)
            self.log.warning("Cancelled run %s: the deferral ended with %s", run_id, why)
        except Exception as exc:
            self.log.warning("Could not cancel run %s: %s", run_id, self.redactor()(str(exc)))

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        from airflow.sdk.exceptions import AirflowException

        from airflow_air._submission import Outcome

        if not event:
            raise AirflowException("the trigger ended without an event")
        outcome = Outcome.from_event(event)
        if outcome.status in ("success", "failed", "timeout"):
            from airflow_air.hooks import AirHook

            try:
                with AirHook(self.databricks_conn_id).get_client() as client:
                    self._copy_logs(client, outcome.run_id, outcome.task_key)
            except Exception as exc:  # the logs are a convenience; the outcome is known
                self.log.info("Could not copy the logs of run %s: %s", outcome.run_id, exc)
        return self._complete(context, outcome)

    def _copy_logs(self, client: AirClient, run_id: int, task_key: str | None) -> None:
        """The nodes' lines of a run (stage) that ended while this task was not streaming
        them: it waited in the triggerer, or found the run ended. The triggerer does not
        follow logs itself: thousands of deferred tasks would each poll every node, where
        the shared watcher sends a few coalesced status requests for all of them."""
        if not self.stream_logs:
            return
        from airflow_air._submission import copy_run_logs
        from airflow_air.hooks import completed_log_lines

        copy_run_logs(
            client,
            run_id,
            self.redacting_log(client),
            task_key,
            max_lines=completed_log_lines(),
        )

    def _complete(self, context: Context, outcome: Outcome) -> Any:
        import dataclasses

        from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

        from airflow_air._submission import push_mlflow_link, remember_run_page
        from airflow_air.exceptions import AirRunFailedError

        self._run_id = outcome.run_id
        self._lineage_result = {**outcome.result(), "mlflow_run_url": outcome.mlflow_run_url}
        remember_run_page(context, outcome.run_page_url)
        push_mlflow_link(context, outcome.mlflow_run_url)
        redact = self.redactor()
        outcome = dataclasses.replace(outcome, message=redact(outcome.message))
        if self.secret_env and outcome.status in ("success", "failed"):
            self._delete_orchestrator_secrets(context, outcome)
        if outcome.gpu_hours is not None:
            from airflow_air.links import GPU_HOURS_KEY

            # Also when the run failed: the accelerators were held all the same.
            context["ti"].xcom_push(key=GPU_HOURS_KEY, value=outcome.gpu_hours)
        if outcome.status == "success":
            self.log.info("%s", outcome.success_text())
            return outcome.result()
        if outcome.status == "failed":
            raise AirRunFailedError(
                outcome.message,
                run_id=outcome.run_id,
                result_state=outcome.result_state,
                run_page_url=outcome.run_page_url,
            )
        if outcome.status == "timeout":
            raise AirflowTaskTimeout(outcome.message)
        raise AirflowException(outcome.message or f"waiting on run {outcome.run_id} failed")

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
        result = self._lineage_result or {}
        url = urlsplit(str(result.get("run_page_url") or ""))
        host = f"{url.scheme}://{url.netloc}" if url.netloc else None
        return operator_lineage(workload, result, host=host)

    def _delete_orchestrator_secrets(self, context: Context, outcome: Outcome) -> None:
        """The run has ended (for a stage: once its whole run has): delete the keys its
        ``secret_env`` values were written to. Best effort; never fails the task."""
        from airflow_air._deployment import deployment_namespace
        from airflow_air._secret_env import delete_submission_secrets, submission_secrets
        from airflow_air.hooks import AirHook

        try:
            secrets = submission_secrets(
                context,
                self.secret_scope_name(),
                deployment_namespace(),
                self.workflow_submit_task_id,
            )
            with AirHook(self.databricks_conn_id).get_client() as client:
                if self.workflow_submit_task_id is not None and not _run_has_ended(
                    client, outcome.run_id
                ):
                    return  # other stages may still start containers; a later one deletes
                delete_submission_secrets(client, secrets, self.log)
        except Exception as exc:
            self.log.warning("Could not delete the secret keys of run %s: %s", outcome.run_id, exc)

    def on_kill(self) -> None:
        """Cancel the run (the whole multi-task run for a workflow stage)."""
        if not self.cancel_on_kill or self._run_id is None:
            return
        from airflow_air.hooks import AirHook

        try:
            with AirHook(self.databricks_conn_id).get_client() as client:
                client.cancel(self._run_id)
            self.log.info("Cancelled run %s", self._run_id)
        except Exception as exc:
            self.log.warning("Could not cancel run %s: %s", self._run_id, self.redactor()(str(exc)))


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

    def _poll_interval(self) -> float:
        from airflow_air.hooks import default_poll_interval

        return self.poll_interval if self.poll_interval is not None else default_poll_interval()

    def _connection_credential(self) -> DockerCredential | None:
        """The registry login of ``docker_conn_id`` (the core stores it as a secret)."""
        from airflow_air.exceptions import AirConfigurationError

        if (self.credentials_scope is None) != (self.credentials_key is None):
            raise AirConfigurationError("credentials_scope and credentials_key go together")
        if self.docker_conn_id is None:
            return None
        from airflow.sdk import BaseHook
        from airflow.sdk.log import mask_secret

        from air_runtime import DockerCredential

        conn = BaseHook.get_connection(self.docker_conn_id)
        password = conn.password or (conn.extra_dejson or {}).get("token")
        if not conn.login or not password:
            raise AirConfigurationError(
                f"connection {self.docker_conn_id!r} needs the Docker Hub user in login and a "
                "password or access token in password"
            )
        mask_secret(password)
        credential = DockerCredential(
            registry="docker.io",
            username=conn.login,
            password=password,
            origin=f"airflow-{self.docker_conn_id}",
        )
        mask_secret(credential.secret_value())
        self.redactor().add(password, credential.secret_value())
        return credential

    def execute(self, context: Context) -> Any:
        from air_runtime import normalize_docker_ref
        from airflow_air.hooks import AirHook

        with (
            _configuration_errors_fail_fast(lambda text: self.redactor()(text)),
            AirHook(self.databricks_conn_id).get_client() as client,
        ):
            self.redactor().include(client.redactor)
            if self.catalog is not None and self.schema is not None:
                from airflow_air._unity_catalog_images import push_to_unity_catalog

                return push_to_unity_catalog(
                    self,
                    context,
                    client,
                    source=self.image,
                    catalog=self.catalog,
                    schema=self.schema,
                    artifact=self.artifact,
                    registry_host=self.registry_host,
                    credential=self._connection_credential(),
                )
            try:
                image = normalize_docker_ref(self.image)
            except ValueError as exc:
                from air_runtime import ConfigurationError

                raise ConfigurationError(str(exc)) from exc
            context["ti"].xcom_push(key="image", value=image)
            existing = client.get_image(image)
            if existing is not None and existing.is_available and not self.refresh:
                self.log.info("%s is already AVAILABLE; nothing to do", image)
                return existing.digest
            if existing is not None and existing.state in ("PENDING", "IMPORTING"):
                self.log.info("%s is being registered (%s); waiting", image, existing.state)
                registration = existing
            else:
                registration = client.register_image(
                    image,
                    credentials_scope=self.credentials_scope,
                    credentials_key=self.credentials_key,
                    refresh=True,
                    docker_credential=self._connection_credential(),
                )
                self.log.info("Registered %s: %s", image, registration.state)
                if registration.is_available:
                    return registration.digest
            if self.deferrable:
                if registration.state == "FAILED":  # ended already: no deferral, same outcome
                    reason = registration.status_message or "no reason given"
                    return self.execute_complete(
                        context,
                        {
                            "status": "failed",
                            "image": image,
                            "state": registration.state,
                            "message": f"registration FAILED: {reason}",
                        },
                    )
                self._defer_until_available(context, image)
            done = client.wait_for_image(
                image, timeout=self.timeout, poll_interval=self._poll_interval()
            )
            self.log.info("%s is AVAILABLE (%s)", image, done.digest)
            return done.digest

    def _defer_until_available(self, context: Context, image: str) -> None:
        import time

        from airflow_air.triggers import AirImageTrigger

        deadline = time.time() + self.timeout
        task_deadline = _deadline(self, context)
        if task_deadline is not None:
            deadline = min(deadline, task_deadline)
        self.defer(
            trigger=AirImageTrigger(
                image,
                databricks_conn_id=self.databricks_conn_id,
                poll_interval=self._poll_interval(),
                deadline=deadline,
                first_poll_at=_first_poll_at(),
            ),
            method_name="execute_complete",
            timeout=_defer_timeout(deadline),
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

        from airflow_air.exceptions import AirConfigurationError

        event = dict(event or {})
        status = event.get("status")
        if status == "success":
            self.log.info("%s is AVAILABLE (%s)", event.get("image"), event.get("digest"))
            return event.get("digest")
        message = self.redactor()(f"{event.get('image')}: {event.get('message') or status}")
        if status == "failed":
            raise AirConfigurationError(message)
        if status == "timeout":
            raise AirflowTaskTimeout(message)
        raise AirflowException(message)
