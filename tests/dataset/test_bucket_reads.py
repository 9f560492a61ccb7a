"""Reads of a bucket planned for an object store (issue 25) on a real SeaweedFS: the block cache's bound and
its GETs, a video never downloaded whole, an MP4's packet index from its sample tables, DataLoader workers forked
and spawned over shuffled windows, a stalled connection, an object rewritten under a running dataset."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from egopool.dataset import BucketSampler, PooledDataset
from egopool.dataset.object_cache import BlockCache, mp4_packet_index
from egopool.errors import ObjectStoreError
from egopool.storage import ObjectPath, open_store

pytestmark = pytest.mark.extra("s3")

BUCKET = "loader-reads"
KEYS = ["d435_rgb", "d435_depth", "action"]
DELTA = {"d435_rgb": [k / 30 for k in range(-7, 1)], "d435_depth": [-1 / 30, 0.0]}


@pytest.fixture(scope="module")
def remote(s3_server, gop_task, ffv1_task):
    """``s3://loader-reads/r/sim_d435x2`` (HEVC depth, keyframes at 0 and 250) and ``.../ffv1/sim_d435x2``."""
    return (s3_server.upload_dir(gop_task.path, BUCKET, "r/sim_d435x2"),
            s3_server.upload_dir(ffv1_task.path, BUCKET, "ffv1/sim_d435x2"))


def _equal(a: dict, b: dict, where: str) -> None:
    assert sorted(a) == sorted(b), where
    for k in a:
        np.testing.assert_array_equal(np.asarray(b[k]), np.asarray(a[k]), err_msg=f"{where} {k}")


def test_the_block_cache_holds_at_most_its_bound_and_counts_its_gets(remote, gop_task, tmp_path):
    kw = {"keys": KEYS, "delta_timestamps": DELTA, "output": "numpy", "cache_dir": tmp_path}
    local = PooledDataset(gop_task.path, **kw)
    ds = PooledDataset(remote[0], cache_bytes=40 << 10, block_size=8 << 10, read_ahead=2, **kw)
    before = ds.io_stats()["GET"]
    for i in [0, 260, 270, 539, 250, 100, 7, 400]:
        _equal(local[i], ds[i], f"item {i}")
        assert ds.io_stats()["cache_held"] <= 40 << 10
    stats = ds.io_stats()
    assert 0 < stats["cache_peak"] <= 40 << 10 and stats["GET"] > before
    with pytest.raises(ValueError, match="cache_bytes=4096, block_size=8192, read_ahead=8: .*cache_bytes >= block_size"):
        PooledDataset(remote[0], cache_bytes=4096, block_size=8192, **kw)


def test_one_window_does_not_download_the_video(s3_server, tmp_path_factory):
    from egopool.cli.app import main
    from egopool.storage._object_read import request_counts

    root = tmp_path_factory.mktemp("s4")  # 160x120, 270 frames: an 82 kB HEVC depth video
    assert main(["simulate", "--rig", "d435x2", "--episodes", "1", "--seconds", "9", "--scale", "4",
                 "--out", str(root)]) == 0
    uri = s3_server.upload_dir(root / "sim_d435x2", BUCKET, "s4/sim_d435x2")
    video = open_store(uri).head("videos/chunk-000/d435_depth/episode-000.mp4")
    assert video is not None and video.size > 60_000
    ds = PooledDataset(uri, keys=["d435_depth"], delta_timestamps={"d435_depth": [-1 / 30, 0.0]}, output="numpy",
                       cache_dir=tmp_path_factory.mktemp("c"), block_size=4096, read_ahead=1)
    before = request_counts()
    item = ds[10]
    spent = {k: v - before[k] for k, v in request_counts().items()}
    assert item["d435_depth"].shape == (2, 120, 160)
    blocks = ds._w.blocks
    # the video's header, its moov box (at its end) and its first frames, not the samples after them
    assert blocks.fetched < video.size // 3 and blocks.gets == 3, (blocks.fetched, blocks.gets, video.size)
    # and one GET of the episode's meta row (the depth parameters); the data parquet is not read for a stream key
    assert spent["GET"] == blocks.gets + 1, spent


