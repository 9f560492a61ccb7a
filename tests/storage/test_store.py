"""One test suite of the storage interface (egopool.storage.Store), run on a directory and on a real
SeaweedFS bucket alike (issue 24; like zarr-python's StoreTests). Never a mock."""

from __future__ import annotations

import os

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from egopool.errors import FormatError
from egopool.storage import ObjectMeta, PreconditionFailed, PutMode, Store, open_store
from egopool.storage.directory_store import DirectoryStore


@pytest.fixture(params=["directory", "bucket"])
def store(request, tmp_path) -> Store:
    """An empty store of each backend: a new directory, or a new prefix of a bucket on the session's weed."""
    if request.param == "directory":
        return open_store(tmp_path / "store")
    server = request.getfixturevalue("s3_server")
    try:
        server.create_bucket("stores")
    except Exception:  # created by an earlier test of the session
        pass
    s = open_store(f"s3://stores/{uuid.uuid4().hex}")
    return s


def test_put_get_head_roundtrip(store: Store) -> None:
    v = store.put("meta/info.json", b'{"a": 1}')
    got = store.get("meta/info.json")
    assert got is not None and got[0] == b'{"a": 1}' and got[1] == v
    h = store.head("meta/info.json")
    assert h is not None and h.size == 8 and h.version == v and h.key == "meta/info.json"
    assert store.get("meta/nothing.json") is None
    assert store.head("meta/nothing.json") is None
    assert store.exists("meta/info.json") and not store.exists("meta/info")


def test_get_range_and_open_input(store: Store) -> None:
    data = bytes(range(256)) * 64
    store.put("videos/a.mp4", data)
    assert store.get_range("videos/a.mp4", 10, 5) == data[10:15]
    assert store.get_range("videos/a.mp4", len(data) - 3, 100) == data[-3:]
    with store.open_input("videos/a.mp4") as f:
        f.seek(1000)
        assert f.read(24) == data[1000:1024]
        f.seek(0)
        assert f.read() == data
    with pytest.raises(FileNotFoundError):
        store.get_range("videos/none.mp4", 0, 4)


def test_list_and_list_dir(store: Store) -> None:
    for k in ("data/chunk-000/episode_000002.parquet", "data/chunk-000/episode_000001.parquet",
              "data/chunk-001/episode_001000.parquet", "meta/info.json", "meta/episodes/chunk-000/episode_000001.parquet"):
        store.put(k, k.encode())
    keys = [m.key for m in store.list("data/")]
    assert keys == ["data/chunk-000/episode_000001.parquet", "data/chunk-000/episode_000002.parquet",
                    "data/chunk-001/episode_001000.parquet"]
    assert [m.size for m in store.list("data/chunk-001/")] == [len("data/chunk-001/episode_001000.parquet")]
    assert [m.key for m in store.list("meta/e")] == ["meta/episodes/chunk-000/episode_000001.parquet"]
    dirs, objs = store.list_dir("meta/")
    assert dirs == ["meta/episodes/"] and [o.key for o in objs] == ["meta/info.json"]
    dirs, objs = store.list_dir("")
    assert dirs == ["data/", "meta/"] and objs == []
    assert list(store.list("nothing/")) == [] and store.list_dir("nothing/") == ([], [])


def test_create_only_if_absent(store: Store) -> None:
    store.put("meta/episodes/chunk-000/episode_000001.parquet", b"row", mode=PutMode.CREATE)
    with pytest.raises(PreconditionFailed):
        store.put("meta/episodes/chunk-000/episode_000001.parquet", b"other", mode=PutMode.CREATE)
    got = store.get("meta/episodes/chunk-000/episode_000001.parquet")
    assert got is not None and got[0] == b"row"


def test_update_only_if_unchanged(store: Store) -> None:
    v1 = store.put("meta/stats.json", b"1")
    v2 = store.put("meta/stats.json", b"2", mode=PutMode.UPDATE, version=v1)
    assert v2 != v1
    with pytest.raises(PreconditionFailed):
        store.put("meta/stats.json", b"3", mode=PutMode.UPDATE, version=v1)  # a stale version
    got = store.get("meta/stats.json")
    assert got is not None and got == (b"2", v2)
    with pytest.raises(PreconditionFailed):
        store.put("meta/missing.json", b"x", mode=PutMode.UPDATE, version=v2)  # no object at all
    assert store.get("meta/missing.json") is None


