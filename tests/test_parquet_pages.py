"""List columns read straight from their parquet pages (egopool._parquet_pages, docs/decisions.md U32) equal
pyarrow's read of them, value for value, in every layout decoded; anything else falls back to pyarrow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import _parquet_pages as pages
from egopool._parquet_pages import Unsupported, iter_batches, read_list_chunk, supported_list_column
from egopool.validate import validate_task

FM = "observation.m"


def _table(rows: int, seed: int, value: pa.DataType = pa.int16(), nulls: bool = True) -> pa.Table:
    """Rows of mixed lengths: long runs (a force-matrix row), short ones (bit-packed levels), [] and nulls."""
    rng = np.random.default_rng(seed)
    out: list[list[int] | list[float] | None] = []
    for i in range(rows):
        kind = i % 7
        n = 0 if kind == 3 else int(rng.integers(1, 6)) if kind in (1, 5) else 3000 + int(rng.integers(0, 50))
        if kind == 6 and nulls:
            out.append(None)
        elif value == pa.int16():
            out.append(rng.integers(-32768, 32768, n).tolist())
        else:
            out.append(rng.standard_normal(n).astype(np.float32).tolist())
    return pa.table({"k": pa.array(np.arange(rows)), FM: pa.array(out, type=pa.list_(value)),
                     "x": pa.array([[float(i)] for i in range(rows)], type=pa.list_(pa.float32()))})


def _write(path: Path, table: pa.Table, **kw: Any) -> Path:
    kw.setdefault("use_dictionary", False)
    pq.write_table(table, path, **kw)
    return path


def _ours(path: Path, name: str = FM) -> list[pa.Array]:
    with pq.ParquetFile(path) as pf, open(path, "rb") as fh:
        assert supported_list_column(pf, name)
        return [read_list_chunk(pf, fh, name, i, 1 << 30) for i in range(pf.metadata.num_row_groups)]


def _theirs(path: Path, name: str = FM) -> list[pa.Array]:
    with pq.ParquetFile(path) as pf:
        return [pf.read_row_group(i, columns=[name]).column(0).combine_chunks()
                for i in range(pf.metadata.num_row_groups)]


LAYOUTS: list[dict[str, Any]] = [
    {"compression": "zstd"},
    {"compression": "snappy"},
    {"compression": "gzip"},
    {"compression": "none"},
    {"compression": "zstd", "data_page_version": "2.0"},
    {"compression": "none", "data_page_version": "2.0"},
    {"compression": "zstd", "data_page_size": 4096, "row_group_size": 9},  # rows across pages, several groups
    {"compression": "zstd", "data_page_size": 4096, "data_page_version": "2.0", "row_group_size": 13},
]


@pytest.mark.parametrize("kw", LAYOUTS, ids=[str(sorted(k.items())) for k in LAYOUTS])
@pytest.mark.parametrize("value", [pa.int16(), pa.float32()], ids=["int16", "float32"])
def test_page_read_equals_pyarrow_value_for_value(tmp_path, kw, value):
    path = _write(tmp_path / "d.parquet", _table(40, 1, value), **kw)
    ours, theirs = _ours(path), _theirs(path)
    assert len(ours) == len(theirs) >= 1
    for a, b in zip(ours, theirs, strict=True):
        assert a.type == b.type and a.null_count == b.null_count
        assert a.equals(b)
    assert sum(a.null_count for a in ours) == 5  # rows 6, 13, .. 34: the nulls were read as nulls
    assert any(len(x) == 0 for a in ours for x in a.to_pylist() if x is not None)  # and [] as []


def test_iter_batches_gives_pyarrows_rows_in_its_batches(tmp_path):
    path = _write(tmp_path / "d.parquet", _table(50, 2), compression="zstd", row_group_size=12)
    with pq.ParquetFile(path) as pf:
        ours = list(iter_batches(pf, path, ["k", FM, "x"], 5, pages=[FM]))
        theirs = list(pf.iter_batches(batch_size=5, columns=["k", FM, "x"]))
        only = list(iter_batches(pf, path, [FM], 5, pages=[FM]))
        bucket = list(iter_batches(pf, None, ["k", FM], 5, pages=[FM]))  # no local file: pyarrow's own
    assert all(b.num_rows <= 5 for b in ours + only)
    assert pa.Table.from_batches(ours).select(["k", FM, "x"]).equals(pa.Table.from_batches(theirs))
    assert pa.Table.from_batches(only).equals(pa.Table.from_batches(theirs).select([FM]))
    assert pa.Table.from_batches(bucket).equals(pa.Table.from_batches(theirs).select(["k", FM]))


def test_a_layout_not_decoded_here_is_read_by_pyarrow(tmp_path, monkeypatch):
    dictionary = _write(tmp_path / "dict.parquet", _table(20, 3), use_dictionary=True)
    nested = _write(tmp_path / "nested.parquet", pa.table({FM: pa.array([[[1, 2]], [[3]]], pa.list_(pa.list_(pa.int16())))}))
    wide = _write(tmp_path / "wide.parquet", pa.table({FM: pa.array([[1, 2], [3]], pa.list_(pa.int32()))}))
    with pq.ParquetFile(dictionary) as pf:
        assert not supported_list_column(pf, FM)
    for p in (nested, wide):
        with pq.ParquetFile(p) as pf:
            assert not supported_list_column(pf, FM)
    # a null element inside a list: pyarrow's masked value, not decoded here; the row group goes to pyarrow
    holes = _write(tmp_path / "holes.parquet", pa.table({FM: pa.array([[1, None, 3], [4]], pa.list_(pa.int16()))}))
    with pq.ParquetFile(holes) as pf, open(holes, "rb") as fh:
        with pytest.raises(Unsupported, match="null elements"):
            read_list_chunk(pf, fh, FM, 0, 1 << 30)
        got = pa.Table.from_batches(list(iter_batches(pf, holes, [FM], 64, pages=[FM])))
    assert got.column(FM).to_pylist() == [[1, None, 3], [4]]
    # a row group larger than what is held at a time is streamed by pyarrow
    big = _write(tmp_path / "big.parquet", _table(30, 4), row_group_size=10)
    monkeypatch.setattr(pages, "MAX_GROUP_BYTES", 1000)
    calls: list[object] = []
    real = pages.read_list_chunk
    monkeypatch.setattr(pages, "read_list_chunk", lambda *a, **k: calls.append(a) or real(*a, **k))
    with pq.ParquetFile(big) as pf:
        got = pa.Table.from_batches(list(iter_batches(pf, big, ["k", FM], 64, pages=[FM])))
        assert got.equals(pf.read(columns=["k", FM]))
    assert calls == []


def _damage(path: Path, column: str) -> Path:
    """A byte in the middle of the first data page of ``column``'s first chunk flipped."""
    with pq.ParquetFile(path) as pf:
        leaf = next(j for j in range(len(pf.schema)) if pf.schema.column(j).path.startswith(column + ".list"))
        c = pf.metadata.row_group(0).column(leaf)
        at = c.data_page_offset + c.total_compressed_size // 2
    data = bytearray(path.read_bytes())
    data[at] ^= 0x5A
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_a_damaged_page_gets_pyarrows_verdict(tmp_path, compression):
    """Flipped bytes in a page: the page read refuses it (zstd) or reads what pyarrow reads (plain values);
    either way the rows (or the error) are pyarrow's."""
    path = _damage(_write(tmp_path / "d.parquet", _table(30, 5), compression=compression), FM)
    with pq.ParquetFile(path) as pf:
        try:
            want: pa.Table | str = pa.Table.from_batches(list(pf.iter_batches(batch_size=8, columns=["k", FM])))
        except Exception as exc:  # noqa: BLE001 - pyarrow's verdict, whichever type
            want = type(exc).__name__
        try:
            got: pa.Table | str = pa.Table.from_batches(list(iter_batches(pf, path, ["k", FM], 8, pages=[FM])))
        except Exception as exc:  # noqa: BLE001
            got = type(exc).__name__
    assert isinstance(got, str) == isinstance(want, str)
    if isinstance(got, str):
        assert got == want
    else:
        assert isinstance(want, pa.Table) and got.select(["k", FM]).equals(want)