def test_an_mp4_index_from_its_sample_tables_equals_a_full_demux(remote):
    import av

    cache = BlockCache(max_bytes=8 << 20)
    for key in ("d435_rgb", "d435_depth"):  # H.264 and HEVC (open GOP)
        path = ObjectPath(f"{remote[0]}/videos/chunk-000/{key}/episode-000.mp4")
        f = cache.open(path)
        table = mp4_packet_index(path, f, 0)
        full = av.open(f)
        assert table is not None
        want = [(p.pts, p.is_keyframe) for p in full.demux(full.streams.video[0]) if p.size]
        assert table == want and len(table) == 270 and sum(k for _, k in table) == 2
        full.close()
    mkv = ObjectPath(f"{remote[1]}/videos/chunk-000/d435_depth/episode-000.mkv")
    assert mp4_packet_index(mkv, cache.open(mkv), 0) is None  # Matroska: demuxed whole


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_shuffled_windows_from_two_workers_equal_the_directory(remote, gop_task, ffv1_task, tmp_path, context):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    for uri, task in ((remote[0], gop_task), (remote[1], ffv1_task)):
        kw = {"keys": KEYS, "delta_timestamps": DELTA, "cache_dir": tmp_path}
        local, ds = PooledDataset(task.path, output="numpy", **kw), PooledDataset(uri, **kw)
        ds[0]  # the parent read first (fork: the workers must not use its clients)
        sampler = BucketSampler(ds, run=20, buffer=3, seed=4)
        loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2, multiprocessing_context=context)
        seen = 0
        for b, batch in enumerate(loader):
            for j, i in enumerate(batch["index"].tolist()):
                want = local[i]
                for k in want:
                    assert torch.equal(batch[k][j], torch.from_numpy(np.asarray(want[k]))), (uri, i, k)
                seen += 1
            if b == 3:
                break
        assert seen == min(32, len(ds))


def test_a_stalled_connection_is_a_timeout_naming_the_object(s3_server, remote, tmp_path, monkeypatch):
    sys.path.insert(0, str(Path(__file__).parents[1] / "storage"))
    from relay import FaultyRelay

    port = int(s3_server.endpoint.rsplit(":", 1)[1])
    with FaultyRelay(port, "stall", after=10**9) as relay:
        monkeypatch.setenv("AWS_ENDPOINT_URL", relay.endpoint)
        monkeypatch.setenv("EGOPOOL_S3_REQUEST_TIMEOUT", "2")
        monkeypatch.setenv("EGOPOOL_S3_CONNECT_TIMEOUT", "2")
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        ds = PooledDataset(remote[0], keys=["d435_rgb"], output="numpy", cache_dir=tmp_path)
        ds[0]
        relay.after = relay.requests  # the next request is never answered
        with pytest.raises(ObjectStoreError) as exc:
            ds[300]  # episode 2: a video and a parquet not read yet
    text = str(exc.value)
    assert exc.value.cause == "timeout" and "did not answer in time" in text and "\n" not in text
    assert f"s3://{BUCKET}/r/sim_d435x2/" in text and "EGOPOOL_S3_REQUEST_TIMEOUT" in text


def test_an_object_rewritten_under_a_running_dataset_is_named_never_mixed(s3_server, gop_task, tmp_path):
    uri = s3_server.upload_dir(gop_task.path, BUCKET, "changing/sim_d435x2")
    # PyAV reads 4 kB at a time here; torchcodec's own read buffer would take this 9 kB video whole at its open (no
    # later GET to catch the change; never mixed either). The version pinning is the block cache's, under both.
    ds = PooledDataset(uri, keys=["d435_rgb"], output="numpy", cache_dir=tmp_path, cache_bytes=4096, block_size=4096,
                       read_ahead=1, decoder="pyav")
    ds[5]  # the video is open; one block of it is held
    store = open_store(uri)
    key = "videos/chunk-000/d435_rgb/episode-000.mp4"
    other, _ = store.get("videos/chunk-000/d435_rgb_2/episode-000.mp4")
    old = store.head(key)
    assert old is not None and store.put(key, other) != old.version  # another video under the key: a new ETag
    with pytest.raises(ObjectStoreError) as exc:
        ds[265]  # needs blocks not read yet, of the version it opened
    text = str(exc.value)
    assert exc.value.cause == "changed" and f"{uri}/{key}" in text and "changed while being read" in text
    assert "make the dataset again" in text and "\n" not in text
    fresh = PooledDataset(uri, keys=["d435_rgb"], output="numpy", cache_dir=tmp_path)
    local = PooledDataset(gop_task.path, keys=["d435_rgb_2"], output="numpy", cache_dir=tmp_path)
    np.testing.assert_array_equal(fresh[265]["d435_rgb"], local[265]["d435_rgb_2"])  # the new bytes, whole
    assert os.environ.get("AWS_ENDPOINT_URL") == s3_server.endpoint


