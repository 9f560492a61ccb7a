"""PooledDataset items equal what the reader gives for the same rows and frames (issue 18)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from egopool.arrowutil import list_column_to_numpy
from egopool.dataset import EpisodeSampler, PooledDataset, delta_indices
from egopool.dataset import index as index_mod
from egopool.errors import SchemaError

FPS = 30.0


def _reader_frames(task, key):
    """{N: (R, ...) every frame of stream key}, decoded by the reader itself."""
    out = {}
    for ep in task.episodes():
        gen = ep.depth(key) if ep.stream_kind(key) == "depth" else ep.video(key)
        out[ep.index] = np.stack(list(gen))
    return out


def _expected_rows(row, length, deltas):
    want = row + np.array([round(d * FPS) for d in deltas])
    return np.clip(want, 0, length - 1), (want < 0) | (want >= length)


def test_random_items_equal_the_readers_decode_across_gops(gop_task, tmp_path):
    deltas = [-0.2, -0.1, 0.0, 0.1]
    keys = ["d435_rgb", "d435_depth", "d435_rgb_2", "d435_depth_2"]
    ds = PooledDataset(gop_task.path, keys=keys, delta_timestamps={"d435_rgb": deltas, "d435_depth": deltas},
                       output="numpy", cache_dir=tmp_path)
    assert len(ds) == 540
    frames = {k: _reader_frames(gop_task, k) for k in keys}
    assert frames["d435_depth"][1].dtype == np.uint16 and frames["d435_rgb"][1].dtype == np.uint8
    rng = np.random.default_rng(7)
    # random order, with items on both sides of the second keyframe (250) and at both edges
    picks = [0, 269, 270, 539, 260, 10, 255, 249, 250, 251, 5, 268, *rng.integers(0, 540, 30).tolist()]
    for i in picks:
        item = ds[i]
        n, row = int(item["episode_index"]), int(item["frame_index"])
        assert (n, row) == (1 + i // 270, i % 270)
        rows, pad = _expected_rows(row, 270, deltas)
        for key in ("d435_rgb", "d435_depth"):
            assert item[key].dtype == frames[key][n].dtype
            np.testing.assert_array_equal(item[key], frames[key][n][rows], err_msg=f"{key} item {i}")
            np.testing.assert_array_equal(item[key + "_is_pad"], pad)
        for key in ("d435_rgb_2", "d435_depth_2"):
            np.testing.assert_array_equal(item[key], frames[key][n][row], err_msg=f"{key} item {i}")
            assert key + "_is_pad" not in item


def test_windows_at_episode_edges_are_clamped_and_flagged(gop_task, tmp_path):
    ds = PooledDataset(gop_task.path, keys=["d435_rgb", "action", "timestamp"], output="numpy", cache_dir=tmp_path,
                       delta_timestamps={"d435_rgb": [-2 / 30, 0, 1 / 30], "action": [-1 / 30, 0, 1 / 30, 2 / 30]})
    rgb = _reader_frames(gop_task, "d435_rgb")
    ep1 = gop_task.episode(1)
    action = list_column_to_numpy(ep1.columns(["action"]).column("action"))
    first, last = ds[0], ds[269]
    np.testing.assert_array_equal(first["d435_rgb_is_pad"], [True, False, False])
    np.testing.assert_array_equal(first["d435_rgb"], rgb[1][[0, 0, 1]])
    np.testing.assert_array_equal(first["action_is_pad"], [True, False, False, False])
    np.testing.assert_array_equal(first["action"], action[[0, 0, 1, 2]])
    np.testing.assert_array_equal(last["d435_rgb_is_pad"], [False, False, True])
    np.testing.assert_array_equal(last["d435_rgb"], rgb[1][[267, 269, 269]])
    np.testing.assert_array_equal(last["action_is_pad"], [False, False, True, True])
    np.testing.assert_array_equal(last["action"], action[[268, 269, 269, 269]])
    # the next item is episode 2's first row: its own edge, not episode 1's rows
    np.testing.assert_array_equal(ds[270]["d435_rgb"], rgb[2][[0, 0, 1]])
    assert first["timestamp"] == ep1.columns(["timestamp"]).column("timestamp")[0].as_py()


def test_delta_indices_follow_lerobot():
    assert delta_indices({"a": [-0.1, 0.0, 1 / 30]}, 30.0)["a"].tolist() == [-3, 0, 1]
    with pytest.raises(ValueError, match=r"not a multiple of 1/30 s"):
        delta_indices({"a": [0.05]}, 30.0)
    assert delta_indices({"a": [0.05]}, 30.0, tolerance_s=0.02)["a"].tolist() == [2]  # round(1.5) as lerobot


def test_ffv1_depth_is_exact(ffv1_task, tmp_path):
    ds = PooledDataset(ffv1_task.path, keys=["d435_depth"], output="numpy", cache_dir=tmp_path,
                       delta_timestamps={"d435_depth": [-1 / 30, 0.0]})
    frames = _reader_frames(ffv1_task, "d435_depth")
    assert ffv1_task.episode(1).stream_path("d435_depth").suffix == ".mkv"
    for i in [29, 3, 0, 17, 16]:
        np.testing.assert_array_equal(ds[i]["d435_depth"], frames[1][[max(i - 1, 0), i]])


def test_columns_imu_trajectories_forces_equal_the_reader(full_task, tmp_path):
    fm = "observation.gripper_left_force_matrix"
    traj = "observation.ego_slam_trajectory"
    cols = ["action", "hardware_ns", "observation.right_hand_pose", "observation.left_glove",
            "observation.gripper_state", "status.left_glove"]
    ds = PooledDataset(full_task.path, keys=[*cols, fm, "observation.imu", "imu_ts_ns", traj, traj + "_ns",
                                             "stereo_left", "stereo_depth"],
                       output="numpy", cache_dir=tmp_path)
    assert len(ds) == 42
    for i in [0, 20, 21, 41, 7, 30]:
        item = ds[i]
        ep = full_task.episode(int(item["episode_index"]))
        r = int(item["frame_index"])
        table = ep.columns(cols)
        for c in cols:
            want = table.column(c)[r].as_py()
            got = item[c]
            if isinstance(want, list):
                # the shape info.json declares (issue 28: a [21, 3] hand pose came back as (63,))
                shape = tuple(full_task.info["features"][c]["shape"])
                assert got.shape == (shape if len(shape) > 1 else (len(want),)), (c, got.shape, shape)
                assert got.dtype == np.float32 and got.ravel().tolist() == pytest.approx(want, abs=0, rel=0)
            else:
                assert got == want
        np.testing.assert_array_equal(item[fm], ep.force_matrix(fm, r))
        assert item[fm].dtype == np.float32 and item[fm].shape == (250, 250, 3)
        s = ep.imu_samples()
        mine = s.rows == r
        order = np.argsort(s.ts_ns[mine], kind="stable")
        np.testing.assert_array_equal(item["observation.imu"], s.values[mine][order])
        np.testing.assert_array_equal(item["imu_ts_ns"], s.ts_ns[mine][order])
        assert item["observation.imu"].shape[1] == 6 and item["observation.imu"].shape[0] > 0
        t = ep.trajectory(traj)
        np.testing.assert_array_equal(item[traj], t.points[t.rows == r])
        np.testing.assert_array_equal(item[traj + "_ns"], t.host_ns[t.rows == r])
        np.testing.assert_array_equal(item["stereo_left"], list(ep.video("stereo_left"))[r])
        np.testing.assert_array_equal(item["stereo_depth"], list(ep.depth("stereo_depth"))[r])


def test_fixed_imu_window_fills_from_earlier_rows_and_pads_the_start(full_task, tmp_path):
    ds = PooledDataset(full_task.path, keys=["observation.imu"], samples={"observation.imu": 40}, output="numpy",
                       cache_dir=tmp_path)
    ep = full_task.episode(1)
    s = ep.imu_samples()
    order = np.lexsort((s.ts_ns, s.rows))
    values, rows = s.values[order], s.rows[order]
    for r in [0, 1, 10, 20]:
        end = int(np.searchsorted(rows, r, side="right"))
        item = ds[r]
        got, pad = item["observation.imu"], item["observation.imu_is_pad"]
        assert got.shape == (40, 6) and pad.shape == (40,)
        n_real = min(40, end)
        assert int((~pad).sum()) == n_real and not pad[-1]
        np.testing.assert_array_equal(got[~pad], values[end - n_real:end])
        assert not got[pad].any()
    assert ds[0]["observation.imu_is_pad"].any()  # row 0 alone has fewer than 40 samples


def test_demo_task_items_equal_the_reader(demo_task, tmp_path):
    ep = demo_task.episode(1)
    rgb = [k for k in ep.streams if ep.stream_kind(k) == "rgb"]
    depth = [k for k in ep.streams if ep.stream_kind(k) == "depth"]
    assert rgb and depth
    keys = [rgb[0], depth[0]]
    ds = PooledDataset(demo_task.path, keys=keys, delta_timestamps={rgb[0]: [-1 / 30, 0.0]}, output="numpy",
                       cache_dir=tmp_path, channels_first=True)
    frames = {k: _reader_frames(demo_task, k) for k in keys}
    for i in [14, 0, 29, 15, 3, 22, 8]:
        item = ds[i]
        n, row = int(item["episode_index"]), int(item["frame_index"])
        want = frames[rgb[0]][n][[max(row - 1, 0), row]]
        np.testing.assert_array_equal(item[rgb[0]], np.moveaxis(want, -1, -3))
        assert item[rgb[0]].shape[1] == 3
        np.testing.assert_array_equal(item[depth[0]], frames[depth[0]][n][row])


def test_filters(gop_task, tmp_path):
    ds = PooledDataset(gop_task.path, keys=["action"], episodes=[2], output="numpy", cache_dir=tmp_path)
    assert len(ds) == 270 and int(ds[0]["episode_index"]) == 2
    assert len(PooledDataset([gop_task.path.parent], keys=["action"], task_names=["sim_d435x2"], output="numpy",
                             cache_dir=tmp_path)) == 540
    assert len(PooledDataset(gop_task.path, keys=["action"], episodes={"sim_d435x2": [1]}, output="numpy",
                             cache_dir=tmp_path)) == 270
    with pytest.raises(ValueError, match="IMU and trajectory"):
        PooledDataset(gop_task.path, keys=["action"], delta_timestamps={"observation.imu": [0.0]}, output="numpy")
    with pytest.raises(FileNotFoundError, match="neither a task"):
        PooledDataset(tmp_path / "nothing", keys=["action"], output="numpy")


def test_index_is_cached_and_rebuilt_when_the_task_changes(gop_task, tmp_path, monkeypatch):
    builds = []
    real = index_mod._build
    monkeypatch.setattr(index_mod, "_build", lambda p: builds.append(p) or real(p))
    PooledDataset(gop_task.path, keys=["action"], output="numpy", cache_dir=tmp_path)
    assert len(builds) == 1 and list((tmp_path / "dataset_index").glob("*.json"))
    ds = PooledDataset(gop_task.path, keys=["action"], output="numpy", cache_dir=tmp_path)
    assert len(builds) == 1 and len(ds) == 540  # from the cache
    for _ in range(3):
        ds[5]  # items never rescan
    assert len(builds) == 1
    data = gop_task.episode(2).files.data
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    PooledDataset(gop_task.path, keys=["action"], output="numpy", cache_dir=tmp_path)
    assert len(builds) == 2


def test_episode_sampler_keeps_episodes_together(gop_task, tmp_path):
    ds = PooledDataset(gop_task.path, keys=["action"], output="numpy", cache_dir=tmp_path)
    s = EpisodeSampler(ds, seed=3)
    orders = [list(s), list(s)]
    for order in orders:
        assert sorted(order) == list(range(540))
        first = order[:270]
        assert first == sorted(first) and first[-1] - first[0] == 269  # one episode, ascending
    runs = list(EpisodeSampler(ds, run=30, seed=1))
    assert sorted(runs) == list(range(540))
    for k in range(0, 540, 30):
        chunk = runs[k:k + 30]
        assert chunk == list(range(chunk[0], chunk[0] + 30)) and chunk[0] % 30 == 0
    assert runs != sorted(runs)


def test_sequential_items_decode_forward_without_seeking(gop_task, tmp_path):
    ds = PooledDataset(gop_task.path, keys=["d435_rgb", "d435_depth"], output="numpy", cache_dir=tmp_path,
                       delta_timestamps={"d435_rgb": [-0.1, 0.0], "d435_depth": [-0.1, 0.0]})
    frames = {k: _reader_frames(gop_task, k) for k in ("d435_rgb", "d435_depth")}
    for i in range(240, 262):  # across the keyframe at 250
        item = ds[i]
        for k in frames:
            np.testing.assert_array_equal(item[k], frames[k][1][[max(i - 3, 0), i]])
    decoders = list(ds._w.decoders._open.values())
    # the first item seeks, the second once more (its window's first frame was not kept: a shuffled
    # sampler would not ask it), then every item decodes forward
    assert len(decoders) == 2 and [d.seeks for d in decoders] == [2, 2]
    ds[100]  # backwards: one seek more each
    assert [d.seeks for d in decoders] == [3, 3]


def test_filters_and_keys_that_match_nothing_are_named(gop_task, tmp_path):
    """An episode, task name or key spelled wrong is a one-line error, not an empty dataset (rev2)."""
    kw = {"output": "numpy", "cache_dir": tmp_path}
    with pytest.raises(ValueError, match=r"sim_d435x2: no episode 7 \(episodes: 1, 2\)"):
        PooledDataset(gop_task.path, keys=["action"], episodes=[2, 7], **kw)
    with pytest.raises(ValueError, match=r"no episode 0 \(episodes: 1, 2\)"):
        PooledDataset(gop_task.path, keys=["action"], episodes={"sim_d435x2": [0]}, **kw)
    with pytest.raises(ValueError, match=r"names task\(s\) \['other'\] that are not among"):
        PooledDataset(gop_task.path, keys=["action"], episodes={"other": [1]}, **kw)
    with pytest.raises(ValueError, match=r"task_names \['sim_x'\] match none of the tasks \['sim_d435x2'\]"):
        PooledDataset(gop_task.path, keys=["action"], task_names=["sim_x"], **kw)
    with pytest.raises(ValueError, match=r"got the string 'action': use keys=\['action'\]"):
        PooledDataset(gop_task.path, keys="action", **kw)
    with pytest.raises(ValueError, match=r"must be a non-empty list of seconds, got 0.0"):
        PooledDataset(gop_task.path, keys=["action"], delta_timestamps={"action": 0.0}, **kw)


def test_a_key_no_task_has_is_refused_when_the_dataset_is_made(gop_task, tmp_path):
    """keys=["nosuch"] fails in the constructor, naming the key and the keys that exist (not at the first item);
    a column the data has without info.json declaring it is accepted (read from the first episode)."""
    kw = {"output": "numpy", "cache_dir": tmp_path}
    with pytest.raises(ValueError, match=r"keys \['nosuch'\]: no stream or column of that name in .*sim_d435x2; "
                                         r"the keys that exist: .*action.*d435_rgb") as exc:
        PooledDataset(gop_task.path, keys=["action", "nosuch"], **kw)
    assert "\n" not in str(exc.value)
    declared = set(gop_task.info["features"]) | set(gop_task.info["video_extensions"])
    undeclared = [c for c in gop_task.episode(1).column_names if c not in declared and c not in
                  ("index", "episode_index", "frame_index", "timestamp", "task_index", "wall_time", "hardware_ns",
                   "raw_hw_ns")]
    assert undeclared, "the simulated task has a column info.json does not declare"
    ds = PooledDataset(gop_task.path, keys=[undeclared[0]], **kw)
    np.testing.assert_array_equal(ds[3][undeclared[0]], np.asarray(gop_task.episode(1).table.column(undeclared[0])
                                                                   .to_pylist()[3]))


def test_a_missing_video_is_named_and_a_task_given_twice_counts_once(gop_task, tmp_path):
    """A declared stream whose file is gone says so (not "neither a stream nor a column"); the same task
    passed twice is indexed once (rev2)."""
    import shutil

    kw = {"output": "numpy", "cache_dir": tmp_path / "cache"}
    assert len(PooledDataset([gop_task.path, gop_task.path], keys=["action"], **kw)) == \
        len(PooledDataset(gop_task.path, keys=["action"], **kw))
    task = tmp_path / gop_task.path.name
    shutil.copytree(gop_task.path, task)
    video = sorted((task / "videos").rglob("episode-000.mp4"))[0]
    key = video.parent.name
    video.unlink()
    ds = PooledDataset(task, keys=[key], **kw)
    with pytest.raises(SchemaError, match=rf"episode 1 has no file for stream '{key}', which the task declares"):
        ds[0]
