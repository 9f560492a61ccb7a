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
from typing import Any, NamedTuple

import numpy as np

from ..errors import CodecError

__all__ = [
    "ENCODINGS",
    "FRAME_SHAPE",
    "FRAME_VALUES",
    "SPEC_SOURCES",
    "ForceMatrixCodec",
    "ResolvedForceMatrixSpec",
    "encoding_for_dtype",
    "fz_plane_sums",
    "fz_ratio",
    "may_saturate",
    "resolve_force_matrix_spec",
    "saturated_cells",
    "usable_scale",
]

FRAME_SHAPE = (250, 250, 3)
FRAME_VALUES = 250 * 750
_ROWS, _COLS = 250, 750
ENCODINGS = ("row_flat_raw", "row_diff_quantized")
#: Where a force-matrix ``scale`` came from, in authority order (§7.2.1).
SPEC_SOURCES = ("force_matrix_specs", "info.features", "default")
_ENCODING_OF_DTYPE = {"int16": "row_diff_quantized", "float32": "row_flat_raw"}


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
        if not usable_scale(self.scale):
            raise CodecError(f"force matrix scale must be a finite number > 0, got {self.scale!r}")
        if self.encoding == "row_flat_raw" and self.scale != 1:
            raise CodecError("row_flat_raw stores raw values: scale must be 1")

    @property
    def dtype(self) -> np.dtype:
        """Stored element dtype: int16 (quantized) or float32 (raw)."""
        return np.dtype(np.int16 if self.encoding == "row_diff_quantized" else np.float32)

    def quantize(self, frame_mn: np.ndarray) -> np.ndarray:
        """``(250, 250, 3)`` mN -> int16 ``q`` of the same shape (clipped to the int16 range)."""
        return self.quantize_counted(frame_mn)[0]

    def quantize_counted(self, frame_mn: np.ndarray) -> tuple[np.ndarray, int]:
        """``(250, 250, 3)`` mN -> (int16 ``q``, number of saturated cells).

        A cell whose ``round(v · scale)`` lies outside ``[-32768, 32767]`` is stored at the
        nearest end (read back as 32767/scale or −32768/scale mN: at ×1000 anything beyond
        ±32.767 mN). The stored value alone cannot tell a saturated cell from one that
        really read 32.767 mN, so the count is the trace (file_format.md §7.2.1).

        Raises
        ------
        CodecError
            The frame holds NaN or Infinity (no reading; a cast would store an arbitrary int16).
        """
        v = np.asarray(frame_mn, dtype=np.float64) * self.scale
        np.rint(v, out=v)
        hi, lo = float(v.max(initial=0.0)), float(v.min(initial=0.0))
        if not (np.isfinite(hi) and np.isfinite(lo)):
            raise CodecError(f"force matrix frame holds {int(np.count_nonzero(~np.isfinite(v)))} NaN/Infinity "
                             "cell(s); a frame without a reading is written as 'no sample' "
                             "(multi_device_storage.md §5.5)")
        saturated = 0
        if hi > 32767 or lo < -32768:  # only then pay for the count and the clip
            saturated = int(np.count_nonzero(v > 32767) + np.count_nonzero(v < -32768))
            np.clip(v, -32768, 32767, out=v)
        return v.astype(np.int16), saturated

    def encode(self, frame_mn: np.ndarray) -> np.ndarray:
        """One frame ``(250, 250, 3)`` mN -> flat ``(187500,)`` int16 diffs or float32 raw.

        Raises
        ------
        CodecError
            See :meth:`encode_counted`.
        """
        return self.encode_counted(frame_mn)[0]

    def encode_counted(self, frame_mn: np.ndarray) -> tuple[np.ndarray, int]:
        """Like :meth:`encode`, also returning how many cells could not be stored as given.

        ``row_diff_quantized``: cells saturated at the int16 range (:meth:`quantize_counted`);
        ``row_flat_raw``: finite cells beyond the float32 range (stored as ±Infinity).

        Raises
        ------
        CodecError
            Not 187500 values, not real numbers, or NaN/Infinity cells (a frame without a reading).
        """
        v = np.asarray(frame_mn)
        if v.size != FRAME_VALUES:
            raise CodecError(f"force matrix frame must have 250*250*3 = {FRAME_VALUES} values, got shape {v.shape}")
        if v.dtype.kind not in "biuf":
            raise CodecError(f"force matrix frame must hold real numbers (mN), got dtype {v.dtype}")
        if self.encoding == "row_diff_quantized":
            q, saturated = self.quantize_counted(v.reshape(FRAME_SHAPE))
            return self.encode_quantized(q), saturated
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            raise CodecError(f"force matrix frame holds {int(np.count_nonzero(~np.isfinite(v)))} NaN/Infinity "
                             "cell(s); a frame without a reading is written as 'no sample' "
                             "(multi_device_storage.md §5.5)")
        with np.errstate(over="ignore"):
            out = np.ascontiguousarray(v, dtype=np.float32).reshape(-1)
        over = 0 if np.isfinite(out).all() else int(np.count_nonzero(~np.isfinite(out)))
        return out, over

    @staticmethod
    def encode_quantized(q: np.ndarray) -> np.ndarray:
        """int16 ``q`` (any shape with 187500 values) -> flat int16 row diffs (int16 wrap-around)."""
        rows = np.asarray(q, dtype=np.int16).reshape(_ROWS, _COLS)
        d = np.empty_like(rows)
        d[:, 0] = rows[:, 0]
        np.subtract(rows[:, 1:], rows[:, :-1], out=d[:, 1:])  # int16 arithmetic wraps
        return d.reshape(-1)

    def decode_quantized(self, flat: np.ndarray) -> np.ndarray:
        """Flat int16 diffs of R frames ``(R*187500,)`` -> int16 ``q`` ``(R, 250, 250, 3)``.

        Exact for every int16 value, wraps included (the cumsum runs in int32 and is
        wrapped back to int16, which equals int16 modular addition).

        Raises
        ------
        CodecError
            The value count is not a multiple of 187500.
        """
        d = _frames_view(flat, np.int16)
        q = np.empty(d.shape, dtype=np.int16)
        _cumsum_rows(d, q, None)
        return q.reshape((-1, *FRAME_SHAPE))

    def decode(self, flat: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Flat stored values of R frames -> float32 mN ``(R, 250, 250, 3)`` (R >= 1).

        ``row_diff_quantized``: ``wrap16(cumsum(d)) / scale`` in float32;
        ``row_flat_raw``: the float32 values as they are (no cumsum).

        Parameters
        ----------
        flat:
            ``(R*187500,)`` (or any shape with that many values) int16 diffs / float32 raw.
        out:
            Optional C-contiguous float32 array with ``R*187500`` values to decode into
            (saves allocating and page-faulting a fresh result for a whole episode).

        Raises
        ------
        CodecError
            Value count not a multiple of 187500, or ``out`` of the wrong size/dtype.
        """
        if self.encoding == "row_flat_raw":
            v = _frames_view(flat, np.float32)
            if out is None:
                return v.reshape((-1, *FRAME_SHAPE)).copy()
            dst = _out_view(out, v.shape[0])
            np.copyto(dst, v)
            return out.reshape((-1, *FRAME_SHAPE))
        d = _frames_view(flat, np.int16)
        if out is None:
            out = np.empty(d.shape, dtype=np.float32)
        dst = _out_view(out, d.shape[0])
        _cumsum_rows(d, dst, np.float32(self.scale))
        return out.reshape((-1, *FRAME_SHAPE))

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


def encoding_for_dtype(dtype: Any) -> str:
    """The only encoding a stored element dtype can carry: int16 -> ``row_diff_quantized``,
    float32 -> ``row_flat_raw`` (§7.2.1 table).

    Raises
    ------
    CodecError
        Any other dtype (a force-matrix column is ``list<int16>`` or ``list<float32>``).
    """
    name = np.dtype(dtype).name
    try:
        return _ENCODING_OF_DTYPE[name]
    except KeyError:
        raise CodecError(f"force matrix values must be int16 or float32, got {name}") from None


class ResolvedForceMatrixSpec(NamedTuple):
    """The codec a reader must use for one column of one episode, and who decided its scale.

    Attributes
    ----------
    codec:
        Encoding + scale.
    source:
        ``"force_matrix_specs"`` (the episode's own row, authoritative),
        ``"info.features"`` (task-level fallback) or ``"default"`` (scale 1, uncalibrated).
    """

    codec: ForceMatrixCodec
    source: str


def resolve_force_matrix_spec(column: str, *, stored_dtype: Any = None,
                              episode_specs: Mapping[str, Any] | None = None,
                              features: Mapping[str, Any] | None = None,
                              files: Mapping[str, Any] | None = None) -> ResolvedForceMatrixSpec:
    """Decide encoding and ``scale`` of one force-matrix column of one episode.

    Authority (file_format.md §7.2.1, multi_device_storage.md §7.3): the episode row's
    ``force_matrix_specs[column]``, then ``info.features[column].scale``, then 1. The
    encoding follows the stored element dtype when it is known (int16 can only be
    ``row_diff_quantized``, float32 only ``row_flat_raw``).

    A task-level declaration whose encoding contradicts the stored dtype belongs to a
    later episode that overwrote ``info.json`` (the §7.2.1 "×10/×100/×1000 then float32"
    case), so it is skipped and the scale falls back to 1 (egopool decision, see
    docs/decisions.md). A per-episode declaration that contradicts the data is an error.

    Parameters
    ----------
    column:
        ``observation.*_force_matrix``.
    stored_dtype:
        Element dtype of the column in this episode's parquet (``int16``/``float32``), if known.
    episode_specs:
        The episode row's decoded ``force_matrix_specs`` (``{}`` or None for old rows).
    features:
        ``info.json`` ``features``.
    files:
        Optional file of each source for error messages: ``"force_matrix_specs"`` (the
        episode row), ``"info.features"`` (``info.json``), ``"data"`` (the data parquet).

    Returns
    -------
    ResolvedForceMatrixSpec

    Raises
    ------
    CodecError
        The stored dtype is neither int16 nor float32; ``force_matrix_specs`` declares an
        encoding the stored dtype cannot carry, or its entry is not an object; a declaration
        holds an unknown encoding or a scale that is not a finite number > 0 (as float32).
        The message names the column and the file holding the declaration.

    References
    ----------
    file_format.md §6.2 (``force_matrix_specs``), §7.2.1; multi_device_storage.md §7.3, §8.2.6.
    """
    files = files or {}
    hints = {"force_matrix_specs": "run `egopool repair force-scale TASK` to restore it from the Σfz criterion",
             "info.features": "fix features[column] in meta/info.json or give the episode row a "
                              "force_matrix_specs entry (`egopool repair force-scale TASK`)"}

    def fail(source: str, what: str) -> CodecError:
        label = {"force_matrix_specs": "the episode row's force_matrix_specs", "info.features": "info.json features",
                 "data": "the data"}[source]
        return CodecError(f"column {column!r}: {label} {what}", path=files.get(source),
                          hint=hints.get(source, "re-record or convert the column to int16/float32"))

    try:
        stored_enc = encoding_for_dtype(stored_dtype) if stored_dtype is not None else None
    except CodecError as exc:
        raise fail("data", f"stores {np.dtype(stored_dtype).name}; force matrices are int16 "
                           "(row_diff_quantized) or float32 (row_flat_raw)") from exc
    ep = episode_specs.get(column) if isinstance(episode_specs, Mapping) else None
    feat = features.get(column) if isinstance(features, Mapping) else None
    if ep is not None and not isinstance(ep, Mapping):
        raise fail("force_matrix_specs", f"entry is {ep!r}, not an object with encoding and scale")
    ep = ep if ep else None
    feat = feat if isinstance(feat, Mapping) and feat else None

    def declared_encoding(decl: Mapping[str, Any], source: str) -> str | None:
        enc = decl.get("encoding")
        if enc is None and decl.get("dtype") in _ENCODING_OF_DTYPE:
            enc = _ENCODING_OF_DTYPE[str(decl["dtype"])]
        if enc is not None and enc not in ENCODINGS:
            raise fail(source, f"declares unknown encoding {enc!r} (known: {', '.join(ENCODINGS)})")
        return str(enc) if enc is not None else None

    encoding = stored_enc
    if ep is not None:
        ep_enc = declared_encoding(ep, "force_matrix_specs")
        if ep_enc is not None and stored_enc is not None and ep_enc != stored_enc:
            raise fail("force_matrix_specs", f"declares {ep_enc} but the data stores {np.dtype(stored_dtype).name}")
        encoding = encoding or ep_enc
    if feat is not None:
        f_enc = declared_encoding(feat, "info.features")
        if f_enc is not None and encoding is not None and f_enc != encoding:
            feat = None  # another episode's declaration (info.json is latest-wins)
        else:
            encoding = encoding or f_enc
    encoding = encoding or "row_diff_quantized"
    if encoding == "row_flat_raw":
        source = "force_matrix_specs" if ep is not None else ("info.features" if feat is not None else "default")
        return ResolvedForceMatrixSpec(ForceMatrixCodec("row_flat_raw", 1.0), source)
    for decl, source in ((ep, "force_matrix_specs"), (feat, "info.features")):
        if decl is not None and decl.get("scale") is not None:
            scale = decl["scale"]
            if not usable_scale(scale):
                raise fail(source, f"scale must be a number, finite and > 0 (10, 100 or 1000), got {scale!r}")
            return ResolvedForceMatrixSpec(ForceMatrixCodec(encoding, float(scale)), source)
    return ResolvedForceMatrixSpec(ForceMatrixCodec(encoding, 1.0), "default")


def usable_scale(scale: Any) -> bool:
    """True for a quantisation ``scale`` a reader can divide by: a real number (not a bool or a
    string) that is finite and > 0 in float32, the precision of the decode (§7.2.1)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        return False
    with np.errstate(over="ignore"):
        s32 = np.float32(scale)
    return bool(np.isfinite(s32) and s32 > 0)


def fz_plane_sums(frames: np.ndarray) -> np.ndarray:
    """Σ of the fz plane of each frame: ``(R, 250, 250, 3)`` mN -> ``(R,)`` float64 mN."""
    f = np.asarray(frames)
    if f.shape[-3:] != FRAME_SHAPE:
        raise CodecError(f"force matrix frames must end in shape {FRAME_SHAPE}, got {f.shape}")
    return np.asarray(f.reshape(-1, 250 * 250, 3)[:, :, 2].sum(axis=1, dtype=np.float64))


def fz_ratio(fz_sums: np.ndarray, force_fz: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """The §7.2.1 self-check: ``Σ(fz plane) / force fz`` per row.

    A calibrated episode gives ≈ 1.000 (float32 rows measured 1.000); historical
    uncalibrated int16 rows give clearly less than 1 (0.04–0.55, truncation toward
    zero), and a wrong ``scale`` shows up as a factor of 10/100/1000.

    Parameters
    ----------
    fz_sums:
        ``(R,)`` Σ fz of each row's matrix (mN), e.g. from :func:`fz_plane_sums`.
    force_fz:
        ``(R,)`` fz of the same rows of ``observation.*_force`` (mN).
    valid:
        Optional ``(R,)`` bool: rows where both samples exist (``*_ns != 0``).

    Returns
    -------
    numpy.ndarray
        ``(R,)`` float64; NaN where a row has no sample or ``force_fz == 0``.
    """
    s = np.asarray(fz_sums, dtype=np.float64)
    f = np.asarray(force_fz, dtype=np.float64)
    if s.shape != f.shape:
        raise CodecError(f"fz sums {s.shape} and force fz {f.shape} must have the same shape")
    ok = f != 0
    if valid is not None:
        ok &= np.asarray(valid, dtype=bool)
    out = np.full(s.shape, np.nan)
    np.divide(s, f, out=out, where=ok)
    return out


def saturated_cells(q: np.ndarray) -> np.ndarray:
    """Cells at the int16 limits per frame: ``(R, 250, 250, 3)`` (or ``(250, 250, 3)``) int16 ``q`` -> ``(R,)`` int64.

    A stored 32767 or −32768 is where ``row_diff_quantized`` saturates (file_format.md
    §7.2.1): the true value may have been larger in magnitude, so a Σfz over such a frame
    is only a bound and must not be read as the historical truncation toward zero.
    """
    a = np.asarray(q)
    if a.dtype != np.int16:
        raise CodecError(f"saturation is counted on stored int16 values, got {a.dtype}")
    flat = a.reshape(-1, FRAME_VALUES)
    return np.count_nonzero(flat == 32767, axis=1) + np.count_nonzero(flat == -32768, axis=1)


def may_saturate(flat: np.ndarray) -> np.ndarray:
    """Frames of ``row_diff_quantized`` diffs that can hold a saturated cell: flat int16 ``(R*187500,)`` -> ``(R,)`` bool.

    A frame is decoded row by row (750 values, ``q = wrap16(cumsum(d))``), so every partial sum of a row, and
    every value it decodes to, is at most the sum of the row's ``|d|`` in magnitude; when that sum is below
    32767 for every row of the frame no wrap-around can happen and no cell can be 32767 or -32768. A False
    frame therefore has no saturated cell (exact; :func:`saturated_cells` need not decode it). Costs one
    pass of ``abs`` and one of a sum, against the decode's five (issue 29).

    Raises
    ------
    CodecError
        The value count is not a multiple of 187500.
    """
    d = _frames_view(flat, np.int16)
    # |int16| as uint16: |-32768| is 32768 there (in int16 it wraps back to -32768)
    reach = np.add.reduce(np.abs(d).view(np.uint16), axis=1, dtype=np.uint32) >= 32767
    return np.asarray(reach.reshape(-1, _ROWS).any(axis=1))


# Rows of 750 values decoded per block. The int32 scratch (1.5 MB) and the float32
# output block stay in L2; measured in benchmarks/bench_force_matrix.py.
_BLOCK_ROWS = 500


def _frames_view(flat: np.ndarray, dtype: type) -> np.ndarray:
    """``(R*250, 750)`` view of stored values (a copy only if the dtype differs)."""
    v = np.asarray(flat)
    if v.dtype != dtype:
        v = v.astype(dtype)
    if v.size % FRAME_VALUES:
        raise CodecError(f"force matrix data has {v.size} values, not a multiple of {FRAME_VALUES}")
    return np.ascontiguousarray(v).reshape(-1, _COLS)


def _out_view(out: np.ndarray, rows: int) -> np.ndarray:
    if out.dtype != np.float32 or out.size != rows * _COLS or not out.flags.c_contiguous:
        raise CodecError(f"out must be a C-contiguous float32 array of {rows * _COLS} values, "
                         f"got {out.dtype} {out.shape}")
    return out.reshape(-1, _COLS)


def _cumsum_rows(d: np.ndarray, out: np.ndarray, scale: np.float32 | None) -> None:
    """Per 750-value row: ``q = wrap16(cumsum(d))``; ``out = q`` (int16) or ``q / scale`` (float32).

    Why this shape: numpy's int16 accumulate is ~5x slower than its int32 one, so each
    block is widened to int32, cumsummed, narrowed back with an unsafe cast (which is
    the int16 wrap-around the encoder relied on), then converted and divided in place.
    Dividing (not multiplying by 1/scale) keeps the result bit-identical to ``q / scale``.
    """
    n = d.shape[0]
    block = min(_BLOCK_ROWS, max(n, 1))
    acc = np.empty((block, _COLS), dtype=np.int32)
    q16 = np.empty((block, _COLS), dtype=np.int16) if scale is not None else None
    for start in range(0, n, block):
        stop = min(start + block, n)
        a = acc[: stop - start]
        np.copyto(a, d[start:stop])
        np.cumsum(a, axis=1, out=a)
        if scale is None:
            np.copyto(out[start:stop], a, casting="unsafe")
            continue
        assert q16 is not None
        q = q16[: stop - start]
        np.copyto(q, a, casting="unsafe")
        o = out[start:stop]
        np.copyto(o, q)
        np.divide(o, scale, out=o)
