"""Re-encode a lossless depth stream as the 12-bit log HEVC code, checked frame by frame (file_format.md §8).

``egopool compress`` brings FFV1 ``gray16le`` depth (the lossless fallback, ``.mkv``) to the spec's
normative 12-bit gray HEVC log code (``.mp4``). :func:`transcode_depth` encodes one stream into a new
file and then decodes both files side by side and compares them (docs/decisions.md R31):

* the frame count and the frame size are the source's;
* holes are exact: every 0 of the source is 0, and no valid pixel became 0;
* the relative error ``|decoded − clip(source)| / clip(source)`` of the valid pixels, ``clip`` being the
  log code's ``[d_min, d_max]`` (pixels outside it are clipped by the code itself and counted apart, as
  the writer counts them in ``drop_stats``, decision 22): over the stream, p99 ≤ 3 % and, away from
  depth edges and holes (:func:`~egopool.codecs.depth_error.depth_edge_mask`), p99 ≤ 1.5 % (DESIGN §3's
  measured figures, the bound tests/codecs/test_depth.py holds the codec to); in every frame at most 1 %
  of the non-edge pixels more than 3 % off (a single broken frame cannot hide in the stream's figure).

Percentiles come from a histogram of the error in steps of 0.01 %, so memory does not grow with the
stream's length.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CodecError
from .depth import DepthEncoder, LogDepthCodec, probe_depth, read_depth_frames
from .depth_error import DepthErrorTally, depth_edge_mask

__all__ = ["DEPTH_BOUNDS", "TranscodeCancelled", "TranscodeResult", "transcode_depth"]

#: The checks of a re-encoded stream (relative errors; module docstring, docs/decisions.md R31).
DEPTH_BOUNDS: dict[str, float] = {"p99": 0.03, "p99_non_edge": 0.015, "frame_non_edge": 0.03,
                                  "frame_non_edge_share": 0.01}

_BIN = 1e-4  # histogram step of the relative error (0.01 %)
_NBINS = 10001  # the last bin holds every error >= 100 %


class TranscodeCancelled(Exception):
    """Raised inside :func:`transcode_depth` when its ``cancel`` event is set (the output is removed)."""


@dataclass
class TranscodeResult:
    """What :func:`transcode_depth` wrote and measured.

    Attributes
    ----------
    frames:
        Frames in the source and in the output (equal, or it raised).
    width, height:
        Frame size in pixels.
    holes, valid:
        Hole (0) and valid pixels of the source over every frame.
    clipped:
        Valid source pixels outside the log code's ``[d_min, d_max]`` (stored clipped).
    max_error_mm:
        Largest ``|decoded − clip(source)|`` in mm over the valid pixels.
    max_rel_error, p99, p99_non_edge:
        Largest, 99th percentile, and 99th percentile away from edges of the relative error.
    worst_frame_non_edge_share:
        Largest share of a frame's non-edge valid pixels more than ``DEPTH_BOUNDS['frame_non_edge']`` off.
    video_codec:
        The output's ``video_codec`` description (encoder, qp, preset, log-code parameters, frames).
    """

    frames: int
    width: int
    height: int
    holes: int = 0
    valid: int = 0
    clipped: int = 0
    max_error_mm: float = 0.0
    max_rel_error: float = 0.0
    p99: float = 0.0
    p99_non_edge: float = 0.0
    worst_frame_non_edge_share: float = 0.0
    video_codec: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the compress journal and ``--json``)."""
        return {"frames": self.frames, "width": self.width, "height": self.height, "holes": self.holes,
                "valid": self.valid, "clipped": self.clipped, "max_error_mm": self.max_error_mm,
                "max_rel_error": self.max_rel_error, "p99": self.p99, "p99_non_edge": self.p99_non_edge,
                "worst_frame_non_edge_share": self.worst_frame_non_edge_share, "video_codec": self.video_codec}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TranscodeResult:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _p99(hist: np.ndarray) -> float:
    total = int(hist.sum())
    if total == 0:
        return 0.0
    k = int(np.searchsorted(np.cumsum(hist), 0.99 * total))
    return min((k + 1) * _BIN, 1.0)  # the bin's upper edge: the percentile is at most this


class _Checker:
    """Accumulates the comparison of decoded frames with their source (module docstring)."""

    def __init__(self, codec: LogDepthCodec, src: Path, dst: Path) -> None:
        self.codec, self.src, self.dst = codec, src, dst
        self.hist = np.zeros(_NBINS, np.int64)
        self.hist_ne = np.zeros(_NBINS, np.int64)
        self.tally = DepthErrorTally()
        self.res = TranscodeResult(0, 0, 0)

    def frame(self, i: int, a: np.ndarray, b: np.ndarray) -> None:
        if a.shape != b.shape:
            raise CodecError(f"frame {i}: re-encoded size {b.shape} != source {a.shape}", path=self.dst)
        bad = int(np.count_nonzero((a == 0) != (b == 0)))
        if bad:
            raise CodecError(f"frame {i}: {bad} pixel(s) changed between hole (0) and depth in the re-encoded "
                             "stream; holes must survive exactly", path=self.dst,
                             hint="keep the lossless FFV1 stream (nothing was changed)")
        valid, rel = self.tally.add(a, b, self.codec.d_min, self.codec.d_max, clip_outside=True)
        r = self.res
        bins = np.minimum((rel / _BIN).astype(np.int64), _NBINS - 1)
        self.hist += np.bincount(bins, minlength=_NBINS)
        non_edge = ~depth_edge_mask(a)[valid]
        ne = int(non_edge.sum())
        if ne:
            self.hist_ne += np.bincount(bins[non_edge], minlength=_NBINS)
            share = float(np.count_nonzero(rel[non_edge] > DEPTH_BOUNDS["frame_non_edge"])) / ne
            r.worst_frame_non_edge_share = max(r.worst_frame_non_edge_share, share)
            if share > DEPTH_BOUNDS["frame_non_edge_share"]:
                raise CodecError(f"frame {i}: {share:.1%} of the pixels away from edges are more than "
                                 f"{DEPTH_BOUNDS['frame_non_edge']:.0%} off after re-encoding (at most "
                                 f"{DEPTH_BOUNDS['frame_non_edge_share']:.0%} allowed)", path=self.dst,
                                 hint="keep the lossless FFV1 stream (nothing was changed)")

    def finish(self, frames: int) -> TranscodeResult:
        r = self.res
        r.frames = frames
        t = self.tally
        r.holes, r.valid, r.max_error_mm, r.max_rel_error = t.holes, t.valid, t.max_abs_mm, t.max_rel
        r.p99, r.p99_non_edge = _p99(self.hist), _p99(self.hist_ne)
        for name, value in (("p99", r.p99), ("p99_non_edge", r.p99_non_edge)):
            if value > DEPTH_BOUNDS[name]:
                raise CodecError(f"relative error {name.replace('_', ' ')} {value:.2%} of the re-encoded stream "
                                 f"exceeds {DEPTH_BOUNDS[name]:.1%} (DESIGN §3)", path=self.dst,
                                 hint="keep the lossless FFV1 stream (nothing was changed)")
        return r


