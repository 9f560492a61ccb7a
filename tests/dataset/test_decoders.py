"""``PooledDataset(decoder=...)`` (issue 25): torchcodec's RGB frames equal PyAV's and the reader's bit for bit (H.264
and HEVC), on a directory and from a real SeaweedFS bucket without scanning the video; depth stays on egopool's own
decoder; a bad choice is one line."""

from __future__ import annotations

import numpy as np
import pytest

from egopool.codecs.video import RgbEncoder, read_rgb_frames
from egopool.dataset import BucketSampler, PooledDataset
from egopool.dataset.decode import StreamDecoder
from egopool.dataset.torchcodec_decode import TorchcodecStream, torchcodec_available
from egopool.errors import CodecError
from egopool.storage import open_store

# the torchcodec tests are marked as the extra `train`'s: a CI that requires the extra fails when torchcodec does not
# load there (tests/conftest.py)

KEYS = ["d435_rgb", "d435_depth", "action"]
DELTA = {"d435_rgb": [k / 30 for k in range(-7, 1)], "d435_depth": [-1 / 30, 0.0]}


def _equal(a: dict, b: dict, where: str) -> None:
    assert sorted(a) == sorted(b), where
    for k in a:
        np.testing.assert_array_equal(np.asarray(b[k]), np.asarray(a[k]), err_msg=f"{where} {k}")


def _kinds(ds: PooledDataset) -> set[str]:
    assert ds._w is not None
    return {type(d).__name__ for d in ds._w.decoders._open.values()}


@pytest.mark.extra("train")
@pytest.mark.skipif(not torchcodec_available(), reason="torchcodec does not load (extra train)")
def test_torchcodec_items_equal_pyav_items_and_depth_stays_on_egopools_decoder(gop_task, tmp_path):
    kw = {"keys": KEYS, "delta_timestamps": DELTA, "output": "numpy", "cache_dir": tmp_path}
    pyav, tc = PooledDataset(gop_task.path, decoder="pyav", **kw), PooledDataset(gop_task.path, decoder="torchcodec", **kw)
    assert (pyav.decoder, tc.decoder) == ("pyav", "torchcodec")
    assert PooledDataset(gop_task.path, **kw).decoder == "pyav"  # the default (docs/decisions.md B10)
    for i in [0, 5, 249, 250, 251, 269, 270, 400, 539]:  # edges, both sides of a keyframe, both episodes
        _equal(pyav[i], tc[i], f"item {i}")
    order = list(BucketSampler(pyav, run=30, buffer=3, seed=1))[:64]
    for b in range(0, 64, 16):  # batches: one forward decode per stream for all their windows
        for x, y, i in zip(pyav.__getitems__(order[b:b + 16]), tc.__getitems__(order[b:b + 16]), order[b:b + 16],
                           strict=True):
            _equal(x, y, f"batch item {i}")
    assert _kinds(tc) == {"TorchcodecStream", "StreamDecoder"}  # RGB by torchcodec, HEVC depth by egopool
    assert _kinds(pyav) == {"StreamDecoder"}


@pytest.mark.extra("train")
@pytest.mark.skipif(not torchcodec_available(), reason="torchcodec does not load (extra train)")
def test_torchcodec_hevc_rgb_equals_the_reader(tmp_path):
    path = tmp_path / "rgb_hevc.mp4"
    enc = RgbEncoder(path, 128, 96, 30.0, codec="hevc")
    base = np.random.default_rng(0).integers(0, 255, (96, 128, 3), dtype=np.uint8)
    for i in range(60):
        enc.encode(np.roll(base, 3 * i, axis=1))
    enc.close()
    want = list(read_rgb_frames(path))
    dec = TorchcodecStream(path, max_frames=4)
    assert dec.frame_count == len(want) == 60
    got = dec.frames([59, 3, 0, 31, 3])
    for j in (0, 3, 31, 59):
        np.testing.assert_array_equal(got[j], want[j], err_msg=f"frame {j}")
    pyav = StreamDecoder(path, "rgb").frames([0, 3, 31, 59])
    assert all(np.array_equal(pyav[j], got[j]) for j in pyav)
    with pytest.raises(CodecError, match="frame 60 asked, the stream holds 60"):
        dec.frames([60])
    dec.close()


@pytest.mark.extra("s3")
@pytest.mark.extra("train")
@pytest.mark.skipif(not torchcodec_available(), reason="torchcodec does not load (extra train)")
def test_torchcodec_from_the_bucket_equals_the_directory_reading_what_pyav_reads(s3_server, gop_task, tmp_path):
    uri = s3_server.upload_dir(gop_task.path, "loader-decoders", "t/sim_d435x2")
    kw = {"keys": KEYS, "delta_timestamps": DELTA, "output": "numpy", "cache_dir": tmp_path}
    local = PooledDataset(gop_task.path, decoder="pyav", **kw)
    ds = PooledDataset(uri, decoder="torchcodec", block_size=4096, read_ahead=1, **kw)
    for i in [10, 20, 280]:
        _equal(local[i], ds[i], f"item {i}")
    assert _kinds(ds) == {"TorchcodecStream", "StreamDecoder"}
    fetched = {}
    for dec in ("pyav", "torchcodec"):  # RGB only: torchcodec reads what PyAV's path reads, no scan of the video
        rgb = PooledDataset(uri, keys=["d435_rgb"], delta_timestamps={"d435_rgb": DELTA["d435_rgb"]}, output="numpy",
                            decoder=dec, block_size=4096, read_ahead=1, cache_dir=tmp_path)
        for i in [10, 20]:
            np.testing.assert_array_equal(rgb[i]["d435_rgb"], local[i]["d435_rgb"])
        assert rgb._w is not None
        fetched[dec] = (rgb._w.blocks.fetched, rgb._w.blocks.gets)
    head = open_store(uri).head("videos/chunk-000/d435_rgb/episode-000.mp4")
    assert head is not None and fetched["torchcodec"] == fetched["pyav"] and fetched["pyav"][0] <= head.size


def test_a_bad_decoder_is_one_line(gop_task, tmp_path):
    with pytest.raises(ValueError, match="decoder must be 'pyav' or 'torchcodec', got 'ffmpeg'"):
        PooledDataset(gop_task.path, keys=["action"], decoder="ffmpeg", cache_dir=tmp_path)
