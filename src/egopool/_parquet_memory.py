"""Parquet held in memory (an object's bytes from a store), read so that no Arrow thread needs Python afterwards.

``pq.read_table(io.BytesIO(body))`` runs the dataset scanner: Arrow's I/O pool reads the Python file, and
its buffers (``arrow::py::PyBuffer``, whose destructor takes the GIL) stay referenced by the scan's
futures. The last reference can be dropped on a pool thread after the call returned; when the
interpreter is finalizing by then (a command that read a row and failed at once), taking the GIL ends
that thread with a forced unwind through a ``noexcept`` destructor: ``terminate called without an
active exception``, exit -6 (docs/decisions.md A1). Here the bytes are copied into Arrow-owned memory
(releasing it needs no GIL) and read by ``ParquetFile`` (one file: no dataset scan, no pre-buffering).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["arrow_owned", "read_parquet_bytes"]


def arrow_owned(body: bytes | bytearray | memoryview) -> pa.Buffer:
    """A copy of ``body`` in Arrow's memory pool (``uint8``, ``len(body)`` bytes; freeing it needs no GIL)."""
    sink = pa.BufferOutputStream()
    sink.write(body)
    return sink.getvalue()


def read_parquet_bytes(body: bytes | bytearray | memoryview) -> pa.Table:
    """The table of the parquet file ``body`` (every column, with the file's schema and its metadata).

    Raises
    ------
    pyarrow.ArrowException, OSError
        Not a readable parquet file (empty, truncated, corrupt).
    """
    with pq.ParquetFile(pa.BufferReader(arrow_owned(body))) as pf:
        return pf.read()
