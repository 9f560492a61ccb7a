"""A seekable Python file object over a ``pyarrow.NativeFile`` of an object (what PyAV and PIL read from;
docs/decisions.md O6)."""

from __future__ import annotations

import io
from typing import Any

__all__ = ["READ_BUFFER", "seekable_reader"]

#: Read size of the buffered file object handed to PyAV (one ranged GET per refill).
READ_BUFFER = 4 << 20


def seekable_reader(native: Any, buffer_size: int = READ_BUFFER) -> io.BufferedReader | io.BytesIO:
    """A seekable Python file object over a ``pyarrow.NativeFile`` (what PyAV reads from).

    An object of at most ``buffer_size`` bytes is fetched whole with one GET (a container's
    index at its end and its start then cost nothing more); a larger one is read through an
    ``io.BufferedReader`` whose every refill is one ranged GET of ``buffer_size`` bytes. Either
    way at most ``buffer_size`` bytes are held. Closing it closes ``native``.
    """
    if native.size() <= buffer_size:
        try:
            data = native.read()
        finally:
            native.close()
        return io.BytesIO(data)
    return io.BufferedReader(_RangeReader(native), buffer_size=buffer_size)


class _RangeReader(io.RawIOBase):
    """A raw, seekable reader over a ``pyarrow.NativeFile`` (PyAV and ``io.BufferedReader`` need ``readinto``)."""

    def __init__(self, native: Any) -> None:
        super().__init__()
        self._f = native

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._f.read(len(b))
        n = len(data)
        memoryview(b).cast("B")[:n] = data
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            super().close()
