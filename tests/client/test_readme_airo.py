"""The README's `airo` commands, run as written against a local workspace: only its
address stands in for `http://127.0.0.1:8765` and the last run's id for `RUN_ID`; the
token is the one the workspace keeps in its default data dir, as the README says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from air_runtime.cli import build_parser
from air_runtime.cli import main as airo
from air_runtime.local import start_local_workspace

ROOT = Path(__file__).resolve().parents[2]
README_HOST = "http://127.0.0.1:8765"


def _blocks() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## `airo`") : text.index("## Airflow")]
    return [
        [line for line in block.splitlines() if line.strip()]
        for block in re.findall(r"```sh\n(.*?)```", section, re.S)
    ]


def test_the_workspace_commands_work_as_written(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("AIRO_WORKSPACE_TOKEN", raising=False)
    blocks = _blocks()
    client_commands = blocks[1]
    assert any(c.startswith("airo pools get") for c in client_commands)
    pools = [{"pool_id": "pool-a10", "accelerator_type": "GPU_1xA10", "accelerator_count": 4}]
    with start_local_workspace(
        data_dir=tmp_path / "airo" / "workspace", gpu_pools=pools, retry_interval_s=0.05
    ) as ws:
        run_id = None
        for line in client_commands:
            argv = shlex.split(line.replace(README_HOST, ws.host), comments=True)
            assert argv[0] == "airo"
            if "RUN_ID" in argv:
                assert run_id is not None, line
                argv = [run_id if a == "RUN_ID" else a for a in argv]
            code = airo(argv[1:])
            out, err = capsys.readouterr()
            assert code == 0, f"{line}\n{out}\n{err}"
            if argv[1] == "run" and "--dry-run" not in argv:
                run_id = out.split()[1].rstrip(":")


def test_the_local_workspace_commands_parse(tmp_path: Path):
    from air_runtime.local._server import options_from_arguments

    commands = _blocks()[2]
    assert any("--gpu-pool" in c for c in commands) and any("simulate" in c for c in commands)
    for line in commands:
        args = build_parser().parse_args(shlex.split(line, comments=True)[1:])
        options = options_from_arguments(args)
        assert options.mode in ("execute", "simulate")
        if "--gpu-pool" in line:
            assert options.gpu_pools[0]["pool_id"] == "pool-a10"
