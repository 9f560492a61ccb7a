"""``export lerobot`` statistics are lerobot 0.4.4's own: its shapes, its values on the same data, its merge.

lerobot's writer takes the statistics of a feature per component of its last axis (a ``[21, 3]``
hand pose gives ``(3,)`` blocks, a ``[16, 16]`` glove ``(16,)``, a uint16 ``[H, W]`` depth ``(W,)``
over every frame) and of a video per channel ``(3, 1, 1)`` on sampled frames; quantiles come from a
5000-bin histogram. Blocks of other shapes make lerobot's ``aggregate_stats`` (and so
``merge_datasets``) raise ``ValueError`` (issue 16 G). The reference values here are computed by
lerobot's own functions on the exported data; the one place egopool differs on purpose is ``std``: lerobot 0.4.4 takes it
as ``sqrt(E[x²] - E[x]²)`` in the data's own dtype, which wraps for uint8 images and uint16
(lerobot issue 3682, std 0) and cancels to 0 for a float64 Unix time with a spread of 0.2 s
(lerobot PR 4704). egopool writes the exact population std, compared here with numpy's ``std`` of
the vectors lerobot takes statistics of.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from egopool import StreamSpec, TaskWriter, hand_pose_column, open_task, vector_column
from egopool.interop import export_lerobot

from .lerobot_env import lerobot_dataset_class, write_with_lerobot

FPS = 15
LENGTHS = (12, 9)
_FRAME_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def _task(root, *, two_d: bool = True, size=(320, 240)):
    """2 episodes: gripper state [3] (+ hand pose [21, 3], glove [16, 16], depth) and an RGB stream."""
    w, h = size
    tw = TaskWriter(root, "stats", fps=float(FPS))
    rng = np.random.default_rng(7)
    for n in LENGTHS:
        cols = [vector_column("observation.gripper_state", [3])]
        streams = [StreamSpec("cam_rgb", "rgb", w, h)]
        if two_d:
            cols += [hand_pose_column("right"), vector_column("observation.left_glove", [16, 16], "uint16")]
            streams.append(StreamSpec("cam_depth", "depth", 64, 48))
        ep = tw.begin_episode(cols, streams)
        base = rng.integers(0, 200, (h, w, 3), dtype=np.uint8)
        for i in range(n):
            row = {"observation.gripper_state": rng.normal([0.02, 5.0, -1.0], [0.01, 2.0, 0.5]).astype(np.float32)}
            images = {"cam_rgb": np.roll(base, 3 * i, axis=1) + np.uint8(i)}
            if two_d:
                row["observation.right_hand_pose"] = (rng.normal(size=(21, 3)) * [0.05, 0.08, 0.02]
                                                      + [0.3, -0.1, 0.5]).astype(np.float32)
                row["observation.left_glove"] = rng.integers(0, 4000, (16, 16)).astype(np.uint16)
                depth = rng.integers(400, 3000, (48, 64)).astype(np.uint16)
                depth[:4] = 0  # holes
                images["cam_depth"] = depth
            ep.add_frame(row, hardware_ns=(i + 1) * 66_666_667, images=images)
        ep.finish()
    return open_task(root / "stats")


def _data(out, e: int, features) -> dict[str, np.ndarray]:
    """Episode e's exported columns as lerobot's writer buffers them: ``(R,)`` scalars, ``(R, *shape)``."""
    table = pq.read_table(out / "data" / "chunk-000" / f"file-{e:03d}.parquet")
    got = {}
    for name, feat in features.items():
        if feat["dtype"] in ("video", "string"):
            continue
        col = table.column(name).combine_chunks()
        shape = [int(s) for s in feat["shape"]]
        while hasattr(col, "flatten") and col.type.num_fields == 1:  # nested fixed-size lists
            col = col.flatten()
        got[name] = col.to_numpy(zero_copy_only=False).reshape(-1, *shape) if shape != [1] else col.to_numpy()
    got["timestamp"] = got["frame_index"] / FPS  # lerobot buffers the float64 frame_index / fps
    return got


def _episode_stats(out, features):
    """Per-episode blocks of ``meta/episodes`` (the ``stats/<feature>/<key>`` columns)."""
    rows = pq.read_table(out / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    per = []
    for row in rows:
        blocks: dict[str, dict[str, np.ndarray]] = {}
        for col, v in row.items():
            if col.startswith("stats/"):
                name, key = col[len("stats/"):].rsplit("/", 1)
                blocks.setdefault(name, {})[key] = np.asarray(v)
        per.append(blocks)
    return per


def _exact_std(values: np.ndarray) -> np.ndarray:
    """numpy's population std of ``(R, *shape)`` values, per component of the last axis (lerobot's vectors)."""
    x = np.asarray(values, np.float64)
    return np.std(x.reshape(-1, 1) if x.ndim == 1 else x.reshape(-1, x.shape[-1]), axis=0)


def _lerobot_stats(data, numeric):
    """lerobot's ``compute_episode_stats`` of one episode's columns, std replaced by :func:`_exact_std`."""
    from lerobot.datasets.compute_stats import compute_episode_stats

    ref = compute_episode_stats(data, numeric)
    for k in ref:
        ref[k]["std"] = _exact_std(data[k])
    return ref


def _lerobot_reference(task, out, features, tmp_path):
    """lerobot's ``compute_episode_stats`` per exported episode (std: :func:`_exact_std`)."""
    from PIL import Image
    from lerobot.datasets.compute_stats import compute_episode_stats, sample_images

    numeric = {k: v for k, v in features.items() if v["dtype"] not in ("video", "string")}
    videos = [k for k, v in features.items() if v["dtype"] == "video"]
    refs = []
    for e, ep in enumerate(task.episodes()):
        ref = _lerobot_stats(_data(out, e, features), numeric)
        for name in videos:
            paths = []
            for i, frame in enumerate(ep.video(name.removeprefix("observation.images."))):
                p = tmp_path / f"{name}_{e}_{i}.png"
                Image.fromarray(frame).save(p)
                paths.append(str(p))
            ref[name] = compute_episode_stats({name: paths}, {name: features[name]})[name]
            sampled = sample_images(paths).transpose(0, 2, 3, 1)  # lerobot's sample, channels last
            ref[name]["std"] = (_exact_std(sampled) / 255.0).reshape(3, 1, 1)
        refs.append(ref)
    return refs


