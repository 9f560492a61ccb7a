"""Every depth layout a reader must take (file_format.md §8, §12.6; multi_device_storage.md §4.8).

Files are produced here with PyAV from real Kinect frames (7-Scenes, uint16 mm, holes 0),
cropped small to keep the suite fast. The decoder must be chosen by probing the content:
FFV1 found among several streams whatever its index, FFV1 in an ``.mp4``, HEVC gray12
in an ``.mkv``, PNG16 directories.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from egopool.codecs.depth import DepthEncoder, LogDepthCodec, hevc12_available, probe_depth, read_depth_frames
from egopool.codecs.depth_png import encode_png16, png16_frame_paths, read_png16_frames
from egopool.errors import CodecError

DATA = Path(__file__).resolve().parents[1] / "data" / "sevenscenes_tsdf_fusion"


@pytest.fixture(scope="module")
def kinect() -> list[np.ndarray]:
    """Three real depth frames, 96x128 crops (even sizes for the H.264 heatmap), uint16 mm with holes."""
    frames = []
    for i in (0, 10, 20):
        with av.open(str(DATA / f"frame-{i:06d}.depth.png")) as c:
            full = next(c.decode(video=0)).to_ndarray(format="gray16le")
        frames.append(np.ascontiguousarray(full[200:296, 250:378]))
    assert all(f.dtype == np.uint16 for f in frames)
    assert sum(int((f == 0).sum()) for f in frames) > 0  # real holes are in the crops
    return frames


def _heatmap(depth: np.ndarray) -> np.ndarray:
    v = (np.clip(depth, 0, 4000) / 4000 * 255).astype(np.uint8)
    return np.stack([v, 255 - v, np.zeros_like(v)], axis=-1)


def _write_dual_mkv(path: Path, frames: list[np.ndarray], ffv1_first: bool) -> None:
    """The v1.0.14 layout: an H.264 heatmap stream and an FFV1 gray16le depth stream in one MKV."""
    h, w = frames[0].shape
    with av.open(str(path), "w", format="matroska") as out:
        def ffv1():
            s = out.add_stream("ffv1", rate=Fraction(30))
            s.width, s.height, s.pix_fmt = w, h, "gray16le"
            return s

        def heat():
            s = out.add_stream("libx264", rate=Fraction(30))
            s.width, s.height, s.pix_fmt = w, h, "yuv420p"
            return s

        if ffv1_first:
            depth_s, heat_s = ffv1(), heat()
        else:
            heat_s, depth_s = heat(), ffv1()
        for i, d in enumerate(frames):
            fd = av.VideoFrame.from_ndarray(d, format="gray16le")
            fh = av.VideoFrame.from_ndarray(_heatmap(d), format="rgb24")
            fd.pts = fh.pts = i
            for p in depth_s.encode(fd):
                out.mux(p)
            for p in heat_s.encode(fh):
                out.mux(p)
        for s in (depth_s, heat_s):
            for p in s.encode():
                out.mux(p)


def _write_single(path: Path, frames: list[np.ndarray], fmt: str, codec: str) -> None:
    h, w = frames[0].shape
    params = LogDepthCodec()
    with av.open(str(path), "w", format=fmt) as out:
        s = out.add_stream(codec, rate=Fraction(30))
        s.width, s.height = w, h
        if codec == "libx265":
            out.metadata["comment"] = json.dumps(params.to_dict())
            s.pix_fmt = "gray12le"
            s.codec_context.color_range = 2
            s.options = {"x265-params": "qp=6:log-level=error"}
        else:
            s.pix_fmt = "gray16le"
        for i, d in enumerate(frames):
            f = (av.VideoFrame.from_ndarray(params.encode(d), format="gray12le") if codec == "libx265"
                 else av.VideoFrame.from_ndarray(d, format="gray16le"))
            f.pts = i
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode():
            out.mux(p)


@pytest.mark.parametrize("ffv1_first", [False, True], ids=["ffv1-second", "ffv1-first"])
def test_v1014_dual_stream_mkv(tmp_path, kinect, ffv1_first):
    path = tmp_path / "episode-000.mkv"
    _write_dual_mkv(path, kinect, ffv1_first)
    probe = probe_depth(path)
    assert [c for c, _ in probe.streams] == (["ffv1", "h264"] if ffv1_first else ["h264", "ffv1"])
    assert (probe.kind, probe.stream_index) == ("ffv1", 0 if ffv1_first else 1)
    got = list(read_depth_frames(path))
    assert len(got) == 3
    for a, b in zip(got, kinect):
        assert a.dtype == np.uint16 and np.array_equal(a, b)  # lossless, holes stay 0


@pytest.mark.parametrize("name,fmt", [("episode-000.mkv", "matroska"), ("episode-000.mp4", "mp4")],
                         ids=["mkv", "ffv1-in-mp4"])
def test_single_stream_ffv1_whatever_the_extension(tmp_path, kinect, name, fmt):
    path = tmp_path / name
    _write_single(path, kinect, fmt, "ffv1")
    assert probe_depth(path).kind == "ffv1"
    got = list(read_depth_frames(path, ext="mp4"))
    assert len(got) == 3 and all(np.array_equal(a, b) for a, b in zip(got, kinect))


@pytest.mark.skipif(not hevc12_available(), reason="this PyAV build's libx265 lacks gray12le")
def test_hevc_gray12_in_an_mkv(tmp_path, kinect):
    path = tmp_path / "episode-000.mkv"
    _write_single(path, kinect, "matroska", "libx265")
    assert probe_depth(path).kind == "hevc12"
    got = list(read_depth_frames(path, ext="mkv"))
    assert len(got) == 3
    for a, b in zip(got, kinect):
        assert np.array_equal(a == 0, b == 0)  # holes kept, none created
        v = b > 0
        rel = np.abs(a[v].astype(np.float64) - b[v]) / b[v]
        assert np.median(rel) < 0.005


def test_writer_ffv1_and_hevc_outputs_probe_right(tmp_path, kinect):
    h, w = kinect[0].shape
    codecs = ["ffv1"] + (["hevc12"] if hevc12_available() else [])
    for codec in codecs:
        path = tmp_path / f"d.{DepthEncoder.ext_for(codec)}"
        enc = DepthEncoder(path, w, h, 30.0, codec=codec)
        for d in kinect:
            enc.encode(d)
        desc = enc.close()
        assert probe_depth(path).kind == codec and desc["frames"] == 3
        got = list(read_depth_frames(path))
        assert all(np.array_equal(a == 0, b == 0) for a, b in zip(got, kinect))


def test_png16_directory_in_frame_number_order(tmp_path, kinect):
    seq = tmp_path / "episode-000"
    seq.mkdir()
    # numbers without zero padding: lexical order would put 10 before 2
    for n, d in zip((2, 10, 1), (kinect[1], kinect[2], kinect[0])):
        (seq / f"frame-{n}.png").write_bytes(encode_png16(d))
    (seq / ".frame-3.png.tmp").write_bytes(b"partial")  # dotfiles are never frames
    assert [p.name for p in png16_frame_paths(seq)] == ["frame-1.png", "frame-2.png", "frame-10.png"]
    assert probe_depth(seq).kind == "png16"
    for reader in (read_png16_frames(seq), read_depth_frames(seq), read_depth_frames(seq, ext="png")):
        got = list(reader)
        assert len(got) == 3 and all(np.array_equal(a, b) for a, b in zip(got, kinect))


def test_real_kinect_png_reads_as_one_frame():
    got = list(read_depth_frames(DATA / "frame-000000.depth.png", ext="png"))
    assert len(got) == 1 and got[0].shape == (480, 640) and got[0].dtype == np.uint16
    reference = np.asarray(Image.open(DATA / "frame-000000.depth.png"))  # an independent PNG decoder
    assert np.array_equal(got[0], reference)
    assert int((got[0] == 0).sum()) > 30000  # holes come back as 0


@pytest.mark.parametrize("case", ["8bit-png", "empty-dir", "rgb-only-video", "missing", "garbage", "mixed-sizes"])
def test_bad_depth_inputs_raise_codec_error(tmp_path, kinect, case):
    if case == "8bit-png":
        path = tmp_path / "episode-000"
        path.mkdir()
        ctx = av.CodecContext.create("png", "w")
        ctx.width, ctx.height, ctx.pix_fmt = 8, 8, "gray"
        frame = av.VideoFrame.from_ndarray(np.zeros((8, 8), np.uint8), format="gray")
        (path / "0.png").write_bytes(b"".join(bytes(p) for p in list(ctx.encode(frame)) + list(ctx.encode(None))))
        match = "not a 16-bit grayscale PNG"
    elif case == "empty-dir":
        path = tmp_path / "episode-000"
        path.mkdir()
        match = "no .png depth frames"
    elif case == "rgb-only-video":
        path = tmp_path / "episode-000.mp4"
        with av.open(str(path), "w", format="mp4") as out:
            s = out.add_stream("libx264", rate=30)
            s.width, s.height, s.pix_fmt = 16, 16, "yuv420p"
            f = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24")
            for p in list(s.encode(f)) + list(s.encode()):
                out.mux(p)
        match = "no depth stream"
    elif case == "missing":
        path = tmp_path / "nothing.mkv"
        match = "not found"
    elif case == "garbage":
        path = tmp_path / "episode-000.mkv"
        path.write_bytes(b"\x00not a video" * 100)
        match = "cannot open depth video"
    else:
        path = tmp_path / "episode-000"
        path.mkdir()
        (path / "0.png").write_bytes(encode_png16(kinect[0]))
        (path / "1.png").write_bytes(encode_png16(kinect[0][:50]))
        match = "differs"
    with pytest.raises(CodecError, match=match):
        list(read_depth_frames(path))
