"""The backend of one local workspace server, built once by `create_app`: it owns the
state and the rules. A handler (each API family's `routes`) reads the request, calls one operation of a part
here (`runs.submit`, `permissions.update_job`, `mlflow.log`, `secrets.put`, ...) and renders
the answer; the parts keep their data in the `Store`, the only place with SQL."""

from __future__ import annotations

from pathlib import Path

from air_runtime.local._faults import Counters, FaultInjector, RequestLog
from air_runtime.local._logs import LogBook
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._security import ensure_token, private_dir
from air_runtime.local._store import Store
from air_runtime.local.files.backend import VolumeTree, WorkspaceTree
from air_runtime.local.identity.backend import Tokens
from air_runtime.local.images.backend import ImageRegistry
from air_runtime.local.images.catalog_images import CatalogImages
from air_runtime.local.mlflow.backend import MlflowRuns
from air_runtime.local.permissions.backend import Permissions
from air_runtime.local.pools.backend import GpuPools
from air_runtime.local.runs.backend import Runs
from air_runtime.local.runs.engine import RunEngine
from air_runtime.local.secrets.backend import SecretStore
from air_runtime.local.usage_policies.backend import UsagePolicies


class WorkspaceState:
    """The state, files, runs and counters of one server; reachable as
    `app.state.workspace` (and from a request with `_request_params.workspace_state`)."""

    def __init__(self, options: WorkspaceOptions, data_dir: Path) -> None:
        private_dir(data_dir)  # state, secrets, logs and the token: nobody else reads them
        if not options.tokens:
            options.tokens = [ensure_token(data_dir)[0]]
        self.options = options
        self.data_dir = data_dir
        self.store = Store(data_dir / "state.sqlite3")
        self.tokens = Tokens(self.store.tokens, options.tokens, options.user_name)
        self.secrets = SecretStore(self.store.secrets)
        self.workspace = WorkspaceTree(data_dir / "workspace")
        self.volumes = VolumeTree(data_dir / "volumes", options.volumes)
        self.logbook = LogBook(data_dir / "logs")
        self.counters = Counters()
        self.request_log = RequestLog(data_dir / "request_log.jsonl", options.request_log_size)
        self.images = ImageRegistry(self.store.images, options, self.secrets.value)
        self.catalog_images = CatalogImages(options, data_dir)
        self.engine = RunEngine(
            self.store,
            self.workspace,
            self.volumes,
            self.logbook,
            options,
            data_dir / "runs",
            self.secrets.value,
            instance_id=self.store.instance_id(),
        )
        self.runs = Runs(
            self.store, self.engine, self.images, self.catalog_images, options, self.counters
        )
        self.pools = GpuPools(options, self.engine.pools)
        self.mlflow = MlflowRuns(self.store, self.logbook)
        self.permissions = Permissions(self.store)
        self.usage_policies = UsagePolicies(self.store.usage_policies)
        self.faults: FaultInjector | None = None

    def close(self) -> None:
        self.request_log.close()
        self.store.close()
