"""One-request reads of objects (egopool.storage._object_read, docs/decisions.md O33) on a real S3 server:
the bytes equal the file's, the requests are those documented, and damage is reported as on disk."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool._safe_read import open_regular, read_parquet, read_parquet_schema
from egopool.errors import FormatError
from egopool.storage import READ_BUFFER, ObjectPath
from egopool.storage._object_read import FOOTER_READ

pytestmark = pytest.mark.extra("s3")

BUCKET = "object-reads"


@pytest.fixture(scope="module")
def put(s3_server):  # type: ignore[no-untyped-def]
    s3_server.create_bucket(BUCKET)
    fs = s3_server.filesystem()

    def write(key: str, data: bytes) -> ObjectPath:
        with fs.open_output_stream(f"{BUCKET}/{key}") as out:
            out.write(data)
        return ObjectPath(f"s3://{BUCKET}/{key}")

    return write


def _settled(server) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """weed's request counts once they stop moving (a request is counted just after its answer is sent)."""
    last = server.request_counts()
    for _ in range(50):
        time.sleep(0.1)
        now = server.request_counts()
        if now == last:
            return now
        last = now
    return last


def _gets(server, fn):  # type: ignore[no-untyped-def]
    before = _settled(server)
    out = fn()
    after = _settled(server)
    return out, {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def test_a_small_parquet_is_one_get(put, s3_server):
    table = pa.table({"episode_index": pa.array([7], pa.int64()), "x": pa.array([1.5])})
    data = _parquet_bytes(table)
    assert len(data) < FOOTER_READ
    path = put("small.parquet", data)
    got, req = _gets(s3_server, lambda: read_parquet(path))
    assert got.equals(table) and req.get("GET") == 1, req


def test_a_parquet_with_a_footer_larger_than_the_first_read(put, s3_server):
    table = pa.table({f"column_{i:04d}_with_a_long_name": pa.array(np.arange(50, dtype=np.int64) * i)
                      for i in range(600)})
    data = _parquet_bytes(table)
    footer = int.from_bytes(data[-8:-4], "little")
    assert footer > FOOTER_READ  # the branch that fetches the rest of the footer
    path = put("wide.parquet", data)
    schema, req = _gets(s3_server, lambda: read_parquet_schema(path))
    assert schema.names == table.column_names and req.get("GET") == 2, req
    cols = ["column_0003_with_a_long_name", "column_0599_with_a_long_name"]
    assert read_parquet(path, cols).equals(table.select(cols))


def test_a_video_sized_object_reads_back_exactly(put, s3_server):
    data = np.random.default_rng(1).integers(0, 256, READ_BUFFER + 123_457, dtype=np.uint8).tobytes()
    path = put("big.bin", data)
    whole, req = _gets(s3_server, lambda: open_regular(path).read())
    assert whole == data and req.get("GET") == 2, req  # the first buffer, then the rest
    f = open_regular(path)
    f.seek(len(data) - 10)
    assert f.read() == data[-10:]
    f.seek(5)
    assert f.read(7) == data[5:12]
    small = put("small.bin", b"0123456789")
    got, req = _gets(s3_server, lambda: open_regular(small).read())
    assert got == b"0123456789" and req.get("GET") == 1, req


@pytest.mark.parametrize("body, message", [(b"", "too short for a parquet file"),
                                           (b"PAR1" + b"\0" * 40, "does not end in the parquet magic"),
                                           (b"PAR1" + b"\0" * 40 + (1 << 20).to_bytes(4, "little") + b"PAR1",
                                            "-byte footer in a")], ids=["empty", "no-magic", "huge-footer"])
def test_damaged_parquet_objects_are_named(put, body, message):
    path = put(f"damaged-{len(body)}-{body[-1:].hex()}.parquet", body)
    with pytest.raises(FormatError, match=message) as err:
        read_parquet(path)
    assert str(path) in str(err.value)


def test_missing_objects_and_prefixes_are_named(put):
    put("prefix/inside.parquet", b"x")
    with pytest.raises(FormatError, match="is missing"):
        read_parquet(ObjectPath(f"s3://{BUCKET}/nothing.parquet"))
    with pytest.raises(FormatError, match="is a prefix"):
        read_parquet(ObjectPath(f"s3://{BUCKET}/prefix"))
    with pytest.raises(FormatError, match="is missing"):
        open_regular(ObjectPath(f"s3://{BUCKET}/nothing.mp4"))
