"""SLAM frames by direction words and relative-pose conventions (file_format.md §3.1, multi_device_storage.md §6.6)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egopool.codecs.slam import (axes_matrix, convert_points, convert_quaternions, frame_rotation, matrix_to_quat,
                                 quat_conjugate, quat_multiply, quat_to_matrix, relative_orientations, rotation_angle,
                                 switch_relative_convention)
from egopool.errors import SchemaError
from egopool.frames import FRAMES, frame_axes, frame_id_of, register_frame, resolve_axes

DATA = Path(__file__).resolve().parents[1] / "data" / "evo_trajectories"
TUM_FILES = ["freiburg1_xyz-groundtruth.txt", "freiburg1_xyz-rgbdslam.txt", "V102.txt"]
RFU, DLF, EGO = frame_axes("right_forward_up"), frame_axes("down_left_forward"), frame_axes("ego_cam_optical")
UNIT = {"+X": np.array([1.0, 0, 0]), "+Y": np.array([0, 1.0, 0]), "+Z": np.array([0, 0, 1.0])}


def _load_tum(name: str) -> np.ndarray:
    """TUM format: 'timestamp tx ty tz qx qy qz qw' per line, '#' comments."""
    rows = [line.split() for line in (DATA / name).read_text().splitlines() if line.strip() and not line.startswith("#")]
    pts = np.array(rows, dtype=np.float64)
    assert pts.shape[1] == 8
    return pts


def _random_quats(rng: np.random.Generator, n: int) -> np.ndarray:
    q = rng.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def test_right_forward_up_to_down_left_forward_matches_the_spec():
    m = frame_rotation(RFU, DLF)
    # §3.1: old +X right -> new −Y, old +Y forward -> new +Z, old +Z up -> new −X
    assert (m @ UNIT["+X"]).tolist() == [0, -1, 0]
    assert (m @ UNIT["+Y"]).tolist() == [0, 0, 1]
    assert (m @ UNIT["+Z"]).tolist() == [-1, 0, 0]
    pts = np.array([[0.5, 1.0, 2.0, 3.0, 0, 0, 0, 1]])
    assert convert_points(pts, RFU, DLF)[0, :4].tolist() == [0.5, -3.0, -1.0, 2.0]


def test_ego_optical_to_down_left_forward_uses_words_not_letters():
    m = frame_rotation(EGO, DLF)
    assert (m @ UNIT["+X"]).tolist() == [0, -1, 0]  # right  = −left
    assert (m @ UNIT["+Y"]).tolist() == [1, 0, 0]   # down   = +X
    assert (m @ UNIT["+Z"]).tolist() == [0, 0, 1]   # forward = +Z


@pytest.mark.parametrize("src,dst", list(itertools.permutations(sorted(FRAMES), 2)))
def test_every_axis_lands_on_the_axis_with_the_same_word(src, dst):
    m = frame_rotation(frame_axes(src), frame_axes(dst))
    opposite = {"right": "left", "left": "right", "up": "down", "down": "up", "forward": "backward",
                "backward": "forward"}
    for axis, word in frame_axes(src).items():
        v = m @ UNIT[axis]
        k = int(np.flatnonzero(v)[0])
        dst_word = frame_axes(dst)[("+X", "+Y", "+Z")[k]]
        assert dst_word == (word if v[k] > 0 else opposite[word])


def test_yaw_about_up_becomes_rotation_about_minus_x():
    s = np.sqrt(0.5)
    yaw_left = np.array([0, 0, s, s])  # 90° about up in right_forward_up
    out = convert_quaternions(yaw_left, frame_rotation(RFU, DLF))
    assert out.tolist() == [-s, 0, 0, s]  # up is −X in down_left_forward
    # and it still turns "forward" into "left" in the new frame's words
    r = quat_to_matrix(out)
    forward_dlf, left_dlf = np.array([0, 0, 1.0]), np.array([0, 1.0, 0])
    assert np.allclose(r @ forward_dlf, left_dlf, atol=1e-15)


def test_random_rotations_round_trip_and_compose_exactly():
    rng = np.random.default_rng(7)
    q = _random_quats(rng, 500)
    p = rng.normal(size=(500, 3))
    pts = np.concatenate([rng.random((500, 1)), p, q], axis=1)
    names = sorted(FRAMES)
    for a, b, c in itertools.permutations(names, 3):
        ab = convert_points(pts, frame_axes(a), frame_axes(b))
        assert np.array_equal(convert_points(ab, frame_axes(b), frame_axes(a)), pts)
        assert np.array_equal(convert_points(ab, frame_axes(b), frame_axes(c)),
                              convert_points(pts, frame_axes(a), frame_axes(c)))
    m = frame_rotation(RFU, EGO)
    want = m @ quat_to_matrix(q) @ m.T
    assert np.allclose(quat_to_matrix(convert_quaternions(q, m)), want, atol=1e-12)


def test_left_handed_frame_still_gives_proper_rotations():
    lh = {"+X": "right", "+Y": "forward", "+Z": "down"}
    m = frame_rotation(RFU, lh)
    assert np.linalg.det(m) == -1
    q = _random_quats(np.random.default_rng(1), 50)
    out = convert_quaternions(q, m)
    r = quat_to_matrix(out)
    assert np.allclose(r, m @ quat_to_matrix(q) @ m.T, atol=1e-12)
    assert np.allclose(np.linalg.det(r), 1.0)


@pytest.mark.parametrize("name", TUM_FILES)
@pytest.mark.parametrize("dst", ["down_left_forward", "ego_cam_optical", "forward_left_up"])
def test_real_tum_trajectories_keep_distances_and_angles(name, dst):
    pts = _load_tum(name)
    out = convert_points(pts, RFU, frame_axes(dst))
    assert np.array_equal(out[:, 0], pts[:, 0])
    rng = np.random.default_rng(0)
    i = np.concatenate([np.arange(len(pts) - 1), rng.integers(0, len(pts), 2000)])
    j = np.concatenate([np.arange(1, len(pts)), rng.integers(0, len(pts), 2000)])
    d0 = np.linalg.norm(pts[i, 1:4] - pts[j, 1:4], axis=1)
    d1 = np.linalg.norm(out[i, 1:4] - out[j, 1:4], axis=1)
    assert np.max(np.abs(d0 - d1)) <= 1e-9
    a0 = rotation_angle(quat_multiply(quat_conjugate(pts[i, 4:8]), pts[j, 4:8]))
    a1 = rotation_angle(quat_multiply(quat_conjugate(out[i, 4:8]), out[j, 4:8]))
    assert np.max(np.abs(a0 - a1)) <= 1e-9
    assert np.max(a0) > 0.1  # the trajectory really turns, so the check means something
    assert np.array_equal(convert_points(out, frame_axes(dst), RFU), pts)


def test_left_and_right_relative_conventions_on_a_real_trajectory():
    q_abs = _load_tum("freiburg1_xyz-groundtruth.txt")[:, 4:8]
    anchor = q_abs[0]
    left = relative_orientations(q_abs, anchor, "left")    # R0ᵀ·R, apps ≤ 1.3.13
    right = relative_orientations(q_abs, anchor, "right")  # R·R0ᵀ, 1.3.14+
    r0 = quat_to_matrix(anchor)
    r = quat_to_matrix(q_abs)
    assert np.allclose(quat_to_matrix(left), r0.T @ r, atol=1e-12)
    assert np.allclose(quat_to_matrix(right), r @ r0.T, atol=1e-12)
    # same angles (a constant conjugation) but different axes: the silent error of §3.1 rule 3
    assert np.allclose(rotation_angle(left), rotation_angle(right), atol=1e-12)
    assert not np.allclose(np.abs(left[:, :3]), np.abs(right[:, :3]), atol=1e-3)
    converted = switch_relative_convention(left, anchor, "left", "right")
    assert np.allclose(quat_to_matrix(converted), quat_to_matrix(right), atol=1e-12)
    back = switch_relative_convention(converted, anchor, "right", "left")
    assert np.allclose(back, left, atol=1e-12)
    with pytest.raises(SchemaError, match="convention"):
        switch_relative_convention(left, anchor, "left", "middle")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=4, max_size=4).filter(lambda v: np.linalg.norm(v) > 1e-3))
def test_matrix_quaternion_round_trip(v):
    q = np.array(v) / np.linalg.norm(v)
    back = matrix_to_quat(quat_to_matrix(q))
    assert back[3] >= 0
    assert min(np.linalg.norm(back - q), np.linalg.norm(back + q)) < 1e-12  # q and −q are the same rotation


@pytest.mark.parametrize("axes,match", [
    ({"+X": "right", "+Y": "forward"}, "exactly"),
    ({"+X": "right", "+Y": "ahead", "+Z": "up"}, "not one of"),
    ({"+X": "right", "+Y": "left", "+Z": "up"}, "distinct"),
])
def test_bad_frame_axes(axes, match):
    with pytest.raises(SchemaError, match=match):
        axes_matrix(axes)


def test_registry_extension_and_lookup():
    assert frame_id_of({"+X": "down", "+Y": "left", "+Z": "forward"}) == "down_left_forward"
    assert resolve_axes("ego_cam_optical") == EGO
    register_frame("test_left_up_forward", {"+X": "left", "+Y": "up", "+Z": "forward"})
    try:
        m = frame_rotation(RFU, frame_axes("test_left_up_forward"))
        assert (m @ UNIT["+X"]).tolist() == [-1, 0, 0]
        with pytest.raises(SchemaError, match="already registered"):
            register_frame("test_left_up_forward", RFU)
    finally:
        del FRAMES["test_left_up_forward"]
    with pytest.raises(SchemaError, match="unknown SLAM frame"):
        frame_axes("nope")
