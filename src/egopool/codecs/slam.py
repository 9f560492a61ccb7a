"""SLAM pose math: frame changes by direction words, quaternions (xyzw), relative-pose conventions.

A trajectory point is ``[t, x, y, z, qx, qy, qz, qw]`` (t in s of the sensor clock,
xyz in m, Hamilton quaternion stored x, y, z, w). Its frame is described by
``frame_axes``: where +X, +Y, +Z point in the real world, as direction words
(``right/left``, ``up/down``, ``forward/backward``). Frames are converted through
those words only, never by matching axis letters (file_format.md §3.1,
multi_device_storage.md §6.6, DESIGN §9)::

    M = axes_matrix(dst)ᵀ · axes_matrix(src)        # v_dst = M · v_src
    p' = M p,   R' = M R Mᵀ  ⇔  q' = (s · M · q_xyz, q_w),  s = det M

For the published gripper frames this gives old +X (right) → new −Y, old +Y
(forward) → new +Z, old +Z (up) → new −X. Because ``M`` is a signed permutation,
positions and quaternions change by sign flips and swaps only: distances and angles
are preserved bit for bit.

Relative poses (§3.1 rule 3): apps ≤ 1.3.13 stored ``R_rel = R0ᵀ·R`` (left-multiplied,
a body delta in the anchor's axes), 1.3.14+ store ``R_rel = R·R0ᵀ``. They differ by the
constant conjugation ``R·R0ᵀ = R0 (R0ᵀ·R) R0ᵀ``, so converting needs the anchor
orientation ``R0``; neither ``frame`` nor ``app_version`` tells them apart, so the
convention is always an explicit argument. Positions are the same in both.

numpy only; imports nothing of egopool but ``errors``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import SchemaError

__all__ = [
    "CONVENTIONS",
    "DIRECTION_WORDS",
    "axes_matrix",
    "convert_points",
    "convert_positions",
    "convert_quaternions",
    "frame_rotation",
    "matrix_to_quat",
    "quat_conjugate",
    "quat_multiply",
    "quat_to_matrix",
    "relative_orientations",
    "rotation_angle",
    "switch_relative_convention",
]

#: World direction of each word in a fixed reference basis (right, forward, up).
DIRECTION_WORDS: dict[str, tuple[int, int, int]] = {
    "right": (1, 0, 0), "left": (-1, 0, 0),
    "forward": (0, 1, 0), "backward": (0, -1, 0),
    "up": (0, 0, 1), "down": (0, 0, -1),
}
#: ``"left"``: ``R0ᵀ·R`` (≤ v1.3.13); ``"right"``: ``R·R0ᵀ`` (v1.3.14+).
CONVENTIONS = ("left", "right")
_AXES = ("+X", "+Y", "+Z")


def axes_matrix(frame_axes: Mapping[str, str]) -> np.ndarray:
    """``(3, 3)`` float64 whose columns are the world directions of +X, +Y, +Z.

    Raises
    ------
    SchemaError
        Missing axis, unknown word, or two axes along the same direction.
    """
    if not isinstance(frame_axes, Mapping) or set(frame_axes) != set(_AXES):
        raise SchemaError(f"frame_axes must map exactly +X, +Y, +Z to direction words, got {frame_axes!r}")
    cols = []
    for axis in _AXES:
        word = frame_axes[axis]
        if word not in DIRECTION_WORDS:
            raise SchemaError(f"frame_axes {axis}={word!r} is not one of {sorted(DIRECTION_WORDS)}")
        cols.append(DIRECTION_WORDS[word])
    m = np.array(cols, dtype=np.float64).T
    if round(abs(np.linalg.det(m))) != 1:
        raise SchemaError(f"frame_axes {dict(frame_axes)} do not span three distinct directions")
    return m


def frame_rotation(src_axes: Mapping[str, str], dst_axes: Mapping[str, str]) -> np.ndarray:
    """``M`` with ``v_dst = M · v_src`` for vectors expressed in two frames (a signed permutation)."""
    return np.asarray(axes_matrix(dst_axes).T @ axes_matrix(src_axes), dtype=np.float64)


def _quats(q: Any) -> np.ndarray:
    a = np.asarray(q, dtype=np.float64)
    if a.shape[-1:] != (4,):
        raise SchemaError(f"quaternions must have shape (..., 4) [qx, qy, qz, qw], got {a.shape}")
    return a


def convert_positions(p: Any, m: np.ndarray) -> np.ndarray:
    """``(..., 3)`` positions -> ``M · p`` (exact for a signed permutation ``M``: values are moved
    and sign-flipped, never mixed, so a NaN or inf coordinate stays on the one axis it maps to)."""
    a = np.asarray(p, dtype=np.float64)
    if a.shape[-1:] != (3,):
        raise SchemaError(f"positions must have shape (..., 3), got {a.shape}")
    return _apply(a, np.asarray(m, dtype=np.float64))


def _signed_permutation(m: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(source index, sign)`` per output axis when ``m`` is a signed permutation, else None."""
    if m.shape != (3, 3) or not np.all(np.isin(m, (-1.0, 0.0, 1.0))):
        return None
    if not (np.all(np.count_nonzero(m, axis=0) == 1) and np.all(np.count_nonzero(m, axis=1) == 1)):
        return None
    src = np.argmax(m != 0, axis=1)
    return src, m[np.arange(3), src]


