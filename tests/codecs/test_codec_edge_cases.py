"""Codec edge cases found in QA: non-finite poses, contradictory declarations, degenerate videos.

file_format.md §3.1 (frames), §7.2.1 (force matrices), §8 (depth); DESIGN §2, §3, §9.
"""

from __future__ import annotations

import numpy as np
import pytest

from egopool.codecs.slam import convert_points, convert_positions, convert_quaternions, frame_rotation
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
    r = subprocess.run([sys.executable, "-c", ONE_FRAME_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    n_depth, n_rgb, holes, value = map(int, r.stdout.split())
    assert (n_depth, n_rgb, holes) == (1, 1, 64)
    assert abs(value - 1234) <= 1234 * 0.003  # log code step 0.15 %, qp 6
