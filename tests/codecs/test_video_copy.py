"""Stream copy into an episode (``StreamSpec(source=...)``, codecs/video_copy.py): packets move, frames stay."""

from __future__ import annotations

import av
import numpy as np
import pytest

from egopool import StreamSpec, TaskWriter, open_task, vector_column
from egopool.codecs.video import RgbEncoder, read_rgb_frames
from egopool.codecs.video_copy import VideoSource, packet_times, remux_segment
from egopool.errors import CodecError


def _source(path, n=20, fps=10.0, codec="h264"):
    enc = RgbEncoder(path, 32, 24, fps, codec=codec)
    for i in range(n):
        img = np.zeros((24, 32, 3), np.uint8)
        img[:, : i + 1] = (10 * i, 200, 90)
        enc.encode(img)
    enc.close()
    return list(read_rgb_frames(path))


def _concatenated(tmp_path, lengths=(8, 12), fps=10.0):
    """Separately encoded parts packed one after the other in one MP4 (what lerobot's writer makes)."""
    parts, frames = [], []
    for k, n in enumerate(lengths):
        parts.append(tmp_path / f"part{k}.mp4")
        frames.append(_source(parts[-1], n=n, fps=fps))
    out_path = tmp_path / "all.mp4"
    with av.open(str(parts[0])) as first, av.open(str(out_path), "w", format="mp4") as out:
        ost = out.add_stream_from_template(first.streams.video[0])
        offset = 0
        for part in parts:
            with av.open(str(part)) as c:
                s = c.streams.video[0]
                last = 0
                for pkt in c.demux(s):
                    if pkt.pts is None:
                        continue
                    last = max(last, pkt.pts + (pkt.duration or 0))
                    pkt.pts += offset
                    pkt.dts += offset
                    pkt.stream = ost
                    out.mux(pkt)
                offset += last
    return out_path, frames


def test_a_middle_segment_copies_exactly_and_restarts_time(tmp_path):
    src, (a, b) = _concatenated(tmp_path)
    info = remux_segment(VideoSource(src, 0.8, 2.0), tmp_path / "b.mp4", fps=10.0)
    assert info["frames"] == 12 and info["codec"] == "h264"
    copied = list(read_rgb_frames(tmp_path / "b.mp4"))
    assert len(copied) == 12 and all(np.array_equal(x, y) for x, y in zip(copied, b, strict=True))
    times, _ = packet_times(tmp_path / "b.mp4")
    np.testing.assert_allclose(times, np.arange(12) / 10.0, atol=1e-6)
    first = list(read_rgb_frames(_copy(src, 0.0, 0.8, tmp_path / "a.mp4")))
    assert len(first) == 8 and all(np.array_equal(x, y) for x, y in zip(first, a, strict=True))


def _copy(src, t0, t1, dst):
    remux_segment(VideoSource(src, t0, t1), dst, fps=10.0)
    return dst


def test_a_window_inside_a_group_of_pictures_is_refused(tmp_path):
    src = tmp_path / "src.mp4"
    _source(src)
    with pytest.raises(CodecError, match="key frame"):
        remux_segment(VideoSource(src, 0.5, None), tmp_path / "x.mp4", fps=10.0)
    with pytest.raises(CodecError, match="group of pictures"):  # x264 B-frames reference later frames
        remux_segment(VideoSource(src, 0.0, 1.2), tmp_path / "y.mp4", fps=10.0)
    assert not (tmp_path / "y.mp4").exists()


def test_episode_with_a_copied_stream_and_a_frame_count_check(tmp_path):
    src = tmp_path / "src.mp4"
    frames = _source(src, n=6)
    tw = TaskWriter(tmp_path / "rec", "copy", fps=10.0)
    ep = tw.begin_episode([vector_column("observation.gripper_state", [3])],
                          [StreamSpec("cam_rgb", "rgb", 32, 24, source=VideoSource(src))])
    for i in range(6):
        ep.add_frame({"observation.gripper_state": [i, 0, 0]}, hardware_ns=i + 1)
    result = ep.finish()
    got = list(open_task(tmp_path / "rec" / "copy").episode(result.index).video("cam_rgb"))
    assert len(got) == 6 and all(np.array_equal(a, b) for a, b in zip(got, frames, strict=True))
    assert open_task(tmp_path / "rec" / "copy").episode(1).meta["video_codec"]["cam_rgb"]["encoder"] == "copy"
    ep = tw.begin_episode([], [StreamSpec("cam_rgb", "rgb", 32, 24, source=VideoSource(src))])
    with pytest.raises(CodecError, match="pass no frames"):
        ep.add_frame({}, images={"cam_rgb": frames[0]})
    for i in range(4):
        ep.add_frame({}, hardware_ns=i + 1)
    with pytest.raises(CodecError, match="holds 6 frames for 4 data rows"):
        ep.finish()
    assert [e.index for e in open_task(tmp_path / "rec" / "copy").episodes()] == [1]  # nothing of N=2 stays
