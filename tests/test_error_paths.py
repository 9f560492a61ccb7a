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
