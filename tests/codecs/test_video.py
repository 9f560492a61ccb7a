"""RGB video via PyAV (file_format.md §8): one encoded frame per call, lossy but close."""

from __future__ import annotations

import numpy as np
import pytest

from egopool.codecs.video import RgbEncoder, count_video_frames, read_rgb_frames, video_info
from egopool.errors import CodecError


def _smooth(h: int, w: int, i: int) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    r = 128 + 100 * np.sin(x / w * np.pi + i * 0.1)
    g = 128 + 100 * np.cos(y / h * np.pi)
    b = np.full_like(r, 30.0 + 15 * i)
    return np.stack([r, g, b], axis=2).round().astype(np.uint8)


@pytest.mark.parametrize("codec,name", [("h264", "h264"), ("hevc", "hevc")])
def test_frames_round_trip_one_per_row(tmp_path, codec, name):
    path = tmp_path / "v.mp4"
    enc = RgbEncoder(path, 64, 48, 30.0, codec=codec)
    n = 12
    for i in range(n):
        enc.encode(_smooth(48, 64, i))
    desc = enc.close()
    assert desc["frames"] == n and desc["codec"] == codec and desc["pix_fmt"] == "yuv420p"
    assert count_video_frames(path) == n
    info = video_info(path)
    assert (info["codec"], info["width"], info["height"]) == (name, 64, 48)
    frames = list(read_rgb_frames(path))
    assert len(frames) == n
    def mae(a, b):
        return np.abs(a.astype(np.int16) - b.astype(np.int16)).mean()

    for i, f in enumerate(frames):
        assert f.shape == (48, 64, 3) and f.dtype == np.uint8
        # lossy: crf 23 with 4:2:0 chroma and an 8-bit YUV round trip; 4/255 = 1.6 % of full scale
        assert mae(f, _smooth(48, 64, i)) < 4.0, i
        # and in order: each decoded frame is nearest to its own input, not a neighbour's
        for j in (i - 1, i + 1):
            if 0 <= j < n:
                assert mae(f, _smooth(48, 64, i)) < mae(f, _smooth(48, 64, j))


def test_gray_and_odd_sizes(tmp_path):
    path = tmp_path / "g.mp4"
    enc = RgbEncoder(path, 33, 17, 30.0)
    gray = np.tile(np.linspace(20, 230, 33).astype(np.uint8), (17, 1))
    enc.encode(gray)
    enc.encode(gray[:, :, None])
    desc = enc.close()
    assert desc["pix_fmt"] == "yuv444p"  # 4:2:0 needs even sizes
    frames = list(read_rgb_frames(path))
    assert len(frames) == 2 and frames[0].shape == (17, 33, 3)
    for f in frames:
        for ch in range(3):
            assert np.abs(f[:, :, ch].astype(np.int16) - gray).mean() < 3.0


def test_bad_frames_and_codecs(tmp_path):
    enc = RgbEncoder(tmp_path / "v.mp4", 16, 16, 30.0)
    with pytest.raises(CodecError, match="uint8"):
        enc.encode(np.zeros((16, 16, 3), np.float32))
    with pytest.raises(CodecError, match="shape"):
        enc.encode(np.zeros((16, 8, 3), np.uint8))
    enc.abort()
    with pytest.raises(CodecError, match="unknown RGB codec"):
        RgbEncoder(tmp_path / "x.mp4", 16, 16, 30.0, codec="vp9")


def test_corrupt_video_is_a_codec_error_naming_the_file(tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 32)
    with pytest.raises(CodecError, match="broken.mp4"):
        count_video_frames(bad)
    with pytest.raises(CodecError, match="broken.mp4"):
        list(read_rgb_frames(bad))


def _decoded_frames_with_time_base(tmp_path, n: int) -> list:
    """Decoded frames of an MPEG-TS file: time base 1/90000, as a v4l2 camera's is 1/1000000 (not 1/fps)."""
    import av

    src = tmp_path / "cam.ts"
    with av.open(str(src), "w", format="mpegts") as out:
        st = out.add_stream("mpeg2video", rate=30)
        st.width, st.height, st.pix_fmt = 64, 48, "yuv420p"
        for i in range(n):
            f = av.VideoFrame.from_ndarray(_smooth(48, 64, i), format="rgb24")
            f.pts = i
            for p in st.encode(f):
                out.mux(p)
        for p in st.encode():
            out.mux(p)
    with av.open(str(src)) as c:
        frames = list(c.decode(c.streams.video[0]))
    assert frames[0].time_base.denominator == 90000
    return frames


def test_decoded_frames_of_another_time_base_get_one_pts_per_frame(tmp_path):
    """A camera's decoded frame keeps its device time base; the encoder must not rescale its
    frame counter from that base (all pts 0: a 0 s video, or 'Invalid argument' once a frame repeats)."""
    import av

    frames = _decoded_frames_with_time_base(tmp_path, 6)
    seq = [frames[0], frames[0], frames[0], *frames[1:]]  # a stalled camera: the recorder repeats its frame
    path = tmp_path / "v.mp4"
    enc = RgbEncoder(path, 64, 48, 30.0, preset="ultrafast")
    for f in seq:
        enc.encode(f)
    assert enc.close()["frames"] == len(seq)
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        pts = sorted(p.pts for p in c.demux(s) if p.pts is not None)
        tb = s.time_base
    assert len(pts) == len(seq) and len(set(pts)) == len(seq)  # one distinct pts per frame
    assert [round(float(p * tb) * 30) for p in pts] == list(range(len(seq)))  # at 1/30 s steps
