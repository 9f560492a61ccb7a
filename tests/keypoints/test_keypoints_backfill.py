"""`egopool keypoints backfill`: mirror hand_pose_3d -> observation.<side>_hand_pose (file_format.md §7.2, §10)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kp_helpers import reference_joints, snapshot, write_hand_task, write_reference_mirror

import egopool
from egopool.cli.app import main
from egopool.keypoints import backfill_hand_pose
from egopool.keypoints.mirror import episode_mirror_dir
from egopool.registry import Registry, sha256_file, task_key
from egopool.validate import validate_task

HANDS = ("observation.left_hand_pose", "observation.right_hand_pose")


def expected(rows: int, offset: int, side: str) -> np.ndarray:
    """What the back-fill must write: the reference joints where present, zeros elsewhere (kp_helpers)."""
    j = reference_joints()[offset:offset + rows].reshape(rows, 63)
    out = np.zeros((rows, 63), np.float32)
    if side == "right":
        keep = np.ones(rows, bool)
        keep[::7] = False
        out[keep] = j[keep]
    else:
        out[[3, 4]] = (reference_joints()[offset:offset + rows] * np.array([-1, 1, 1], np.float32)).reshape(rows, 63)[
            [3, 4]]
    return out


def hand_values(table: pa.Table, column: str) -> np.ndarray:
    return np.asarray(table.column(column).combine_chunks().flatten().to_numpy(), np.float32).reshape(-1, 63)


def assert_other_columns_identical(before: Path, after: Path) -> None:
    """Column by column: everything but the two hand columns is as it was (types, values, metadata)."""
    a, b = pq.read_table(before), pq.read_table(after)
    assert a.schema.names == b.schema.names
    assert a.schema.metadata == b.schema.metadata
    for name in a.schema.names:
        assert a.schema.field(name) == b.schema.field(name), name
        if name not in HANDS:
            assert a.column(name).equals(b.column(name)), name
    assert pq.ParquetFile(before).metadata.num_row_groups == pq.ParquetFile(after).metadata.num_row_groups


@pytest.fixture
def task(tmp_path, monkeypatch):
    monkeypatch.delenv("EGOPOOL_KEYPOINTS_ROOT", raising=False)
    t = write_hand_task(tmp_path / "recordings", episodes=3, rows=40)
    write_reference_mirror(t, 1, rows=40, offset=0)
    write_reference_mirror(t, 2, rows=40, offset=200)
    return t


def test_backfill_writes_the_mirror_values_and_nothing_else(task, tmp_path):
    layout = egopool.open_task(task).layout
    originals = {n: tmp_path / f"orig-{n}.parquet" for n in (1, 2, 3)}
    for n, p in originals.items():
        p.write_bytes(layout.data_file(n).read_bytes())
    stats_before = (task / "meta/stats.json").read_bytes()
    info_before = (task / "meta/info.json").read_bytes()

    tree = snapshot(task)
    dry = backfill_hand_pose(task, dry_run=True)
    assert [(e.index, e.status, e.changed_rows) for e in dry.episodes] == [(1, "would write", 34), (2, "would write", 34)]
    assert snapshot(task) == tree

    report = backfill_hand_pose(task)
    assert report.ok and [(e.index, e.status) for e in report.episodes] == [(1, "written"), (2, "written")]
    assert report.episodes[0].hand_rows == {"left": 2, "right": 34} and report.episodes[0].registry == "updated"
    for n, offset in ((1, 0), (2, 200)):
        t = pq.read_table(layout.data_file(n))
        for side in ("left", "right"):
            np.testing.assert_array_equal(hand_values(t, f"observation.{side}_hand_pose"), expected(40, offset, side))
        assert_other_columns_identical(originals[n], layout.data_file(n))
        rec = Registry.for_task(task).get(task_key(task), n)
        data_rec = next(f for f in rec.files if f.path == layout.data_file(n).relative_to(task).as_posix())
        assert data_rec.sha256 == sha256_file(layout.data_file(n)) != sha256_file(originals[n])
    # episode 3 has no mirror: untouched; hand_pose is never in stats (§4) and the columns were declared
    assert layout.data_file(3).read_bytes() == originals[3].read_bytes()
    assert (task / "meta/stats.json").read_bytes() == stats_before
    assert (task / "meta/info.json").read_bytes() == info_before
    assert validate_task(task).findings == []
    # Episode.keypoints() and the data now agree
    ep = egopool.open_task(task).episode(2)
    kp = ep.keypoints().hand_pose_3d
    np.testing.assert_array_equal(hand_values(ep.table, "observation.right_hand_pose"),
                                  np.where(kp.present["right"][:, None], kp.flat("right"), 0))

    tree = snapshot(task)
    again = backfill_hand_pose(task)
    assert [(e.index, e.status, e.registry) for e in again.episodes] == [(1, "unchanged", "unchanged"),
                                                                         (2, "unchanged", "unchanged")]
    assert snapshot(task) == tree


def test_row_count_mismatch_is_refused_and_nothing_changes(task, capsys):
    write_reference_mirror(task, 3, rows=39, offset=400)
    data3 = egopool.open_task(task).layout.data_file(3)
    before = data3.read_bytes()
    report = backfill_hand_pose(task, [3])
    (e,) = report.episodes
    assert not report.ok and e.status == "refused"
    assert e.reason.startswith("the mirror has 39 rows, the data parquet 40")
    assert data3.read_bytes() == before
    code = main(["keypoints", "backfill", str(task), "3"])
    out = capsys.readouterr().out
    assert code == 1 and "episode 3: refused: the mirror has 39 rows, the data parquet 40" in " ".join(out.split())


def test_a_broken_mirror_file_refuses_its_episode_and_the_others_go_on(task, capsys):
    """Episode 1's hand_pose_3d is not a parquet file: episode 1 refused with the file named, 2 still written."""
    broken = episode_mirror_dir(task, 1) / "hand_pose_3d" / "chunk-000.parquet"
    broken.write_bytes(b"not parquet")
    data1 = egopool.open_task(task).layout.data_file(1)
    before = data1.read_bytes()
    code = main(["keypoints", "backfill", str(task), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and not doc["ok"]
    (e1, e2) = doc["episodes"]
    assert (e1["episode_index"], e1["status"], e2["episode_index"], e2["status"]) == (1, "refused", 2, "written")
    assert e1["reason"].startswith(f"{broken}: ") and "parquet" in e1["reason"]  # the file and what is wrong
    assert data1.read_bytes() == before


def test_missing_mirror_for_a_requested_episode_fails(task, capsys):
    code = main(["keypoints", "backfill", str(task), "3", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["ok"] is False and doc["episodes"][0]["status"] == "missing"
    assert "run `egopool keypoints extract` first" in doc["episodes"][0]["reason"]
    assert main(["keypoints", "backfill", str(task), "9"]) == 1
    assert "no episode 9 in task" in capsys.readouterr().err


def test_columns_a_task_lacked_are_added_and_declared(tmp_path, monkeypatch):
    monkeypatch.delenv("EGOPOOL_KEYPOINTS_ROOT", raising=False)
    t = write_hand_task(tmp_path / "recordings", episodes=1, rows=25, hand_columns=False)
    before = tmp_path / "before.parquet"
    data = egopool.open_task(t).layout.data_file(1)
    before.write_bytes(data.read_bytes())
    write_reference_mirror(t, 1, rows=25, offset=50)
    report = backfill_hand_pose(t)
    assert report.episodes[0].added_columns == ["observation.left_hand_pose", "observation.right_hand_pose"]
    feats = json.loads((t / "meta/info.json").read_text())["features"]
    assert feats["observation.right_hand_pose"] == {"dtype": "float32", "shape": [21, 3]}
    a, b = pq.read_table(before), pq.read_table(data)
    assert b.schema.names == a.schema.names + ["observation.left_hand_pose", "observation.right_hand_pose"]
    for name in a.schema.names:
        assert a.column(name).equals(b.column(name)), name
    np.testing.assert_array_equal(hand_values(b, "observation.right_hand_pose"), expected(25, 50, "right"))
    assert validate_task(t).findings == []
    assert backfill_hand_pose(t).episodes[0].status == "unchanged"


def test_cli_json_and_dry_run(task, capsys):
    tree = snapshot(task)
    assert main(["keypoints", "backfill", str(task), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dry_run"] is True and doc["counts"] == {"would write": 2} and snapshot(task) == tree
    assert main(["keypoints", "backfill", str(task), "1", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"] == {"written": 2} and [e["changed_rows"] for e in doc["episodes"]] == [34, 34]


_KILL_SCRIPT = """
import sys
from egopool.keypoints import backfill_hand_pose
backfill_hand_pose(sys.argv[1])
"""


def test_sigkill_mid_backfill_loses_nothing_and_a_rerun_finishes(tmp_path, monkeypatch):
    monkeypatch.delenv("EGOPOOL_KEYPOINTS_ROOT", raising=False)
    n_eps, rows = 24, 300
    task = write_hand_task(tmp_path / "recordings", episodes=n_eps, rows=rows, video=False)
    for n in range(1, n_eps + 1):
        write_reference_mirror(task, n, rows=rows, offset=n * 5)
    layout = egopool.open_task(task).layout
    originals = {n: pq.read_table(layout.data_file(n)) for n in range(1, n_eps + 1)}
    inode = {n: os.stat(layout.data_file(n)).st_ino for n in originals}

    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, str(task)], env={**os.environ, "PYTHONPATH": str(Path(egopool.__file__).parents[1])})  # this checkout
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if any(os.stat(layout.data_file(n)).st_ino != inode[n] for n in originals):
            break
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    replaced = [n for n in originals if os.stat(layout.data_file(n)).st_ino != inode[n]]
    assert 1 <= len(replaced) < n_eps, "the kill did not land mid-job; make the task bigger"

    # every data file is whole and each episode is either untouched or completely back-filled
    for n, orig in originals.items():
        t = pq.read_table(layout.data_file(n))
        for name in orig.column_names:
            if name not in HANDS:
                assert t.column(name).equals(orig.column(name)), (n, name)
        right = hand_values(t, "observation.right_hand_pose")
        assert (not right.any()) if n not in replaced else np.array_equal(right, expected(rows, n * 5, "right"))
    assert validate_task(task).ok

    report = backfill_hand_pose(task)
    assert report.ok
    assert {e.status for e in report.episodes if e.index in replaced} == {"unchanged"}
    assert {e.status for e in report.episodes if e.index not in replaced} == {"written"}
    reg = Registry.for_task(task)
    for n in originals:
        t = pq.read_table(layout.data_file(n))
        np.testing.assert_array_equal(hand_values(t, "observation.right_hand_pose"), expected(rows, n * 5, "right"))
        rec = reg.get(task_key(task), n)
        data_rec = next(f for f in rec.files if f.path == layout.data_file(n).relative_to(task).as_posix())
        assert data_rec.sha256 == sha256_file(layout.data_file(n))
    assert not [p for p in (task / "data").rglob(".*")]  # the killed run's temp is gone
    assert validate_task(task).findings == []
    assert episode_mirror_dir(task, 1).is_dir()
