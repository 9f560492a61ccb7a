"""egopool.storage against a real S3 server (SeaweedFS's weed on loopback, the ``s3_server`` fixture)."""

from __future__ import annotations

import pickle
from pathlib import Path, PurePosixPath

import pytest

from egopool.errors import FormatError, ObjectStoreError
from egopool.storage import ObjectPath, S3Settings, as_path

pytestmark = pytest.mark.extra("s3")


def test_as_path_keeps_local_paths_as_pathlib(tmp_path):
    assert as_path(str(tmp_path)) == tmp_path and type(as_path(str(tmp_path))) is type(tmp_path)
    assert as_path(tmp_path) == tmp_path


@pytest.mark.parametrize("uri", ["s3://", "s3:///x", "s3://b/a//c", "s3://b//c", "s3://b/../c", "s3://b/./c"])
def test_bad_uris_are_refused(uri):
    with pytest.raises(FormatError):
        as_path(uri)


def test_pure_operations():
    p = ObjectPath("s3://bkt/pre/task/", S3Settings())
    assert str(p) == "s3://bkt/pre/task" and p.name == "task" and str(p.parent) == "s3://bkt/pre"
    q = p / "data/chunk-000" / Path("episode-000.parquet")
    assert str(q) == "s3://bkt/pre/task/data/chunk-000/episode-000.parquet"
    assert q.suffix == ".parquet" and q.stem == "episode-000"
    assert q.relative_to(p) == PurePosixPath("data/chunk-000/episode-000.parquet")
    assert [str(x) for x in p.parents] == ["s3://bkt/pre", "s3://bkt"]
    assert pickle.loads(pickle.dumps(q)) == q
    with pytest.raises(FormatError):
        p / "../other"
    with pytest.raises(TypeError):  # never a local file named "s3:"
        open(q)  # type: ignore[call-overload]


def test_settings_from_env():
    s = S3Settings.from_env({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ENDPOINT_URL_S3": "https://h:1",
                             "AWS_REGION": "eu-west-1", "EGOPOOL_S3_REQUEST_TIMEOUT": "5", "AWS_MAX_ATTEMPTS": "2"})
    assert (s.endpoint, s.scheme, s.region, s.request_timeout, s.max_attempts) == ("h:1", "https", "eu-west-1", 5.0, 2)
    with pytest.raises(FormatError, match="EGOPOOL_S3_REQUEST_TIMEOUT"):
        S3Settings.from_env({"EGOPOOL_S3_REQUEST_TIMEOUT": "soon"})
    with pytest.raises(FormatError, match="AWS_ENDPOINT_URL"):
        S3Settings.from_env({"AWS_ENDPOINT_URL": "ftp://x"})


def test_objects_round_trip(s3_server):
    s3_server.create_bucket("objpath")
    root = as_path("s3://objpath/pre/task")
    assert isinstance(root, ObjectPath) and not root.exists()
    (root / "meta" / "info.json").write_bytes(b'{"format": 1}')
    (root / "data/chunk-000/episode-000.parquet").write_bytes(bytes(range(256)) * 40)
    assert root.is_dir() and root.exists() and not root.is_file()
    assert (root / "meta/info.json").is_file() and (root / "meta/info.json").stat().st_size == 13
    assert sorted(e.name for e in root.scandir()) == ["data", "meta"]
    assert root.walk_files() == [("data/chunk-000/episode-000.parquet", 10240), ("meta/info.json", 13)]
    with (root / "data/chunk-000/episode-000.parquet").open("rb") as f:
        f.seek(300)
        assert f.read(3) == bytes([44, 45, 46])
        f.seek(-2, 2)
        assert f.read() == bytes([254, 255])
    (root / "meta/info.json").unlink()
    assert not (root / "meta/info.json").exists()
    with pytest.raises(FileNotFoundError):
        (root / "meta/info.json").read_bytes()


def test_bad_credentials_name_the_uri_and_the_fix(s3_server, monkeypatch):
    s3_server.create_bucket("objpath")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    p = as_path("s3://objpath/x/meta/info.json")
    with pytest.raises(ObjectStoreError) as err:
        p.read_bytes()
    assert err.value.cause == "denied" and str(err.value).startswith("s3://objpath/x/meta/info.json: ")
    assert "AWS_SECRET_ACCESS_KEY" in str(err.value)


