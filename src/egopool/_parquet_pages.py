"""A list column of a parquet file read straight from its pages, levels kept as runs (docs/decisions.md U32).

pyarrow decodes a ``list<int16>`` column by materialising two level values (repetition, definition) for every
element and rebuilding the offsets from them one element at a time: for a force-matrix column (187,500 values
a row, file_format.md §7.2.1) that is most of what reading it costs, several times the zstd decompression of
its pages. Here a column chunk's pages are parsed (Thrift compact page headers), decompressed with pyarrow's
own codecs, and the RLE / bit-packed level runs are turned into row offsets without expanding them; the values
are a ``numpy.frombuffer`` of the PLAIN pages. The result is the ``pyarrow.ListArray`` pyarrow would have read.

Only the common layout is decoded (what pyarrow writes for a ``list<int16>`` / ``list<float32>`` field: a
3-level list, optional field and element, PLAIN values, v1 or v2 data pages, no dictionary); anything else,
and every inconsistency (a size, a count, a level outside the layout, an int16 value out of range), raises
:class:`Unsupported`, and the caller reads the column with pyarrow as before, which then gives its own verdict
on the file. So a file this module decodes reads to exactly the values pyarrow reads, and a file it does not
is read as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

__all__ = ["MAX_GROUP_BYTES", "Unsupported", "iter_batches", "read_list_chunk", "supported_list_column"]


class Unsupported(Exception):
    """The column chunk is not in the layout decoded here (or is inconsistent): read it with pyarrow."""


# -- Thrift compact protocol (only what a PageHeader holds) ----------------------------------------------------
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)


class _Thrift:
    """A cursor over Thrift compact-protocol bytes."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def varint(self) -> int:
        out = shift = 0
        data = self.data
        while True:
            if self.pos >= len(data) or shift > 63:
                raise Unsupported("truncated varint")
            b = data[self.pos]
            self.pos += 1
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def struct(self, depth: int = 0) -> dict[int, Any]:
        """A struct's fields by id: ints, bools, nested structs (as dicts); other fields skipped."""
        if depth > 8:
            raise Unsupported("thrift nesting too deep")
        out: dict[int, Any] = {}
        last = 0
        while True:
            if self.pos >= len(self.data):
                raise Unsupported("truncated struct")
            head = self.data[self.pos]
            self.pos += 1
            kind = head & 0x0F
            if kind == _STOP:
                return out
            delta = head >> 4
            fid = last + delta if delta else self.zigzag()
            last = fid
            if kind == _TRUE or kind == _FALSE:
                out[fid] = kind == _TRUE
            elif kind == _STRUCT:
                out[fid] = self.struct(depth + 1)
            else:
                out[fid] = self.value(kind, depth)

    def value(self, kind: int, depth: int) -> Any:
        if kind in (_I16, _I32, _I64):
            return self.zigzag()
        if kind == _BYTE:
            self.pos += 1
            return None
        if kind == _DOUBLE:
            self.pos += 8
            return None
        if kind == _BINARY:
            n = self.varint()
            self.pos += n
            return None
        if kind in (_LIST, _SET):
            head = self.data[self.pos]
            self.pos += 1
            n, elem = head >> 4, head & 0x0F
            if n == 15:
                n = self.varint()
            for _ in range(n):
                if elem == _STRUCT:
                    self.struct(depth + 1)
                elif elem in (_TRUE, _FALSE):
                    self.pos += 1
                else:
                    self.value(elem, depth + 1)
            return None
        if kind == _MAP:
            n = self.varint()
            if n:
                types = self.data[self.pos]
                self.pos += 1
                for _ in range(n):
                    for t in (types >> 4, types & 0x0F):
                        if t == _STRUCT:
                            self.struct(depth + 1)
                        else:
                            self.value(t, depth + 1)
            return None
        raise Unsupported(f"thrift type {kind}")


# -- levels: RLE / bit-packed hybrid, kept as runs -------------------------------------------------------------
@dataclass
class _Levels:
    """The positions (in the chunk's level sequence) of levels of interest, found without expanding runs:
    ``zeros`` of the repetition levels (row starts), ``other`` / ``other_values`` of the definition
    levels that are not the maximum (empty or null rows, null elements)."""

    zeros: list[np.ndarray]
    other: list[np.ndarray]
    other_values: list[np.ndarray]


