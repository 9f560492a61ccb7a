"""The dashboard's figures from server.db (docs/decisions.md P21): per host and day, review states, histograms,
and a kept build that follows every verdict and quality row."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from egopool.server.dashboard import build_dashboard_data, dashboard_data  # noqa: E402
from egopool.server.db import EpisodeRow, ServerDB  # noqa: E402

DAY = 86400.0


def _row(n: int, host: str, at: float) -> EpisodeRow:
    return EpisodeRow("t", n, f"{n:032x}", host, n, f"{n:064x}", n, None, at, 300, ["ego"],
                      {"ok": True, "errors": 0, "warnings": 0})


def test_dashboard_figures_follow_reviews_and_facts(tmp_path: Path) -> None:
    db = ServerDB(tmp_path / "server.db")
    day0 = 20_000 * DAY
    db.add_episodes([_row(1, "pc-a", day0 + 10), _row(2, "pc-a", day0 + 20), _row(3, "pc-b", day0 + 2 * DAY + 5),
                     _row(4, "pc-b", day0 + 2 * DAY + 6)])
    for n, secs, frozen in ((1, 10.5, 0), (2, 20.25, 30), (3, 30.0, 0)):  # 4 is not measured yet
        db.set_quality("t", n, {"duration_s": secs, "gap_total": n - 1, "frozen_frames": frozen})
    db.add_reviews("t", [(1, 0), (3, 0)], "reject", "blur", "anna")
    d = dashboard_data(db, "t")
    assert d == build_dashboard_data(db, "t")
    t = d["totals"]
    assert (t["episodes"], t["measured"], t["rejected"], t["unreviewed"]) == (4, 3, 2, 2)
    assert t["hours"] == pytest.approx(60.75 / 3600)
    assert [(h["host"], h["episodes"], h["rejected"], round(h["hours"] * 3600)) for h in d["hosts"]] == \
        [("pc-a", 2, 1, 31), ("pc-b", 2, 1, 30)]
    assert [(x["day"], x["episodes"]) for x in d["days"]] == [(day0, 2), (day0 + DAY, 0), (day0 + 2 * DAY, 2)]
    gaps = d["facts"]["gap_total"]
    assert (gaps["edges"], gaps["counts"], gaps["missing"], gaps["whole"]) == ([-0.5, 0.5, 1.5, 2.5], [1, 1, 1], 1, True)
    frozen = d["facts"]["frozen_frames"]  # whole numbers 0..30: one bin each
    assert (len(frozen["counts"]), frozen["counts"][0], frozen["counts"][-1], frozen["edges"][-1]) == (31, 2, 1, 30.5)
    dur = d["facts"]["duration_s"]
    assert len(dur["counts"]) == 20 and sum(dur["counts"]) == 3 and (dur["edges"][0], dur["edges"][-1]) == (10.5, 30)
    # a verdict and a new quality row are seen at the next page (the kept build is for an unchanged task only)
    db.add_review("t", 2, "accept", "", "anna", version=0)
    db.set_quality("t", 4, {"duration_s": 40.0, "gap_total": 0, "frozen_frames": 0})
    d = dashboard_data(db, "t")
    assert (d["totals"]["accepted"], d["totals"]["measured"]) == (1, 4)
    assert d["facts"]["gap_total"]["counts"] == [2, 1, 1]
    assert d == build_dashboard_data(db, "t")
