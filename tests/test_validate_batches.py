"""The row checks' batches and the force matrices' element type (docs/decisions.md U37, U38).

A full-rig episode's force matrices are read in batches of a few MB (not 64 rows of ~3 MB each); findings name
the same rows whichever batch they fall in. Force-matrix elements stay nullable in the writer's schema (U38,
withdrawn); a file whose elements are declared not null validates as well.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from validate_support import DATA, FM, ROWS, build_task, copy_task, rewrite_parquet

from egopool.validate import validate_task
from egopool.validate import data as vdata


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_task(tmp_path_factory.mktemp("ref"))


@pytest.fixture
def task(reference: Path, tmp_path: Path) -> Path:
    return copy_task(reference, tmp_path)


def test_writer_keeps_force_matrix_elements_nullable_so_episodes_concatenate(task: Path) -> None:
    """U38 is withdrawn: not-null elements made a new episode's table refuse ``pa.concat_tables`` with an older
    one of the same task (``list<element: int16>`` vs ``list<element: int16 not null>``)."""
    pf = pq.ParquetFile(task / DATA)
    typ = pf.schema_arrow.field(FM).type
    assert typ == pa.list_(pa.int16()) and typ.value_field.nullable
    earlier = pa.table({FM: pa.array([[0] * 4], pa.list_(pa.int16()))})  # the type every earlier writer gave
    assert pa.concat_tables([earlier, pq.read_table(task / DATA, columns=[FM])]).num_rows == 1 + ROWS
    assert validate_task(task).findings == []


def test_a_file_with_not_null_force_matrix_elements_validates(task: Path) -> None:
    def not_null(t: pa.Table) -> pa.Table:
        i = t.schema.get_field_index(FM)
        typ = pa.list_(pa.field("element", pa.int16(), nullable=False))
        col = t.column(FM).combine_chunks()
        return t.set_column(i, FM, pa.ListArray.from_arrays(col.offsets, col.values, type=typ))

    rewrite_parquet(task / DATA, not_null)
    assert not pq.ParquetFile(task / DATA).schema_arrow.field(FM).type.value_field.nullable
    assert validate_task(task).findings == []


def test_batch_rows_follow_the_decoded_size(task: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pf = pq.ParquetFile(task / DATA)
    names = pf.schema_arrow.names
    # 12 rows of 187,500 int16 stored as INT32: ~750 KB a row decoded, so 32 MiB hold 44 rows, 1 MiB one
    assert vdata.batch_rows(pf, names) == 44
    monkeypatch.setattr(vdata, "_BATCH_BYTES", 4 << 20)
    assert vdata.batch_rows(pf, names) == 5
    assert vdata.batch_rows(pf, [n for n in names if n != FM]) == vdata._BATCH_ROWS  # small columns only
    monkeypatch.setattr(vdata, "_BATCH_BYTES", 1)
    assert vdata.batch_rows(pf, names) == 1


def test_findings_name_their_row_in_any_batch(task: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def damage(t: pa.Table) -> pa.Table:
        rows = t.column(FM).to_pylist()
        rows[7] = rows[7][:1000]  # a short frame in the eighth batch
        glove = t.column("observation.left_glove").to_pylist()
        glove[9] = None
        t = t.set_column(t.schema.get_field_index(FM), FM, pa.array(rows, type=pa.list_(pa.int16())))
        return t.set_column(t.schema.get_field_index("observation.left_glove"), "observation.left_glove",
                            pa.array(glove, type=pa.list_(pa.float32())))

    rewrite_parquet(task / DATA, damage)
    monkeypatch.setattr(vdata, "_BATCH_BYTES", 1)  # one row a batch
    pf = pq.ParquetFile(task / DATA)
    assert vdata.batch_rows(pf, pf.schema_arrow.names) == 1
    errors = sorted(f.message for f in validate_task(task).findings if f.severity == "error")
    assert any(f"'{FM}' row 7 has 1000 values" in m for m in errors), errors
    assert any("'observation.left_glove' row 9 is null" in m for m in errors), errors
    assert sum("row 7 has 1000" in m for m in errors) == 1


def _leaf_values(path: Path) -> int:
    """``num_values`` of the force matrix's leaf column chunks, summed over row groups (the footer's count)."""
    md = pq.ParquetFile(path).metadata
    leaf = f"{FM}.list.element"
    return sum(md.row_group(i).column(j).num_values for i in range(md.num_row_groups)
               for j in range(md.num_columns) if md.row_group(i).column(j).path_in_schema == leaf)


def test_rows_are_counted_from_their_levels_not_from_the_footer(task: Path) -> None:
    """docs/decisions.md U45: the footer's value count cannot stand for the row lengths. Two rows of 187,499 and
    187,501 values add up to what two whole frames give, rows and column-chunk ``num_values`` alike; only the
    decoded offsets tell them apart, and the validator refuses the file."""
    lens = [len(r) for r in pq.read_table(task / DATA, columns=[FM]).column(FM).to_pylist()]
    assert lens[:2] == [187_500, 187_500]
    valid_count = _leaf_values(task / DATA)

    def shift(t: pa.Table) -> pa.Table:
        rows = t.column(FM).to_pylist()
        rows[1] = rows[1] + rows[0][-1:]  # 187,501
        rows[0] = rows[0][:-1]  # 187,499
        return t.set_column(t.schema.get_field_index(FM), FM, pa.array(rows, type=pa.list_(pa.int16())))

    rewrite_parquet(task / DATA, shift)
    pf = pq.ParquetFile(task / DATA)
    assert pf.metadata.num_rows == ROWS and _leaf_values(task / DATA) == valid_count
    errors = [f.message for f in validate_task(task).findings if f.severity == "error"]
    assert any(f"'{FM}' row 0 has 187499 values" in m for m in errors), errors