def _scan_levels(data: bytes | memoryview, count: int, width: int, base: int, keep: int,
                 pos_out: list[np.ndarray], val_out: list[np.ndarray] | None, limit: int) -> int:
    """Decode ``count`` levels of bit ``width`` from RLE/bit-packed hybrid ``data``; append to ``pos_out`` the
    positions (offset by ``base``) of the levels != ``keep`` (and their values to ``val_out``), at most ``limit``
    of them in all (each is a row start, or an empty or null row: never more than the rows). Returns the
    bytes consumed."""
    held = sum(a.size for a in pos_out)
    pos, done, n = 0, 0, len(data)
    vbytes = (width + 7) // 8
    mask = (1 << width) - 1
    while done < count:
        head = shift = 0
        while True:
            if pos >= n or shift > 35:
                raise Unsupported("truncated level run")
            b = data[pos]
            pos += 1
            head |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
        if head & 1:  # bit-packed: (head >> 1) groups of 8 values, LSB first
            groups = head >> 1
            nbytes = groups * width
            if groups == 0 or pos + nbytes > n:
                raise Unsupported("bad bit-packed run")
            bits = np.unpackbits(np.frombuffer(data, np.uint8, nbytes, pos), bitorder="little")
            vals = bits.reshape(-1, width) @ (1 << np.arange(width, dtype=np.int64))
            pos += nbytes
            take = min(groups * 8, count - done)
            vals = vals[:take]
            hit = np.flatnonzero(vals != keep)
            held += hit.size
            if held > limit:
                raise Unsupported("more level positions than rows")
            if hit.size:
                pos_out.append(hit + (base + done))
                if val_out is not None:
                    val_out.append(vals[hit])
            done += take
        else:
            run = head >> 1
            if run == 0 or pos + vbytes > n:
                raise Unsupported("bad RLE run")
            value = int.from_bytes(bytes(data[pos:pos + vbytes]), "little")
            pos += vbytes
            if value > mask:
                raise Unsupported("level beyond its bit width")
            take = min(run, count - done)
            if value != keep:
                held += take
                if held > limit:
                    raise Unsupported("more level positions than rows")
                pos_out.append(np.arange(base + done, base + done + take, dtype=np.int64))
                if val_out is not None:
                    val_out.append(np.full(take, value, np.int64))
            done += take
    return pos


# -- one column chunk ------------------------------------------------------------------------------------------
_CODECS = {"ZSTD": "zstd", "SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli", "LZ4_RAW": "lz4_raw"}
_VALUE = {"INT32": (np.dtype("<i4"), pa.int16()), "FLOAT": (np.dtype("<f4"), pa.float32())}
_PLAIN = 0
_RLE = 3


def supported_list_column(pf: Any, name: str) -> bool:
    """Whether the top-level field ``name`` of an open ``pyarrow.parquet.ParquetFile`` is a list column
    :func:`read_list_chunk` can read: one leaf, ``list<int16>`` or ``list<float32>``, 3-level (max definition
    level 3, repetition 1), and in every row group PLAIN-encoded without a dictionary page, in a codec
    decompressed here."""
    arrow = pf.schema_arrow
    if name not in arrow.names:
        return False
    t = arrow.field(name).type
    if not pa.types.is_list(t) or t.value_type not in (pa.int16(), pa.float32()):
        return False
    leaf = _leaf_index(pf, name)
    if leaf is None:
        return False
    col = pf.schema.column(leaf)
    if col.max_definition_level != 3 or col.max_repetition_level != 1 or col.physical_type not in _VALUE:
        return False
    if _VALUE[col.physical_type][1] != t.value_type:
        return False
    meta = pf.metadata
    for i in range(meta.num_row_groups):
        c = meta.row_group(i).column(leaf)
        if c.has_dictionary_page or c.compression not in (*_CODECS, "UNCOMPRESSED") \
                or not set(c.encodings) <= {"PLAIN", "RLE"}:
            return False
    return True


