"""How far decoded depth is from the original: holes and relative error, edges apart (DESIGN §3).

A lossy depth codec is judged on three things (DESIGN §3): every hole (0) of the
original is still a hole, no valid pixel became a hole, and the relative error of
valid pixels, reported separately away from depth edges and on them, because
codec ringing concentrates at discontinuities and hole borders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CodecError

__all__ = ["DepthErrorReport", "DepthErrorTally", "depth_edge_mask", "depth_error_report"]


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


@dataclass
class DepthErrorTally:
    """The running error of a lossy depth code over a stream, one frame at a time (what ``egopool compress``
    checks, :mod:`.depth_transcode`, and what ``export lerobot`` measures of LeRobot's quantisation,
    :mod:`egopool.interop.lerobot_depth`).

    Attributes
    ----------
    pixels, holes:
        Pixels seen, and of them holes (0) of the source.
    below_min, above_max:
        Valid source pixels under / over the code's range ``[lo, hi]`` mm (the code clips them).
    max_abs_mm, max_rel:
        Largest ``|decoded - reference|`` (mm) and ``|decoded - reference| / reference`` of the measured pixels.
    """

    pixels: int = 0
    holes: int = 0
    below_min: int = 0
    above_max: int = 0
    max_abs_mm: float = 0.0
    max_rel: float = 0.0

    @property
    def valid(self) -> int:
        """Valid (non-zero) source pixels."""
        return self.pixels - self.holes

    def add(self, src: np.ndarray, back: np.ndarray, lo: float, hi: float, *,
            clip_outside: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Account one frame and return ``(measured, rel)``: the ``(H, W)`` bool mask of the pixels measured and
        their relative errors ``(M,)`` float64, in the mask's order.

        ``src``: the source frame, uint16 mm ``(H, W)``, 0 = hole; ``back``: what the code gives back, mm, same
        shape; ``[lo, hi]``: the code's range (mm). The reference of a valid pixel is its value; with
        ``clip_outside`` every valid pixel is measured against its value clipped to ``[lo, hi]`` (the log code,
        file_format.md §8), without it only the pixels inside the range are measured (LeRobot's quantisation,
        whose lowest valid code is not ``lo``).
        """
        a = np.asarray(src)
        valid = a > 0
        self.pixels += a.size
        self.holes += int(a.size - np.count_nonzero(valid))
        below, above = valid & (a < lo), valid & (a > hi)
        self.below_min += int(np.count_nonzero(below))
        self.above_max += int(np.count_nonzero(above))
        measured = valid if clip_outside else valid & ~below & ~above
        ref = np.clip(a[measured], lo, hi).astype(np.float64)
        err = np.abs(np.asarray(back)[measured].astype(np.float64) - ref)
        rel = err / ref
        if ref.size:
            self.max_abs_mm = max(self.max_abs_mm, float(err.max()))
            self.max_rel = max(self.max_rel, float(rel.max()))
        return measured, rel

    def merge(self, other: DepthErrorTally) -> DepthErrorTally:
        """Both streams' counts, the larger errors."""
        return DepthErrorTally(self.pixels + other.pixels, self.holes + other.holes, self.below_min + other.below_min,
                               self.above_max + other.above_max, max(self.max_abs_mm, other.max_abs_mm),
                               max(self.max_rel, other.max_rel))

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``egopool_mapping.json``'s ``depth`` of a stream)."""
        return {"pixels": self.pixels, "holes": self.holes, "below_depth_min": self.below_min,
                "above_depth_max_clipped": self.above_max, "max_abs_error_mm": self.max_abs_mm,
                "max_rel_error": self.max_rel}
