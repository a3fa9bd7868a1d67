"""The local workspace: a faithful emulator of the AI Runtime REST API that executes
submitted workloads on this machine (or follows scripted timelines in simulate mode)."""

from air_runtime.local._app import create_app
from air_runtime.local._faults import endpoint_key
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._registry_server import (
    RegistryServer,
    registry_program,
    start_artifact_registry,
    start_registry_server,
)
from air_runtime.local._server import AdminClient, LocalWorkspace, serve, start_local_workspace

__all__ = [
    "AdminClient",
    "LocalWorkspace",
    "RegistryServer",
    "WorkspaceOptions",
    "create_app",
    "endpoint_key",
    "registry_program",
    "serve",
    "start_artifact_registry",
    "start_local_workspace",
    "start_registry_server",
]