def _leaf_index(pf: Any, name: str) -> int | None:
    """Index of the parquet leaf column of top-level field ``name`` (names hold dots, so the leaves are
    counted field by field); None unless the field is a list of one leaf ``<name>.list.element``."""
    j = 0
    for f in pf.schema_arrow:
        if f.name == name:
            if _leaves(f.type) != 1 or pf.schema.column(j).path not in (f"{name}.list.element", f"{name}.list.item"):
                return None
            return j
        j += _leaves(f.type)
    return None


def _leaves(t: Any) -> int:
    return 1 if t.num_fields == 0 else sum(_leaves(t.field(i).type) for i in range(t.num_fields))


def read_list_chunk(pf: Any, fh: BinaryIO, name: str, row_group: int, max_bytes: int,
                    leaf: int | None = None, ltype: pa.DataType | None = None) -> pa.ListArray:
    """Column ``name`` of row group ``row_group`` as the ``ListArray`` pyarrow reads (its type, nulls, offsets
    and values), decoded from the file's pages read from ``fh`` (the file, opened binary).

    ``name`` must pass :func:`supported_list_column`. ``max_bytes``: a chunk declaring more decoded bytes is not
    read here (the caller streams it with pyarrow in small batches, as before). ``leaf``, ``ltype``: the field's
    parquet leaf column and arrow type, when the caller has them (else looked up).

    Raises
    ------
    Unsupported
        Anything outside the decoded layout or inconsistent (sizes, counts, levels, values out of range).
    OSError
        Reading ``fh`` failed.
    """
    leaf = _leaf_index(pf, name) if leaf is None else leaf
    if leaf is None:
        raise Unsupported("not one leaf")
    ltype = pf.schema_arrow.field(name).type if ltype is None else ltype
    rg = pf.metadata.row_group(row_group)
    c = rg.column(leaf)
    rows = rg.num_rows
    if c.total_uncompressed_size > max_bytes or c.num_values * 4 > max_bytes:
        raise Unsupported("chunk too large to hold")
    dtype, atype = _VALUE[c.physical_type]
    codec = None if c.compression == "UNCOMPRESSED" else pa.Codec(_CODECS[c.compression])
    start = c.data_page_offset
    size = c.total_compressed_size
    if start < 4 or size <= 0:
        raise Unsupported("bad chunk offsets")
    fh.seek(start)
    raw = fh.read(size)
    if len(raw) != size:
        raise Unsupported("chunk beyond the end of the file")
    levels = _Levels([], [], [])
    total = c.num_values
    out = np.empty(total, np.int16 if atype == pa.int16() else np.float32)  # values <= levels
    filled = seen = pos = others = 0
    while seen < total:
        t = _Thrift(raw, pos)
        header = t.struct()
        pos = t.pos
        ptype, usize, csize = _field(header, 1), _field(header, 2), _field(header, 3)
        if pos + csize > size or usize > max_bytes:
            raise Unsupported("bad page header")
        body = memoryview(raw)[pos:pos + csize]
        pos += csize
        if ptype == 0:  # DATA_PAGE (v1)
            dh = _struct(header, 5)
            if _field(dh, 2) != _PLAIN or _field(dh, 3) != _RLE or _field(dh, 4) != _RLE:
                raise Unsupported("data page encodings")
            count = _field(dh, 1)
            if count == 0 or seen + count > total:
                raise Unsupported("page value count")
            page = _decompress(codec, body, usize)
            off = _length_prefixed(page, 0, count, 1, seen, levels.zeros, None, 1, rows)
            off = _length_prefixed(page, off, count, 2, seen, levels.other, levels.other_values, 3, rows)
            vals = page[off:]
        elif ptype == 3:  # DATA_PAGE_V2
            dh = _struct(header, 8)
            if _field(dh, 4) != _PLAIN:
                raise Unsupported("data page v2 encoding")
            count, dlen, rlen = _field(dh, 1), _field(dh, 5), _field(dh, 6)
            if count == 0 or seen + count > total or rlen + dlen > csize or rlen + dlen > usize:
                raise Unsupported("page v2 sizes")
            _scan_exact(body[:rlen], count, 1, seen, levels.zeros, None, 1, rows)
            _scan_exact(body[rlen:rlen + dlen], count, 2, seen, levels.other, levels.other_values, 3, rows)
            compressed = dh.get(7, True) is not False
            vals = _decompress(codec if compressed else None, body[rlen + dlen:], usize - rlen - dlen)
        elif ptype == 2:
            raise Unsupported("dictionary page")
        else:
            raise Unsupported(f"page type {ptype}")
        # the page's values, converted while they are in cache (one page: ~1 MB decoded)
        n = count - sum(a.size for a in levels.other[others:])  # levels of a value, not of an empty/null row
        others = len(levels.other)
        if len(vals) != n * dtype.itemsize:
            raise Unsupported("value count")
        x = np.frombuffer(vals, dtype)
        if n and atype == pa.int16() and (int(x.min()) < -32768 or int(x.max()) > 32767):
            raise Unsupported("int16 out of range")
        out[filled:filled + n] = x  # int32 -> int16 (in range) or float32 as is
        filled += n
        seen += count
    if pos != size:
        raise Unsupported("bytes after the last page")
    return _assemble(levels, out[:filled], total, rows, atype, ltype)