def _apply(v: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``(..., 3)`` -> ``M · v``. A signed permutation moves each value to one axis (a matrix
    product would spread a NaN/inf of one coordinate over all three: ``0 · NaN = NaN``)."""
    perm = _signed_permutation(m)
    if perm is None:
        return np.asarray(v @ m.T, dtype=np.float64)
    src, sign = perm
    return np.asarray(v[..., src] * sign, dtype=np.float64)


def convert_quaternions(q: Any, m: np.ndarray) -> np.ndarray:
    """``(..., 4)`` xyzw orientations ``R`` -> the quaternion of ``M R Mᵀ``.

    The vector part turns with ``M`` (times ``det M`` so a reflecting, left-handed
    frame still yields a proper rotation); ``w`` is unchanged, so the sign convention
    of the input is kept.
    """
    a = _quats(q)
    mm = np.asarray(m, dtype=np.float64)
    if mm.shape != (3, 3):
        raise SchemaError(f"frame rotation must be (3, 3), got {mm.shape}")
    sign = 1.0 if np.linalg.det(mm) > 0 else -1.0
    out = np.empty_like(a)
    out[..., :3] = _apply(a[..., :3], mm) * sign
    out[..., 3] = a[..., 3]
    return out


def convert_points(points: Any, src_axes: Mapping[str, str], dst_axes: Mapping[str, str]) -> np.ndarray:
    """Trajectory points ``(K, 8)`` ``[t,x,y,z,qx,qy,qz,qw]`` from one frame to another.

    ``t`` is copied untouched; xyz and the quaternion are re-expressed in ``dst_axes``.

    Raises
    ------
    SchemaError
        Bad ``frame_axes`` or points not shaped ``(K, 8)``.
    """
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 8:
        raise SchemaError(f"trajectory points must be (K, 8) [t,x,y,z,qx,qy,qz,qw], got {pts.shape}")
    m = frame_rotation(src_axes, dst_axes)
    out = pts.copy()
    out[:, 1:4] = convert_positions(pts[:, 1:4], m)
    out[:, 4:8] = convert_quaternions(pts[:, 4:8], m)
    return out


def quat_multiply(a: Any, b: Any) -> np.ndarray:
    """Hamilton product ``a ⊗ b`` of xyzw quaternions (broadcasting); rotation ``R_a · R_b``."""
    p, q = _quats(a), _quats(b)
    x1, y1, z1, w1 = np.moveaxis(p, -1, 0)
    x2, y2, z2, w2 = np.moveaxis(q, -1, 0)
    return np.stack([
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
    ], axis=-1)


def quat_conjugate(q: Any) -> np.ndarray:
    """``(..., 4)`` xyzw -> its conjugate (the inverse rotation for unit quaternions)."""
    a = _quats(q).copy()
    a[..., :3] *= -1
    return a


def quat_to_matrix(q: Any) -> np.ndarray:
    """``(..., 4)`` xyzw (normalised here) -> ``(..., 3, 3)`` rotation matrices."""
    a = _quats(q)
    n = np.linalg.norm(a, axis=-1, keepdims=True)
    if np.any(n == 0):
        raise SchemaError("zero-length quaternion")
    x, y, z, w = np.moveaxis(a / n, -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def matrix_to_quat(r: Any) -> np.ndarray:
    """``(..., 3, 3)`` rotation matrices -> ``(..., 4)`` unit xyzw with ``w >= 0``.

    Picks the largest of w, x, y, z as the pivot per matrix (numerically stable everywhere).
    """
    m = np.asarray(r, dtype=np.float64)
    if m.shape[-2:] != (3, 3):
        raise SchemaError(f"rotation matrices must have shape (..., 3, 3), got {m.shape}")
    flat = m.reshape(-1, 3, 3)
    tr = np.trace(flat, axis1=1, axis2=2)
    diag = np.stack([flat[:, 0, 0], flat[:, 1, 1], flat[:, 2, 2]], -1)
    cand = np.concatenate([diag * 2 - tr[:, None] + 1, (tr + 1)[:, None]], -1)  # 4·x², 4·y², 4·z², 4·w²
    k = np.argmax(cand, axis=1)
    q = np.empty((flat.shape[0], 4))
    s = 2.0 * np.sqrt(np.maximum(cand[np.arange(len(k)), k], 1e-300))
    r21, r12 = flat[:, 2, 1], flat[:, 1, 2]
    r02, r20 = flat[:, 0, 2], flat[:, 2, 0]
    r10, r01 = flat[:, 1, 0], flat[:, 0, 1]
    for i, row in enumerate((
        (s / 4, (r01 + r10) / s, (r02 + r20) / s, (r21 - r12) / s),
        ((r01 + r10) / s, s / 4, (r12 + r21) / s, (r02 - r20) / s),
        ((r02 + r20) / s, (r12 + r21) / s, s / 4, (r10 - r01) / s),
        ((r21 - r12) / s, (r02 - r20) / s, (r10 - r01) / s, s / 4),
    )):
        sel = k == i
        q[sel] = np.stack(row, -1)[sel]
    q[q[:, 3] < 0] *= -1
    return q.reshape((*m.shape[:-2], 4))


def rotation_angle(q: Any) -> np.ndarray:
    """Rotation angle in rad ``[0, π]`` of each xyzw quaternion (sign-insensitive)."""
    a = _quats(q)
    v = np.linalg.norm(a[..., :3], axis=-1)
    return np.asarray(2.0 * np.arctan2(v, np.abs(a[..., 3])), dtype=np.float64)


def _unit(q: Any) -> np.ndarray:
    """Normalise an anchor: its conjugate must be its inverse (stored quaternions carry rounding)."""
    a = _quats(q)
    n = np.linalg.norm(a, axis=-1, keepdims=True)
    if np.any(n == 0):
        raise SchemaError("zero-length anchor quaternion")
    return np.asarray(a / n, dtype=np.float64)


def _convention(name: str) -> str:
    if name not in CONVENTIONS:
        raise SchemaError(f"relative-pose convention must be one of {CONVENTIONS}, got {name!r}",
                          hint="'left' = R0ᵀ·R, apps ≤ 1.3.13; 'right' = R·R0ᵀ, apps 1.3.14+")
    return name


def relative_orientations(q_abs: Any, anchor: Any, convention: str) -> np.ndarray:
    """Orientations relative to an anchor, in one of the two conventions of §3.1 rule 3.

    Parameters
    ----------
    q_abs:
        ``(K, 4)`` absolute xyzw orientations ``R``.
    anchor:
        ``(4,)`` xyzw anchor orientation ``R0`` (e.g. the pose at ENTER); normalised here.
    convention:
        ``"left"``: ``R0ᵀ·R`` (≤ v1.3.13); ``"right"``: ``R·R0ᵀ`` (v1.3.14+).

    Returns
    -------
    numpy.ndarray
        ``(K, 4)`` xyzw.
    """
    inv0 = quat_conjugate(_unit(anchor))
    if _convention(convention) == "left":
        return quat_multiply(inv0, q_abs)
    return quat_multiply(q_abs, inv0)


def switch_relative_convention(q_rel: Any, anchor: Any, src: str, dst: str) -> np.ndarray:
    """Convert relative orientations between ``R0ᵀ·R`` and ``R·R0ᵀ`` (file_format.md §3.1 rule 3).

    ``right = R0 · left · R0ᵀ`` and ``left = R0ᵀ · right · R0``: a conjugation by the
    anchor, which keeps every rotation angle but turns the apparent axes. Positions do
    not change between the conventions and are not taken here.

    Parameters
    ----------
    q_rel:
        ``(K, 4)`` xyzw relative orientations in convention ``src``.
    anchor:
        ``(4,)`` xyzw absolute anchor orientation ``R0`` (the stored data cannot tell it).
    src, dst:
        ``"left"`` or ``"right"``.

    Raises
    ------
    SchemaError
        Unknown convention or bad shapes.
    """
    src, dst = _convention(src), _convention(dst)
    q = _quats(q_rel)
    if src == dst:
        return q.copy()
    a = _unit(anchor)
    if src == "left":
        return quat_multiply(quat_multiply(a, q), quat_conjugate(a))
    return quat_multiply(quat_multiply(quat_conjugate(a), q), a)
