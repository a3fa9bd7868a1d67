"""The local workspace served in its own process for the trigger benchmark (P1), so its CPU is
not counted against the side being measured.

It is served with a large listen backlog, since thousands of anchor triggers open their
own connections at once.

    python -m benchmarks._workspace --ready-file F [--running-s 3600]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import uvicorn

from air_runtime.local._app import asgi_app, create_app
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._server import bind_socket


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ready-file", type=Path, required=True)
    parser.add_argument("--running-s", type=float, default=3600.0)
    parser.add_argument("--token", default="bench-token")
    args = parser.parse_args()
    options = WorkspaceOptions.from_mapping(
        {
            "tokens": [args.token],
            "mode": "simulate",
            "simulate": {"pending_s": 0.0, "running_s": args.running_s, "result": "SUCCESS"},
        }
    )
    data_dir = Path(tempfile.mkdtemp(prefix="airo-bench-ws-"))
    app = asgi_app(create_app(options, data_dir))
    sock = bind_socket("127.0.0.1", 0)
    config = uvicorn.Config(
        app,
        http="h11",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=30,
        backlog=8192,
        limit_concurrency=None,
    )
    server = uvicorn.Server(config)

    def announce() -> None:
        while not server.started:
            time.sleep(0.01)
        tmp = args.ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"port": sock.getsockname()[1], "pid": os.getpid()}))
        tmp.replace(args.ready_file)

    threading.Thread(target=announce, daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
