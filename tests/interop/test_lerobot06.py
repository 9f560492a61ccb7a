"""``export lerobot`` / ``import lerobot`` against the real lerobot 0.6.1 (torchcodec), in its own Python 3.12 venv.

.ci/run builds ``.venv-lerobot06`` (``EGOPOOL_EXTRAS=lerobot06``, scripts/install-extra) and runs this file
there with ``-m lerobot06``; the main suite leaves it out (``-m "not keypoints and not lerobot06"``).
docs/decisions.md I14-I17.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from egopool import StreamSpec, TaskWriter, open_task, vector_column
from egopool.cli.app import main
from egopool.errors import FormatError
from egopool.interop import export_lerobot, import_lerobot
from egopool.interop.lerobot_depth import LeRobotDepthMap

from .lerobot_field import depth_bound

pytestmark = [pytest.mark.lerobot06, pytest.mark.extra("lerobot06")]

DEPTH = LeRobotDepthMap()


def _lerobot06():
    pytest.importorskip("torchcodec")
    lerobot = pytest.importorskip("lerobot")
    if tuple(int(x) for x in lerobot.__version__.split(".")[:2]) < (0, 6):
        pytest.skip(f"lerobot {lerobot.__version__} is installed; these tests are of lerobot >= 0.6")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset


@pytest.mark.parametrize("which", ["demo_task", "sim_task", "d435x2_task"])
def test_lerobot06_reads_every_frame_and_window_of_the_export(request, which, tmp_path):
    LeRobotDataset = _lerobot06()
    task = request.getfixturevalue(which)
    out = tmp_path / "lr"
    result = export_lerobot(task.path, out)
    depth_streams = {s.name: s.key for s in result.plan.streams if s.depth}
    rgb_streams = {s.name: s.key for s in result.plan.streams if not s.depth}
    assert depth_streams, "every task here has a depth stream"
    fps = result.plan.fps
    ds = LeRobotDataset("local/x", root=out, video_backend="torchcodec")
    assert sorted(ds.meta.depth_keys) == sorted(depth_streams)
    assert ds.meta.info["codebase_version"] == "v3.0" and ds.fps == fps
    start = 0
    for e, ep in enumerate(task.episodes()):
        data = pq.ParquetFile(out / "data" / "chunk-000" / f"file-{e:03d}.parquet")
        assert data.metadata.num_row_groups == 1  # one row group per episode (lerobot #3807)
        rgb = {n: list(ep.video(k)) for n, k in rgb_streams.items()}
        depth = {n: list(ep.depth(k)) for n, k in depth_streams.items()}
        for fi in range(ep.length):
            item = ds[start + fi]
            assert (int(item["episode_index"]), int(item["frame_index"])) == (e, fi)
            for name, frames in rgb.items():
                got = item[name].numpy().transpose(1, 2, 0) * 255.0
                assert np.abs(got - frames[fi]).max() <= 1e-3, (name, fi)
            for name, frames in depth.items():
                got, want = item[name].numpy()[0], frames[fi]
                hole = want == 0
                assert np.all(got[hole] == DEPTH.depth_min * 1000)  # a hole reads as depth_min (I14)
                err = np.abs(got[~hole].astype(np.float64) - want[~hole])
                assert np.all(err <= depth_bound(want[~hole])), (name, fi, err.max())
        start += ep.length
    # a window: the frame before each one, as a policy asks for it (delta_timestamps)
    keys = list(rgb_streams) + list(depth_streams)
    windowed = LeRobotDataset("local/x", root=out, video_backend="torchcodec",
                              delta_timestamps={k: [-1 / fps, 0.0] for k in keys})
    for i in range(len(windowed)):
        item = windowed[i]
        for k in keys:
            np.testing.assert_array_equal(item[k][1].numpy(), ds[i][k].numpy())
            prev = ds[i - 1][k].numpy() if int(ds[i]["frame_index"]) > 0 else ds[i][k].numpy()
            np.testing.assert_array_equal(item[k][0].numpy(), prev)
    mapping = json.loads((out / "egopool_mapping.json").read_text())
    for name in depth_streams:
        stated = mapping["features"][name]["depth"]
        assert stated["max_abs_error_mm"] <= 3.0 and stated["pixels"] > 0


def _reference_stats(task, out, features, name_to_key):
    """lerobot 0.6.1's own ``compute_episode_stats`` of each exported episode (depth: its image path, on the
    sampled frames the writer would hand it), aggregated by its ``aggregate_stats``; std: numpy's exact."""
    from lerobot.datasets.compute_stats import (aggregate_stats, auto_downsample_height_width, compute_episode_stats,
                                                get_feature_stats, sample_indices)

    refs = []
    for e, ep in enumerate(task.episodes()):
        table = pq.read_table(out / "data" / "chunk-000" / f"file-{e:03d}.parquet")
        data, numeric = {}, {}
        for name, feat in features.items():
            if feat["dtype"] in ("video", "string") or name == "timestamp":
                continue
            vals = np.asarray(table.column(name).to_pylist(), dtype=feat["dtype"])
            data[name] = vals.reshape(-1) if list(feat["shape"]) == [1] else vals
            numeric[name] = feat
        data["timestamp"] = data["frame_index"] / int(json.loads((out / "meta" / "info.json").read_text())["fps"])
        numeric["timestamp"] = features["timestamp"]
        ref = compute_episode_stats(data, numeric)
        for k in ref:
            x = np.asarray(data[k], np.float64)
            ref[k]["std"] = np.std(x.reshape(-1, 1) if x.ndim == 1 else x.reshape(-1, x.shape[-1]), axis=0)
        for name, key in name_to_key.items():
            frames = list(ep.depth(key))
            sampled = np.stack([auto_downsample_height_width(frames[i][None]) for i in sample_indices(len(frames))])
            block = get_feature_stats(sampled, axis=(0, 2, 3), keepdims=True)
            block = {k: v if k == "count" else np.squeeze(v, axis=0) for k, v in block.items()}
            block["std"] = np.std(sampled.astype(np.float64)).reshape(1, 1, 1)
            ref[name] = block
        refs.append(ref)
    return refs, aggregate_stats(refs)


