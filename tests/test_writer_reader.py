"""Writer -> reader round trips of every column kind (file_format.md §7, §8; multi_device_storage.md §4.6, §8.1).

Everything written is read back through the public reader (``open_task``) and
compared with what was passed to ``add_frame``: bit-exact for parquet columns,
within codec tolerance for video.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import (SchemaError, StreamSpec, TaskWriter, hand_pose_column, imu_columns, open_task,
                     slam_trajectory_columns, status_column, vector_column)
from egopool.codecs.video import count_video_frames
from egopool.meta.episodes import EPISODE_COLUMNS
from egopool.meta.stats import read_stats, recalc_stats

W, H = 64, 48
CREATED = 1_760_000_000.25


def _rgb(i: int) -> np.ndarray:
    """A smooth frame (gradients + a per-frame offset): easy for H.264, so the error is small."""
    y, x = np.mgrid[0:H, 0:W]
    r = (x * 255 // (W - 1)).astype(np.int64)
    g = (y * 255 // (H - 1)).astype(np.int64)
    b = np.full_like(r, 40 + 5 * i)
    return np.stack([r, g, b], axis=2).astype(np.uint8)


def _depth(i: int) -> np.ndarray:
    y, x = np.mgrid[0:H, 0:W]
    d = (800 + 20 * x + 10 * y + 3 * i).astype(np.uint16)
    d[5:12, 7:20] = 0  # a hole
    return d


class Recorded:
    """What the test passed to the writer, row by row."""

    def __init__(self, rows: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.rows = rows
        self.imu = [rng.normal(size=(int(rng.integers(0, 8)), 6)).astype(np.float32) for _ in range(rows)]
        t0 = 10_000_000
        self.imu_ts = []
        for i, s in enumerate(self.imu):
            self.imu_ts.append(np.arange(len(s), dtype=np.int64) * 1_000_000 + t0 + i * 33_333_333)
        self.traj = [rng.normal(size=(int(rng.integers(0, 5)), 8)) for _ in range(rows)]
        self.traj_ns = []
        for i, p in enumerate(self.traj):
            ns = np.arange(1, len(p) + 1, dtype=np.int64) * 1_000 + i * 33_333_333
            if len(ns) > 1:
                ns[0] = 0  # a point without a host stamp stays in lockstep as 0 (§8.1.3)
            self.traj_ns.append(ns)
        self.hand = rng.normal(size=(rows, 63)).astype(np.float32)
        self.glove = rng.uniform(0, 4000, size=(rows, 16)).astype(np.float32)
        self.status = ["connected" if i % 4 else "disconnected" for i in range(rows)]
        self.hw = (np.arange(rows, dtype=np.int64) * 33_333_333 + 123_456_789_012).tolist()
        # non-uniform but strictly increasing timestamps
        self.ts = np.cumsum(np.r_[0.0, rng.uniform(0.02, 0.05, rows - 1)])


def _record(root: Path, rec: Recorded, *, depth_codec: str = "hevc12", name: str = "pick_cup"):
    tw = TaskWriter(root, name, fps=30.0)
    imu, imu_ts = imu_columns()
    traj, traj_ns = slam_trajectory_columns("ego_", frame="ego_cam_optical",
                                            owner={"role": "ego"}, source_slot="head_left_rgb")
    cols = [imu, imu_ts, traj, traj_ns, hand_pose_column("right"), status_column("head_left_rgb"),
            vector_column("observation.right_glove", [16])]
    streams = [StreamSpec("head_left_rgb", "rgb", W, H),
               StreamSpec("head_depth", "depth", W, H, codec=depth_codec, master_slot="head_left_rgb")]
    ep = tw.begin_episode(columns=cols, streams=streams, sensors=["right_glove"], sensor_dim=16,
                          created_at=CREATED)
    for i in range(rec.rows):
        ep.add_frame({"observation.imu": rec.imu[i], "imu_ts_ns": rec.imu_ts[i],
                      traj.name: rec.traj[i], traj_ns.name: rec.traj_ns[i],
                      "observation.right_hand_pose": rec.hand[i], "status.head_left_rgb": rec.status[i],
                      "observation.right_glove": rec.glove[i]},
                     timestamp=float(rec.ts[i]), hardware_ns=rec.hw[i],
                     images={"head_left_rgb": _rgb(i), "head_depth": _depth(i)})
    return ep.finish()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("rec")
    rec = Recorded(rows=300)  # > one 256-row group: the reader must stitch row groups
    res = _record(root, rec)
    return rec, res, open_task(root / "pick_cup")


def test_key_columns_have_the_exact_dtypes_of_7_1(recorded):
    rec, res, task = recorded
    schema = task.episode(1).schema
    expected = {"episode_index": pa.int64(), "frame_index": pa.int64(), "timestamp": pa.float32(),
                "task_index": pa.int64(), "wall_time": pa.float64(), "hardware_ns": pa.int64()}
    for name, typ in expected.items():
        assert schema.field(name).type == typ, name
    t = task.episode(1).table
    assert t.column("episode_index").to_pylist() == [1] * rec.rows
    assert t.column("frame_index").to_pylist() == list(range(rec.rows))
    assert t.column("task_index").to_pylist() == [0] * rec.rows
    assert t.column("hardware_ns").to_pylist() == rec.hw
    np.testing.assert_array_equal(t.column("timestamp").to_numpy(), rec.ts.astype(np.float32))
    assert res.length == rec.rows and (res.chunk, res.file, res.index) == (0, 0, 1)


def test_wall_time_is_start_plus_timestamp_and_strictly_increasing(recorded):
    rec, _, task = recorded
    t = task.episode(1).table
    wall = t.column("wall_time").to_numpy()
    ts = t.column("timestamp").to_numpy().astype(np.float64)
    offset = wall - ts
    # constant to float64 rounding at ~1.76e9 s (ulp 2.4e-7 s)
    assert np.max(np.abs(offset - CREATED)) < 1e-6
    assert np.all(np.diff(wall) > 0)
    assert task.episode(1).meta["created_at"] == CREATED


def test_vector_and_hand_pose_columns_are_bit_exact(recorded):
    rec, _, task = recorded
    t = task.episode(1).table
    assert t.schema.field("observation.right_hand_pose").type == pa.list_(pa.float32())
    hand = np.stack(t.column("observation.right_hand_pose").to_pylist()).astype(np.float32)
    assert hand.shape == (rec.rows, 63)
    np.testing.assert_array_equal(hand, rec.hand)
    glove = np.stack(t.column("observation.right_glove").to_pylist()).astype(np.float32)
    np.testing.assert_array_equal(glove, rec.glove)
    assert t.column("action").to_pylist() == [[0.0]] * rec.rows
    assert t.column("status.head_left_rgb").to_pylist() == rec.status


def test_imu_round_trip_per_row_and_flattened(recorded):
    rec, _, task = recorded
    ep = task.episode(1)
    t = ep.table
    assert t.schema.field("observation.imu").type == pa.list_(pa.list_(pa.float32()))
    assert t.schema.field("imu_ts_ns").type == pa.list_(pa.int64())
    per_row = t.column("observation.imu").to_pylist()
    for i in (0, 1, 150, 299):
        np.testing.assert_array_equal(np.asarray(per_row[i], np.float32).reshape(-1, 6), rec.imu[i])
    ts, samples = ep.imu()
    assert ts.dtype == np.int64 and samples.dtype == np.float32
    np.testing.assert_array_equal(ts, np.concatenate(rec.imu_ts))
    np.testing.assert_array_equal(samples, np.concatenate(rec.imu))


def test_trajectory_points_and_host_ns_round_trip(recorded):
    rec, _, task = recorded
    tr = task.episode(1).trajectory("observation.ego_slam_trajectory")
    want = np.concatenate(rec.traj)
    assert tr.points.shape == (want.shape[0], 8) and tr.points.dtype == np.float64
    np.testing.assert_array_equal(tr.points, want)
    np.testing.assert_array_equal(tr.host_ns, np.concatenate(rec.traj_ns))
    assert tr.host_ns.dtype == np.int64 and tr.has_host_ns
    np.testing.assert_array_equal(tr.rows, np.repeat(np.arange(rec.rows), [len(p) for p in rec.traj]))
    assert tr.frame == "ego_cam_optical"
    assert tr.frame_axes == {"+X": "right", "+Y": "down", "+Z": "forward"}
    meta = task.episode(1).meta
    assert meta["slam_specs"]["observation.ego_slam_trajectory"]["owner"] == {"role": "ego"}
    assert task.info["slam_frames"] == {"observation.ego_slam_trajectory": "ego_cam_optical"}
    assert "gripper_slam_frame" not in task.info  # only an ego trajectory (§8.1 rule 6)


def test_rgb_video_has_one_frame_per_row_and_is_close(recorded):
    rec, _, task = recorded
    ep = task.episode(1)
    path = ep.streams["head_left_rgb"]
    assert path.name == "episode-000.mp4"
    assert count_video_frames(path) == rec.rows
    frames = list(ep.video("head_left_rgb"))
    assert len(frames) == rec.rows
    for i in (0, 100, 299):
        assert frames[i].shape == (H, W, 3) and frames[i].dtype == np.uint8
        err = np.abs(frames[i].astype(np.int16) - _rgb(i).astype(np.int16))
        assert err.mean() < 3.0, (i, err.mean())
    assert task.info["cameras"]["head_left_rgb"] == {"height": H, "width": W}
    assert task.info["video_extensions"] == {"head_left_rgb": "mp4", "head_depth": "mp4"}
    assert "head_depth" not in task.info["cameras"]  # depth slots never enter cameras (§3)


def test_depth_stream_keeps_holes_and_is_close(recorded):
    rec, _, task = recorded
    ep = task.episode(1)
    frames = list(ep.depth("head_depth"))
    assert len(frames) == rec.rows
    for i in (0, 299):
        orig = _depth(i)
        assert frames[i].dtype == np.uint16
        np.testing.assert_array_equal(frames[i] == 0, orig == 0)
        v = orig > 0
        rel = np.abs(frames[i][v].astype(float) - orig[v]) / orig[v]
        assert np.median(rel) < 0.005
    vc = ep.meta["video_codec"]["head_depth"]
    assert vc["codec"] == "hevc12" and vc["frames"] == rec.rows and vc["d_min"] == 100.0


def test_ffv1_depth_stream_is_lossless(tmp_path):
    rec = Recorded(rows=6, seed=3)
    _record(tmp_path, rec, depth_codec="ffv1")
    ep = open_task(tmp_path / "pick_cup").episode(1)
    assert ep.streams["head_depth"].suffix == ".mkv"
    assert open_task(tmp_path / "pick_cup").info["video_extensions"]["head_depth"] == "mkv"
    frames = list(ep.depth("head_depth"))
    assert len(frames) == 6
    for i, f in enumerate(frames):
        np.testing.assert_array_equal(f, _depth(i))


def test_episode_row_has_every_column_and_matching_length(recorded):
    rec, _, task = recorded
    meta = task.episode(1).meta
    assert set(EPISODE_COLUMNS) <= set(meta)
    assert (meta["episode_index"], meta["start_frame_index"], meta["end_frame_index"], meta["length"]) == \
        (1, 0, rec.rows - 1, rec.rows)
    ts32 = rec.ts.astype(np.float32).astype(np.float64)
    assert meta["duration_sec"] == pytest.approx(ts32[-1] - ts32[0] + 1 / 30.0, abs=1e-12)
    raw = pq.read_table(task.layout.episodes_file(1))
    assert raw.num_rows == 1 and raw.schema.field("slam_specs").type == pa.string()
    assert json.loads(raw.column("video_codec")[0].as_py())["head_left_rgb"]["frames"] == rec.rows


# -- column-level sparsity (decisions.md #2, multi_device_storage.md §4.6, §8.1.3, Appendix C) ---------------------

def _sparse_task(tmp_path: Path, rows: list[dict]) -> object:
    tw = TaskWriter(tmp_path, "sparse", fps=30.0)
    imu, imu_ts = imu_columns()
    traj, traj_ns = slam_trajectory_columns()
    ep = tw.begin_episode(columns=[imu, imu_ts, traj, traj_ns, vector_column("observation.left_glove", [4]),
                                   hand_pose_column("left")], sensors=["left_glove"])
    for values in rows:
        ep.add_frame(values)
    ep.finish()
    return open_task(tmp_path / "sparse")


def test_columns_never_filled_are_not_created(tmp_path):
    empty_traj = {"observation.slam_trajectory": np.zeros((0, 8)), "observation.slam_trajectory_ns": [],
                  "observation.imu": np.zeros((0, 6), np.float32), "imu_ts_ns": []}
    task = _sparse_task(tmp_path, [empty_traj] * 5)
    names = task.episode(1).column_names
    for gone in ("observation.slam_trajectory", "observation.slam_trajectory_ns", "observation.imu", "imu_ts_ns",
                 "observation.left_glove"):
        assert gone not in names
        assert gone not in task.info["features"]
    # hand pose is always written (§7.2), zero placeholder
    assert "observation.left_hand_pose" in names
    assert task.episode(1).table.column("observation.left_hand_pose").to_pylist() == [[0.0] * 63] * 5
    assert "slam_frames" not in task.info and task.episode(1).meta["slam_specs"] == {}


def test_trajectory_without_any_host_stamp_has_no_ns_column(tmp_path):
    """§8.1.3: "全段无戳不建 _ns 列": stamps passed but all 0 -> no ``_ns`` column."""
    pts = np.arange(16, dtype=np.float64).reshape(2, 8)
    rows = [{"observation.slam_trajectory": pts if i % 2 else np.zeros((0, 8)),
             "observation.slam_trajectory_ns": np.zeros(2 if i % 2 else 0, np.int64)} for i in range(6)]
    task = _sparse_task(tmp_path, rows)
    ep = task.episode(1)
    assert "observation.slam_trajectory" in ep.column_names
    assert "observation.slam_trajectory_ns" not in ep.column_names
    assert "observation.slam_trajectory_ns" not in task.info["features"]
    tr = ep.trajectory()
    np.testing.assert_array_equal(tr.points, np.concatenate([pts] * 3))
    np.testing.assert_array_equal(tr.host_ns, np.zeros(6, np.int64))
    assert not tr.has_host_ns
    assert tr.frame == "down_left_forward"


def test_one_stamp_in_the_episode_keeps_the_ns_column(tmp_path):
    pts = np.ones((1, 8))
    rows = [{"observation.slam_trajectory": pts, "observation.slam_trajectory_ns": [0]} for _ in range(4)]
    rows[2]["observation.slam_trajectory_ns"] = [777]
    ep = _sparse_task(tmp_path, rows).episode(1)
    assert "observation.slam_trajectory_ns" in ep.column_names
    np.testing.assert_array_equal(ep.trajectory().host_ns, [0, 0, 777, 0])


def test_lockstep_mismatch_is_refused(tmp_path):
    tw = TaskWriter(tmp_path, "t")
    traj, traj_ns = slam_trajectory_columns()
    ep = tw.begin_episode(columns=[traj, traj_ns])
    with pytest.raises(SchemaError, match="lockstep"):
        ep.add_frame({traj.name: np.ones((2, 8)), traj_ns.name: [5]})
    ep.abort()


def test_sensor_stats_count_every_row_even_before_the_first_sample(tmp_path):
    """§4: sensor blocks count rows, all-zero rows included; the writer's accumulator must
    equal a recomputation from data/ even when the sensor first appears after a row group."""
    tw = TaskWriter(tmp_path, "t")
    ep = tw.begin_episode(columns=[vector_column("observation.right_glove", [4])], sensors=["right_glove"])
    for i in range(400):
        ep.add_frame({"observation.right_glove": np.full(4, i, np.float32)} if i >= 300 else {})
    ep.finish()
    stored = read_stats(tmp_path / "t")["observation.right_glove"]
    fresh = recalc_stats(tmp_path / "t")["observation.right_glove"]
    assert stored["count"] == fresh["count"] == 400
    np.testing.assert_allclose(stored["mean"], [np.arange(300, 400).sum() / 400] * 4, rtol=1e-12)
    np.testing.assert_allclose(stored["std"], fresh["std"], rtol=1e-9)
    assert stored["min"] == [0.0] * 4 and stored["max"] == [399.0] * 4


# -- appending to a task whose earlier episodes lack a column (§6.2, §6.7, multi_device_storage §7.2) ---------------

def test_append_episode_with_a_column_earlier_episodes_lack(tmp_path):
    tw = TaskWriter(tmp_path, "t")
    imu, imu_ts = imu_columns()
    ep1 = tw.begin_episode(columns=[imu, imu_ts])
    for i in range(3):
        ep1.add_frame({"observation.imu": np.full((2, 6), i, np.float32), "imu_ts_ns": [i * 10, i * 10 + 5]})
    ep1.finish()
    traj, traj_ns = slam_trajectory_columns(frame="down_left_forward")
    ep2 = tw.begin_episode(columns=[traj, traj_ns])
    for i in range(4):
        ep2.add_frame({traj.name: np.full((1, 8), float(i)), traj_ns.name: [1000 + i]})
    ep2.finish()

    task = open_task(tmp_path / "t")
    e1, e2 = task.episodes()
    assert "observation.slam_trajectory" not in e1.column_names and "observation.imu" in e1.column_names
    assert "observation.imu" not in e2.column_names
    with pytest.raises(SchemaError, match="observation.slam_trajectory"):
        e1.trajectory()
    np.testing.assert_array_equal(e2.trajectory().points[:, 0], [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(e2.trajectory().host_ns, [1000, 1001, 1002, 1003])
    np.testing.assert_array_equal(e1.imu()[0], [0, 5, 10, 15, 20, 25])
    feats = task.info["features"]
    assert {"observation.imu", "observation.slam_trajectory", "observation.slam_trajectory_ns", "action"} <= set(feats)
    assert e1.meta["slam_specs"] == {} and set(e2.meta["slam_specs"]) == {"observation.slam_trajectory"}
    assert task.info["gripper_slam_frame"] == "down_left_forward"
    assert read_stats(tmp_path / "t")["observation.imu"]["count"] == 6  # ep2 adds no IMU samples


def test_legacy_episodes_row_without_new_columns_reads_with_defaults(tmp_path):
    """An episodes row from before v1.3.x lacks force_matrix_specs / slam_specs: read as {} (§6.2)."""
    tw = TaskWriter(tmp_path, "t")
    ep = tw.begin_episode()
    ep.add_frame()
    ep.finish()
    path = tw.layout.episodes_file(1)
    legacy = pa.table({"episode_index": pa.array([1], pa.int64()), "task_index": pa.array([0], pa.int64()),
                       "start_frame_index": pa.array([0], pa.int64()), "end_frame_index": pa.array([0], pa.int64()),
                       "length": pa.array([1], pa.int64()), "created_at": pa.array([1.5e9], pa.float64()),
                       "duration_sec": pa.array([1 / 30], pa.float64()),
                       "drop_stats": pa.array(['{"imu_overflow": 0}']), "video_codec": pa.array(["{}"]),
                       "calibration": pa.array(['{"head_stereo": {"type": "stereo"}}'])})
    pq.write_table(legacy, path)
    # and a new episode appended after it
    ep2 = tw.begin_episode()
    ep2.add_frame()
    ep2.finish()
    task = open_task(tmp_path / "t")
    old, new = task.episodes()
    assert old.meta["force_matrix_specs"] == {} and old.meta["slam_specs"] == {}
    assert old.meta["drop_stats"] == {"imu_overflow": 0}
    assert old.meta["calibration"] == {"head_stereo": {"type": "stereo"}}
    assert new.index == 2 and new.meta["force_matrix_specs"] == {}
    assert pq.read_schema(tw.layout.episodes_file(2)).names == [*EPISODE_COLUMNS, "file_digests"]  # X1


def test_imu_that_stops_for_a_whole_row_group_still_finishes(tmp_path):
    """A 256-row group without any IMU sample (device unplugged) must not break the stats merge."""
    tw = TaskWriter(tmp_path, "t")
    imu, imu_ts = imu_columns()
    ep = tw.begin_episode(columns=[imu, imu_ts])
    for i in range(600):
        k = 2 if i < 100 else 0
        ep.add_frame({"observation.imu": np.full((k, 6), i, np.float32), "imu_ts_ns": np.arange(k) + 10 * i})
    ep.finish()
    assert read_stats(tmp_path / "t")["observation.imu"]["count"] == 200
    assert open_task(tmp_path / "t").episode(1).imu()[1].shape == (200, 6)


def test_refused_row_leaves_every_stream_and_column_untouched(tmp_path):
    """A row refused for a bad frame or bad value must not reach any stream or column:
    videos keep exactly one frame per data row (§8, multi_device_storage §5.3)."""
    from egopool.errors import CodecError

    tw = TaskWriter(tmp_path, "t")
    traj, traj_ns = slam_trajectory_columns()
    ep = tw.begin_episode(columns=[traj, traj_ns],
                          streams=[StreamSpec("a_rgb", "rgb", W, H), StreamSpec("b_depth", "depth", W, H,
                                                                                   codec="ffv1")])
    good = {"a_rgb": _rgb(0), "b_depth": _depth(0)}
    ep.add_frame(images=good)
    with pytest.raises(CodecError, match="shape"):
        ep.add_frame(images={"a_rgb": _rgb(1), "b_depth": _depth(1)[:, :10]})
    with pytest.raises(CodecError, match="uint16"):
        ep.add_frame(images={"a_rgb": _rgb(1), "b_depth": _depth(1).astype(np.float32)})
    with pytest.raises(SchemaError, match="lockstep"):  # the trajectory must not count as filled
        ep.add_frame({traj.name: np.ones((1, 8)), traj_ns.name: []}, images=good)
    ep.add_frame(images=good)
    res = ep.finish()
    assert res.length == 2
    task = open_task(tmp_path / "t")
    e = task.episode(1)
    assert [count_video_frames(p) for p in e.streams.values()] == [2, 2]
    assert traj.name not in e.column_names
    assert e.meta["drop_stats"] == {}


def test_encoder_failure_mid_row_makes_the_episode_refuse_to_finish(tmp_path, monkeypatch):
    from egopool.codecs.video import RgbEncoder
    from egopool.errors import CodecError, EgopoolError

    tw = TaskWriter(tmp_path, "t")
    ep = tw.begin_episode(streams=[StreamSpec("a_rgb", "rgb", W, H), StreamSpec("b_rgb", "rgb", W, H)])
    ep.add_frame(images={"a_rgb": _rgb(0), "b_rgb": _rgb(0)})
    real = RgbEncoder.encode

    def flaky(self, image):
        if self.path.parent.name == "b_rgb":
            raise CodecError("encoder crashed")
        return real(self, image)

    monkeypatch.setattr(RgbEncoder, "encode", flaky)
    with pytest.raises(CodecError, match="crashed"):  # streams encode on their own threads (stream_encoder.py):
        for i in range(1, 40):  # the failure comes back with a later frame of the stream, at the latest
            ep.add_frame(images={"a_rgb": _rgb(i), "b_rgb": _rgb(i)})  # when its queue is full
    monkeypatch.undo()
    with pytest.raises(EgopoolError, match="abort"):
        ep.add_frame(images={"a_rgb": _rgb(2), "b_rgb": _rgb(2)})
    with pytest.raises(EgopoolError, match="not one frame per row"):
        ep.finish()
    ep.abort()
    assert open_task(tmp_path / "t").episodes() == []
    assert tw.next_episode_index() == 1


@pytest.mark.parametrize("what", ["data", "meta", "video", "depth"])
def test_corrupt_files_raise_egopool_errors_naming_the_file(tmp_path, what):
    from egopool.errors import EgopoolError

    rec = Recorded(rows=3, seed=5)
    _record(tmp_path, rec, depth_codec="ffv1")
    task = open_task(tmp_path / "pick_cup")
    ep = task.episode(1)
    target = {"data": ep.files.data, "meta": ep.files.meta, "video": ep.streams["head_left_rgb"],
              "depth": ep.streams["head_depth"]}[what]
    target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 3])  # truncated
    calls = {"data": [lambda: ep.table, lambda: ep.length, lambda: ep.schema, ep.imu],
             "meta": [lambda: ep.meta],
             "video": [lambda: list(ep.video("head_left_rgb"))],
             "depth": [lambda: list(ep.depth("head_depth"))]}[what]
    for call in calls:
        with pytest.raises(EgopoolError, match=target.name):
            call()


def test_remove_if_unused_takes_back_only_an_empty_task_this_writer_created(tmp_path):
    """A recording session that ended before its first episode leaves no empty task (record's
    Ctrl-C before the first row); a task that existed before, or holds anything beyond the files a
    new task starts with, is kept."""
    fresh = TaskWriter(tmp_path, "fresh")
    assert (tmp_path / "fresh" / "meta" / "info.json").is_file()
    assert fresh.remove_if_unused() is True and not (tmp_path / "fresh").exists()
    assert tmp_path.is_dir()  # the recordings root stays

    (tmp_path / "existing").mkdir()
    assert TaskWriter(tmp_path, "existing").remove_if_unused() is False
    assert (tmp_path / "existing" / "meta" / "info.json").is_file()

    used = TaskWriter(tmp_path, "used")
    ep = used.begin_episode(columns=[vector_column("observation.right_glove", [4])])
    ep.add_frame({"observation.right_glove": np.ones(4, np.float32)})
    ep.finish()
    assert used.remove_if_unused() is False
    assert [e.index for e in open_task(tmp_path / "used").episodes()] == [1]

    aborted = TaskWriter(tmp_path, "aborted")  # an aborted episode leaves its N recycled: kept
    ep = aborted.begin_episode(columns=[vector_column("observation.right_glove", [4])])
    ep.add_frame({"observation.right_glove": np.ones(4, np.float32)})
    ep.abort()
    assert (tmp_path / "aborted" / "meta" / "recycled_episode.json").is_file()
    assert aborted.remove_if_unused() is False and (tmp_path / "aborted" / "meta" / "info.json").is_file()
