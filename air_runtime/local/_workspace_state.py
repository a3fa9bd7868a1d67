"""Everything one local workspace server holds, built once by `create_app`."""

from __future__ import annotations

from pathlib import Path

from fastapi import Request

from air_runtime.local._faults import Counters, FaultInjector, RequestLog
from air_runtime.local._files import VolumeTree, WorkspaceTree
from air_runtime.local._images import ImageRegistry
from air_runtime.local._logs import LogBook
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._runs import RunEngine
from air_runtime.local._secret_store import SecretStore
from air_runtime.local._security import ensure_token, private_dir
from air_runtime.local._store import Store


class WorkspaceState:
    """The state, files, runs and counters of one server; reachable as
    `app.state.workspace` (and from a request with `workspace_state`)."""

    def __init__(self, options: WorkspaceOptions, data_dir: Path) -> None:
        private_dir(data_dir)  # state, secrets, logs and the token: nobody else reads them
        if not options.tokens:
            options.tokens = [ensure_token(data_dir)[0]]
        self.options = options
        self.data_dir = data_dir
        self.store = Store(data_dir / "state.sqlite3")
        self.secrets = SecretStore(self.store)
        self.workspace = WorkspaceTree(data_dir / "workspace")
        self.volumes = VolumeTree(data_dir / "volumes")
        self.logbook = LogBook(data_dir / "logs")
        self.counters = Counters()
        self.request_log = RequestLog(data_dir / "request_log.jsonl", options.request_log_size)
        self.images = ImageRegistry(self.store, options, self.secrets.value)
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
        self.tokens = set(options.tokens)
        self.revoked = self.store.revoked_tokens()
        self.faults: FaultInjector | None = None

    def close(self) -> None:
        self.request_log.close()
        self.store.close()


def workspace_state(request: Request) -> WorkspaceState:
    state: WorkspaceState = request.app.state.workspace
    return state