@pytest.mark.parametrize("which, state", [("sim_task", ["observation.gripper_state"]), ("demo_task", []),
                                          ("d435x2_task", ["observation.left_hand_pose"])])
def test_stats_agree_with_lerobot06s_own_functions(request, which, state, tmp_path):
    """Every feature's block, depth included (the demo's real depth with holes, d435x2's two depth streams)."""
    _lerobot06()
    task = request.getfixturevalue(which)
    out = tmp_path / "lr"
    result = export_lerobot(task.path, out, state=state)
    features = json.loads((out / "meta" / "info.json").read_text())["features"]
    depth = {s.name: s.key for s in result.plan.streams if s.depth}
    _, want = _reference_stats(task, out, features, depth)
    got = json.loads((out / "meta" / "stats.json").read_text())
    for name, block in want.items():
        for key, w in block.items():
            g = np.asarray(got[name][key])
            assert g.shape == np.asarray(w).shape, (name, key)
            if key in ("min", "max", "count"):
                np.testing.assert_array_equal(g, w, err_msg=f"{name} {key}")
            else:  # lerobot sums float32 (and, since 0.6, <= 16-bit integers promoted to float32) in float32:
                # its rounding is relative to the values' magnitude, not to a mean near 0 (I16)
                scale = np.maximum(np.abs(np.asarray(block["min"], np.float64)), np.abs(np.asarray(block["max"],
                                                                                                       np.float64)))
                assert np.all(np.abs(g - np.asarray(w, np.float64)) <= 2e-5 * scale + 1e-9), (name, key, g, w)
    for name in depth:
        assert np.asarray(got[name]["mean"]).shape == (1, 1, 1) and got[name]["max"][0][0][0] > 255


def _write_own(root: Path, features: dict, episodes: int, fps: int, seed: int):
    """A dataset with the same features written by lerobot 0.6.1's own writer (H.264 RGB, its default depth)."""
    from lerobot.configs.video import RGBEncoderConfig
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    frame_keys = ("timestamp", "frame_index", "episode_index", "index", "task_index")
    feats = {}
    for k, v in features.items():
        if k in frame_keys:
            continue
        f = {"dtype": v["dtype"], "shape": tuple(v["shape"]), "names": v["names"]}
        if v["dtype"] == "video" and (v.get("info") or {}).get("is_depth_map"):
            f["info"] = {"is_depth_map": True}
        feats[k] = f
    ds = LeRobotDataset.create("local/own", fps=fps, features=feats, root=root,
                               rgb_encoder=RGBEncoderConfig(vcodec="h264"))
    rng = np.random.default_rng(seed)
    for _ in range(episodes):
        for i in range(7):
            frame: dict = {"task": "recorded by lerobot"}
            for k, f in feats.items():
                shape = f["shape"]
                if f["dtype"] == "video" and shape[-1] == 1:
                    frame[k] = rng.integers(300, 4000, shape).astype(np.uint16)
                elif f["dtype"] == "video":
                    frame[k] = rng.integers(0, 255, shape, dtype=np.uint8)
                elif f["dtype"] == "string":
                    frame[k] = "x"
                elif np.dtype(f["dtype"]).kind in "uib":
                    frame[k] = rng.integers(0, 2, shape).astype(f["dtype"])
                else:
                    frame[k] = (rng.normal(size=shape) + i).astype(f["dtype"])
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    return LeRobotDataset("local/own", root=root, video_backend="torchcodec")