def test_a_worker_opens_its_next_batch_in_the_samplers_order(remote, gop_task, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    kw = {"keys": KEYS, "delta_timestamps": DELTA, "cache_dir": tmp_path}
    local, ds = PooledDataset(gop_task.path, output="numpy", **kw), PooledDataset(remote[0], **kw)
    sampler = BucketSampler(ds, run=30, buffer=2, seed=3)
    order = list(sampler.epoch_order(0))
    sampler.set_epoch(0)
    it = iter(DataLoader(ds, batch_size=6, sampler=sampler))
    for b in range(4):
        batch = next(it)
        assert batch["index"].tolist() == order[6 * b:6 * b + 6]
        for j, i in enumerate(batch["index"].tolist()):
            for k, v in local[i].items():
                assert torch.equal(batch[k][j], torch.from_numpy(np.asarray(v))), (i, k)
        w = ds._w
        assert w is not None and w.position.next == 6 * (b + 1)  # its next batch was predicted where it is
        w.settle()  # the next batch's episodes and streams are open before it is asked for
        nxt = {ds.index.locate(i)[:2] for i in order[6 * b + 6:6 * b + 12]}
        opened = {(t, n) for (t, n) in w.views}
        assert nxt <= opened, (nxt, opened)
        paths = {str(p) for p in w.decoders._open}
        for t, n in nxt:
            ep = ds.index.tasks[t].path
            assert any(f"episode-{n - 1:03d}" in p and str(ep) in p for p in paths), (n, paths)


@pytest.mark.parametrize("max_open", [16, 1])
def test_the_next_batch_opens_while_this_one_decodes(remote, gop_task, tmp_path, monkeypatch, max_open):
    """Over a bucket the next batch's opens start before this batch's (last) streams decode (0 workers: the main
    process reads ahead during its own decoding, not only during the step), on threads of their own, leaving room in
    the decoder cache for the streams in use: items equal the directory's with a decoder cache of 1 too."""
    from egopool.dataset import decode as decode_mod
    from egopool.dataset import worker as worker_mod

    events: list[str] = []
    real_ahead, real_frames = worker_mod.Worker.read_ahead, decode_mod.StreamDecoder.frames
    monkeypatch.setattr(worker_mod.Worker, "read_ahead", lambda self, fn: events.append("ahead") or real_ahead(self, fn))
    monkeypatch.setattr(decode_mod.StreamDecoder, "frames", lambda self, w: events.append("frames") or real_frames(self, w))
    kw = {"keys": KEYS, "delta_timestamps": DELTA, "cache_dir": tmp_path, "output": "numpy"}
    local, ds = PooledDataset(gop_task.path, **kw), PooledDataset(remote[0], max_open_streams=max_open, **kw)
    sampler = BucketSampler(ds, run=30, buffer=2, seed=3)
    order = list(sampler.epoch_order(0))
    seen = set()
    for b in range(4):
        del events[:]
        batch = ds.__getitems__(order[6 * b:6 * b + 6])
        got = list(events)  # the bucket dataset's own (the directory's items below decode too)
        for j, i in enumerate(order[6 * b:6 * b + 6]):
            _equal(local[i], batch[j], f"item {i}")
        streams = len({(ds.index.locate(i)[:2], k) for i in order[6 * b:6 * b + 6] for k in ("d435_rgb", "d435_depth")})
        # the streams decode max_open at a time; the next batch starts opening just before the last of those chunks
        earlier = (streams - 1) // max_open * max_open
        assert got == ["frames"] * earlier + ["ahead"] + ["frames"] * (streams - earlier), (got, streams)
        seen.add(earlier > 0)
        ds._w.settle()
        assert len(ds._w.decoders._open) <= max_open
    assert seen == ({False} if max_open == 16 else {True}), seen  # with a cache of 1 every batch decodes in chunks