def _frames(path: Path, what: str) -> Generator[np.ndarray, None, None]:
    try:
        yield from read_depth_frames(path)
    except CodecError as exc:
        raise CodecError(f"{what}: {exc.message}", path=path, hint=exc.hint or "the depth stream is damaged: "
                         "restore it from a backup (`egopool validate TASK` names it)") from exc


def transcode_depth(src: str | Path, dst: str | Path, *, fps: float, params: LogDepthCodec | None = None,
                    qp: int = 6, preset: str = "veryfast", expect_frames: int | None = None,
                    progress: Callable[[int], None] | None = None,
                    cancel: threading.Event | None = None) -> TranscodeResult:
    """Encode the lossless depth stream ``src`` as 12-bit log HEVC into ``dst`` and check it (module docstring).

    Parameters
    ----------
    src:
        An FFV1 ``gray16le`` depth file (uint16 mm, 0 = hole; also the legacy dual-stream MKV).
    dst:
        Output MP4 (the caller passes a hidden name and publishes it); removed when this raises.
    fps:
        Task frame rate (frames/s), the stream's nominal rate.
    params:
        Log-code range (default 100..20000 mm, DESIGN §3).
    qp, preset:
        x265 quantiser and speed preset (DESIGN §3: qp 6; docs/decisions.md #11: ``veryfast`` offline).
    expect_frames:
        Frames the source must hold (the episode's data rows, §7.3); a truncated source that decodes
        to fewer frames without an error is refused.
    progress:
        ``progress(frames_done)`` after each frame encoded and after each frame checked (so it runs
        to twice the frame count).
    cancel:
        When set, the work stops at the next frame (:class:`TranscodeCancelled`).

    Returns
    -------
    TranscodeResult

    Raises
    ------
    CodecError
        ``src`` is not lossless depth, cannot be decoded or holds another frame count than
        ``expect_frames`` (named, nothing written), or the re-encoded stream fails a check (frame
        count, holes, error bound).
    StorageError
        ``dst`` cannot be written.
    TranscodeCancelled
        ``cancel`` was set.
    """
    src, dst = Path(src), Path(dst)
    codec = params or LogDepthCodec()
    kind = probe_depth(src).kind
    if kind != "ffv1":
        raise CodecError(f"not a lossless FFV1 depth stream (found {kind})", path=src)
    done = 0
    enc: DepthEncoder | None = None
    try:
        for frame in _frames(src, "cannot decode the source depth stream"):
            if cancel is not None and cancel.is_set():
                raise TranscodeCancelled()
            if enc is None:
                enc = DepthEncoder(dst, frame.shape[1], frame.shape[0], fps, codec="hevc12", params=codec, qp=qp,
                                   preset=preset)
            enc.encode(frame)
            done += 1
            if progress is not None:
                progress(done)
        if enc is None:
            raise CodecError("the source depth stream holds no frame", path=src)
        if expect_frames is not None and done != expect_frames:
            raise CodecError(f"the source depth stream decodes to {done} frames but the episode has {expect_frames} "
                             "data rows (one frame per row, file_format.md §7.3): it is damaged or truncated",
                             path=src, hint="restore it from a backup or delete the episode")
        clipped = enc.clipped  # valid pixels the log code clipped into [d_min, d_max]
        desc = enc.close()
        enc = None
        check = _Checker(codec, src, dst)
        n = 0
        decoded = _frames(dst, "cannot decode the re-encoded stream")
        for a in _frames(src, "cannot decode the source depth stream"):
            if cancel is not None and cancel.is_set():
                raise TranscodeCancelled()
            b = next(decoded, None)
            if b is None:
                raise CodecError(f"the re-encoded stream holds {n} frames, the source more", path=dst)
            check.frame(n, a, b)
            n += 1
            if progress is not None:
                progress(done + n)
        if next(decoded, None) is not None:
            raise CodecError(f"the re-encoded stream holds more frames than the source's {n}", path=dst)
        decoded.close()
        if n != desc["frames"]:
            raise CodecError(f"the source decoded to {n} frames the second time, {desc['frames']} the first",
                             path=src)
        result = check.finish(n)
        result.clipped = clipped
        result.width, result.height = int(desc["width"]), int(desc["height"])
        result.video_codec = desc
        return result
    except BaseException:
        if enc is not None:
            enc.abort()
        dst.unlink(missing_ok=True)
        raise
