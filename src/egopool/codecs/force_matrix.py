"""UMI gripper force matrices: ``row_flat_raw`` and ``row_diff_quantized`` (file_format.md §7.2.1, DESIGN §2).

A frame is ``(250, 250, 3)`` float mN (fx, fy, fz per taxel), stored flat as
``250 × 750 = 187500`` values in C order, i.e. viewed as ``(250, 750)`` rows.

* ``row_flat_raw``: float32 values as they are, scale 1, no cumsum.
* ``row_diff_quantized``: ``q = clip(round(v · scale), -32768, 32767)`` as int16, then
  per row ``d[:, 0] = q[:, 0]`` and ``d[:, 1:] = q[:, 1:] − q[:, :-1]`` with int16
  wrap-around. Decoding cumsums in int32, wraps back to int16, reshapes and divides by
  ``scale``. The round trip of ``q`` is exact for every int16 value, wraps included,
  because int16 addition modulo 2^16 is associative.

``scale`` cannot be inferred from the data (×10/×100/×1000 all store int16), so the
reader must take it from the episode's ``force_matrix_specs``, then
``info.features[col].scale``, then 1 (§7.2.1 authority order).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CodecError

__all__ = ["ENCODINGS", "FRAME_SHAPE", "FRAME_VALUES", "ForceMatrixCodec"]

FRAME_SHAPE = (250, 250, 3)
FRAME_VALUES = 250 * 750
_ROWS, _COLS = 250, 750
ENCODINGS = ("row_flat_raw", "row_diff_quantized")


@dataclass(frozen=True)
class ForceMatrixCodec:
    """Encode/decode one force-matrix encoding.

    Attributes
    ----------
    encoding:
        ``"row_flat_raw"`` or ``"row_diff_quantized"``.
    scale:
        Quantisation factor (10, 100 or 1000 in recorded data); must be 1 for
        ``row_flat_raw``.

    Raises
    ------
    CodecError
        Unknown encoding or a non-positive scale.
    """

    encoding: str = "row_diff_quantized"
    scale: float = 10.0

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise CodecError(f"unknown force matrix encoding {self.encoding!r}", hint=f"use one of {ENCODINGS}")
        if not (isinstance(self.scale, (int, float)) and self.scale > 0):
            raise CodecError(f"force matrix scale must be > 0, got {self.scale!r}")
        if self.encoding == "row_flat_raw" and self.scale != 1:
            raise CodecError("row_flat_raw stores raw values: scale must be 1")

    @property
    def dtype(self) -> np.dtype:
        """Stored element dtype: int16 (quantized) or float32 (raw)."""
        return np.dtype(np.int16 if self.encoding == "row_diff_quantized" else np.float32)

    def quantize(self, frame_mn: np.ndarray) -> np.ndarray:
        """``(250, 250, 3)`` mN -> int16 ``q`` of the same shape (clipped to the int16 range)."""
        v = np.asarray(frame_mn, dtype=np.float64)
        return np.clip(np.rint(v * self.scale), -32768, 32767).astype(np.int16)

    def encode(self, frame_mn: np.ndarray) -> np.ndarray:
        """One frame ``(250, 250, 3)`` mN -> flat ``(187500,)`` int16 diffs or float32 raw."""
        v = np.asarray(frame_mn)
        if v.size != FRAME_VALUES:
            raise CodecError(f"force matrix frame must have 250*250*3 = {FRAME_VALUES} values, got shape {v.shape}")
        if self.encoding == "row_flat_raw":
            return np.ascontiguousarray(v, dtype=np.float32).reshape(-1)
        return self.encode_quantized(self.quantize(v.reshape(FRAME_SHAPE)))

    @staticmethod
    def encode_quantized(q: np.ndarray) -> np.ndarray:
        """int16 ``q`` (any shape with 187500 values) -> flat int16 row diffs (int16 wrap-around)."""
        rows = np.asarray(q, dtype=np.int16).reshape(_ROWS, _COLS)
        d = np.empty_like(rows)
        d[:, 0] = rows[:, 0]
        np.subtract(rows[:, 1:], rows[:, :-1], out=d[:, 1:])  # int16 arithmetic wraps
        return d.reshape(-1)

    def decode_quantized(self, flat: np.ndarray) -> np.ndarray:
        """Flat int16 diffs of R frames ``(R*187500,)`` -> int16 ``q`` ``(R, 250, 250, 3)``."""
        d = np.asarray(flat, dtype=np.int16)
        if d.size % FRAME_VALUES:
            raise CodecError(f"force matrix data has {d.size} values, not a multiple of {FRAME_VALUES}")
        rows = d.reshape(-1, _COLS).astype(np.int32)
        q = np.cumsum(rows, axis=1).astype(np.int16)  # wrap back to int16
        return q.reshape((-1, *FRAME_SHAPE))

    def decode(self, flat: np.ndarray) -> np.ndarray:
        """Flat stored values of R frames -> float32 mN ``(R, 250, 250, 3)`` (R >= 1)."""
        if self.encoding == "row_flat_raw":
            v = np.asarray(flat, dtype=np.float32)
            if v.size % FRAME_VALUES:
                raise CodecError(f"force matrix data has {v.size} values, not a multiple of {FRAME_VALUES}")
            return v.reshape((-1, *FRAME_SHAPE))
        q = self.decode_quantized(flat)
        return (q.astype(np.float32) / np.float32(self.scale)).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        """The declaration stored in ``features`` and ``force_matrix_specs`` (§6.2)."""
        return {"dtype": self.dtype.name, "shape": list(FRAME_SHAPE), "encoding": self.encoding,
                "scale": int(self.scale) if float(self.scale).is_integer() else self.scale}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ForceMatrixCodec:
        """Build from a declaration; ``encoding`` defaults by dtype, ``scale`` to 1."""
        enc = d.get("encoding") or ("row_flat_raw" if d.get("dtype") == "float32" else "row_diff_quantized")
        scale = d.get("scale", 1)
        return cls(str(enc), float(scale) if scale is not None else 1.0)