def test_delete(store: Store) -> None:
    store.put("a/b", b"1")
    store.put("a/c", b"2")
    store.delete(["a/b", "a/none"])
    assert [m.key for m in store.list("a/")] == ["a/c"]


def test_put_file_and_staged(store: Store, tmp_path) -> None:
    src = tmp_path / "v.mp4"
    src.write_bytes(b"video" * 1000)
    store.put_file("videos/x/episode_000001.mp4", src)
    assert store.get("videos/x/episode_000001.mp4") == (b"video" * 1000, store.head("videos/x/episode_000001.mp4").version)
    with pytest.raises(PreconditionFailed):
        store.put_file("videos/x/episode_000001.mp4", src, mode=PutMode.CREATE)
    assert src.exists()
    with store.staged("data/d.parquet") as f:
        f.write_bytes(b"parquet")
        assert store.get("data/d.parquet") is None  # nothing visible before the block ends
    assert store.get("data/d.parquet")[0] == b"parquet"
    with pytest.raises(RuntimeError), store.staged("data/e.parquet") as f:
        f.write_bytes(b"half")
        raise RuntimeError("writer died")
    assert store.get("data/e.parquet") is None
    assert [m.key for m in store.list("data/")] == ["data/d.parquet"]


def test_put_file_moves_a_synced_file_with_create(store: Store, tmp_path) -> None:
    """``move=True, synced=True`` (the pooling server's publish: a file the caller fsynced): the object holds its
    bytes, and a second CREATE of the key is refused with nothing changed."""
    src = tmp_path / "staged.parquet"
    src.write_bytes(b"rows" * 100)
    with open(src, "rb") as f:
        os.fsync(f.fileno())
    store.put_file("data/chunk-000/episode-000.parquet", src, mode=PutMode.CREATE, move=True, synced=True)
    assert store.get("data/chunk-000/episode-000.parquet")[0] == b"rows" * 100
    other = tmp_path / "other.parquet"
    other.write_bytes(b"other")
    with pytest.raises(PreconditionFailed):
        store.put_file("data/chunk-000/episode-000.parquet", other, mode=PutMode.CREATE, move=True, synced=True)
    assert store.get("data/chunk-000/episode-000.parquet")[0] == b"rows" * 100


def test_child_store(store: Store) -> None:
    task = store.child("pooled/pick_cup")
    task.put("meta/info.json", b"{}")
    assert [m.key for m in store.list("pooled/")] == ["pooled/pick_cup/meta/info.json"]
    assert task.url("meta/info.json").endswith("pooled/pick_cup/meta/info.json")


@pytest.mark.parametrize("key", ["/abs", "a//b", "a/../b", "./a", ""])
def test_bad_keys_refused(store: Store, key: str) -> None:
    with pytest.raises(FormatError):
        store.put(key, b"x")


def test_sixteen_racing_creates_have_one_winner(store: Store) -> None:
    barrier = threading.Barrier(16)

    def create(i: int) -> bool:
        barrier.wait()
        try:
            store.put(".egopool-server/journals/t/000000007.json", json.dumps({"owner": i}).encode(),
                      mode=PutMode.CREATE)
            return True
        except PreconditionFailed:
            return False

    with ThreadPoolExecutor(16) as pool:
        won = list(pool.map(create, range(16)))
    assert won.count(True) == 1
    got = store.get(".egopool-server/journals/t/000000007.json")
    assert got is not None and json.loads(got[0])["owner"] == won.index(True)


def test_compare_and_swap_loses_no_update(store: Store) -> None:
    store.put("meta/counter.json", b"0")
    writers, rounds = 6, 5

    def bump(_: int) -> int:
        lost = 0
        for _ in range(rounds):
            while True:
                got = store.get("meta/counter.json")
                assert got is not None
                try:
                    store.put("meta/counter.json", str(int(got[0]) + 1).encode(), mode=PutMode.UPDATE,
                              version=got[1])
                    break
                except PreconditionFailed:
                    lost += 1
        return lost

    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(bump, range(writers)))
    got = store.get("meta/counter.json")
    assert got is not None and int(got[0]) == writers * rounds


def _create_in_process(root: str, key: str, tag: int) -> bool:
    s = DirectoryStore(root)
    try:
        s.put(key, str(tag).encode(), mode=PutMode.CREATE)
        return True
    except PreconditionFailed:
        return False


