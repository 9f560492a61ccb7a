"""The video streams of one episode being written: each holds exactly one frame per data row (file_format.md §7.3).

A row's frames are all checked before any is encoded, so a row refused for one stream reaches no
other; a stream without a frame in a row repeats its previous one. With ``reject_bad`` (the
recorder) a bad frame is replaced by the stream's previous frame and a stream whose encoder fails
is left out of the episode (``<key>_encode_failed_count``), the rows and the other streams going on
(docs/decisions.md #22).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._atomic import temp_path_for
from ..codecs.depth import DepthEncoder
from ..codecs.video_copy import VideoCopy, check_copy_frames
from ..errors import CodecError, EgopoolError, SchemaError, StorageError
from ..meta.drop_stats import clipped_key, encode_failed_key
from .stream_encoder import EncoderThread
from .streams import EpisodeStream, StreamSpec

if TYPE_CHECKING:
    import av

__all__ = ["EpisodeVideo"]


class EpisodeVideo:
    """The streams of one episode (image_key -> :class:`EpisodeStream`, in declaration order).

    Parameters
    ----------
    drop_stats, reasons:
        The episode's ``drop_stats`` and their first reasons: a stream left out, its repeated frames
        and clipped depth are counted there.
    threads:
        Encode each stream on its own :class:`EncoderThread` (a copied stream has none).

    Attributes
    ----------
    broken:
        ``"<key>: <error>"`` once a stream's encoder failed outside ``reject_bad``: the streams are then
        no longer one frame per row.
    """

    def __init__(self, drop_stats: dict[str, int | float], reasons: dict[str, str], *, threads: bool) -> None:
        self.streams: dict[str, EpisodeStream] = {}
        self.threads = threads
        self.broken: str | None = None
        self._drop_stats, self._reasons = drop_stats, reasons

    def open(self, st: StreamSpec, final: Path, fps: float) -> None:
        """Start stream ``st`` (at ``fps`` frames/s) writing a dot-temp of ``final``.

        Raises
        ------
        SchemaError
            Its image_key is declared twice.
        StorageError
            The video directory cannot be created.
        """
        if st.image_key in self.streams:
            raise SchemaError(f"image_key {st.image_key!r} declared twice (§5.2 rule 1)")
        with StorageError.guard(final.parent, action="cannot create the video directory"):
            final.parent.mkdir(parents=True, exist_ok=True)
        temp = temp_path_for(final)
        enc = VideoCopy(temp, st.source, fps) if st.source is not None else st.encoder(temp, fps)
        copied = isinstance(enc, VideoCopy)  # nothing to encode: no thread
        worker = EncoderThread(enc, st.image_key, depth=max(2, int(fps // 4))) if self.threads and not copied else None
        self.streams[st.image_key] = EpisodeStream(st, enc, temp, final, worker=worker)

    def add_frames(self, images: Mapping[str, np.ndarray | av.VideoFrame], row: int, reject_bad: bool = False,
                   reject: Callable[..., None] | None = None) -> None:
        """Encode data row ``row``'s frame of every stream (its previous one where ``images`` has none).

        Raises
        ------
        CodecError
            Images for an undeclared stream, a frame a stream cannot take, or a stream without any
            frame yet (with ``reject_bad`` only the last; ``reject(name, why)`` counts the others).
        Exception
            A stream's encoder failed (with ``reject_bad`` the stream is left out instead).
        """
        # frames of a stream dropped for its encoder (reject_bad) are expected, not bad samples
        unknown = set(images) - set(self.streams) - {k for k in images
                                                     if encode_failed_key(str(k)) in self._drop_stats}
        if unknown:
            if not reject_bad or reject is None:
                raise CodecError(f"images for undeclared streams {sorted(unknown)}",
                                 hint="declare them with begin_episode(streams=[StreamSpec(...)])")
            for key in sorted(unknown, key=str):
                reject(str(key), f"no declared stream {key!r}")
        # Check every frame first: a row refused for one stream must not reach any other,
        # or the streams would no longer hold exactly one frame per data row.
        frames: dict[str, np.ndarray | av.VideoFrame] = {}
        fresh: set[str] = set()
        for key, st in self.streams.items():
            frame = images.get(key)
            if isinstance(st.encoder, VideoCopy):
                if frame is not None:
                    st.check(frame)  # refuses: a copied stream takes no frames
                continue
            if frame is not None:
                try:
                    frames[key] = st.check(frame)
                    fresh.add(key)
                    continue
                except Exception as exc:  # noqa: BLE001 - any frame a source can push (reject_bad)
                    if not reject_bad or reject is None:
                        raise
                    reject(key, exc.message if isinstance(exc, EgopoolError) else f"{type(exc).__name__}: {exc}")
            if st.last is None:
                raise CodecError(f"stream {key!r} has no frame for row {row}; the first row must "
                                 "carry every declared stream")
            frames[key] = st.last
        for key, st in list(self.streams.items()):
            if key not in frames:  # copied from its source file
                continue
            try:
                st.encode(frames[key])
            except BaseException as exc:
                if not reject_bad or not isinstance(exc, Exception):
                    self.broken = f"{key}: {exc}"
                    raise
                self.drop(key, exc, row)  # the other streams keep one frame per row
                continue
            if key not in fresh and images.get(key) is None:
                st.repeated += 1
            st.last = frames[key]

    def drop(self, key: str, exc: BaseException, row: int) -> None:
        """Leave a stream whose encoder failed out of the episode (reject_bad): its frames so far are lost,
        the rows and the other streams go on; counted and its reason kept for the notes."""
        st = self.streams.pop(key)
        st.abort()
        with contextlib.suppress(FileNotFoundError):
            st.temp.unlink()
        with contextlib.suppress(OSError):
            st.temp.parent.rmdir()  # only when empty (the stream's directory made for this episode)
        fkey = encode_failed_key(key)
        self._drop_stats[fkey] = 1
        self._reasons.setdefault(fkey, f"row {row}: {exc}")

    def close(self, rows: int, lenient: bool) -> dict[str, Any]:
        """Finish every stream of an episode of ``rows`` rows; their ``video_codec`` entries (§6.2).

        Repeated frames and clipped depth are counted in ``drop_stats``. ``lenient`` (some row was added
        with ``reject_bad``): a stream whose encoder fails now is left out, as in :meth:`add_frames`.

        Raises
        ------
        CodecError
            A copied stream does not hold one frame per row.
        Exception
            An encoder failed (not ``lenient``).
        """
        video_codec: dict[str, Any] = {}
        for key, st in list(self.streams.items()):
            if isinstance(st.encoder, VideoCopy):  # a copy must hold one frame per row (§7.3)
                check_copy_frames(key, st.encoder, rows)
            try:
                video_codec[key] = st.close()  # an encoder thread reports its failure here at the latest
            except Exception as exc:
                if not lenient:
                    raise
                self.drop(key, exc, rows)  # as in add_frames(reject_bad=True): the rest is published
                continue
            if st.repeated:
                self._drop_stats[f"{key}_repeated_count"] = st.repeated
            clipped = getattr(st.encoder, "clipped", 0)
            if clipped:  # DESIGN §3 log code: beyond [d_min, d_max] (decisions.md #22)
                self._drop_stats[clipped_key(key)] = int(clipped)
                p = st.encoder.params if isinstance(st.encoder, DepthEncoder) else None
                if p is not None:
                    self._reasons.setdefault(clipped_key(key), f"range {p.d_min:g}..{p.d_max:g} mm")
        return video_codec
