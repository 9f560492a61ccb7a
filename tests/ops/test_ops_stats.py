"""egopool stats recalc / check (file_format.md §4, DESIGN §4)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ops_helpers import SENSOR, snapshot, write_task

from egopool.meta.stats import read_stats, stats_path
from egopool.ops import check_stats, delete_episodes, recalc_task_stats


def expected_block(episodes, rows=3):
    """The glove block by hand: row i of episode k holds arange(4) + k + i (ops_helpers.write_task)."""
    x = np.array([np.arange(4) + k + i for k in episodes for i in range(rows)], dtype=np.float64)
    return {"count": len(x), "mean": x.mean(0), "std": x.std(0), "min": x.min(0), "max": x.max(0)}


def assert_block(block, exp):
    assert block["count"] == exp["count"]
    for k in ("mean", "std", "min", "max"):
        np.testing.assert_allclose(block[k], exp[k], rtol=1e-12, atol=1e-12)


def test_check_agrees_on_a_fresh_task(tmp_path):
    task = write_task(tmp_path, episodes=3, video=False)
    report = check_stats(task)
    assert report.ok and report.differences == []
    assert report.episodes == 3
    assert report.blocks == ["action", SENSOR]
    assert_block(read_stats(task)[SENSOR], expected_block(range(3)))


def test_check_after_delete_names_the_block_and_counts(tmp_path):
    task = write_task(tmp_path, episodes=3, video=False)
    delete_episodes(task, [2])
    report = check_stats(task)
    assert not report.ok
    assert report.differing_blocks == [SENSOR]
    count = [d for d in report.differences if d.field == "count"]
    assert [(d.stored, d.fresh) for d in count] == [(9, 6)]
    # stats.json itself was not rolled back by the delete
    assert_block(read_stats(task)[SENSOR], expected_block(range(3)))


def test_check_lists_only_the_corrupted_field(tmp_path):
    task = write_task(tmp_path, episodes=2, video=False)
    doc = read_stats(task)
    doc[SENSOR]["max"][2] += 0.5
    stats_path(task).write_text(json.dumps(doc))
    report = check_stats(task)
    assert [(d.column, d.field) for d in report.differences] == [(SENSOR, "max")]
    d = report.differences[0]
    assert d.stored == pytest.approx(expected_block(range(2))["max"][2] + 0.5)
    assert d.fresh == pytest.approx(expected_block(range(2))["max"][2])


def test_recalc_rebuilds_legacy_blocks_without_count(tmp_path):
    task = write_task(tmp_path, episodes=3, video=False)
    legacy = read_stats(task)
    del legacy[SENSOR]["count"]
    legacy[SENSOR]["mean"] = [0.0] * 4
    stats_path(task).write_text(json.dumps(legacy))
    old_bytes = stats_path(task).read_bytes()
    check = check_stats(task)
    assert ("count" in {d.field for d in check.differences}) and "legacy block" in check.differences[0].detail

    before = snapshot(task)
    dry = recalc_task_stats(task, dry_run=True)
    assert not dry.written and snapshot(task) == before
    assert SENSOR in dry.to_dict()["changed_blocks"]

    report = recalc_task_stats(task)
    assert report.written and report.episodes == 3
    assert report.backup is not None and report.backup.read_bytes() == old_bytes
    assert report.backup.relative_to(task).parts[0] == ".egopool_backup"
    assert_block(read_stats(task)[SENSOR], expected_block(range(3)))
    assert read_stats(task)["action"] == {"count": 0, "mean": [0.0], "std": [1.0], "min": [0.0], "max": [0.0]}
    assert check_stats(task).ok


def test_recalc_after_delete_reflects_data_and_second_run_is_a_no_op(tmp_path):
    task = write_task(tmp_path, episodes=3, video=False)
    delete_episodes(task, [2])
    recalc_task_stats(task)
    assert_block(read_stats(task)[SENSOR], expected_block([0, 2]))
    before = snapshot(task)
    again = recalc_task_stats(task)
    assert not again.written and again.changes == [] and snapshot(task) == before


def test_recalc_repairs_unparsable_stats(tmp_path):
    task = write_task(tmp_path, episodes=1, video=False)
    stats_path(task).write_text("{not json")
    report = recalc_task_stats(task)
    assert report.written and report.backup.read_text() == "{not json"
    assert_block(read_stats(task)[SENSOR], expected_block([0]))


def test_recalc_while_an_episode_is_publishing_does_not_count_it_twice(tmp_path, monkeypatch):
    """recalc takes the lock between the writer publishing N's data parquet and committing its row.

    The writer merges N's blocks into stats.json when it commits, so a recomputation that
    already counted N's data file would count it twice (DESIGN §4, decisions.md #5).
    """
    from egopool import TaskWriter, vector_column
    from egopool.write import episode_writer as ew

    task = write_task(tmp_path, episodes=1, video=False)
    real_publish = ew.publish

    def publish_then_recalc(temp, final):
        real_publish(temp, final)
        if final.suffix == ".parquet" and final.parts[-3] == "data":
            recalc_task_stats(task)  # another process running `egopool stats recalc` right now

    monkeypatch.setattr(ew, "publish", publish_then_recalc)
    ep = TaskWriter(tmp_path, "pick").begin_episode(columns=[vector_column(SENSOR, [4])], sensors=["right_glove"],
                                                   sensor_dim=4)
    for i in range(3):
        ep.add_frame({SENSOR: np.arange(4, dtype=np.float32) + 1 + i})
    ep.finish()

    assert_block(read_stats(task)[SENSOR], expected_block(range(2)))
    assert check_stats(task).ok


def test_data_without_a_row_is_not_counted(tmp_path):
    """A group with a data parquet but no meta/episodes row is unfinished (decisions.md #5)."""
    task = write_task(tmp_path, episodes=2, video=False)
    (task / "meta/episodes/chunk-000/episode-001.parquet").unlink()
    report = check_stats(task)
    assert report.episodes == 1
    recalc_task_stats(task)
    assert_block(read_stats(task)[SENSOR], expected_block([0]))


@pytest.mark.parametrize("field,value", [("mean", "abc"), ("std", [[1.0], 2.0, 3.0, 4.0]), ("min", {"a": 1}),
                                         ("count", "x"), ("count", True), ("count", 6.5)])
def test_garbage_in_a_block_is_a_difference_and_recalc_fixes_it(tmp_path, field, value):
    task = write_task(tmp_path, episodes=2, video=False)
    doc = read_stats(task)
    doc[SENSOR][field] = value
    stats_path(task).write_text(json.dumps(doc))
    report = check_stats(task)
    assert [(d.column, d.field) for d in report.differences] == [(SENSOR, field)]
    assert "not" in report.differences[0].detail  # "... is not a number list" / "... is not an integer"
    fixed = recalc_task_stats(task)
    assert fixed.written
    assert_block(read_stats(task)[SENSOR], expected_block(range(2)))
    assert check_stats(task).ok
