"""``AirWorkspace``: the Dagster resource for one Databricks workspace (or the local one)."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from air_runtime import (
    AirClient,
    AirError,
    AsyncAirClient,
    Credentials,
    OAuthM2M,
    Prices,
    normalize_host,
    sweep_budget,
)

USER_AGENT_EXTRA = f"dagster/{dg.__version__}"


class AirWorkspace(dg.ConfigurableResource):
    """A Databricks workspace that runs AI Runtime workloads.

    Credentials, in this order: ``token`` (a personal access token), or ``client_id`` +
    ``client_secret`` (an OAuth service principal), or, when none is given, the
    databricks-sdk default chain (``DATABRICKS_HOST``/``DATABRICKS_TOKEN``, other SDK
    environment variables, ``~/.databrickscfg`` profiles, cloud logins). Pass secrets as
    ``dg.EnvVar("NAME")`` so their values never appear in the UI or in run config::

        AirWorkspace(host=dg.EnvVar("DATABRICKS_HOST"), token=dg.EnvVar("DATABRICKS_TOKEN"))
    """

    host: str | None = Field(
        default=None,
        description="Workspace URL, e.g. https://adb-123.azuredatabricks.net. "
        "Unset: the databricks-sdk chain decides.",
    )
    token: str | None = Field(
        default=None, description="Personal access token. Pass it as dg.EnvVar."
    )
    client_id: str | None = Field(
        default=None, description="OAuth service principal client id (with client_secret)."
    )
    client_secret: str | None = Field(
        default=None, description="OAuth service principal secret. Pass it as dg.EnvVar."
    )
    poll_interval: float = Field(
        default=5.0, description="Seconds between run-state checks while waiting."
    )
    request_budget: float = Field(
        default=10.0,
        description="Requests per second that all waiting assets of one process may send "
        "to this workspace together: the shared watcher's status polls, sweep listings, "
        "failure diagnoses, progress and MLflow reads. Outside it: following each run's node "
        "logs (stream_logs, Pipes), one read of each open node stream every ~2 s while the "
        "run runs, and a step's own submits and cancels.",
    )
    request_timeout: float = Field(default=30.0, description="Seconds per HTTP request.")
    progress_interval: float = Field(
        default=60.0,
        description="Read a running run's training progress and time left (from what it logs "
        "to MLflow, as databricks air get computes them) at most every this many seconds; "
        "each change is logged and recorded as an observation. 0: never.",
    )
    checkpoint_volume: str | None = Field(
        default=None,
        description="Unity Catalog volume (/Volumes/<catalog>/<schema>/<volume>) where each "
        "asset, partition and stage keeps its checkpoints: the ranks find their folder in "
        "AIRO_CHECKPOINT_DIR, the same across the platform's retries, step retries, run "
        "retries and re-executions of one root run. A volume that is missing or not "
        "writable fails the step before anything is submitted. Unset: no folder.",
    )
    checkpoint_per_code_version: bool = Field(
        default=True,
        description="A new checkpoint folder when the asset's code_version changes (another "
        "model's checkpoints would not load); False: the folder outlives code changes. "
        "Assets without a code_version keep one folder.",
    )
    stream_logs: bool = Field(
        default=True, description="Copy the run's node logs into the step's stdout while waiting."
    )
    pipes: bool = Field(
        default=True,
        description="Give each workload a Dagster Pipes context (env vars) and read what its "
        "ranks report (metadata, asset checks, log lines) from the run's logs. With this and "
        "stream_logs off, a waiting step reads no logs at all.",
    )
    log_node: int | None = Field(
        default=None,
        description="Print only this node's (rank's) log lines; unset: every node's, each "
        "labelled with its task, node and attempt.",
    )
    cancel_wait: float = Field(
        default=30.0,
        description="Seconds to wait for a cancelled run to end when a Dagster run is terminated.",
    )
    secret_scope: str = Field(
        default="dagster-air",
        description="Secret scope that orchestrator secrets (secret_env) are written to.",
    )
    deployment_namespace: str | None = Field(
        default=None,
        description="Identity of this Dagster deployment in idempotency tokens and secret keys, "
        "so deployments sharing a workspace never get each other's runs. Unset: a random "
        "value made once and kept in the instance's storage. Set it to another instance's "
        "value to take over its runs on purpose (a migration).",
    )
    secret_env: dict[str, str] = Field(
        default_factory=dict,
        description="Workload secret NAME -> name of an environment variable of the Dagster "
        "process holding its value, for every asset using this resource.",
    )

    sweep_gpu_hours_budget: float | None = Field(
        default=None,
        description="GPU-hours that every run of one sweep may use together: the runs of a "
        "backfill (all its Dagster runs, every partition and asset), or of one Dagster run "
        "when it belongs to no backfill; counted from the workspace (the runs whose names "
        "carry those Dagster runs). Before a submit: once spent, nothing is submitted and the "
        "step fails without retries, saying what was spent and by which runs. While waiting "
        "(one listing per poll interval, shared by every step of the process): once spent, "
        "the run and the sweep's other runs still going are cancelled, the cause kept next to "
        "them (airo get shows it), and the step fails with the figure, without retries.",
    )
    gpu_hour_prices: dict[str, float] = Field(
        default_factory=dict,
        description='What one GPU-hour of each accelerator type costs, e.g. {"GPU_1xA10": 1.2, '
        '"GPU_8xH100": 98.0} (your figures: none are built in), in currency: materializations '
        "get dagster-air/cost, budget messages the money beside the GPU-hours.",
    )
    currency: str | None = Field(default=None, description="The currency of gpu_hour_prices.")

    def prices(self) -> Prices | None:
        """The resource's prices, checked (a bad entry fails the step, naming it)."""
        try:
            return Prices.of(
                self.gpu_hour_prices or None,
                self.currency,
                where="AirWorkspace.gpu_hour_prices",
            )
        except AirError as error:
            raise dg.Failure(description=str(error), allow_retries=False) from None

    def sweep_budget(self) -> float | None:
        """``sweep_gpu_hours_budget``, checked (a bad one fails the step, naming it)."""
        try:
            return sweep_budget(self.sweep_gpu_hours_budget, "AirWorkspace.sweep_gpu_hours_budget")
        except AirError as error:
            raise dg.Failure(description=str(error), allow_retries=False) from None

    def credentials(self) -> Credentials | None:
        """The OAuth M2M credentials the resource was given; None: the default chain."""
        if not (self.client_id or self.client_secret):
            return None
        if not self.host:
            raise dg.Failure(
                description="AirWorkspace: OAuth client credentials need a host",
                allow_retries=False,
            )
        return OAuthM2M(normalize_host(self.host), self.client_id or "", self.client_secret or "")

    def host_source(self) -> str | None:
        """Where the host was set, for the fix of a host that cannot be reached; None: the
        databricks-sdk chain found it (the client names where)."""
        return "the host of the AirWorkspace resource" if self.host else None

    def get_client(self) -> AirClient:
        """A new synchronous client; close it (``with workspace.get_client() as client:``)."""
        return AirClient(
            self.host,
            self.token,
            credentials=self.credentials(),
            timeout=self.request_timeout,
            user_agent_extra=USER_AGENT_EXTRA,
            host_source=self.host_source(),
        )

    def get_async_client(self) -> AsyncAirClient:
        """A new asynchronous client, bound to the event loop that uses it."""
        return AsyncAirClient(
            self.host,
            self.token,
            credentials=self.credentials(),
            timeout=self.request_timeout,
            user_agent_extra=USER_AGENT_EXTRA,
            host_source=self.host_source(),
        )
