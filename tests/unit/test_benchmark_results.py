"""The committed benchmark results keep every run they were decided on, and the performance
page's table is the one those files give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import _common, run_all
from benchmarks._common import MET_RULE, RESULTS, met_over_runs, verdict

RESULT_FILES = sorted(RESULTS.glob("p*.json"))


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.stem)
def test_a_result_keeps_its_runs_their_commits_and_a_computed_met(path: Path) -> None:
    result = json.loads(path.read_text())
    runs = result.get("runs")
    assert runs, f"{path.name} keeps no runs"
    for run in runs:
        assert run.get("date"), f"{path.name}: a run without its date"
        assert run.get("commit"), f"{path.name}: a run without its commit"
        assert "met" in run or "met_detail" in run or "checkpoint" in run, path.name
    assert result.get("met_rule"), f"{path.name} does not say how met is decided"
    assert isinstance(result["met"], bool | dict)
    if result["met_rule"] == MET_RULE:
        assert verdict(result["met"]) == met_over_runs(runs), f"{path.name}: met not computed"


def test_write_result_keeps_every_run_and_decides_met_over_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    # A file from before runs were kept becomes the first run.
    (tmp_path / "px.json").write_text(
        json.dumps({"id": "PX", "ratio": 1.3, "met": False, "machine": {"measured_at": "d0"}})
    )
    _common.write_result("PX", {"ratio": 1.1, "met": True})
    first = json.loads((tmp_path / "px.json").read_text())
    assert [r["met"] for r in first["runs"]] == [False, True]
    assert first["runs"][0]["date"] == "d0" and first["runs"][0]["result"]["ratio"] == 1.3
    assert first["runs"][1]["load_before"] == _common.LOAD_BEFORE
    assert first["met"] is False  # one of two runs is not more than half
    # Rows kept while a long run is measured are replaced by the run's result.
    _common.write_result("PX", {"partial": True, "rows": [1], "met": False})
    _common.write_result("PX", {"ratio": 1.05, "met": {"wall": True, "duplicates": True}})
    second = json.loads((tmp_path / "px.json").read_text())
    assert len(second["runs"]) == 3 and second["met"] is True
    assert second["ratio"] == 1.05  # the top-level fields are the newest run's
    assert all(r["commit"] for r in second["runs"][1:])


def test_the_summary_and_the_performance_page_are_the_result_files() -> None:
    summary = json.loads((RESULTS / "summary.json").read_text())
    assert [row["id"] for row in summary["rows"]] == run_all.ORDER
    for row in summary["rows"]:
        fresh = run_all.summary_row(row["id"])
        assert {k: row.get(k) for k in fresh} == fresh, (
            f"{row['id']}: summary.json is older than its result file: "
            "python -m benchmarks.run_all --summary-only"
        )
    page = run_all.PERFORMANCE_PAGE.read_text()
    table = page.split(run_all.TABLE_START, 1)[1].split(run_all.TABLE_END, 1)[0].strip()
    assert table == run_all.performance_table(), (
        "docs/performance.md's table differs from the results: "
        "python -m benchmarks.run_all --summary-only"
    )
    for row in summary["rows"]:
        assert f"`{row['commit']}`" in table and row["date"][:10] in table