def _assert_block(got, want, where):
    assert set(got) == set(want), where
    for key in want:
        g, w = np.asarray(got[key]), np.asarray(want[key])
        assert g.shape == w.shape, (where, key, g.shape, w.shape)
        if key in ("min", "max", "count"):
            np.testing.assert_array_equal(g, w, err_msg=f"{where} {key}")
        else:  # lerobot's float32 mean / float32 histogram edges against egopool's float64 arithmetic
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-9, err_msg=f"{where} {key}")


@pytest.mark.extra("interop")
def test_stats_are_lerobots_own_computation_on_the_exported_data(tmp_path):
    lerobot_dataset_class()
    from lerobot.datasets.compute_stats import aggregate_stats

    task = _task(tmp_path)
    out = tmp_path / "lr"
    export_lerobot(task.path, out, lerobot="0.4")
    features = json.loads((out / "meta" / "info.json").read_text())["features"]
    refs = _lerobot_reference(task, out, features, tmp_path)
    per = _episode_stats(out, features)
    assert len(per) == len(refs) == 2
    for e, (got, want) in enumerate(zip(per, refs, strict=True)):
        assert set(got) == set(want)
        for name in want:
            _assert_block(got[name], want[name], f"episode {e} {name}")
    shapes = {k: np.asarray(v["mean"]).shape for k, v in per[0].items()}
    assert shapes["observation.right_hand_pose"] == (3,) and shapes["observation.left_glove"] == (16,)
    assert shapes["observation.depth.cam_depth"] == (64,) and shapes["observation.images.cam_rgb"] == (3, 1, 1)
    assert per[0]["observation.depth.cam_depth"]["count"].tolist() == [LENGTHS[0]]  # every frame, counted in frames
    assert per[0]["observation.images.cam_rgb"]["count"].tolist() == [LENGTHS[0]]  # < 100 frames: all sampled
    # a real spread, not lerobot 0.4.4's wrapped uint8 squares (std 0)
    assert np.all(per[0]["observation.images.cam_rgb"]["std"] > 0.1)
    stats = json.loads((out / "meta" / "stats.json").read_text())
    want = aggregate_stats(refs)
    assert set(stats) == set(want)
    for name in want:
        _assert_block(stats[name], want[name], f"stats.json {name}")


def _frames_like(features, n, seed, task_text):
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(n):
        frame = {"task": task_text}
        for name, feat in features.items():
            if name in _FRAME_KEYS:
                continue
            shape = tuple(feat["shape"])
            if feat["dtype"] == "video":
                frame[name] = rng.integers(0, 255, shape, dtype=np.uint8)
            elif np.dtype(feat["dtype"]).kind in "ui":
                frame[name] = rng.integers(0, 3000, shape).astype(feat["dtype"])
            else:
                frame[name] = (rng.normal(size=shape) + i).astype(feat["dtype"])
        frames.append(frame)
    return frames


