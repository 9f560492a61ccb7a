"""Quality facts that see what a reviewer must see (docs/decisions.md P7), on an episode written with the
writer: a frozen stream is a fact with its rows, one 200 ms stall is 1 gap, 10 dark frames are 10 (not also
10 blurred), and the ego stream (the master clock, the blur/exposure subject) is the stream that moves."""

from __future__ import annotations

from pathlib import Path

from facts_episode import DARK, STALL_AT, write_facts_task

from egopool.curation.build import PreviewJob, build_preview
from egopool.gaps import audit_episode_gaps
from egopool.read import open_task


def test_frozen_stall_and_dark_frames_are_counted_once(tmp_path: Path) -> None:
    task = write_facts_task(tmp_path / "pc")
    assert audit_episode_gaps(open_task(task).episode(1)).gaps == 2  # two stamp series see the same stall
    out = tmp_path / "preview"
    out.mkdir()
    manifest, facts = build_preview(PreviewJob(str(task), 1, out=str(out)), out)
    assert facts["frozen_frames"] == 119
    assert facts["frozen_streams"] == {"head_rgb": 119}
    assert facts["frozen_ranges"] == {"head_rgb": [[1, 120]]}
    assert facts["repeated_counts"] == {"head_rgb": 119}  # the writer's own count agrees
    assert facts["gap_total"] == 1 and facts["gap_series_total"] == 2
    assert facts["gap_ranges"] == [[STALL_AT - 1, STALL_AT + 1]]
    assert facts["exposure_outliers"] == 10 and facts["exposure_rows"] == list(DARK)
    assert facts["blur_outliers"] == 0 and facts["blur_rows"] == []
    assert facts["ego_stream"] == "wrist_rgb"
    streams = {s["key"]: s for s in manifest["streams"]}
    assert streams["head_rgb"]["moves"] is False and streams["head_rgb"]["held_frames"] == 119
    assert streams["wrist_rgb"]["moves"] is True and streams["wrist_rgb"]["held_frames"] == 0
