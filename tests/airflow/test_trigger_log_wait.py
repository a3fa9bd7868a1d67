"""A trigger's last line and its log file: the trigger ends only once its last line is in
this try's trigger log (``airflow_air._logs.wait_until_in_trigger_log``), since the triggerer
closes that file when the trigger ends and lines still queued then never reach it."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow_air import _logs

TI = SimpleNamespace(dag_id="sweep", run_id="manual__1", task_id="trial", map_index=3, try_number=2)


def _attempt_log(base: Path) -> Path:
    return (
        base
        / "dag_id=sweep"
        / "run_id=manual__1"
        / "task_id=trial"
        / "map_index=3"
        / "attempt=2.log"
    )


@pytest.fixture
def log_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIRFLOW__LOGGING__BASE_LOG_FOLDER", str(tmp_path))
    _attempt_log(tmp_path).parent.mkdir(parents=True)
    return tmp_path


def _json_line(event: str) -> str:
    return json.dumps({"timestamp": "2026-12-06T00:00:00Z", "event": event}) + "\n"


def test_the_files_of_every_triggerer_of_the_try_and_only_those(log_folder: Path) -> None:
    attempt = _attempt_log(log_folder)
    for name in (
        "attempt=2.log.trigger.4.log",
        "attempt=2.log.trigger.5.log",
        "attempt=1.log.trigger.4.log",
        "attempt=2.log",
    ):
        (attempt.parent / name).write_text("")
    assert [p.name for p in _logs.trigger_log_files(TI)] == [
        "attempt=2.log.trigger.4.log",
        "attempt=2.log.trigger.5.log",
    ]


def test_waits_for_the_line_to_be_written(log_folder: Path) -> None:
    """The wait ends when the line lands, written only after the wait has looked once."""
    trigger_log = _attempt_log(log_folder).with_name("attempt=2.log.trigger.7.log")
    trigger_log.write_text(_json_line("Run 12: RUNNING"))
    line = 'Run 12 succeeded: http://127.0.0.1/jobs/runs/12 "quoted" é'
    looked = threading.Event()
    real_found_in = _logs._TailSearch.found_in

    def found_in(search: _logs._TailSearch, path: Path) -> bool:
        looked.set()
        return real_found_in(search, path)

    def write_after_a_look() -> None:
        looked.wait()
        with trigger_log.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"event": line}, ensure_ascii=False) + "\n")

    writer = threading.Thread(target=write_after_a_look)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_logs._TailSearch, "found_in", found_in)
        writer.start()
        assert asyncio.run(_logs.wait_until_in_trigger_log(TI, line)) is True
    writer.join()


def test_a_line_is_found_when_it_lands_across_two_looks(tmp_path: Path) -> None:
    """Each look reads only what was appended since the one before, and the needle's length
    before it: a line whose first half was there at one look and the rest at the next is
    found; so is one in a file written anew, shorter than what was read of it."""
    log = tmp_path / "attempt=1.log.trigger.3.log"
    log.write_bytes(b"x" * 100_000 + b'{"event": "Run 12 succ')
    search = _logs._TailSearch(b"Run 12 succeeded")
    assert not search.found_in(log)
    with log.open("ab") as f:
        f.write(b'eeded"}\n')
    assert search.found_in(log)
    assert not search.found_in(log)  # nothing appended since: nothing read
    log.write_bytes(b'{"event": "Run 12 succeeded"}\n')  # a triggerer took the try back
    assert search.found_in(log)


def test_gives_up_on_a_line_that_never_comes(
    log_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _attempt_log(log_folder).with_name("attempt=2.log.trigger.7.log").write_text(
        _json_line("Run 12: RUNNING")
    )
    monkeypatch.setattr(_logs, "LAST_LINE_WAIT_SECONDS", 0.0)
    assert asyncio.run(_logs.wait_until_in_trigger_log(TI, "Run 12 succeeded")) is False


def test_gives_up_where_the_logs_are_not_on_this_machine(
    log_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_logs, "NO_LOG_FILE_SECONDS", 0.0)
    monkeypatch.setattr(_logs, "LAST_LINE_WAIT_SECONDS", 3600.0)
    assert asyncio.run(_logs.wait_until_in_trigger_log(TI, "Run 12 succeeded")) is False


def test_shown_lines_count_only_where_a_trigger_log_still_holds_them(log_folder: Path) -> None:
    """A takeover trusts what an earlier trigger showed on this machine only for the streams
    whose newest shown line is still in a trigger log of the try (a triggerer that takes a
    trigger back truncates its file for the try)."""
    kept_ns = 1_796_531_056_152_793_445  # 2026-12-06T04:24:16.152Z
    truncated_ns = 1_796_531_060_000_000_000  # 2026-12-06T04:24:20.000Z
    _attempt_log(log_folder).with_name("attempt=2.log.trigger.5.log").write_text(
        _json_line("2026-12-06T04:24:16.152Z [trial_1 node 0 attempt 0] trial 1: started")
    )
    _attempt_log(log_folder).with_name("attempt=2.log.trigger.4.log").write_text(
        _json_line("Run 12: live lines go on after those already shown")
    )
    shown = {"trial_1/0/0": kept_ns, "trial_1/1/0": truncated_ns}
    assert asyncio.run(_logs.lines_in_trigger_logs(TI, shown)) == {"trial_1/0/0": kept_ns}
