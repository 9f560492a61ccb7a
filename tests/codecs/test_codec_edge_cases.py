"""Codec edge cases found in QA: non-finite poses, contradictory declarations, degenerate videos.

file_format.md §3.1 (frames), §7.2.1 (force matrices), §8 (depth); DESIGN §2, §3, §9.
"""

from __future__ import annotations

import numpy as np
import pytest

from egopool.codecs.slam import (
    convert_points,
    convert_positions,
    convert_quaternions,
    frame_rotation,
)
from egopool.frames import FRAMES, frame_axes

RFU, DLF = frame_axes("right_forward_up"), frame_axes("down_left_forward")


@pytest.mark.parametrize("src,dst", [("right_forward_up", "down_left_forward"), ("ego_cam_optical", "forward_left_up"),
                                     ("down_left_forward", "right_up_backward")])
def test_non_finite_values_only_move_with_their_axis(src, dst):
    """A NaN/inf coordinate (lost tracking) must land on one axis, not poison the other two."""
    m = frame_rotation(FRAMES[src], FRAMES[dst])
    pts = np.array([[0.5, np.nan, 1.0, 2.0, 0.0, np.inf, 0.0, 1.0],
                    [0.6, 1.0, -np.inf, 3.0, 0.1, 0.2, 0.3, 0.9]])
    out = convert_points(pts, FRAMES[src], FRAMES[dst])
    for row_in, row_out in zip(pts, out):
        # the signed permutation moves each value to exactly one place, sign flipped or not
        exp_p = np.array([sum(m[i, j] * row_in[1 + j] for j in range(3) if m[i, j] != 0) for i in range(3)])
        sign = np.linalg.det(m)
        exp_q = np.array([sign * sum(m[i, j] * row_in[4 + j] for j in range(3) if m[i, j] != 0) for i in range(3)])
        np.testing.assert_array_equal(row_out[1:4], exp_p)
        np.testing.assert_array_equal(row_out[4:7], exp_q)
        assert row_out[7] == row_in[7] and row_out[0] == row_in[0]
    assert int(np.isnan(out[0, 1:4]).sum()) == 1 and int(np.isinf(out[0, 4:7]).sum()) == 1


def test_rfu_to_dlf_keeps_a_nan_on_the_axis_it_moves_to():
    m = frame_rotation(RFU, DLF)
    # old +X (right) -> new −Y: a NaN in x stays NaN only in y
    out = convert_positions([np.nan, 2.0, 3.0], m)
    assert out[0] == -3.0 and np.isnan(out[1]) and out[2] == 2.0
    q = convert_quaternions([0.0, 0.0, np.inf, 1.0], m)
    assert q.tolist() == [-np.inf, 0.0, 0.0, 1.0]


def test_general_rotation_matrices_still_work():
    """convert_positions accepts any (3, 3) matrix (not only signed permutations)."""
    c, s = np.cos(0.3), np.sin(0.3)
    m = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])
    np.testing.assert_allclose(convert_positions([1.0, 0, 0], m), [c, s, 0])


ONE_FRAME_SCRIPT = r"""
import sys
import numpy as np
from egopool import TaskWriter, StreamSpec, open_task
ep = TaskWriter(sys.argv[1], "one", fps=30.0).begin_episode(
    [], [StreamSpec("cam_depth", "depth", 64, 48), StreamSpec("cam_rgb", "rgb", 64, 48, codec="hevc")])
depth = np.full((48, 64), 1234, np.uint16)
depth[:8, :8] = 0
ep.add_frame({}, hardware_ns=1_000_000_000, images={"cam_depth": depth,
                                                     "cam_rgb": np.full((48, 64, 3), 90, np.uint8)})
ep.finish()
e = open_task(sys.argv[1] + "/one").episode(1)
d = list(e.depth("cam_depth"))
rgb = list(e.video("cam_rgb"))
print(len(d), len(rgb), int((d[0] == 0).sum()), int(d[0][20, 20]))
"""