def test_the_validator_finds_the_same_with_and_without_the_page_read(tmp_path, monkeypatch):
    """A task with saturated cells, a short matrix row and a null row: the same findings either way."""
    from validate_support import DATA, FM as fm, build_task, reseal

    task = build_task(tmp_path, episodes=2)
    data = task / DATA

    def damage(t: pa.Table) -> pa.Table:
        rows = t.column(fm).to_pylist()
        rows[0] = [32767] * 187_500
        rows[1] = [1, 2, 3]
        rows[2] = None
        return t.set_column(t.column_names.index(fm), fm, pa.array(rows, t.schema.field(fm).type))

    pq.write_table(damage(pq.read_table(data)), data, compression="zstd", use_dictionary=False)  # as egopool's writer
    reseal(task)
    with pq.ParquetFile(data) as pf:
        assert supported_list_column(pf, fm)
    used: list[str] = []
    real = pages.read_list_chunk
    monkeypatch.setattr(pages, "read_list_chunk", lambda pf, fh, name, *a, **k: used.append(name) or real(pf, fh, name, *a, **k))
    fast = validate_task(task)
    assert fm in used
    monkeypatch.setattr(pages, "supported_list_column", lambda pf, name: False)
    slow = validate_task(task)
    assert [f.to_dict() for f in fast.findings] == [f.to_dict() for f in slow.findings]
    messages = " ".join(f.message for f in fast.findings)
    assert "row 1 has 3 values" in messages and "row 2 is null" in messages and "saturat" in messages
