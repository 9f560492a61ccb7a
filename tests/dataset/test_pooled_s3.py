"""PooledDataset over ``s3://`` tasks on a real S3 server (SeaweedFS, the ``s3_server`` fixture) equals the same
dataset over the task directories: item by item, windows and pads, filters and review selections, torch
DataLoader workers, the index cache, and the errors (issue 24, docs/decisions.md O41).

The tasks are simulated locally and put into the bucket with ``egopool sync DIR s3://...`` (the way a lab fills
a bucket), then read from ``s3://`` only.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from egopool import open_task
from egopool.dataset import PooledDataset, find_tasks
from egopool.dataset import index as index_mod
from egopool.errors import ObjectStoreError
from egopool.storage import ObjectPath, open_store

pytestmark = pytest.mark.extra("s3")

BUCKET = "loader-tasks"
GOP_KEYS = ["d435_rgb", "d435_depth", "d435_rgb_2", "action", "hardware_ns", "timestamp"]
GOP_DELTA = {"d435_rgb": [-0.2, -1 / 30, 0.0, 0.1], "d435_depth": [-0.1, 0.0], "action": [-1 / 30, 0.0, 2 / 30]}


def _sync(src, dst: str) -> str:
    r = subprocess.run([sys.executable, "-m", "egopool", "sync", str(src), dst], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return dst


@pytest.fixture(scope="module")
def bucket(s3_server, gop_task, full_task):
    """``s3://loader-tasks/pool`` holding ``sim_d435x2`` and ``sim_full`` (copied by ``egopool sync``) and a
    prefix that is no task (``pool/notes/``)."""
    s3_server.create_bucket(BUCKET)
    root = f"s3://{BUCKET}/pool"
    _sync(gop_task.path, f"{root}/sim_d435x2")
    _sync(full_task.path, f"{root}/sim_full")
    open_store(f"{root}/notes").put("readme.txt", b"not a task")
    return root


def _same_item(a: dict, b: dict, where: str) -> None:
    assert sorted(a) == sorted(b), where
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape, f"{where} {k}"
            if x.dtype == object:
                assert x.tolist() == y.tolist(), f"{where} {k}"
            else:
                np.testing.assert_array_equal(y, x, err_msg=f"{where} {k}")
        else:
            assert type(x) is type(y) and x == y, f"{where} {k}"


def test_find_tasks_on_a_prefix_of_tasks_lists_it_as_a_directory(bucket, gop_task, full_task):
    found = find_tasks(bucket)
    assert all(isinstance(p, ObjectPath) for p in found)
    # the sync's own .egopool-server/ journals and notes/ hold no meta/info.json: not tasks
    assert [str(p) for p in found] == [f"{bucket}/sim_d435x2", f"{bucket}/sim_full"]
    assert [p.name for p in find_tasks(gop_task.path.parent)] == ["sim_d435x2"]
    # mixed with directories, in the order given; a task named twice counts once
    mixed = find_tasks([full_task.path, f"{bucket}/sim_d435x2/", f"{bucket}/sim_d435x2", gop_task.path])
    assert [str(p) for p in mixed] == [str(full_task.path), f"{bucket}/sim_d435x2", str(gop_task.path)]


def test_items_over_the_bucket_equal_the_directory_item_by_item(bucket, gop_task, tmp_path):
    kw = {"keys": GOP_KEYS, "delta_timestamps": GOP_DELTA, "output": "numpy", "cache_dir": tmp_path}
    local = PooledDataset(gop_task.path, **kw)
    remote = PooledDataset(f"{bucket}/sim_d435x2", **kw)
    assert isinstance(remote.index.tasks[0].path, ObjectPath)
    assert len(remote) == len(local) == 540 and remote.fps == local.fps == 30.0
    assert remote.episode_ranges() == local.episode_ranges()
    rng = np.random.default_rng(3)
    # both edges of both episodes (pads), both sides of the keyframe at 250, then random order
    picks = [0, 1, 269, 270, 539, 249, 250, 251, 252, 100, *rng.integers(0, 540, 12).tolist()]
    for i in picks:
        a, b = local[i], remote[i]
        _same_item(a, b, f"item {i}")
    assert remote[0]["d435_rgb_is_pad"].tolist() == [True, True, False, False]
    assert remote[539]["action_is_pad"].tolist() == [False, False, True]
    assert remote[-1]["index"] == 539


def test_columns_imu_trajectories_forces_and_sample_windows_equal_the_directory(bucket, full_task, tmp_path):
    traj = "observation.ego_slam_trajectory"
    keys = ["action", "observation.right_hand_pose", "status.left_glove", "observation.gripper_left_force_matrix",
            "observation.imu", "imu_ts_ns", traj, traj + "_ns", "stereo_left", "stereo_depth"]
    kw = {"keys": keys, "samples": {"observation.imu": 40}, "output": "numpy", "cache_dir": tmp_path,
          "delta_timestamps": {"stereo_left": [-1 / 30, 0.0], "observation.gripper_left_force_matrix": [0.0, 1 / 30]}}
    local = PooledDataset(full_task.path, **kw)
    remote = PooledDataset(f"{bucket}/sim_full", **kw)
    assert len(remote) == len(local) == 42
    for i in [0, 20, 21, 41, 7, 30]:
        _same_item(local[i], remote[i], f"item {i}")
    assert remote[0]["observation.imu_is_pad"].any() and remote[0]["observation.imu"].shape == (40, 6)


def test_filters_and_review_selections_pick_the_same_episodes(bucket, gop_task, full_task, tmp_path):
    from egopool.curation.selection import read_selection

    uri = f"{bucket}/sim_d435x2"

    def picked(tasks, **kw):
        ds = PooledDataset(tasks, keys=["timestamp"], output="numpy", cache_dir=tmp_path, **kw)
        return [(t, n) for t, n, _ in ds.index.episodes]

    assert picked(uri, episodes=[2]) == picked(gop_task.path, episodes=[2]) == [(0, 2)]
    assert picked(uri, episodes={"sim_d435x2": [1]}) == picked(gop_task.path, episodes={"sim_d435x2": [1]}) == [(0, 1)]
    assert picked(uri, episodes={uri: [2]}) == picked(gop_task.path, episodes={str(gop_task.path): [2]}) == [(0, 2)]
    assert picked(bucket, task_names=["sim_full"]) == picked([gop_task.path, full_task.path],
                                                              task_names=["sim_full"]) == [(0, 1), (0, 2)]
    # a review selection (the server's answer, saved as JSON) over a mixed dataset: a bucket task and a directory
    sel = tmp_path / "accepted.json"
    sel.write_text(json.dumps({"episodes": [{"task": "sim_d435x2", "index": 2}, {"task": "sim_full", "index": 1}],
                               "next_cursor": None}))
    by_task = read_selection(sel).by_task()
    assert picked([uri, full_task.path], episodes=by_task) == picked([gop_task.path, full_task.path],
                                                                      episodes=by_task) == [(0, 2), (1, 1)]
    for tasks in (uri, gop_task.path):  # the same refusals, naming the same things
        with pytest.raises(ValueError, match=r"no episode 7 \(episodes: 1, 2\)"):
            picked(tasks, episodes=[7])
        with pytest.raises(ValueError, match=r"task_names \['sim_x'\] match none of the tasks \['sim_d435x2'\]"):
            picked(tasks, task_names=["sim_x"])
        with pytest.raises(ValueError, match=r"names task\(s\) \['other'\] that are not among"):
            picked(tasks, episodes={"other": [1]})


def test_dataloader_two_workers_over_the_bucket_gives_the_directory_samples(bucket, gop_task, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from egopool.dataset import EpisodeSampler

    keys, delta = ["d435_rgb", "d435_depth", "action"], {"d435_rgb": [-0.1, 0.0], "action": [0.0, 1 / 30]}
    remote = PooledDataset(f"{bucket}/sim_d435x2", keys=keys, delta_timestamps=delta, cache_dir=tmp_path)
    local = PooledDataset(gop_task.path, keys=keys, delta_timestamps=delta, cache_dir=tmp_path)
    remote[0]  # the parent reads first: the forked workers must not share its connections or decoders
    batches = {}
    for name, ds in (("remote", remote), ("local", local)):
        loader = DataLoader(ds, batch_size=6, sampler=EpisodeSampler(ds, run=12, seed=2), num_workers=2,
                            multiprocessing_context="fork")
        got = []
        for b, batch in enumerate(loader):
            got.append(batch)
            if b == 7:
                break
        batches[name] = got
    assert len(batches["remote"]) == len(batches["local"]) == 8
    for x, y in zip(batches["local"], batches["remote"], strict=True):
        assert sorted(x) == sorted(y)
        assert y["d435_rgb"].dtype == torch.uint8 and y["d435_rgb"].shape[1:] == (2, 30, 40, 3)
        for k in x:
            assert torch.equal(x[k], y[k]), k


def test_spawned_workers_reach_the_bucket_with_their_own_environment(bucket, gop_task, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, Subset

    remote = PooledDataset(f"{bucket}/sim_d435x2", keys=["d435_depth"], cache_dir=tmp_path)
    local = PooledDataset(gop_task.path, keys=["d435_depth"], output="numpy", cache_dir=tmp_path)
    idx = [269, 3, 250, 539, 271]
    loader = DataLoader(Subset(remote, idx), batch_size=2, num_workers=2, multiprocessing_context="spawn")
    got = torch.cat([b["d435_depth"] for b in loader]).numpy()
    np.testing.assert_array_equal(got, np.stack([local[i]["d435_depth"] for i in idx]))


def test_index_cache_keys_a_bucket_apart_and_follows_its_changes(s3_server, bucket, gop_task, tmp_path, monkeypatch):
    uri = f"s3://{BUCKET}/changing/sim_d435x2"
    _sync(gop_task.path, uri)
    builds = []
    real = index_mod._build
    monkeypatch.setattr(index_mod, "_build", lambda p: builds.append(str(p)) or real(p))
    cache = tmp_path / "cache"
    PooledDataset(gop_task.path, keys=["action"], output="numpy", cache_dir=cache)
    PooledDataset(uri, keys=["action"], output="numpy", cache_dir=cache)
    # the same task name in a directory and a bucket: two entries, neither taken for the other
    assert builds == [str(gop_task.path), uri] and len(list((cache / "dataset_index").glob("*.json"))) == 2
    docs = sorted(json.loads(p.read_text())["path"] for p in (cache / "dataset_index").glob("*.json"))
    assert docs == sorted([str(gop_task.path), f"{s3_server.endpoint} {uri}"])
    before = s3_server.request_counts()
    ds = PooledDataset(uri, keys=["action"], output="numpy", cache_dir=cache)
    spent = {k: v - before.get(k, 0) for k, v in s3_server.request_counts().items() if v != before.get(k, 0)}
    assert len(builds) == 2 and len(ds) == 540  # from the cache, having downloaded nothing: a HEAD of
    # meta/info.json by find_tasks and one by the fingerprint (weed counts a HEAD as a GET), a LIST of data/
    # and one of meta/episodes/ (no parquet, no video read)
    assert spent == {"GET": 2, "LIST": 2}, spent
    # the bucket task changes: info.json rewritten (a new ETag), then episode 2 gone (its row and files)
    store = open_store(uri)
    info, _ = store.get("meta/info.json")
    store.put("meta/info.json", json.dumps({**json.loads(info), "note": "edited"}).encode())
    assert len(PooledDataset(uri, keys=["action"], output="numpy", cache_dir=cache)) == 540
    assert builds[2:] == [uri]
    files = open_task(uri).episode(2).files
    assert files.meta is not None and files.data is not None and not files.meta_is_shard
    store.delete(str(p.relative_to(uri)) for p in [files.meta, *files.paths()])
    ds = PooledDataset(uri, keys=["action"], output="numpy", cache_dir=cache)
    assert builds[3:] == [uri] and len(ds) == 270 and int(ds[0]["episode_index"]) == 1
    # the directory's entry was never touched by the bucket's
    PooledDataset(gop_task.path, keys=["action"], output="numpy", cache_dir=cache)
    assert len(builds) == 4


def test_a_missing_bucket_or_a_prefix_without_tasks_is_one_line(bucket, tmp_path):
    kw = {"keys": ["action"], "output": "numpy", "cache_dir": tmp_path}
    with pytest.raises(ObjectStoreError) as exc:
        PooledDataset("s3://no-such-bucket-here/pool/sim_d435x2", **kw)
    text = str(exc.value)
    assert exc.value.cause == "no_bucket" and "s3://no-such-bucket-here/pool/sim_d435x2" in text
    assert "'no-such-bucket-here' does not exist" in text and "AWS_ENDPOINT_URL" in text and "\n" not in text
    for where in (f"{bucket}/notes", f"{bucket}/nothing-here"):
        with pytest.raises(FileNotFoundError) as nf:
            PooledDataset(where, **kw)
        text = str(nf.value)
        assert text.startswith(f"{where}: neither a task (no meta/info.json) nor a prefix of tasks")
        assert "\n" not in text
        assert f"pass a task such as s3://{BUCKET}/PREFIX/pick_cup" in text
    with pytest.raises(FileNotFoundError, match="neither a task .* nor a directory of tasks"):
        PooledDataset(tmp_path / "nothing", **kw)


def test_a_key_no_task_has_is_refused_over_the_bucket_as_over_the_directory(bucket, gop_task, tmp_path):
    """keys=["nosuch"] over tasks in a bucket: one line when the dataset is made, naming the key and the keys that
    exist (the first episode's undeclared columns among them), the same keys as over the directory."""
    kw = {"output": "numpy", "cache_dir": tmp_path}

    def refused(where: object, keys: list[str]) -> str:
        with pytest.raises(ValueError) as exc:
            PooledDataset(where, keys=keys, **kw)
        assert "\n" not in str(exc.value)
        return str(exc.value)

    text = refused(bucket, ["d435_rgb", "nosuch"])
    assert text.startswith(f"keys ['nosuch']: no stream or column of that name in {bucket}/sim_d435x2, {bucket}/sim_full")
    assert "; the keys that exist: " in text and "d435_rgb" in text and "wall_time" in text
    one = refused(f"{bucket}/sim_d435x2", ["nosuch"]).split("; the keys that exist: ")[1]
    assert one == refused(gop_task.path, ["nosuch"]).split("; the keys that exist: ")[1]


def test_ffv1_and_legacy_png16_depth_in_a_bucket_equal_the_directory(s3_server, ffv1_task, tmp_path):
    import shutil

    from egopool.codecs.depth_png import encode_png16

    png = tmp_path / "png16"
    shutil.copytree(ffv1_task.path, png)  # the FFV1 stream replaced by a legacy PNG16 directory (decisions C4)
    ep = open_task(png).episode(1)
    video = ep.stream_path("d435_depth")
    frames = list(ep.depth("d435_depth"))
    video.unlink()
    (video.parent / "episode-000").mkdir()
    for i, d in enumerate(frames):
        (video.parent / "episode-000" / f"{i:06d}.png").write_bytes(encode_png16(d))
    info = json.loads((png / "meta" / "info.json").read_text())
    info["video_extensions"]["d435_depth"] = "png"
    (png / "meta" / "info.json").write_text(json.dumps(info))
    for local in (ffv1_task.path, png):
        uri = s3_server.upload_dir(local, BUCKET, f"depth/{local.name}")
        kw = {"keys": ["d435_depth", "d435_rgb"], "output": "numpy", "cache_dir": tmp_path / "cache",
              "delta_timestamps": {"d435_depth": [-1 / 30, 0.0, 1 / 30]}}
        a, b = PooledDataset(local, **kw), PooledDataset(uri, **kw)
        assert len(a) == len(b) == 30
        for i in [29, 0, 15, 3, 16]:
            _same_item(a[i], b[i], f"{local.name} item {i}")
            np.testing.assert_array_equal(b[i]["d435_depth"][1], frames[i])  # lossless both ways
        kinds = {type(d).__name__ for d in b._w.decoders._open.values()}
        assert kinds == ({"PngSequence", "StreamDecoder"} if local == png else {"StreamDecoder"})
