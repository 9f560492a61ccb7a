"""What the publish of a small upload does once instead of twice (issue 29, docs/decisions.md U48).

* a renumbered episode's row is renumbered and stamped with its files' sha256 in one write
  (``renumber_row``): the bytes are exactly those of the two writes it replaces (the row rewritten with its new
  N, as ``rewrite_episode_index`` did with ``single_row`` before U48, then ``restamp_row_file``), the row records the files and its content digest holds,
  and the returned sha256 is the file's;
* the allocation's probe for a video of N (``video_group_exists``) answers what
  ``any(chunk.glob("*/episode-<f>.*"))`` answers, for every shape of a chunk folder.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transfer_helpers import write_task

from egopool.errors import FormatError
from egopool.meta.episodes import read_episode_row, recorded_as, restamp_row_file
from egopool.server.importer import video_group_exists
from egopool.server.renumber import renumber_row


@pytest.fixture(scope="module")
def row_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real writer's one-row ``meta/episodes`` file of N=1 (it records its files' digests)."""
    task = write_task(tmp_path_factory.mktemp("rec"), "pick", 1, rows=5, registry=False)
    row = task / "meta" / "episodes" / "chunk-000" / "episode-000.parquet"  # N=1: chunk 0, file 0 (§2)
    assert row.is_file()
    return row


FILES = {"data/chunk-000/episode-006.parquet": "a" * 64, "videos/chunk-000/cam/episode-006.mp4": "b" * 64}


def test_renumber_row_is_the_two_writes_it_replaces(row_file: Path, tmp_path: Path) -> None:
    two, one = tmp_path / "two.parquet", tmp_path / "one.parquet"
    table = pq.read_table(row_file)  # the path before U48: the row rewritten with N=7, read, stamped, written
    pos = table.schema.get_field_index("episode_index")
    pq.write_table(table.set_column(pos, table.schema.field(pos), pa.array([7], table.schema.field(pos).type)),
                   two, compression="zstd")
    restamp_row_file(two, FILES)
    shutil.copyfile(row_file, one)
    sha = renumber_row(one, 7, FILES)
    assert one.read_bytes() == two.read_bytes()
    assert sha == hashlib.sha256(one.read_bytes()).hexdigest()
    assert recorded_as(one, 7, FILES)  # the files recorded, the content digest holds
    assert read_episode_row(one, 7)["episode_index"] == 7
    assert not recorded_as(one, 7, {**FILES, "data/chunk-000/episode-006.parquet": "c" * 64})


def test_renumber_row_refuses_a_file_without_episode_index(row_file: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"length": [3]}), bad)
    before = bad.read_bytes()
    with pytest.raises(FormatError, match="no episode_index column"):
        renumber_row(bad, 2, FILES)
    assert bad.read_bytes() == before  # nothing half-written


@pytest.mark.parametrize("shape", ["absent", "file", "empty", "other_n", "longer_n", "match", "match_hidden_slot",
                                   "file_at_slot_level", "dir_named_like", "second_slot"])
def test_video_group_exists_is_the_glob(tmp_path: Path, shape: str) -> None:
    chunk = tmp_path / "chunk-000"
    if shape == "file":
        chunk.write_bytes(b"")
    elif shape != "absent":
        chunk.mkdir()
    if shape in ("other_n", "longer_n", "match", "second_slot", "dir_named_like"):
        (chunk / "cam").mkdir()
    name = {"other_n": "episode-002.mp4", "longer_n": "episode-0010.mp4", "match": "episode-001.mp4"}.get(shape)
    if name:
        (chunk / "cam" / name).write_bytes(b"x")
    if shape == "match_hidden_slot":
        (chunk / ".cam").mkdir()
        (chunk / ".cam" / "episode-001.").write_bytes(b"")
    if shape == "file_at_slot_level":
        (chunk / "episode-001.mp4").write_bytes(b"x")
    if shape == "dir_named_like":
        (chunk / "cam" / "episode-001.d").mkdir()
    if shape == "second_slot":
        (chunk / "depth").mkdir()
        (chunk / "depth" / "episode-001.mkv").write_bytes(b"x")
    expected = chunk.is_dir() and any(chunk.glob("*/episode-001.*"))
    assert video_group_exists(chunk, 1) is expected
    assert expected is (shape in ("match", "match_hidden_slot", "dir_named_like", "second_slot"))
