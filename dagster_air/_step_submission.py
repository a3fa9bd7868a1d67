"""What one Dagster step submits: the selected stages' workloads with the run-time
overrides, the partition's parameters, ``run_env``, the upstream output location, the
orchestrator secrets and the Pipes environment; and the submit itself.

The life of the submission (secret keys, idempotency token, marking, deleting the keys) is
``air_runtime.Submission``'s; this module only decides *what* the step asks for.

Pipes environment: ``PipesEnvContextInjector``'s context (``DAGSTER_PIPES_CONTEXT``) and the
message writer's parameters (``DAGSTER_PIPES_MESSAGES``), set as workload environment
variables like any other. Each stage gets its own context naming only its asset (and, in a
range run, its own partition), so ``report_asset_materialization()`` and
``report_asset_check()`` need no asset key in the workload. The writer prints each message as
one JSON line to the rank's stdout, and the step run reads them back from the run's logs
(``_execution``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
from dagster import PipesEnvContextInjector
from dagster._core.pipes.context import build_external_execution_context_data
from dagster_pipes import (
    DAGSTER_PIPES_CONTEXT_ENV_VAR,
    DAGSTER_PIPES_MESSAGES_ENV_VAR,
    PipesDefaultMessageWriter,
    PipesParams,
    encode_param,
)

from air_runtime import (
    AirClient,
    AirError,
    AuthError,
    ConfigurationError,
    Redactor,
    RunState,
    Stage,
    Submission,
    SubmissionKey,
    SubmittedRun,
    Workload,
    WorkloadError,
)

from ._config import AirRunConfig
from ._identity import StepIdentity
from ._interrupts import deferred_interrupts
from ._partitions import DEFAULT_MAX_TASKS_PER_RUN, PartitionParameters, partition_overrides
from ._resource import AirWorkspace
from ._secrets import resolve_secret_env
from ._stage import AirStage
from ._translator import DagsterAirTranslator

OUTPUT_URI_KEY = "dagster/uri"

# Where every rank's Pipes messages go: its stdout, which the platform keeps in the run's
# logs (the same logs endpoint ``databricks air logs`` reads), so the messages need no
# volume, no DBFS and no extra credentials.
PIPES_MESSAGES_PARAMS: PipesParams = {
    PipesDefaultMessageWriter.STDIO_KEY: PipesDefaultMessageWriter.STDOUT
}


@dataclass(frozen=True)
class PartitionScope:
    """The one partition a task of a partition range run works on, for its Pipes context."""

    key: str
    time_window: dg.TimeWindow | None = None


def pipes_env(
    context: dg.AssetExecutionContext,
    asset_key: dg.AssetKey,
    stage_key: str,
    partition: PartitionScope | None = None,
) -> dict[str, str]:
    """``DAGSTER_PIPES_CONTEXT``/``DAGSTER_PIPES_MESSAGES`` for one task's workload: its
    asset, and (a task of a partition range run) its own partition."""
    data = build_external_execution_context_data(context, {"air_stage": stage_key})
    name = asset_key.to_user_string()
    data["asset_keys"] = [name]
    for name_field in ("code_version_by_asset_key", "provenance_by_asset_key"):
        by_key = data.get(name_field)
        if isinstance(by_key, Mapping):
            data[name_field] = {k: v for k, v in by_key.items() if k == name}
    if partition is not None:
        data["partition_key"] = partition.key
        data["partition_key_range"] = {"start": partition.key, "end": partition.key}
        data["partition_time_window"] = (
            {
                "start": partition.time_window.start.isoformat(),
                "end": partition.time_window.end.isoformat(),
            }
            if partition.time_window is not None
            else None
        )
    with PipesEnvContextInjector().inject_context(data) as context_params:
        return {
            DAGSTER_PIPES_CONTEXT_ENV_VAR: encode_param(context_params),
            DAGSTER_PIPES_MESSAGES_ENV_VAR: encode_param(PIPES_MESSAGES_PARAMS),
        }


@dataclass(frozen=True)
class LoadedStage:
    """A stage with its validated workload and the asset it materializes."""

    stage: AirStage
    workload: Workload
    asset_key: dg.AssetKey
    key: str = field(init=False)  # the stage's key (its task key in a multi-task run)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.stage.key)


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
    # Derives the run-time metadata too (materializations, attempts, failures).
    translator: DagsterAirTranslator = field(default_factory=DagsterAirTranslator)

    def selected(self, context: dg.AssetExecutionContext) -> list[LoadedStage]:
        keys = context.selected_asset_keys
        return [s for s in self.stages if s.asset_key in keys]


def _with_env(
    workloads: Mapping[str, Workload], env: Mapping[str, Mapping[str, str]]
) -> dict[str, Workload]:
    """``workloads`` with the variables ``env`` gives each (by workload key) added."""
    return {
        key: workload.with_overrides(
            {f"env_variables.{name}": value for name, value in env[key].items()}
        )
        if env.get(key)
        else workload
        for key, workload in workloads.items()
    }


def config_failure(error: Exception | str, what: str) -> dg.Failure:
    return dg.Failure(description=f"{what}: {error}", allow_retries=False)


def _refusal(error: AirError, otherwise: str) -> str:
    """What a non-retryable error is about: the credentials, the setup, or the request."""
    if isinstance(error, AuthError):
        return "the workspace refused the credentials of the air_workspace resource"
    if isinstance(error, ConfigurationError):
        return "the workspace setup needs a change"
    return otherwise


@dataclass
class RemoteRun:
    """One remote run of a step and the core's submission behind it (a step over a
    partition range may submit several, see ``_ranges``)."""

    submission: Submission
    label: str  # what the run covers, for the step's log
    task_keys: tuple[str, ...]  # the keys of the workloads it runs
    submitted: SubmittedRun | None = None
    state: RunState | None = None  # once the step saw it end


@dataclass
class StepSubmission:
    """The submission of one Dagster step materializing one or more stages as one run."""

    context: dg.AssetExecutionContext
    workflow: AirWorkflow
    workspace: AirWorkspace
    config: AirRunConfig
    extra_overrides: Mapping[str, Any] | Sequence[str] | None = None
    # Set while submitting: the redaction of what the step resolved and the remote runs
    # (each with the core's submission behind it).
    redact: Redactor = field(default_factory=lambda: Redactor(()), init=False)
    runs: list[RemoteRun] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.selected = self.workflow.selected(self.context)
        self.stage_keys = ", ".join(s.key for s in self.selected)
        # One stage selected of a one-stage workflow: a single-task run.
        self.single = len(self.selected) == 1 and not self.workflow.always_workflow

    # --- the workloads ----------------------------------------------------------------------

    def workloads(self) -> dict[str, Workload]:
        partition = self._partition_overrides()
        workloads = {}
        for s in self.selected:
            workload = self._apply_overrides(s, partition)
            run_env = self._run_env(s.key)
            if run_env:
                workload = workload.with_overrides(run_env)
            upstream = self._upstream_output(s)
            if upstream:
                workload = workload.with_overrides(upstream)
            workloads[s.key] = workload
        return workloads

    def _apply_overrides(
        self, loaded: LoadedStage, partition: tuple[dict[str, Any], list[str]]
    ) -> Workload:
        workload = loaded.workload
        config_typed, config_text = self.config.overrides_for(loaded.key)
        typed = {**config_typed, **partition[0]}
        text = [*partition[1], *config_text]
        try:
            for overrides in (typed, text, self.extra_overrides):
                if overrides:
                    workload = workload.with_overrides(overrides)
        except WorkloadError as error:
            raise config_failure(
                error, f"stage {loaded.key}: the run-time overrides do not give a valid workload"
            ) from None
        return workload

    def _partition_overrides(
        self, partition: str | dg.MultiPartitionKey | None = None
    ) -> tuple[dict[str, Any], list[str]]:
        """The parameters of ``partition`` (by default the step's)."""
        if partition is None:
            if not self.context.has_partition_key:
                return {}, []
            partition, what = self.context.partition_key, "the partition"
        else:
            what = f"partition {partition}"
        try:
            return partition_overrides(
                partition, self.workflow.partition_parameters, self.workflow.partition_env
            )
        except (KeyError, ValueError) as error:
            raise config_failure(error, f"cannot map {what} to parameters") from None

    def _upstream_output(self, loaded: LoadedStage, partition: str | None = None) -> dict[str, str]:
        """A stage run without an upstream stage of its workflow reads where that stage
        last wrote: ``output_env`` gets the upstream's latest recorded ``dagster/uri`` (of
        ``partition``, by default the step's)."""
        name = self.workflow.output_env
        keys = {s.key for s in self.selected}
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
        raise config_failure(
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
            raise config_failure(
                error, "run_env may only use {run_id}, {partition_key} and {stage}"
            ) from None

    # --- the submission ---------------------------------------------------------------------

    def submit(self, client: AirClient) -> dict[str, Workload]:
        """Name the submission, build the workloads, open the core's submission of each
        remote run of this step, write its secrets, add the Pipes environment and submit this
        attempt's generation. An interrupt during a submit is held until the run id is known
        (``RemoteRun.submitted``), so the run can still be cancelled. Returns the workloads
        as submitted, secrets included (without the Pipes environment)."""
        # Who submits (the step of this Dagster run, in this instance's namespace) and the
        # generation this attempt submits.
        self.identity, self.key, self.generation = StepIdentity.submission_of(
            self.context, self.workspace.deployment_namespace
        )
        workloads = self.workloads()
        self.redact = client.redactor.with_values(())
        values = self._secret_values(client)
        pipes = self._pipes_envs(workloads)
        self.runs = [
            RemoteRun(
                Submission(run_key, log=self.context.log, redact=lambda t: self.redact(t)),
                label,
                task_keys,
            )
            for run_key, label, task_keys in self._plan(self.key)
        ]
        stored: dict[str, Workload] = {}
        for run in self.runs:
            mine = self._with_secrets(client, run.submission, values, run.task_keys, workloads)
            stored.update(mine)
            with deferred_interrupts():
                run.submitted = self._submit(client, run, _with_env(mine, pipes))
            self.context.log.info(
                f"run {run.submitted.run_id} for {run.label}: "
                f"{run.submitted.run_page_url} (generation {self.generation})"
            )
        return stored

    def _plan(self, key: SubmissionKey) -> list[tuple[SubmissionKey, str, tuple[str, ...]]]:
        """The remote runs of the step: their submission keys, what each covers and the
        keys of its workloads. One run of the selected stages."""
        return [(key, self.stage_keys, tuple(s.key for s in self.selected))]

    def _secret_values(self, client: AirClient) -> dict[str, str]:
        """The secret_env values (resolved where the step runs), redacted from then on."""
        secret_env = {**self.workspace.secret_env, **(self.workflow.secret_env or {})}
        if not secret_env:
            return {}
        values = resolve_secret_env(secret_env)
        self.redact = client.redactor.with_values(values.values())
        if self.redact.ignored:
            self.context.log.warning(
                f"{self.redact.ignored} secret_env value(s) are shorter than 4 characters: they "
                "are not redacted from messages and logs (too short to tell from ordinary text)"
            )
        return values

    def _with_secrets(
        self,
        client: AirClient,
        submission: Submission,
        values: Mapping[str, str],
        keys: Sequence[str],
        workloads: Mapping[str, Workload],
    ) -> dict[str, Workload]:
        """The workloads ``keys`` with the secret_env values written under keys of this
        submission alone (the core deletes first what earlier runs of the step left behind
        once their runs ended)."""
        mine = {key: workloads[key] for key in keys}
        if not values:
            return mine
        try:
            refs = submission.store(client, values, scope=self.workspace.secret_scope)
        except AirError as error:
            if error.retryable:
                raise
            raise config_failure(
                self.redact(str(error)), _refusal(error, "cannot store the orchestrator secrets")
            ) from None
        return {key: w.with_secrets(refs) for key, w in mine.items()}

    def _pipes_envs(self, workloads: Mapping[str, Workload]) -> dict[str, dict[str, str]]:
        """The Pipes environment of each workload (by key), when the resource enables Pipes."""
        if not self.workspace.pipes:
            return {}
        return {key: self._pipes_env(key) for key in workloads}

    def _pipes_env(self, key: str) -> dict[str, str]:
        loaded = next(s for s in self.selected if s.key == key)
        return pipes_env(self.context, loaded.asset_key, loaded.key)

    def _payload(self, run: RemoteRun, workloads: dict[str, Workload]) -> Workload | list[Stage]:
        """What one remote run submits: the workload, or the stages of a multi-task run."""
        selected = self.selected
        if self.single:
            return workloads[selected[0].key]
        keys = {s.key for s in selected}
        return [
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

    def _submit(
        self, client: AirClient, run: RemoteRun, workloads: dict[str, Workload]
    ) -> SubmittedRun:
        payload = self._payload(run, workloads)
        run_name = None if isinstance(payload, Workload) else self.workflow.name
        try:
            return run.submission.submit(client, payload, self.generation, run_name=run_name)
        except AirError as error:
            if not error.retryable:  # the workload, the setup or a refusal: a retry cannot help
                raise config_failure(
                    self.redact(str(error)), _refusal(error, "the workspace refused the workload")
                ) from None
            raise dg.Failure(
                description=f"submitting the run failed: {self.redact(str(error))}"
            ) from None