def test_directory_creates_race_across_processes(tmp_path) -> None:
    from concurrent.futures import ProcessPoolExecutor

    root = str(tmp_path / "s")
    with ProcessPoolExecutor(4) as pool:
        won = list(pool.map(_create_in_process, [root] * 16, ["k/n"] * 16, range(16)))
    assert won.count(True) == 1
    assert DirectoryStore(root).get("k/n")[0] == str(won.index(True)).encode()


def test_directory_objects_get_the_mode_open_gives(tmp_path) -> None:
    """Every write path (put, put_file copied or moved, staged) leaves 0666 under the umask, as open() does,
    not mkstemp's 0600 (docs/decisions.md O45): a shared task stays readable by its other users."""
    import stat as st

    umask = os.umask(0o022)
    os.umask(umask)
    want = 0o666 & ~umask
    s = DirectoryStore(tmp_path / "s")
    s.put("a/put", b"x")
    s.put("a/create", b"x", mode=PutMode.CREATE)
    src = tmp_path / "src.bin"
    for key, move in (("a/copied", False), ("a/moved", True)):
        src.write_bytes(b"y")
        os.chmod(src, 0o600)
        s.put_file(key, src, move=move)
    with s.staged("a/staged") as f:
        f.write_bytes(b"z")
    modes = {k: st.S_IMODE(os.stat(tmp_path / "s" / k).st_mode) for k in
             ("a/put", "a/create", "a/copied", "a/moved", "a/staged")}
    assert modes == dict.fromkeys(modes, want)


def test_directory_store_on_a_file_is_refused(tmp_path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    from egopool.errors import StorageError

    with pytest.raises(StorageError, match="is not a directory"):
        DirectoryStore(f)


def test_objectmeta_is_a_value() -> None:
    assert ObjectMeta("a", 1, "v") == ObjectMeta("a", 1, "v")


# -- a bucket's failures: one line naming the URI and the fix (issue 24) ------------------------------
def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["no-bucket", "wrong-key", "no-endpoint"])
def test_bucket_failures_name_the_uri_and_the_fix(s3_server, monkeypatch, case):
    from egopool.errors import ObjectStoreError
    from egopool.storage.s3_store import S3Store

    s3_server.create_bucket("failures") if case != "no-bucket" else None
    uri, fix, cause = {
        "no-bucket": ("s3://no-such-bucket-x/t", "check the bucket name", "no_bucket"),
        "wrong-key": ("s3://failures/t", "AWS_SECRET_ACCESS_KEY", "denied"),
        "no-endpoint": ("s3://failures/t", "AWS_ENDPOINT_URL", "unreachable"),
    }[case]
    if case == "wrong-key":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    if case == "no-endpoint":
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    store = S3Store(uri)
    ops = [store.require_bucket] if case == "no-bucket" else [
        lambda: store.get("meta/info.json"), lambda: store.put("meta/x.json", b"{}"), lambda: list(store.list("data/"))]
    for op in ops:
        with pytest.raises(ObjectStoreError) as err:
            op()
        line = err.value.one_line()
        assert "\n" not in line and line.startswith(uri) and fix in line and err.value.cause == cause, line


def test_a_stalled_bucket_endpoint_times_out(s3_server, monkeypatch):
    import socket

    from egopool.errors import ObjectStoreError
    from egopool.storage.s3_store import S3Store

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.5)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])  # read nothing, answer nothing
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{srv.getsockname()[1]}")
    monkeypatch.setenv("EGOPOOL_S3_REQUEST_TIMEOUT", "2")
    monkeypatch.setenv("EGOPOOL_S3_CONNECT_TIMEOUT", "2")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    try:
        with pytest.raises(ObjectStoreError) as err:
            S3Store("s3://stalled/t").get("meta/info.json")
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
    assert held and err.value.cause == "timeout", err.value.one_line()
    assert "EGOPOOL_S3_REQUEST_TIMEOUT" in err.value.one_line()


def test_an_object_deleted_between_list_and_read(store: Store) -> None:
    store.put("data/a.parquet", b"x" * 10)
    listed = [m.key for m in store.list("data/")]
    store.delete(["data/a.parquet"])
    assert listed == ["data/a.parquet"]
    assert store.get("data/a.parquet") is None and store.head("data/a.parquet") is None
    with pytest.raises(FileNotFoundError):
        store.get_range("data/a.parquet", 0, 4)