def _field(fields: dict[int, Any], fid: int) -> int:
    """A non-negative integer field of a parsed Thrift struct (:class:`Unsupported` otherwise)."""
    v = fields.get(fid)
    if type(v) is not int or v < 0:
        raise Unsupported(f"thrift field {fid} is {v!r}")
    return v


def _struct(fields: dict[int, Any], fid: int) -> dict[int, Any]:
    v = fields.get(fid)
    if not isinstance(v, dict):
        raise Unsupported(f"thrift field {fid} is not a struct")
    return v


def _decompress(codec: Any, body: memoryview, usize: int) -> memoryview:
    if codec is None:
        if len(body) != usize:
            raise Unsupported("uncompressed page size")
        return body
    try:
        out = codec.decompress(body, decompressed_size=usize)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types: pyarrow then gives the verdict
        raise Unsupported(f"decompression: {exc}") from exc
    if out.size != usize:
        raise Unsupported("decompressed page size")
    return memoryview(out)


def _length_prefixed(page: memoryview, off: int, count: int, width: int, base: int, pos_out: list[np.ndarray],
                     val_out: list[np.ndarray] | None, keep: int, limit: int) -> int:
    """v1 levels: a 4-byte little-endian length, then the runs; returns the offset after them."""
    if off + 4 > len(page):
        raise Unsupported("truncated levels")
    n = int.from_bytes(bytes(page[off:off + 4]), "little")
    if off + 4 + n > len(page):
        raise Unsupported("levels beyond the page")
    _scan_exact(page[off + 4:off + 4 + n], count, width, base, pos_out, val_out, keep, limit)
    return off + 4 + n


def _scan_exact(data: memoryview, count: int, width: int, base: int, pos_out: list[np.ndarray],
                val_out: list[np.ndarray] | None, keep: int, limit: int) -> None:
    used = _scan_levels(data, count, width, base, keep, pos_out, val_out, limit)
    if used > len(data):
        raise Unsupported("levels overrun")


def _assemble(levels: _Levels, flat: np.ndarray, total: int, rows: int, atype: pa.DataType,
              ltype: pa.DataType) -> pa.ListArray:
    """Offsets and nulls from the level positions around the values ``flat`` (already the arrow type's)."""
    starts = np.concatenate(levels.zeros) if levels.zeros else np.zeros(0, np.int64)
    if starts.size != rows or (rows and starts[0] != 0):
        raise Unsupported("row count")
    other = np.concatenate(levels.other) if levels.other else np.zeros(0, np.int64)
    other_v = np.concatenate(levels.other_values) if levels.other_values else np.zeros(0, np.int64)
    ends = np.append(starts[1:], total)
    span = ends - starts  # levels per row
    lens = span.copy()
    nulls = np.zeros(rows, bool)
    if other.size:
        if (other_v == 2).any():
            raise Unsupported("null elements")  # pyarrow's masked values; not decoded here
        row_of = np.searchsorted(starts, other, side="right") - 1
        if (starts[row_of] != other).any() or (span[row_of] != 1).any():
            raise Unsupported("empty or null row with elements")
        lens[row_of] = 0
        nulls[row_of[other_v == 0]] = True
    if flat.size != int(lens.sum()):
        raise Unsupported("value count")
    offsets = np.zeros(rows + 1, np.int32)
    if rows:
        np.cumsum(lens, out=offsets[1:])
    mask = pa.array(nulls) if nulls.any() else None
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=atype), type=ltype, mask=mask)


