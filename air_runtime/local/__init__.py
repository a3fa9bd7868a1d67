"""The local workspace: a faithful emulator of the AI Runtime REST API that executes
submitted workloads on this machine (or follows scripted timelines in simulate mode).

Names load on first use: `airo` reads the workspace's options and token file through this
package without paying for the server (FastAPI, uvicorn) on every command."""

from __future__ import annotations

from typing import TYPE_CHECKING

from air_runtime._lazy import lazy_exports

if TYPE_CHECKING:
    from air_runtime.local._app import create_app as create_app
    from air_runtime.local._faults import endpoint_key as endpoint_key
    from air_runtime.local._options import WorkspaceOptions as WorkspaceOptions
    from air_runtime.local._server import AdminClient as AdminClient
    from air_runtime.local._server import LocalWorkspace as LocalWorkspace
    from air_runtime.local._server import serve as serve
    from air_runtime.local._server import start_local_workspace as start_local_workspace

_LAZY = {
    "AdminClient": "air_runtime.local._server",
    "LocalWorkspace": "air_runtime.local._server",
    "WorkspaceOptions": "air_runtime.local._options",
    "create_app": "air_runtime.local._app",
    "endpoint_key": "air_runtime.local._faults",
    "serve": "air_runtime.local._server",
    "start_local_workspace": "air_runtime.local._server",
}


__getattr__ = lazy_exports(globals(), _LAZY)


__all__ = sorted(_LAZY)
