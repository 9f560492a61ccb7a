"""How far decoded depth is from the original: holes and relative error, edges apart (DESIGN §3).

A lossy depth codec is judged on three things (DESIGN §3): every hole (0) of the
original is still a hole, no valid pixel became a hole, and the relative error of
valid pixels, reported separately away from depth edges and on them, because
codec ringing concentrates at discontinuities and hole borders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CodecError

__all__ = ["DepthErrorReport", "depth_edge_mask", "depth_error_report"]


def _dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    """Square (Chebyshev) dilation of a boolean ``(H, W)`` mask by ``radius`` px.

    A square structuring element is separable, so dilating rows then columns costs
    ``4 * radius`` shifted ORs instead of ``(2 * radius + 1) ** 2``.
    """
    out = mask.copy()
    for axis in (0, 1):
        src = out.copy()
        n = src.shape[axis]
        for r in range(1, min(radius, n - 1) + 1):
            lo = [slice(None), slice(None)]
            hi = [slice(None), slice(None)]
            lo[axis], hi[axis] = slice(0, n - r), slice(r, n)
            out[tuple(hi)] |= src[tuple(lo)]
            out[tuple(lo)] |= src[tuple(hi)]
    return out


def depth_edge_mask(depth_mm: np.ndarray, *, rel_jump: float = 0.05, radius: int = 2) -> np.ndarray:
    """Pixels near a depth discontinuity or a hole.

    A discontinuity is a pair of 4-neighbours, both valid, whose depths differ by more
    than ``rel_jump`` of the smaller one. Every pixel within ``radius`` px (square
    neighbourhood) of either pixel of such a pair, or of a hole (0), is an edge pixel.

    Parameters
    ----------
    depth_mm:
        ``(H, W)`` uint16 depth in mm, 0 = hole.
    rel_jump:
        Relative jump that counts as a discontinuity (0.05 = 5 %).
    radius:
        Dilation radius in pixels.

    Returns
    -------
    numpy.ndarray
        ``(H, W)`` bool, True on edge pixels (holes themselves included).

    Raises
    ------
    CodecError
        ``depth_mm`` is not 2-D.
    """
    d = np.asarray(depth_mm)
    if d.ndim != 2:
        raise CodecError(f"depth frame must be (H, W), got shape {d.shape}")
    x = d.astype(np.float64)
    hole = d == 0
    seed = hole.copy()
    for a, b in ((x[:, 1:], x[:, :-1]), (x[1:, :], x[:-1, :])):
        lo = np.minimum(a, b)
        jump = (lo > 0) & (np.abs(a - b) > rel_jump * np.where(lo > 0, lo, 1.0))
        if a.shape[1] != x.shape[1]:
            seed[:, 1:] |= jump
            seed[:, :-1] |= jump
        else:
            seed[1:, :] |= jump
            seed[:-1, :] |= jump
    return _dilate(seed, radius)


@dataclass(frozen=True)
class DepthErrorReport:
    """Hole bookkeeping and relative error of decoded vs original depth.

    Attributes
    ----------
    holes, holes_kept, holes_created:
        Holes in the original, of them still 0 after decoding, valid pixels that became 0.
    valid:
        Valid (non-zero) original pixels.
    median, p99, max:
        Relative error ``|decoded - orig| / orig`` over valid pixels that stayed valid.
    median_non_edge, p99_non_edge, median_edge, p99_edge:
        The same, split by :func:`depth_edge_mask` of the original (NaN when empty).
    """

    holes: int
    holes_kept: int
    holes_created: int
    valid: int
    median: float
    p99: float
    max: float
    median_non_edge: float
    p99_non_edge: float
    median_edge: float
    p99_edge: float


def _q(values: np.ndarray, pct: float) -> float:
    return float(np.percentile(values, pct)) if values.size else float("nan")


def depth_error_report(original: np.ndarray, decoded: np.ndarray, *, rel_jump: float = 0.05,
                       radius: int = 2) -> DepthErrorReport:
    """Compare decoded depth with the original (DESIGN §3).

    Parameters
    ----------
    original, decoded:
        uint16 mm frames, ``(H, W)`` or a stack ``(T, H, W)`` of the same shape.
    rel_jump, radius:
        Edge definition, passed to :func:`depth_edge_mask` (applied to the original).

    Returns
    -------
    DepthErrorReport

    Raises
    ------
    CodecError
        Shapes differ.
    """
    a, b = np.asarray(original), np.asarray(decoded)
    if a.shape != b.shape:
        raise CodecError(f"decoded shape {b.shape} != original {a.shape}")
    if a.ndim == 2:
        a, b = a[None], b[None]
    edge = np.stack([depth_edge_mask(f, rel_jump=rel_jump, radius=radius) for f in a])
    hole = a == 0
    both = ~hole & (b != 0)
    rel = np.zeros(a.shape, dtype=np.float64)
    af = a.astype(np.float64)
    np.divide(np.abs(b.astype(np.float64) - af), af, out=rel, where=both)
    allv, ne, ed = rel[both], rel[both & ~edge], rel[both & edge]
    return DepthErrorReport(
        holes=int(hole.sum()), holes_kept=int((hole & (b == 0)).sum()), holes_created=int((~hole & (b == 0)).sum()),
        valid=int((~hole).sum()), median=_q(allv, 50), p99=_q(allv, 99),
        max=float(allv.max()) if allv.size else float("nan"),
        median_non_edge=_q(ne, 50), p99_non_edge=_q(ne, 99), median_edge=_q(ed, 50), p99_edge=_q(ed, 99))
