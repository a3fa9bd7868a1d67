"""The local workspace: a faithful emulator of the AI Runtime REST API that executes
submitted workloads on this machine (or follows scripted timelines in simulate mode)."""

from air_runtime.local._app import create_app
from air_runtime.local._faults import endpoint_key
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._server import AdminClient, LocalWorkspace, serve, start_local_workspace

__all__ = [
    "AdminClient",
    "LocalWorkspace",
    "WorkspaceOptions",
    "create_app",
    "endpoint_key",
    "serve",
    "start_local_workspace",
]
