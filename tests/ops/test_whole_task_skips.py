"""Whole-task commands report a broken episode as skipped with its error and go on (issue 12 part E).

One of three episodes has a truncated data parquet. ``audit-gaps``, ``stats check`` and ``repair
force-scale`` each report it (naming the file) and still do their work on the other two, exiting 1;
``validate`` and ``ls`` already did. ``stats recalc`` refuses (a stats.json without the episode's
rows would be wrong), naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ops_helpers import snapshot, write_task

from egopool import FormatError, open_task
from egopool.cli.app import main
from egopool.gaps import audit_task_gaps
from egopool.ops import check_stats, recalc_task_stats, repair_force_scale

BROKEN = "data/chunk-000/episode-001.parquet"


@pytest.fixture
def task(tmp_path: Path) -> Path:
    t = write_task(tmp_path, episodes=3, rows=5, video=False, registry=False)
    path = t / BROKEN
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # truncated: no footer
    return t


def test_audit_gaps_skips_the_broken_episode_and_audits_the_others(task, capsys):
    report = audit_task_gaps(open_task(task))
    assert [r.episode_index for r in report.episodes] == [1, 3]
    assert all(r.length == 5 for r in report.episodes)
    (sk,) = report.skipped
    assert (sk.episode_index, sk.reason) == (2, "unreadable") and str(task / BROKEN) in sk.error
    assert not report.ok
    assert main(["audit-gaps", str(task), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [e["episode_index"] for e in out["episodes"]] == [1, 3] and out["ok"] is False
    assert out["skipped"] == [{"episode_index": 2, "reason": "unreadable", "error": sk.error}]
    assert main(["audit-gaps", str(task)]) == 1
    text = capsys.readouterr().out
    assert f"episode 2 skipped: {task / BROKEN}" in text
    assert "2 episode(s), 0 gap(s) beyond 1.5 nominal intervals; 1 episode(s) could not be read" in text


def test_stats_check_skips_the_broken_episode_and_compares_the_rest(task, capsys):
    report = check_stats(task)
    assert report.episodes == 2 and not report.ok
    assert [(s["episode_index"], s["reason"]) for s in report.skipped] == [(2, "unreadable")]
    assert str(task / BROKEN) in report.skipped[0]["error"]
    counts = {d.column: (d.stored, d.fresh) for d in report.differences if d.field == "count"}
    assert counts == {"observation.right_glove": (15, 10)}  # the two readable episodes' rows
    assert main(["stats", "check", str(task), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["skipped"] == report.skipped
    assert main(["stats", "check", str(task)]) == 1
    assert f"episode 2 skipped: {task / BROKEN}" in capsys.readouterr().out


def test_stats_recalc_refuses_naming_the_broken_episode(task):
    before = snapshot(task)
    with pytest.raises(FormatError) as ei:
        recalc_task_stats(task)
    assert "episode(s) 2" in ei.value.message and ei.value.path == task / BROKEN
    assert snapshot(task) == before


def test_repair_force_scale_skips_the_broken_episode(task, capsys):
    report = repair_force_scale(task, dry_run=True, registry=False)
    assert report.unreadable == [2]
    (ep,) = report.episodes
    assert (ep.index, ep.status, ep.reason) == (2, "skipped", "cannot be read") and str(task / BROKEN) in ep.error
    assert main(["repair", "force-scale", str(task), "--dry-run", "--no-registry"]) == 1
    assert "could not be read: 2" in capsys.readouterr().out


def test_validate_and_ls_report_it_too(task, capsys):
    assert main(["ls", str(task), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["episode_index"], r["complete"]) for r in rows] == [(1, True), (2, False), (3, True)]
    assert main(["validate", str(task), "--json"]) == 1
    found = json.loads(capsys.readouterr().out)["findings"]
    assert [f["path"] for f in found if f["severity"] == "error"] == [str(task / BROKEN)]