def _rgbd_task(root: Path):
    """2 episodes of a gripper state [3], an RGB and a depth stream (with holes) at 15 fps."""
    tw = TaskWriter(root, "rgbd", fps=15.0)
    rng = np.random.default_rng(4)
    for n in (9, 6):
        ep = tw.begin_episode([vector_column("observation.gripper_state", [3])],
                              [StreamSpec("cam_rgb", "rgb", 64, 48), StreamSpec("cam_depth", "depth", 64, 48)])
        for i in range(n):
            depth = rng.integers(300, 6000, (48, 64)).astype(np.uint16)
            depth[:5] = 0
            ep.add_frame({"observation.gripper_state": rng.normal(size=3).astype(np.float32)},
                         hardware_ns=(i + 1) * 66_666_667,
                         images={"cam_rgb": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8), "cam_depth": depth})
        ep.finish()
    return open_task(root / "rgbd")


def test_merge_datasets_of_an_export_and_a_dataset_lerobot06_wrote(tmp_path):
    """lerobot 0.6.1's merge_datasets itself fails on any 2-D (ArrayND) feature, two datasets it wrote included
    (pyarrow 'Did not pass numpy.dtype object' rewriting the data): the task here has vectors, RGB and depth."""
    LeRobotDataset = _lerobot06()
    from lerobot.datasets.dataset_tools import merge_datasets

    out = tmp_path / "lr"
    export_lerobot(_rgbd_task(tmp_path).path, out)
    features = json.loads((out / "meta" / "info.json").read_text())["features"]
    ours = LeRobotDataset("local/ours", root=out, video_backend="torchcodec")
    own = _write_own(tmp_path / "own", features, 2, ours.fps, 5)
    merged = merge_datasets([ours, own], "local/merged", output_dir=tmp_path / "merged")
    assert merged.num_episodes == ours.num_episodes + 2 and len(merged) == len(ours) + 14
    assert sorted(merged.meta.depth_keys) == sorted(ours.meta.depth_keys)
    for i in (0, len(ours) - 1):
        for k in ours.meta.camera_keys:
            np.testing.assert_array_equal(merged[i][k].numpy(), ours[i][k].numpy())


def test_round_trip_lerobot06_writer_import_export_reader(tmp_path):
    """lerobot's writer -> import lerobot -> export lerobot -> lerobot's reader: the same values (depth included:
    the import stores the millimetres lerobot reads, and quantising them again gives the same codes)."""
    LeRobotDataset = _lerobot06()
    features = {"observation.state": {"dtype": "float32", "shape": [3], "names": ["a", "b", "c"]},
                "observation.hand": {"dtype": "float32", "shape": [21, 3], "names": None},
                "observation.images.cam": {"dtype": "video", "shape": [48, 64, 3],
                                           "names": ["height", "width", "channels"]},
                "observation.images.depth": {"dtype": "video", "shape": [48, 64, 1],
                                             "names": ["height", "width", "channels"], "info": {"is_depth_map": True}}}
    own = _write_own(tmp_path / "own", features, 2, 15, 9)  # 2 episodes in one data file: 2 row groups
    assert pq.ParquetFile(tmp_path / "own" / "data" / "chunk-000" / "file-000.parquet").metadata.num_row_groups == 2
    result = import_lerobot(tmp_path / "own", tmp_path / "rec", task="own")
    assert any("depth videos decoded" in n for n in result.notes)
    assert main(["validate", str(tmp_path / "rec" / "own")]) == 0
    export_lerobot(tmp_path / "rec" / "own", tmp_path / "back", state=["observation.state"])
    back = LeRobotDataset("local/back", root=tmp_path / "back", video_backend="torchcodec")
    assert len(back) == len(own) == 14 and back.meta.depth_keys == ["observation.images.depth"]
    for i in range(len(own)):
        a, b = own[i], back[i]
        np.testing.assert_array_equal(b["observation.images.depth"].numpy(), a["observation.images.depth"].numpy())
        np.testing.assert_array_equal(b["observation.images.cam"].numpy(), a["observation.images.cam"].numpy())
        np.testing.assert_array_equal(b["observation.state"].numpy(), a["observation.state"].numpy())
        np.testing.assert_array_equal(b["observation.hand"].numpy(), a["observation.hand"].numpy())