@pytest.mark.extra("interop")
def test_lerobot_aggregates_an_export_with_a_dataset_lerobot_wrote(tmp_path):
    """The [21, 3] / [16, 16] / depth features: the blocks have lerobot's shapes and its aggregate_stats takes both.

    This is the step of ``merge_datasets`` that raised ``ValueError`` (``finalize_aggregation``); the
    merge itself cannot be run on 2-D features here: lerobot 0.4.4 fails to rewrite the data parquet of
    any dataset with an ``ArrayND`` feature under pandas 3 (two datasets lerobot wrote included).
    """
    LeRobotDataset = lerobot_dataset_class()
    from lerobot.datasets.compute_stats import aggregate_stats

    task = _task(tmp_path, size=(64, 48))
    out = tmp_path / "lr"
    export_lerobot(task.path, out, lerobot="0.4")
    features = json.loads((out / "meta" / "info.json").read_text())["features"]
    own = write_with_lerobot(tmp_path / "own", features,
                             [_frames_like(features, 8, s, "recorded by lerobot") for s in (1, 2)], fps=FPS)
    ours = LeRobotDataset("local/stats", root=out, video_backend="pyav")
    assert own.meta.features == ours.meta.features
    assert {k: v["mean"].shape for k, v in ours.meta.stats.items()} == \
        {k: v["mean"].shape for k, v in own.meta.stats.items()}
    merged = aggregate_stats([ours.meta.stats, own.meta.stats])
    total = sum(LENGTHS) + 16
    pose = "observation.right_hand_pose"
    assert merged[pose]["count"].tolist() == [total] and merged[pose]["mean"].shape == (3,)
    values = np.concatenate([np.asarray(ours.hf_dataset.data.column(pose).to_pylist()).reshape(-1, 3),
                             np.asarray(own.hf_dataset.data.column(pose).to_pylist()).reshape(-1, 3)])
    np.testing.assert_allclose(merged[pose]["mean"], values.mean(axis=0), rtol=1e-5)
    np.testing.assert_array_equal(merged[pose]["min"], values.min(axis=0))


@pytest.mark.extra("interop")
def test_merge_datasets_of_an_export_and_a_dataset_lerobot_wrote(tmp_path):
    LeRobotDataset = lerobot_dataset_class()
    from lerobot.datasets.compute_stats import aggregate_stats
    from lerobot.datasets.dataset_tools import merge_datasets

    task = _task(tmp_path, two_d=False, size=(64, 48))
    out = tmp_path / "lr"
    export_lerobot(task.path, out, lerobot="0.4")
    features = json.loads((out / "meta" / "info.json").read_text())["features"]
    own = write_with_lerobot(tmp_path / "own", features,
                             [_frames_like(features, n, s, "recorded by lerobot") for s, n in ((1, 8), (2, 11))],
                             fps=FPS)
    ours = LeRobotDataset("local/stats", root=out, video_backend="pyav")
    merged = merge_datasets([ours, own], "local/merged", output_dir=tmp_path / "merged")
    assert merged.num_episodes == 4 and len(merged) == sum(LENGTHS) + 19
    for i in (0, sum(LENGTHS) - 1):  # frames of the export come through the merge unchanged
        np.testing.assert_array_equal(merged[i]["observation.gripper_state"].numpy(),
                                      ours[i]["observation.gripper_state"].numpy())
    got = json.loads((tmp_path / "merged" / "meta" / "stats.json").read_text())
    numeric = {k: v for k, v in features.items() if v["dtype"] not in ("video", "string")}
    refs = []  # lerobot's own statistics of every merged episode's rows, aggregated by lerobot
    table = merged.hf_dataset.data
    starts = np.cumsum([0, *LENGTHS, 8, 11])
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        data = {}
        for name, feat in numeric.items():
            vals = np.asarray(table.column(name).slice(a, b - a).to_pylist(), dtype=feat["dtype"])
            data[name] = vals.reshape(-1) if list(feat["shape"]) == [1] else vals
        data["timestamp"] = data["frame_index"] / FPS  # lerobot buffers the float64 frame_index / fps
        refs.append(_lerobot_stats(data, numeric))
    want = aggregate_stats(refs)
    for name in ("observation.gripper_state", "pooled_timestamp", "hardware_ns", "timestamp", "frame_index"):
        _assert_block(got[name], want[name], f"merged {name}")
    assert np.asarray(got["observation.images.cam_rgb"]["mean"]).shape == (3, 1, 1)


@pytest.mark.extra("interop")
def test_depth_counted_in_batches_equals_lerobots_statistics_of_the_whole_episode():
    """A depth stream arrives in batches of 256 rows; the later ones hold larger values than the first."""
    lerobot_dataset_class()
    from lerobot.datasets.compute_stats import get_feature_stats

    from egopool.interop.lerobot_format import CountedStats, as_vectors

    rng = np.random.default_rng(11)
    frames = [rng.integers(0, 900, (256, 6, 5)), rng.integers(0, 5000, (256, 6, 5)), rng.integers(0, 20, (3, 6, 5))]
    frames = [f.astype(np.uint16) for f in frames]
    counted = CountedStats()
    for f in frames:
        counted.update(as_vectors(f))
    got = counted.result(515)
    whole = np.concatenate(frames)
    want = get_feature_stats(whole, axis=0, keepdims=False)
    want["std"] = _exact_std(whole)
    _assert_block(got, want, "counted depth")
    assert got["mean"].shape == (5,) and got["count"].tolist() == [515]