def test_one_frame_hevc_episode_is_written(tmp_path):
    """libx265 hands back a garbage dts for a lone frame (pts 0, dts ≈ -4e11) in a fresh process, which
    the MP4 muxer refuses ("pts/dts pair unsupported"): a one-row episode with HEVC depth or HEVC RGB
    must still be written. A fresh interpreter, because later encoders in one process may be lucky."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src"
    env = dict(os.environ, PYTHONPATH=str(src))
    r = subprocess.run([sys.executable, "-c", ONE_FRAME_SCRIPT, str(tmp_path)], capture_output=True, text=True, check=False,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    n_depth, n_rgb, holes, value = map(int, r.stdout.split())
    assert (n_depth, n_rgb, holes) == (1, 1, 64)
    assert abs(value - 1234) <= 1234 * 0.003  # log code step 0.15 %, qp 6


def _hevc_depth(path, frames, comment_json, params=None):
    """A 12-bit log-code depth MP4 whose container comment is ``comment_json`` (any text)."""
    import json as _json

    import egopool.codecs.depth as depth_mod
    from egopool.codecs.depth import DepthEncoder

    real = depth_mod.json.dumps
    depth_mod.json.dumps = lambda obj: comment_json  # the only json.dumps in __init__ writes the comment
    try:
        enc = DepthEncoder(path, frames[0].shape[1], frames[0].shape[0], 30.0, params=params)
    finally:
        depth_mod.json.dumps = real
    for f in frames:
        enc.encode(f)
    enc.close()
    assert _json  # keep the import honest
    return path


def _ramp(n=3, h=48, w=64):
    yy, xx = np.mgrid[0:h, 0:w]
    out = []
    for i in range(n):
        d = (900 + 7 * xx + 3 * yy + 40 * i).astype(np.uint16)
        d[:6, :6] = 0
        out.append(d)
    return out


@pytest.mark.parametrize("comment", ["123", '"hello"', "[1, 2]", "plain text", '{"title": "made elsewhere"}'])
def test_foreign_container_comment_falls_back_to_the_declared_parameters(tmp_path, comment):
    """Only a JSON object naming the log code is the file's own description; any other comment
    (another tool's) must not crash the reader nor override ``video_codec``."""
    from egopool.codecs.depth import LogDepthCodec, read_depth_frames

    frames = _ramp()
    codec = LogDepthCodec(200.0, 10000.0)  # not the default range: decoding with 100..20000 is ~8 % off
    path = _hevc_depth(tmp_path / "d.mp4", frames, comment, params=codec)
    got = list(read_depth_frames(path, params=codec.to_dict()))
    assert len(got) == 3
    for g, f in zip(got, frames):
        assert np.array_equal(g == 0, f == 0)
        v = f > 0
        assert np.median(np.abs(g[v].astype(float) - f[v]) / f[v]) < 0.002


@pytest.mark.parametrize("params", [{"d_min": "abc"}, {"d_min": 0}, {"d_min": 500, "d_max": 100}])
def test_unusable_log_parameters_are_a_codec_error_naming_the_file(tmp_path, params):
    from egopool.codecs.depth import read_depth_frames
    from egopool.errors import CodecError

    path = _hevc_depth(tmp_path / "d.mp4", _ramp(1), "not json")
    with pytest.raises(CodecError) as ei:
        list(read_depth_frames(path, params=params))
    assert str(path) in str(ei.value) and "d_min" in str(ei.value)


def test_a_file_is_probed_even_when_video_extensions_says_png(tmp_path):
    """``video_extensions`` = png selects the sequence reader for a directory; a file at the
    stream's place is decoded by what probing finds in it (C5), not refused as "not a PNG"."""
    from egopool.codecs.depth import read_depth_frames

    frames = _ramp(2)
    path = _hevc_depth(tmp_path / "episode-000.mp4", frames, '{"depth_codec": "log12", "d_min": 100, "d_max": 20000}')
    got = list(read_depth_frames(path, ext="png"))
    assert len(got) == 2 and np.array_equal(got[0] == 0, frames[0] == 0)
