"""The local workspace served in its own process for the trigger benchmark (P1), so its CPU is
not counted against the side being measured.

The Databricks provider's async hook sends ``GET`` requests with the parameters in a JSON
body (``runs/get`` with ``{"run_id": ...}``), which the real workspace accepts; the local
workspace reads query parameters only. A small ASGI layer in front of it moves such a body
into the query string, so the anchor runs its own unmodified code path. The translation
costs only the workspace process.

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
from typing import Any
from urllib.parse import urlencode

import uvicorn

from air_runtime.local._app import asgi_app, create_app
from air_runtime.local._options import WorkspaceOptions
from air_runtime.local._server import bind_socket


class GetBodyToQuery:
    """ASGI middleware: a GET with a JSON object body gets that object as query parameters."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = int(headers.get(b"content-length", b"0") or 0)
        if length <= 0:
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        try:
            body = json.loads(b"".join(chunks) or b"{}")
        except ValueError:
            body = None
        if isinstance(body, dict) and body:
            query = urlencode(
                {k: str(v).lower() if isinstance(v, bool) else v for k, v in body.items()}
            )
            existing = scope.get("query_string", b"")
            joined = f"{existing.decode()}&{query}" if existing else query
            scope = {**scope, "query_string": joined.encode()}
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


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
    app = GetBodyToQuery(asgi_app(create_app(options, data_dir)))
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