#: Decoded bytes of the page-read columns of one row group held at a time (their int16/float32 values plus
#: the largest chunk's compressed bytes); a row group over it is streamed by pyarrow in small batches. An
#: import holds a row group decoded anyway (docs/decisions.md U9's per-import bound, ``--max-decode-mb``).
MAX_GROUP_BYTES = 256 << 20


def iter_batches(pf: Any, path: Path | None, columns: list[str], batch_rows: int,
                 pages: list[str]) -> Iterator[pa.RecordBatch]:
    """``pf.iter_batches(batch_size=batch_rows, columns=columns)``'s rows (the same columns, every row in
    order, in batches of at most ``batch_rows`` rows), with the columns of ``pages`` that
    :func:`supported_list_column` accepts decoded from their pages by :func:`read_list_chunk`, a row group at a
    time, when ``path`` is the local file of ``pf`` (for big list columns: a small one costs less in pyarrow).
    A row group any of them cannot be read from (:class:`Unsupported`) is read by pyarrow whole, as before;
    ``path`` None (a bucket's file) or no such column: pyarrow alone.

    Raises
    ------
    Exception
        Whatever pyarrow raises for a damaged file (the caller's boundary).
    """
    fast = [c for c in columns if c in pages and supported_list_column(pf, c)] if path is not None else []
    if not fast or path is None:
        yield from pf.iter_batches(batch_size=batch_rows, columns=columns)
        return
    rest = [c for c in columns if c not in fast]
    arrow = pf.schema_arrow
    leaves = {c: (_leaf_index(pf, c), arrow.field(c).type) for c in fast}
    meta = pf.metadata
    with open(path, "rb") as fh:
        for rg in range(meta.num_row_groups):
            try:
                cols = _group_columns(pf, fh, leaves, rg)
            except Exception:  # noqa: BLE001 - Unsupported, or a damaged page this parser trips on: pyarrow's verdict
                yield from pf.iter_batches(batch_size=batch_rows, row_groups=[rg], columns=columns)
                continue
            rows = meta.row_group(rg).num_rows
            if rest:
                off = 0
                for batch in pf.iter_batches(batch_size=batch_rows, row_groups=[rg], columns=rest):
                    k = batch.num_rows
                    yield pa.RecordBatch.from_arrays([*batch.columns, *(cols[c].slice(off, k) for c in fast)],
                                                     names=[*batch.schema.names, *fast])
                    off += k  # (fewer rows than the footer's: from_arrays refuses the lengths, a damaged file)
            else:
                for off in range(0, rows, batch_rows):
                    k = min(batch_rows, rows - off)
                    yield pa.RecordBatch.from_arrays([cols[c].slice(off, k) for c in fast], names=fast)


def _group_columns(pf: Any, fh: BinaryIO, leaves: dict[str, tuple[int | None, pa.DataType]],
                   rg: int) -> dict[str, pa.ListArray]:
    """Every column of ``leaves`` (name -> leaf column, arrow type) of row group ``rg``, from its pages."""
    group = pf.metadata.row_group(rg)
    chunks = [group.column(j) for j, _ in leaves.values() if j is not None]
    need = sum(c.num_values * 4 for c in chunks) + max((c.total_compressed_size for c in chunks), default=0)
    if need > MAX_GROUP_BYTES:
        raise Unsupported("row group too large to hold")
    return {n: read_list_chunk(pf, fh, n, rg, MAX_GROUP_BYTES, leaf, t) for n, (leaf, t) in leaves.items()}
