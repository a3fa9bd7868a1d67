"""Materializing AI Runtime assets: overrides, secrets, submit, wait, results.

The rules all live in ``air_runtime`` (validation, payloads, HTTP, state meaning); this
module only decides *what* to submit for one Dagster step and turns the outcome into
Dagster events.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import re
import sys
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterExecutionInterruptedError

from air_runtime import (
    AirClient,
    AirError,
    AuthError,
    ConfigurationError,
    Redactor,
    RunFailed,
    RunState,
    Stage,
    SubmittedRun,
    TaskState,
    Workload,
    WorkloadError,
    make_idempotency_token,
    mlflow_ids,
    mlflow_run_url,
)
from air_runtime.client import SubmissionSecrets

from ._blocking import BlockingChecks, RunTask, blocking_check_keys
from ._config import AirRunConfig
from ._identity import StepIdentity, deployment_namespace, terminal_failure_observation
from ._interrupts import deferred_interrupts
from ._partitions import DEFAULT_MAX_TASKS_PER_RUN, PartitionParameters, partition_overrides
from ._pipes import StepPipes, earlier_attempt_observation
from ._resource import AirWorkspace
from ._secrets import resolve_secret_env
from ._stage import AirStage, workload_hash
from ._translator import META_PREFIX, container_rows, containers_table
from ._watch import watch_run

OUTPUT_URI_KEY = "dagster/uri"
# GPU-hours, named apart so a metric summing one of them never counts an attempt twice:
# materializations carry every attempt's total (sum this one), the observation of each
# ended attempt only that attempt's.
GPU_HOURS_KEY = f"{META_PREFIX}gpu_hours"
ATTEMPT_GPU_HOURS_KEY = f"{META_PREFIX}attempt_gpu_hours"
_LOCATION = re.compile(r"^(/|[a-zA-Z][a-zA-Z0-9+.-]*:/)")

# What a step yields; a step over a partition range also yields per-partition
# materializations and check evaluations, and its checks' outputs (see ``_ranges``).
AirEvent = (
    dg.MaterializeResult
    | dg.AssetObservation
    | dg.AssetCheckResult
    | dg.AssetMaterialization
    | dg.AssetCheckEvaluation
    | dg.Output
)


@dataclass(frozen=True)
class LoadedStage:
    """A stage with its validated workload and the asset it materializes."""

    stage: AirStage
    workload: Workload
    asset_key: dg.AssetKey

    @property
    def key(self) -> str:
        return self.stage.key


@dataclass(frozen=True)
class AirWorkflow:
    """Everything an asset needs at run time, fixed when the definitions load."""

    name: str
    stages: tuple[LoadedStage, ...]
    resource_key: str = "air_workspace"
    secret_env: Mapping[str, str] | None = None
    partition_parameters: PartitionParameters | None = None
    partition_env: str | None = None
    log_node: int | None = None
    # Env vars whose values are formatted per step: {run_id}, {partition_key}, {stage}.
    run_env: Mapping[str, str] | None = None
    always_workflow: bool = False  # several stages: always a multi-task run, even one selected
    # The environment variable that names where the stages write (recorded as dagster/uri).
    output_env: str | None = None
    # Tasks per remote run of a step over a partition range (see ``_ranges``).
    max_tasks_per_run: int = DEFAULT_MAX_TASKS_PER_RUN

    def selected(self, context: dg.AssetExecutionContext) -> list[LoadedStage]:
        keys = context.selected_asset_keys
        return [s for s in self.stages if s.asset_key in keys]


def _config_failure(error: Exception | str, what: str) -> dg.Failure:
    return dg.Failure(description=f"{what}: {error}", allow_retries=False)


def _refusal(error: AirError, otherwise: str) -> str:
    """What a non-retryable error is about: the credentials, the setup, or the request."""
    if isinstance(error, AuthError):
        return "the workspace refused the credentials of the air_workspace resource"
    if isinstance(error, ConfigurationError):
        return "the workspace setup needs a change"
    return otherwise


def _apply_overrides(
    loaded: LoadedStage,
    config: AirRunConfig,
    partition: tuple[dict[str, Any], list[str]],
    extra: Mapping[str, Any] | Sequence[str] | None,
) -> Workload:
    workload = loaded.workload
    typed = {**config.mapping_overrides(), **partition[0]}
    text = [*partition[1], *config.text_overrides(loaded.key)]
    try:
        for overrides in (typed, text, extra):
            if overrides:
                workload = workload.with_overrides(overrides)
    except WorkloadError as error:
        raise _config_failure(
            error, f"stage {loaded.key}: the run-time overrides do not give a valid workload"
        ) from None
    return workload


def _partition_overrides(
    context: dg.AssetExecutionContext, workflow: AirWorkflow
) -> tuple[dict[str, Any], list[str]]:
    if not context.has_partition_key:
        return {}, []
    try:
        return partition_overrides(
            context.partition_key, workflow.partition_parameters, workflow.partition_env
        )
    except (KeyError, ValueError) as error:
        raise _config_failure(error, "cannot map the partition to parameters") from None


def _duration_s(state: RunState, task: TaskState | None) -> float | None:
    start = (task.start_time if task else None) or state.start_time
    end = (task.end_time if task else None) or state.end_time
    if start and end and end >= start:
        return round((end - start) / 1000.0, 3)
    return None


def _mlflow_ids(client: AirClient, task: TaskState | None) -> dict[str, str]:
    if task is None or task.run_id is None:
        return {}
    try:
        output = client.get_output(task.run_id)
    except AirError:
        return {}
    experiment, run = mlflow_ids(output)
    found: dict[str, Any] = {"mlflow_experiment_id": experiment, "mlflow_run_id": run}
    url = mlflow_run_url(client.host, experiment, run)
    if url:
        found["mlflow_run"] = dg.MetadataValue.url(url)
    return {f"{META_PREFIX}{name}": value for name, value in found.items() if value}


def run_metadata(submitted: SubmittedRun, state: RunState | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        f"{META_PREFIX}run_id": dg.MetadataValue.int(submitted.run_id),
        f"{META_PREFIX}run_url": dg.MetadataValue.url(submitted.run_page_url),
    }
    if state is not None:
        metadata[f"{META_PREFIX}final_state"] = state.result_state or state.life_cycle_state
    return metadata


def stage_metadata(
    client: AirClient,
    submitted: SubmittedRun,
    state: RunState,
    task: TaskState | None,
    workload: Workload,
) -> dict[str, Any]:
    final = (task.result_state if task else None) or state.result_state or state.life_cycle_state
    metadata = run_metadata(submitted)
    metadata.update(
        {
            f"{META_PREFIX}final_state": final,
            # 1 for the first attempt (the platform counts from 0).
            f"{META_PREFIX}attempt": (task.attempt_number if task else 0) + 1,
            f"{META_PREFIX}accelerator": workload.compute.accelerator_type,
            f"{META_PREFIX}num_accelerators": workload.compute.num_accelerators,
            f"{META_PREFIX}containers": containers_table(workload),
            f"{META_PREFIX}workload_hash": workload_hash(workload),
            f"{META_PREFIX}idempotency_token": submitted.idempotency_token,
        }
    )
    for row in container_rows(workload):
        metadata[f"{META_PREFIX}container/{row['name']}"] = (
            f"ranks {row['ranks']}, image {row['image']}"
        )
    # Every attempt of the stage's task: what the platform held, retries included. This is
    # the figure to sum; the per-attempt observations carry ATTEMPT_GPU_HOURS_KEY instead.
    gpu_hours = state.gpu_hours(task.task_key if task is not None else None)
    metadata[GPU_HOURS_KEY] = dg.MetadataValue.float(round(gpu_hours, 6))
    duration = _duration_s(state, task)
    if duration is not None:
        metadata[f"{META_PREFIX}duration_s"] = dg.MetadataValue.float(duration)
    if task is not None and task.run_id is not None:
        metadata[f"{META_PREFIX}task_run_id"] = dg.MetadataValue.int(task.run_id)
    metadata.update(_mlflow_ids(client, task))
    return metadata


class StepRun:
    """One Dagster step materializing one or more stages as one remote run."""

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        workflow: AirWorkflow,
        workspace: AirWorkspace,
        config: AirRunConfig,
        extra_overrides: Mapping[str, Any] | Sequence[str] | None = None,
    ) -> None:
        self.context = context
        self.workflow = workflow
        self.workspace = workspace
        self.config = config
        self.extra_overrides = extra_overrides
        self.identity = StepIdentity.of(context)
        self.redact = Redactor(())
        self.secrets: SubmissionSecrets | None = None  # where secret_env values were written
        self.pipes: StepPipes | None = None
        self._selected: list[LoadedStage] = []
        self._attempts_seen: set[tuple[str, int]] = set()
        self._client: AirClient | None = None  # while the step waits (to cancel blocked tasks)
        self.blocking: BlockingChecks | None = None
        self._last_state: RunState | None = None  # the newest state the wait saw

    # --- preparing ------------------------------------------------------------------

    def _workloads(self, selected: list[LoadedStage]) -> dict[str, Workload]:
        partition = _partition_overrides(self.context, self.workflow)
        workloads = {}
        for s in selected:
            workload = _apply_overrides(s, self.config, partition, self.extra_overrides)
            run_env = self._run_env(s.key)
            if run_env:
                workload = workload.with_overrides(run_env)
            upstream = self._upstream_output(s, selected)
            if upstream:
                workload = workload.with_overrides(upstream)
            workloads[s.key] = workload
        return workloads

    def _upstream_output(
        self, loaded: LoadedStage, selected: list[LoadedStage], partition: str | None = None
    ) -> dict[str, str]:
        """A stage run without an upstream stage of its workflow reads where that stage
        last wrote: ``output_env`` gets the upstream's latest recorded ``dagster/uri`` (of
        ``partition``, by default the step's)."""
        name = self.workflow.output_env
        keys = {s.key for s in selected}
        missing = [d for d in loaded.stage.depends_on if d not in keys]
        if not name or not missing:
            return {}
        by_key = {s.key: s for s in self.workflow.stages}
        for dependency in missing:
            uri = self._latest_uri(by_key[dependency].asset_key, partition)
            if uri:
                self.context.log.info(
                    f"stage {loaded.key}: {name}={uri} (where {dependency} last wrote)"
                )
                return {f"env_variables.{name}": uri}
        raise _config_failure(
            f"no materialization of {', '.join(missing)} records an output location "
            f"({OUTPUT_URI_KEY})",
            f"stage {loaded.key} runs without its upstream stage",
        )

    def _latest_uri(self, asset_key: dg.AssetKey, partition: str | None = None) -> str | None:
        if partition is None and self.context.has_partition_key:
            partition = self.context.partition_key
        partitions = [partition] if partition is not None else None
        records = self.context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=partitions), limit=1
        ).records
        for record in records:
            materialization = record.asset_materialization
            value = materialization.metadata.get(OUTPUT_URI_KEY) if materialization else None
            if value is not None:
                return str(value.value)
        return None

    def _run_env(self, stage_key: str, partition: str | None = None) -> dict[str, str]:
        fields = {
            "run_id": self.context.run_id,
            "partition_key": partition or self.identity.partition or "",
            "stage": stage_key,
        }
        try:
            return {
                f"env_variables.{name}": template.format(**fields)
                for name, template in (self.workflow.run_env or {}).items()
            }
        except (KeyError, IndexError, ValueError) as error:
            raise _config_failure(
                error, "run_env may only use {run_id}, {partition_key} and {stage}"
            ) from None

    def _with_secrets(
        self, client: AirClient, workloads: dict[str, Workload], namespace: str
    ) -> dict[str, Workload]:
        """Write the secret_env values under keys of this step's submission alone (see
        ``air_runtime.client._secrets``), after deleting what earlier runs of the step left
        behind once their runs ended."""
        secret_env = {**self.workspace.secret_env, **(self.workflow.secret_env or {})}
        if not secret_env:
            return workloads
        values = resolve_secret_env(secret_env)
        self.redact = client.redactor.with_values(values.values())
        if self.redact.ignored:
            self.context.log.warning(
                f"{self.redact.ignored} secret_env value(s) are shorter than 4 characters: they "
                "are not redacted from messages and logs (too short to tell from ordinary text)"
            )
        secrets = SubmissionSecrets.of(
            self.workspace.secret_scope,
            namespace=namespace,
            orchestrator="dagster",
            pipeline_id=self.identity.pipeline_id,
            task_key=self.identity.step_key,
            run_id=self.identity.run_id,
            map_index=self.identity.partition,
        )
        self._secret_call(
            lambda: client.sweep_ended_submissions(secrets),
            "delete the secret keys earlier runs left behind",
        )
        try:
            refs = client.store_submission_secrets(secrets, values)
        except AirError as error:
            if error.retryable:
                raise
            raise _config_failure(
                self.redact(str(error)), _refusal(error, "cannot store the orchestrator secrets")
            ) from None
        self.secrets = secrets
        return {key: w.with_secrets(refs) for key, w in workloads.items()}

    def _with_pipes(
        self, selected: list[LoadedStage], workloads: dict[str, Workload]
    ) -> dict[str, Workload]:
        """Each stage's Dagster Pipes context in its environment (see ``_pipes``)."""
        assert self.pipes is not None
        result = {}
        for s in selected:
            env = self.pipes.env_for(s.asset_key, s.key)
            result[s.key] = workloads[s.key].with_overrides(
                {f"env_variables.{name}": value for name, value in env.items()}
            )
        return result

    def _secret_call(self, call: Callable[[], object], what: str) -> None:
        """Best effort housekeeping of secret keys: a failure is a warning."""
        try:
            call()
        except AirError as error:
            self.context.log.warning(f"could not {what}: {self.redact(str(error))}")

    def _mark_secrets(self, client: AirClient, submitted: SubmittedRun) -> None:
        secrets = self.secrets
        if secrets is not None:
            self._secret_call(
                lambda: client.mark_submission_run(secrets, submitted.run_id),
                f"record run {submitted.run_id} next to its secret keys",
            )

    def _delete_secrets(self, client: AirClient) -> None:
        """The run has ended: its secret keys are no longer read."""
        secrets = self.secrets
        if secrets is not None:
            self._secret_call(
                lambda: client.delete_submission_secrets(secrets),
                f"delete the secret keys of this run from scope {secrets.scope} (the next "
                "run of the step retries)",
            )

    def _submit(
        self,
        client: AirClient,
        selected: list[LoadedStage],
        workloads: dict[str, Workload],
        token: str,
    ) -> SubmittedRun:
        keys = {s.key for s in selected}
        try:
            if len(selected) == 1 and not self.workflow.always_workflow:
                return client.submit_workload(workloads[selected[0].key], idempotency_token=token)
            stages = [
                Stage(
                    task_key=s.key,
                    workload=workloads[s.key],
                    depends_on=tuple(d for d in s.stage.depends_on if d in keys),
                    run_if=s.stage.run_if
                    if any(d in keys for d in s.stage.depends_on)
                    else "ALL_SUCCESS",
                )
                for s in selected
            ]
            return client.submit_workload(
                stages, idempotency_token=token, run_name=self.workflow.name
            )
        except AirError as error:
            raise self._submit_failure(error) from None

    def _submit_failure(self, error: AirError) -> dg.Failure:
        if not error.retryable:  # the workload, the setup or a refusal: a retry cannot help
            return _config_failure(
                self.redact(str(error)), _refusal(error, "the workspace refused the workload")
            )
        return dg.Failure(description=f"submitting the run failed: {self.redact(str(error))}")

    # --- waiting --------------------------------------------------------------------

    def _show(self, item: tuple[str, Any], run_id: int) -> Iterator[AirEvent]:
        kind, value = item
        if kind == "state":
            state: RunState = value
            text = f"run {run_id}: {state.describe()}"
            if state.is_waiting_for_capacity:
                text += " (waiting for GPU capacity)"
            self.context.log.info(self.redact(text))
            yield from self._attempt_ends(state)
            self._last_state = state
            self._follow_blocking(state)
        elif kind == "warning":
            self.context.log.warning(self.redact(str(value)))
        elif kind == "log":
            record, line = value
            line = self.redact(line)
            # Pipes messages of every node; printed lines of every node or the chosen one.
            if self.pipes is not None and self.pipes.reader.handle_line(
                line, record.task_key, record.attempt
            ):
                # A check may arrive after the state that ended its task (logs lag states).
                if self._last_state is not None:
                    self._follow_blocking(self._last_state)
                return
            node = self._log_node()
            if self.workspace.stream_logs and (node is None or record.node_index == node):
                sys.stdout.write(f"[run {run_id} {record.label}] {line}\n")
                sys.stdout.flush()

    def _follow_blocking(self, state: RunState) -> None:
        if self.blocking is None:
            self.blocking = BlockingChecks(self._run_tasks(), blocking_check_keys(self.context))
        if self.pipes is not None:
            self.blocking.update(
                self._client, state, self.pipes.reports(), self.context.log, self.redact
            )

    def _log_node(self) -> int | None:
        if self.workflow.log_node is not None:
            return self.workflow.log_node
        return self.workspace.log_node

    def _attempt_ends(self, state: RunState) -> Iterator[AirEvent]:
        """One observation per attempt of a selected stage that ended (platform retries
        included), on that stage's asset, as soon as the step sees it."""
        for attempt in state.attempts:
            key = (attempt.task_key, attempt.attempt_number)
            if not attempt.is_terminal or key in self._attempts_seen:
                continue
            self._attempts_seen.add(key)
            asset_key = self._asset_of_task(attempt.task_key)
            if asset_key is None:
                continue
            final = attempt.result_state or attempt.life_cycle_state
            metadata: dict[str, Any] = {
                f"{META_PREFIX}run_id": dg.MetadataValue.int(state.run_id),
                f"{META_PREFIX}attempt": attempt.attempt_number + 1,
                f"{META_PREFIX}attempt_state": final,
                ATTEMPT_GPU_HOURS_KEY: dg.MetadataValue.float(round(attempt.gpu_hours(), 6)),
            }
            if attempt.state_message:
                metadata[f"{META_PREFIX}state_message"] = self.redact(attempt.state_message)
            if attempt.run_id is not None:
                metadata[f"{META_PREFIX}task_run_id"] = dg.MetadataValue.int(attempt.run_id)
            self.context.log.info(
                f"run {state.run_id}: {attempt.task_key} attempt {attempt.attempt_number + 1} "
                f"ended {final}"
            )
            yield dg.AssetObservation(
                asset_key=asset_key,
                partition=self._partition_of_task(attempt.task_key),
                metadata=metadata,
            )

    def _partition_of_task(self, task_key: str) -> str | None:
        return self.context.partition_key if self.context.has_partition_key else None

    def _run_tasks(self) -> dict[str, RunTask]:
        """The tasks of the run and their dependencies (for blocking checks)."""
        if len(self._selected) == 1 and not self.workflow.always_workflow:
            return {}
        keys = {s.key for s in self._selected}
        return {
            s.key: RunTask(
                s.key, s.asset_key, None, tuple(d for d in s.stage.depends_on if d in keys)
            )
            for s in self._selected
        }

    def _asset_of_task(self, task_key: str) -> dg.AssetKey | None:
        selected = self._selected
        if len(selected) == 1 and not self.workflow.always_workflow:
            return selected[0].asset_key  # a single-task run's task is the workload's
        for loaded in selected:
            if loaded.key == task_key:
                return loaded.asset_key
        return None

    def _wait(self, submitted: SubmittedRun) -> Generator[AirEvent, None, RunState]:
        events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        # Every node is followed (Pipes messages may come from any rank); log_node only
        # narrows what is printed.
        future = self.workspace.run_in_background(
            watch_run(
                self.workspace,
                submitted.run_id,
                events,
                None,
                follow_logs=self.workspace.stream_logs or self.pipes is not None,
            )
        )
        try:
            while True:
                yield from self._drain(events, submitted.run_id)
                try:
                    state = future.result(timeout=0.5)
                    break
                except concurrent.futures.TimeoutError:
                    continue
            yield from self._drain(events, submitted.run_id)
            yield from self._attempt_ends(state)
            return state
        except BaseException:
            future.cancel()  # stop following this run on the background loop
            raise

    def _drain(self, events: queue.SimpleQueue[tuple[str, Any]], run_id: int) -> Iterator[AirEvent]:
        while True:
            try:
                item = events.get_nowait()
            except queue.Empty:
                return
            yield from self._show(item, run_id)

    def _cancel_remote(self, client: AirClient, submitted: SubmittedRun) -> RunState | None:
        """The Dagster run was terminated: stop the GPU run too, and wait a little for it
        to end so the event log says how it ended. Returns the final state when it ended
        within ``cancel_wait``."""
        log = self.context.log
        try:
            log.warning(
                f"Dagster run terminated: cancelling run {submitted.run_id} ({submitted.run_page_url})"
            )
            client.cancel(submitted.run_id)
            deadline = time.monotonic() + self.workspace.cancel_wait
            while time.monotonic() < deadline:
                state = client.get_run(submitted.run_id)
                if state.is_terminal:
                    log.warning(f"run {submitted.run_id} ended {state.describe()}")
                    return state
                time.sleep(min(1.0, self.workspace.poll_interval))
            log.warning(
                f"run {submitted.run_id} is still ending after {self.workspace.cancel_wait:g}s"
            )
        except AirError as error:
            log.error(f"could not cancel run {submitted.run_id}: {self.redact(str(error))}")
        return None

    # --- the whole step -------------------------------------------------------------

    @contextlib.contextmanager
    def _session(self, writers: int) -> Iterator[tuple[AirClient, str]]:
        """The step's Pipes session (``writers`` ranks may report) and client, with the
        deployment namespace."""
        if self.workspace.pipes:
            self.pipes = StepPipes(self.context, writers)
        with (
            self.pipes.open() if self.pipes is not None else contextlib.nullcontext(),
            self.workspace.get_client() as client,
        ):
            self.redact = client.redactor.with_values(())
            self._client = client
            yield (
                client,
                deployment_namespace(self.context.instance, self.workspace.deployment_namespace),
            )

    def _token(self, namespace: str, generation: int, partition: str | None) -> str:
        """The idempotency token of this step's run (see ``_identity``); ``partition`` names
        the partition, or the partition keys, the run covers."""
        return make_idempotency_token(
            "dagster",
            self.identity.pipeline_id,
            self.identity.run_id,
            self.identity.step_key,
            partition,
            generation,
            namespace=namespace,
        )

    def execute(self) -> Iterator[AirEvent]:
        selected = self.workflow.selected(self.context)
        if not selected:
            return
        self._selected = selected
        workloads = self._workloads(selected)
        with self._session(sum(w.num_nodes for w in workloads.values())) as (client, namespace):
            workloads = self._with_secrets(client, workloads, namespace)
            submitted_workloads = (
                self._with_pipes(selected, workloads) if self.pipes is not None else workloads
            )
            generation = self.identity.generation(self.context)
            token = self._token(namespace, generation, self.identity.partition)
            submitted: SubmittedRun | None = None
            try:
                # An interrupt during the submit is held until the run id is known, so
                # the run can still be cancelled.
                with deferred_interrupts():
                    submitted = self._submit(client, selected, submitted_workloads, token)
                self._mark_secrets(client, submitted)
                self.context.log.info(
                    f"run {submitted.run_id} for {', '.join(s.key for s in selected)}: "
                    f"{submitted.run_page_url} (generation {generation})"
                )
                state = yield from self._wait(submitted)
            except DagsterExecutionInterruptedError:
                if submitted is not None:
                    ended = self._cancel_remote(client, submitted)
                    if ended is not None:
                        self._delete_secrets(client)
                    # A retry of this step (Dagster retries interrupted steps that have a
                    # retry policy) must not reattach to the run just cancelled.
                    yield terminal_failure_observation(
                        self.context, selected[0].asset_key, submitted, ended, generation
                    )
                raise
            self._delete_secrets(client)
            yield from self._results(client, selected, workloads, submitted, state, generation)

    def _output_metadata(self, workload: Workload) -> dict[str, Any]:
        name = self.workflow.output_env
        value = workload.env_variables.get(name) if name else None
        if not value:
            return {}
        metadata: dict[str, Any] = {f"{META_PREFIX}output/{name}": value}
        if _LOCATION.match(value):  # a path or a URL, not some other kind of value
            metadata[OUTPUT_URI_KEY] = value
        return metadata

    def _check_results(
        self, checks: list[dg.AssetCheckResult], materialized: set[dg.AssetKey]
    ) -> Iterator[AirEvent]:
        """The check results the workload reported, for the checks this step runs; a
        declared check the workload did not report fails (it cannot pass unseen)."""
        selected = self.context.selected_asset_check_keys
        seen = set()
        for check in checks:
            key = dg.AssetCheckKey(check.asset_key, check.check_name)  # type: ignore[arg-type]
            if key not in selected or key in seen:
                self.context.log.warning(
                    f"the workload reported check {check.check_name} of "
                    f"{key.asset_key.to_user_string()}, which this step does not run: ignored"
                )
                continue
            seen.add(key)
            yield check
        for key in sorted(selected - seen, key=str):
            if key.asset_key not in materialized:
                continue
            yield dg.AssetCheckResult(
                asset_key=key.asset_key,
                check_name=key.name,
                passed=False,
                metadata={"reason": "the workload did not report this check (dagster-pipes)"},
            )

    def _earlier_attempts(self, state: RunState, submitted: SubmittedRun) -> Iterator[AirEvent]:
        """What retried attempts reported, as observations (the final attempt's reports are
        the materialization and the check results)."""
        assert self.pipes is not None
        for reports in self.pipes.final_reports(state)[1]:
            asset_key = self._asset_of_task(reports.task_key)
            if asset_key is not None:
                yield earlier_attempt_observation(
                    reports, asset_key, self._partition_of_task(reports.task_key), submitted.run_id
                )

    def _blocked_message(self, blocked: Mapping[str, str]) -> str:
        cancelled = self.blocking is not None and bool(self.blocking.cancelled)
        lines = [f"{key}: not materialized, {reason}" for key, reason in sorted(blocked.items())]
        tail = " (their unfinished tasks were cancelled)" if cancelled else ""
        return "downstream of a failed blocking check" + tail + ":\n" + "\n".join(lines)

    def _results(
        self,
        client: AirClient,
        selected: list[LoadedStage],
        workloads: dict[str, Workload],
        submitted: SubmittedRun,
        state: RunState,
        generation: int,
    ) -> Iterator[AirEvent]:
        single = len(selected) == 1 and not self.workflow.always_workflow
        reported: dict[dg.AssetKey, dg.MaterializeResult] = {}
        checks: list[dg.AssetCheckResult] = []
        if self.pipes is not None:
            self._follow_blocking(state)
            yield from self._earlier_attempts(state, submitted)
            reported, checks = self.pipes.reported(state)
        blocked = self.blocking.blocked if self.blocking is not None else {}
        failed_asset = selected[0].asset_key
        failed_task = state.failed_task
        materialized: set[dg.AssetKey] = set()
        for loaded in selected:
            task = state.task(loaded.workload.experiment_name if single else loaded.key)
            if (
                task is not None
                and failed_task is not None
                and task.task_key == failed_task.task_key
            ):
                failed_asset = loaded.asset_key
            if loaded.key in blocked:
                self.context.log.warning(
                    f"stage {loaded.key} is not recorded as materialized: {blocked[loaded.key]}"
                )
                continue
            if task.is_success if task is not None else state.is_success:
                metadata = stage_metadata(client, submitted, state, task, workloads[loaded.key])
                metadata.update(self._output_metadata(workloads[loaded.key]))
                from_pipes = reported.get(loaded.asset_key)
                materialized.add(loaded.asset_key)
                yield dg.MaterializeResult(
                    asset_key=loaded.asset_key,
                    # What the workload reports adds to, never replaces, what the run says.
                    metadata={**(from_pipes.metadata or {} if from_pipes else {}), **metadata},
                    data_version=from_pipes.data_version if from_pipes else None,
                )
        yield from self._check_results(checks, materialized)
        if blocked:
            yield terminal_failure_observation(
                self.context, failed_asset, submitted, state, generation
            )
            raise dg.Failure(
                description=self.redact(self._blocked_message(blocked)),
                metadata=run_metadata(submitted, state),
            )
        if state.is_success:
            return
        yield terminal_failure_observation(self.context, failed_asset, submitted, state, generation)
        try:
            client.raise_for_failure(state)
            message = f"run {submitted.run_id} ended {state.describe()}"
        except RunFailed as error:
            message = str(error)
        except AirError as error:
            message = f"run {submitted.run_id} ended {state.describe()} ({error})"
        raise dg.Failure(description=self.redact(message), metadata=run_metadata(submitted, state))
