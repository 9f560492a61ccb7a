"""Bounding what decoding an uploaded parquet file or video costs, before it is decoded (docs/decisions.md U9).

:func:`check_parquet_bounds` bounds what decoding a parquet file costs, from its footer alone (whose own size
is bounded first, from the file's last 8 bytes): decoded bytes of each row group and of the columns read whole,
and the decoded / file ratio, before a page of it is decoded; :func:`check_video_bounds` the frames of a video,
from its container header (:func:`open_video_bounded` keeps the container open for the validator, U20).
Every refusal is an :class:`~egopool.errors.UploadRejectedError` (413 naming the limit and its option, 422).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from ..errors import UploadRejectedError
from .zipcheck import Limits, _mib, _reject, too_large

__all__ = ["check_parquet_bounds", "check_video_bounds", "open_parquet_bounded", "open_video_bounded"]


#: Bytes per value a parquet physical type decodes to (BYTE_ARRAY: its 4-byte offset; the bytes themselves
#: are counted from the pages, or from the dictionary when dictionary-encoded).
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8, "BYTE_ARRAY": 4}


def _dictionary_bytes(array: Any) -> int:
    """Bytes the dictionary-encoded binary values in ``array`` (any nesting) materialise to."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        return sum(_dictionary_bytes(c) for c in array.chunks)
    if isinstance(array, pa.DictionaryArray):
        lengths = pc.binary_length(array.dictionary)
        total = pc.sum(pc.take(lengths, array.indices)).as_py()
        return int(total or 0)
    t = array.type
    if pa.types.is_struct(t):
        return sum(_dictionary_bytes(array.field(i)) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_map(t):
        return _dictionary_bytes(array.flatten())
    return 0


def _leaves(t: Any) -> int:
    """Parquet leaf columns of an arrow type (names hold dots, so a leaf's path cannot tell its field)."""
    if t.num_fields == 0:
        return 1
    return sum(_leaves(t.field(i).type) for i in range(t.num_fields))


def _footer_bytes(pf: Any) -> tuple[list[int], int, dict[int, list[str]]]:
    """Upper bounds from the footer: bytes each row group decodes to, bytes of the columns without
    lists over the whole file, and the dictionary-encoded binary columns (row group -> top-level
    fields) whose values are still to be counted by :func:`_add_dictionary_bytes`.

    A value counts at least its physical width, so an RLE run or a dictionary index of a few bits
    counts what it expands to. A dictionary-encoded binary column chunk counts ``num_values`` times
    its whole size (no value is longer than the chunk) when that is at most
    :data:`_DICT_CHEAP_BYTES` (a status column: a few KiB) or the chunk is over
    :data:`_DICT_SCAN_BYTES`; otherwise it is counted exactly afterwards."""
    meta = pf.metadata
    schema = meta.schema
    owner = [f.name for f in pf.schema_arrow for _ in range(_leaves(f.type))]  # leaf column -> top-level field
    nested = {f.name for f in pf.schema_arrow if f.type.num_fields}
    groups = [0] * meta.num_row_groups
    flat = 0
    scan: dict[int, list[str]] = {}
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        for j in range(rg.num_columns):
            c, col = rg.column(j), schema.column(j)
            width = col.length if c.physical_type == "FIXED_LEN_BYTE_ARRAY" else _WIDTH.get(c.physical_type, 8)
            n = max(c.total_uncompressed_size, c.num_values * width)
            if c.physical_type == "BYTE_ARRAY":
                n = c.total_uncompressed_size + c.num_values * width
                bound = c.num_values * c.total_uncompressed_size  # no value is longer than the whole chunk
                big = c.total_uncompressed_size > _DICT_SCAN_BYTES
                if c.has_dictionary_page and (bound <= _DICT_CHEAP_BYTES or big):
                    n += bound
                elif c.has_dictionary_page and owner[j] not in scan.get(i, []):
                    scan.setdefault(i, []).append(owner[j])
            groups[i] += n
            if owner[j] not in nested:
                flat += n
    return groups, flat, scan


#: A dictionary-encoded binary column chunk up to this size is read (as a DictionaryArray: a few times its
#: size in memory) to count what its values expand to; a larger one is bounded from the footer alone.
_DICT_SCAN_BYTES = 4 << 20
#: ... unless its footer bound (values x chunk size) is at most this: then it is counted at that bound.
_DICT_CHEAP_BYTES = 16 << 20


def _add_dictionary_bytes(path: Path, groups: list[int], flat: int, scan: dict[int, list[str]]) -> int:
    """Add to ``groups`` (and return ``flat`` plus) the bytes the small dictionary-encoded binary columns
    expand to over every row, read as DictionaryArrays (dictionary + indices), never materialised."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pq.ParquetFile(str(path)) as probe:
        binary = [c.path for c in probe.schema if c.physical_type == "BYTE_ARRAY"]
    with pq.ParquetFile(str(path), read_dictionary=binary) as pf:
        for i, names in sorted(scan.items()):
            table = pf.read_row_group(i, columns=names)
            for name in names:
                extra = _dictionary_bytes(table.column(name))
                groups[i] += extra
                flat += 0 if pa.types.is_nested(pf.schema_arrow.field(name).type) else extra
    return flat


def _check_decode(name: str, groups: list[int], flat: int, rows: int, limit: int) -> None:
    for i, n in enumerate(groups):
        if n > limit:
            raise too_large("decode_too_large", f"{name} row group {i} decodes to {_mib(n)}, the limit of what one "
                                                f"import decodes at a time is {_mib(limit)}", "max_decode_bytes")
    if flat > limit:
        raise too_large("decode_too_large", f"{name}: its columns without lists decode to {_mib(flat)} over "
                                            f"{rows} rows (read whole), the limit of what one import decodes at a "
                                            f"time is {_mib(limit)}", "max_decode_bytes")


#: Memory a parsed parquet footer takes per byte of it (pyarrow's FileMetaData, schema and the row-group
#: statistics: 16-28x measured), counted against ``max_decode_bytes``: 8 MiB of footer at the default
#: (an egopool data parquet's is a few KiB).
_FOOTER_COST = 32


def _footer_length(path: Path) -> int:
    """Bytes of a parquet file's footer, from its last 8 bytes (length, ``PAR1``); 0 when it has none or
    declares more than the file holds (pyarrow then names what is wrong)."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size < 12:
            return 0
        fh.seek(-8, os.SEEK_END)
        tail = fh.read(8)
    length = int(struct.unpack("<I", tail[:4])[0])
    return length if tail[4:] == b"PAR1" and length <= size - 12 else 0


def open_parquet_bounded(path: Path, limits: Limits, *, rows: int | None = None) -> Any:
    """Refuse a parquet bomb from its footer alone, before any page of it is decoded.

    Decoding holds one row group at a time (the validator streams rows, stats and renumbering
    go row group by row group) plus the columns without lists of the whole file (the validator
    reads the key columns whole), so both must decode to at most ``max_decode_bytes``: that
    bounds the memory one import takes, whatever the file's size or ratio. Compressed pages
    (zstd, gzip), RLE runs and dictionaries expand like a zip bomb and the zip's own ratio
    limit never sees them: the decoded size (see :func:`_footer_bytes`) may be at most
    ``max_ratio`` times the file (files decoding to up to ``ratio_floor_bytes`` are exempt).
    ``rows``: the row count the file must hold (1 for the §6.1 single-row ``meta/episodes``
    file), so a row file repeating its row millions of times is refused before the validator
    reads it whole.

    Returns the file's ``pyarrow.parquet.ParquetFile``, open (the caller closes it): the checks that follow read
    its footer no second time (docs/decisions.md U36).

    Raises
    ------
    UploadRejectedError
        422 ``validation`` an unreadable footer, ``meta_rows`` another row count; 413
        ``decode_too_large`` (``--max-decode-mb``), ``compression_ratio`` (``--max-ratio``).
    """
    import pyarrow.parquet as pq

    name = "/".join(path.parts[-3:] if path.parts[-3] == "data" else path.parts[-4:])  # task-relative
    footer = _footer_length(path)
    if footer * _FOOTER_COST > limits.max_decode_bytes:
        raise too_large("decode_too_large", f"{name}: its footer (the file's metadata, parsed whole before a page "
                                            f"is read, ~{_FOOTER_COST}x its size in memory) is {_mib(footer)}; the "
                                            f"limit of what one import decodes at a time is "
                                            f"{_mib(limits.max_decode_bytes)}", "max_decode_bytes")
    pf = None
    try:
        pf = pq.ParquetFile(str(path))
        meta = pf.metadata
        if rows is not None and meta.num_rows != rows:
            raise _reject(422, "meta_rows", f"{name} holds {meta.num_rows} rows; a per-episode meta file holds "
                                            f"exactly {rows} (file_format.md §6.1)")
        groups, flat, dictionary = _footer_bytes(pf)
        _check_decode(name, groups, flat, meta.num_rows, limits.max_decode_bytes)
        if dictionary:  # the small dictionaries, now that reading them is known to be cheap
            flat = _add_dictionary_bytes(path, groups, flat, dictionary)
            _check_decode(name, groups, flat, meta.num_rows, limits.max_decode_bytes)
    except UploadRejectedError:
        if pf is not None:
            pf.close()
        raise
    except Exception as exc:  # pyarrow raises several types for a broken footer
        if pf is not None:
            pf.close()
        raise _reject(422, "validation", f"{name}: cannot read the parquet footer ({_first_line(exc, path)})"
                      ) from exc
    decoded = sum(groups)
    size = path.stat().st_size
    if decoded > limits.ratio_floor_bytes and decoded > limits.max_ratio * max(size, 1):
        pf.close()
        raise too_large("compression_ratio", f"{name} expands {decoded / max(size, 1):.0f}x when decoded, the "
                                             f"limit is {limits.max_ratio:g}x (parquet bomb?)", "max_ratio")
    return pf


def check_parquet_bounds(path: Path, limits: Limits, *, rows: int | None = None) -> None:
    """:func:`open_parquet_bounded`, the file closed again.

    Raises
    ------
    UploadRejectedError
        As :func:`open_parquet_bounded`.
    """
    open_parquet_bounded(path, limits, rows=rows).close()


def _first_line(exc: BaseException, path: Path) -> str:
    """An exception's first line with the file's server path cut out."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text.replace(str(path), path.name)


#: Frames a decoder holds at once, counted against ``max_decode_bytes`` (the frame being decoded and
#: its references: FFmpeg's H.264/HEVC decoders keep the stream's decoded picture buffer).
_FRAMES_HELD = 4


def check_video_bounds(path: Path, limits: Limits) -> None:
    """Refuse a video whose frames would not fit ``max_decode_bytes`` before the validator decodes it.

    Every video stream's width, height and pixel format come from the container header (nothing is
    decoded); ``_FRAMES_HELD`` frames of that size must fit the limit, so a few KiB of stream
    declaring 16384x16384 (or an FFV1 frame of 65535x65535) cannot make the server allocate GiB.
    A header the container cannot give is left to the validator (which reports it).

    Raises
    ------
    UploadRejectedError
        413 ``decode_too_large`` (``--max-decode-mb``).
    """
    container = open_video_bounded(path, limits)
    if container is not None:
        container.close()


def open_video_bounded(path: Path, limits: Limits) -> Any | None:
    """:func:`check_video_bounds`, returning the container it opened (nothing demuxed from it: the
    caller may hand it to the validator, which then need not open the file again, and closes it);
    None when the file cannot be opened (the validator names an unreadable video).

    Raises
    ------
    UploadRejectedError
        413 ``decode_too_large`` (``--max-decode-mb``); the container is closed first.
    """
    import av

    from ..codecs.video import open_media
    from ..errors import CodecError

    name = "/".join(path.parts[-4:])  # videos/chunk-CCC/<key>/episode-FFF.ext
    try:
        container = open_media(path)  # a regular file (never a FIFO FFmpeg would block on), then av.open
    except CodecError:  # the validator names an unreadable video
        return None
    try:
        for stream in container.streams.video:
            cc = stream.codec_context
            width, height = int(cc.width or 0), int(cc.height or 0)
            if width <= 0 or height <= 0:
                continue
            try:
                fmt = av.video.format.VideoFormat(cc.format.name if cc.format else "rgba64le", width, height)
                frame = sum(c.width * c.height * ((c.bits + 7) // 8) for c in fmt.components)
            except (ValueError, TypeError):
                frame = width * height * 8  # an unknown format: 4 channels of 16 bits, the most FFmpeg has
            if _FRAMES_HELD * frame > limits.max_decode_bytes:
                raise too_large("decode_too_large", f"{name}: {width}x{height} frames "
                                                    f"({cc.format.name if cc.format else 'unknown format'}) decode "
                                                    f"to {_mib(frame)} each, {_FRAMES_HELD} held while decoding; the "
                                                    f"limit of what one import decodes at a time is "
                                                    f"{_mib(limits.max_decode_bytes)}", "max_decode_bytes")
    except BaseException:
        container.close()
        raise
    return container
