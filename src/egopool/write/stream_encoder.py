"""Each video stream encodes on its own thread, off the tick and write threads (issue 11).

The write thread checks a row's frames (size, dtype: a refused row reaches no stream) and hands
each stream its frame by reference through a bounded queue; the stream's thread converts and
encodes it. PyAV releases the GIL inside FFmpeg (``avcodec_send_frame``, ``sws_scale``), so the
streams encode in parallel with each other and with the parquet writer. A full queue blocks the
write thread (the recorder then skips ticks and counts them): memory stays bounded.

A frame handed over must not be changed afterwards by its producer (sources hand over a new
buffer per frame, or an immutable pre-rendered one).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Protocol

from .._threads import name_thread
from ..errors import EgopoolError

__all__ = ["EncoderThread"]

_STOP = object()


class _Encoder(Protocol):
    def encode(self, frame: Any) -> None: ...

    def close(self) -> dict[str, Any]: ...

    def abort(self) -> None: ...


class EncoderThread:
    """Run ``encoder`` (an :class:`~egopool.codecs.video.RgbEncoder` or
    :class:`~egopool.codecs.depth.DepthEncoder`) on a thread named ``enc-<key>``.

    Parameters
    ----------
    encoder:
        Opened encoder; only this thread calls it until :meth:`close` / :meth:`abort`.
    key:
        image_key (thread name, messages).
    depth:
        Frames the queue holds before :meth:`submit` blocks.
    """

    def __init__(self, encoder: _Encoder, key: str, depth: int = 8) -> None:
        self.encoder, self.key = encoder, key
        self.error: BaseException | None = None
        self._q: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))
        self._cancel = False
        self._thread = threading.Thread(target=self._loop, name=f"enc-{key}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        name_thread(f"enc-{self.key}"[:15])
        while True:
            item = self._q.get()
            if item is _STOP:
                return
            if self.error is not None or self._cancel:
                continue  # drain: the producer must never block on a dead stream
            try:
                self.encoder.encode(item)
            except BaseException as exc:  # noqa: BLE001 - reported to the write thread by submit / close
                self.error = exc

    def _raise(self) -> None:
        if self.error is not None:
            err = self.error
            if isinstance(err, EgopoolError):
                raise err
            raise EgopoolError(f"stream {self.key!r}: {type(err).__name__}: {err}") from err

    def submit(self, frame: Any) -> None:
        """Queue one checked frame (blocks while the queue is full).

        Raises
        ------
        EgopoolError
            An earlier frame of this stream failed to encode (CodecError, StorageError...).
        """
        self._raise()
        self._q.put(frame)

    @property
    def queued(self) -> int:
        """Frames waiting to be encoded."""
        return self._q.qsize()

    def close(self) -> dict[str, Any]:
        """Encode what is queued, flush, close; returns the encoder's ``video_codec`` description.

        Raises
        ------
        EgopoolError
            A frame failed to encode, or flushing failed (the file is incomplete).
        """
        self._q.put(_STOP)
        self._thread.join()
        self._raise()
        return self.encoder.close()

    def abort(self) -> None:
        """Drop what is queued, stop the thread, abandon the output."""
        self._cancel = True
        self._q.put(_STOP)
        self._thread.join()
        self.encoder.abort()
