"""What an error names as its file (egopool.errors): a local path, or an object-store location
named by its URI (issue 24: ``Path | ObjectPath`` at the read path's seam)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from egopool.errors import FormatError, StorageError
from egopool.storage import ObjectPath, S3Settings


def _obj(uri: str) -> ObjectPath:
    return ObjectPath(uri, S3Settings(endpoint="127.0.0.1:1", scheme="http"))


def test_an_os_error_on_an_object_names_its_uri() -> None:
    # was a TypeError: from_os_error made a local Path of the ObjectPath
    with pytest.raises(StorageError) as info:
        with StorageError.guard(_obj("s3://lab/pooled/t/videos/x.mp4")):
            raise OSError(errno.EIO, "Input/output error")
    assert info.value.path == _obj("s3://lab/pooled/t/videos/x.mp4")
    assert info.value.one_line() == "s3://lab/pooled/t/videos/x.mp4: cannot write: Input/output error"
    assert info.value.errno == errno.EIO


def test_an_os_error_on_an_s3_text_keeps_the_uri() -> None:
    exc = StorageError.from_os_error(OSError(errno.EIO, "Input/output error"), "s3://lab/t/meta/info.json")
    assert exc.path == "s3://lab/t/meta/info.json"
    assert exc.one_line().startswith("s3://lab/t/meta/info.json: cannot write")


def test_a_local_dot_temp_is_named_as_the_file_it_becomes(tmp_path: Path) -> None:
    temp = tmp_path / ".info.json.0123abcd.tmp"
    exc = StorageError.from_os_error(OSError(errno.ENOSPC, "No space left on device", str(temp)))
    assert exc.path == tmp_path / "info.json"
    assert exc.hint is not None and "free disk space" in exc.hint


def test_a_file_where_a_directory_belongs_is_named(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("x")
    exc = StorageError.from_os_error(OSError(errno.ENOTDIR, "Not a directory"), tmp_path / "data" / "chunk-000")
    assert exc.path == tmp_path / "data"
    assert "where a directory is needed" in exc.message


def test_a_format_error_names_an_object_by_uri() -> None:
    exc = FormatError("meta/info.json is missing", path=_obj("s3://lab/t/meta/info.json"))
    assert str(exc) == "s3://lab/t/meta/info.json: meta/info.json is missing"


@pytest.mark.parametrize("write", ["info", "stats", "tasks", "recycled", "reserve"])
def test_a_local_writer_refuses_a_bucket_in_one_line(write: str) -> None:
    # was a TypeError from deep inside the atomic write (an ObjectPath has no __fspath__)
    from egopool.meta import markers
    from egopool.meta.info import write_info
    from egopool.meta.stats import write_stats
    from egopool.meta.tasks import write_tasks_if_missing

    uri = "s3://lab/pooled/t"
    call = {"info": lambda: write_info(uri, {"format": "pooled_episodes_v1"}),
            "stats": lambda: write_stats(uri, {}),
            "tasks": lambda: write_tasks_if_missing(uri, "t"),
            "recycled": lambda: markers.write_recycled(uri, 3),
            "reserve": lambda: markers.reserve(uri, 3)}[write]
    with pytest.raises(FormatError) as info:
        call()
    assert str(info.value.path) == uri
    assert "needs a local directory, not an object store" in info.value.message


def test_leftovers_are_looked_for_in_a_local_task_only() -> None:
    from egopool.layout import TaskLayout
    from egopool.meta.leftovers import find_leftovers

    with pytest.raises(FormatError, match="looking for stale temp files needs a local directory"):
        find_leftovers("s3://lab/pooled/t", TaskLayout(_obj("s3://lab/pooled/t")))