def test_a_missing_aws_profile_is_one_line_naming_the_uri(s3_server, tmp_path):
    """AWS_PROFILE naming no profile (O21): boto3 raised ProfileNotFound (a traceback from `sync`) and pyarrow
    went on unsigned ("access denied"); now one line naming the URI, the profile and the fix."""
    import os
    import subprocess
    import sys

    s3_server.create_bucket("objpath")
    (tmp_path / "home" / ".aws").mkdir(parents=True)
    (tmp_path / "home" / ".aws" / "config").write_text("[profile other]\nregion = us-east-1\n")
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env.update(HOME=str(tmp_path / "home"), AWS_PROFILE="nosuch", XDG_STATE_HOME=str(tmp_path / "xdg"))
    from egopool import TaskWriter

    ep = TaskWriter(tmp_path, "src", fps=30.0).begin_episode()
    for _ in range(3):
        ep.add_frame({})
    ep.finish()
    src = tmp_path / "src"
    for argv in (["sync", str(src), "s3://objpath/p/task"], ["sync", "s3://objpath/p/task", str(tmp_path / "d")],
                 ["ls", "s3://objpath/p/task"], ["validate", "s3://objpath/p/task"]):
        r = subprocess.run([sys.executable, "-m", "egopool", *argv], capture_output=True, text=True, env=env,
                           timeout=300)
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        line = [ln for ln in r.stderr.splitlines() if "AWS_PROFILE" in ln]
        assert len(line) == 1 and "s3://objpath/p" in line[0] and "'nosuch' is not a profile" in line[0], r.stderr
        assert "unset AWS_PROFILE" in line[0]
    # a profile that exists is used (keys from the config file: listed, not refused)
    (tmp_path / "home" / ".aws" / "config").write_text(
        f"[profile lab]\naws_access_key_id = {s3_server.access_key}\naws_secret_access_key = {s3_server.secret_key}\n")
    env["AWS_PROFILE"] = "lab"
    r = subprocess.run([sys.executable, "-m", "egopool", "info", "s3://objpath/p/task"], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 1 and "no task at s3://objpath/p/task (check the URI" in r.stderr, r.stderr


def test_bucket_get_refuses_an_object_larger_than_its_limit_before_reading_it(s3_server):
    """Bucket.get reads JSON documents (info.json, stats.json, journals) whole: a huge object put where one is
    expected is refused from its Content-Length (memory stays bounded), naming the URI."""
    pytest.importorskip("boto3")
    from egopool.storage.bucket import MAX_GET_BYTES, Bucket

    s3_server.create_bucket("objpath")
    b = Bucket("s3://objpath/limits")
    b.put("t/meta/info.json", b"{" + b" " * 4000 + b"}")
    with pytest.raises(FormatError) as err:
        b.get("t/meta/info.json", limit=1000)
    assert str(err.value).startswith("s3://objpath/limits/t/meta/info.json: the object is 4002 bytes, more than")
    assert b.get("t/meta/info.json", limit=4002)[0] == b"{" + b" " * 4000 + b"}"
    assert MAX_GET_BYTES == 256 << 20


def test_bucket_writers_parse_uris_as_readers_and_a_failed_upload_is_an_egopool_error(s3_server, tmp_path):
    """Every writer into a bucket (serve, sync, export lerobot, stats recalc) goes through Bucket: `..` reached the
    server (`export lerobot TASK s3://b/x/../out` died in boto3's S3UploadFailedError traceback) and `//` was
    collapsed into a prefix no reader accepts (O22)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("boto3")
    from egopool import TaskWriter
    from egopool.storage.bucket import Bucket

    s3_server.create_bucket("objpath")
    for bad in ("s3://objpath/x/../out", "s3://objpath/x//out", "s3://objpath/./out"):
        with pytest.raises(FormatError, match="path component"):
            Bucket(bad)
    (tmp_path / "f").write_bytes(b"abc")
    import dataclasses

    wrong = dataclasses.replace(S3Settings.from_env(), secret_key="not-the-secret")
    with pytest.raises(ObjectStoreError) as err:  # a PUT the store refuses
        Bucket("s3://objpath/p", settings=wrong).upload(tmp_path / "f", "k")
    assert str(err.value).startswith("s3://objpath/p/k: ") and err.value.cause == "denied", str(err.value)
    ep = TaskWriter(tmp_path, "task", fps=30.0).begin_episode()
    for _ in range(3):
        ep.add_frame({})
    ep.finish()
    out = "s3://objpath/x/../out"
    r = subprocess.run([sys.executable, "-m", "egopool", "export", "lerobot", str(tmp_path / "task"), out],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert out in lines[0] and "path component" in lines[0], lines[0]