def test_an_unknown_depth_encoding_is_refused_in_one_line(tmp_path):
    _lerobot06()
    features = {"observation.state": {"dtype": "float32", "shape": [2], "names": None},
                "observation.images.depth": {"dtype": "video", "shape": [24, 32, 1],
                                             "names": ["height", "width", "channels"], "info": {"is_depth_map": True}}}
    _write_own(tmp_path / "own", features, 1, 15, 3)
    info_path = tmp_path / "own" / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"]["observation.images.depth"]["info"]["video.use_log"] = "sometimes"
    info_path.write_text(json.dumps(info))
    with pytest.raises(FormatError, match="video.use_log is 'sometimes', not true/false"):
        import_lerobot(tmp_path / "own", tmp_path / "rec", task="t")
    info["features"]["observation.images.depth"]["info"]["video.use_log"] = True
    info["features"]["observation.images.depth"]["info"]["video.pix_fmt"] = "yuv420p"
    info_path.write_text(json.dumps(info))
    with pytest.raises(FormatError, match="an encoding egopool does not know") as exc:
        import_lerobot(tmp_path / "own", tmp_path / "rec", task="t")
    assert "\n" not in str(exc.value.message) and not (tmp_path / "rec" / "t").exists()


def test_per_frame_task_strings_survive_import_and_export(tmp_path):
    """lerobot 0.6.1 writes tasks 'pick thing 0' / 'pick thing 1' (and a second task inside episode 1): import keeps
    each frame's text in observation.language_task, export writes it back as LeRobot's task (decisions I24)."""
    LeRobotDataset = _lerobot06()
    ds = LeRobotDataset.create("local/own", fps=10, features={"observation.state": {"dtype": "float32", "shape": (2,),
                                                                                    "names": None}},
                               root=tmp_path / "own")
    want = [["pick thing 0"] * 4, ["pick thing 1"] * 2 + ["place thing 1"] * 3]
    for e, tasks in enumerate(want):
        for i, t in enumerate(tasks):
            ds.add_frame({"task": t, "observation.state": np.array([e, i], np.float32)})
        ds.save_episode()
    ds.finalize()
    result = import_lerobot(tmp_path / "own", tmp_path / "rec", task="own")
    assert any("observation.language_task" in n for n in result.notes)
    pooled = open_task(tmp_path / "rec" / "own")
    got = [ep.columns(["observation.language_task"]).column(0).to_pylist() for ep in pooled.episodes()]
    assert got == want
    export_lerobot(tmp_path / "rec" / "own", tmp_path / "back")
    back = LeRobotDataset("local/back", root=tmp_path / "back", video_backend="torchcodec")
    assert [back[i]["task"] for i in range(len(back))] == want[0] + want[1]
    assert sorted(back.meta.tasks.index) == ["pick thing 0", "pick thing 1", "place thing 1"]
    assert list(back.meta.episodes["tasks"]) == [["pick thing 0"], ["pick thing 1", "place thing 1"]]
    info = json.loads((tmp_path / "back" / "meta" / "info.json").read_text())
    assert info["total_tasks"] == 3 and "observation.language_task" not in info["features"]


def test_a_lerobot_datasets_action_is_the_default_export_action(tmp_path):
    """import renames LeRobot's action to observation.action (the pooled action is the placeholder); the export
    without --action writes it back as action, with its names (decisions I25)."""
    LeRobotDataset = _lerobot06()
    ds = LeRobotDataset.create("local/own", fps=10, root=tmp_path / "own",
                               features={"action": {"dtype": "float32", "shape": (3,), "names": ["x", "y", "grip"]}})
    for e in range(2):
        for i in range(4):
            ds.add_frame({"task": "t", "action": np.array([e, i, 0.5 * i], np.float32)})
        ds.save_episode()
    ds.finalize()
    import_lerobot(tmp_path / "own", tmp_path / "rec", task="own")
    result = export_lerobot(tmp_path / "rec" / "own", tmp_path / "back")
    assert not any("constant" in w for w in result.warnings)
    assert {"from": "observation.action", "to": "action"}.items() <= next(
        r for r in result.plan.renamed if r["from"] == "observation.action").items()
    info = json.loads((tmp_path / "back" / "meta" / "info.json").read_text())
    assert info["features"]["action"]["names"] == ["x", "y", "grip"]
    assert "observation.action" not in info["features"]
    back = LeRobotDataset("local/back", root=tmp_path / "back", video_backend="torchcodec")
    got = np.stack([back[i]["action"].numpy() for i in range(len(back))])
    np.testing.assert_array_equal(got, [[e, i, 0.5 * i] for e in range(2) for i in range(4)])
