"""Hostile and broken uploads: each is a 4xx with a reason, and the store's files are unchanged.

The zips are built from a real packed episode with one thing wrong (the manifest is rewritten to
match, unless the manifest is the thing under test), and posted over real HTTP to a real server.
"""

from __future__ import annotations

import io
import json
import stat
import zipfile
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transfer_helpers import ServerProc, rebuild_zip, store_files, write_task

from egopool.transfer import pack_episode

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from egopool.transfer import upload_episodes  # noqa: E402

DATA = "data/chunk-000/episode-001.parquet"
ROW = "meta/episodes/chunk-000/episode-001.parquet"
VIDEO = "videos/chunk-000/cam/episode-001.mp4"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    """A server whose store already holds episode 1 of task "pick", and the packed zip of episode 2."""
    root = tmp_path_factory.mktemp("hostile")
    task = write_task(root / "pc", episodes=2)
    good = pack_episode(task, 2, root / "zips")
    with ServerProc(root / "store") as srv:
        assert upload_episodes(task, [1], server=srv.url).ok
        yield srv, good.path, root


def _post(srv: ServerProc, body: bytes, *, name: str = "pick", f: str | None = "1") -> httpx.Response:
    data = {"name": name} if f is None else {"name": name, "episode_index": f}
    return httpx.post(srv.url + "/api/v1/session/upload", data=data,
                      files={"file": ("episode.zip", body, "application/zip")}, timeout=60)


def _zip_with(members: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for info, data in members:
            z.writestr(info, data)
    return buf.getvalue()


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _symlink_info(name: str) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name)
    zi.external_attr = (stat.S_IFLNK | 0o777) << 16
    return zi


def _bomb(tmp: Path, good: Path) -> bytes:
    """A member declaring 10 GiB in the central directory (zip64), the rest of the zip intact."""
    buf = io.BytesIO()
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info.filename, src.read(info))
        z.writestr("videos/chunk-000/big/episode-001.mp4", b"\0" * (1 << 20))
        z.filelist[-1].file_size = 10 << 30  # what the central directory will declare
    return buf.getvalue()


def _ratio_bomb(good: Path) -> bytes:
    """50 MiB of zeros deflated to ~50 KiB: declared honestly, expands ~1000x."""
    buf = io.BytesIO()
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(buf, "w") as z:
        for info in src.infolist():
            z.writestr(info, src.read(info))
        z.writestr(zipfile.ZipInfo(VIDEO.replace("/cam/", "/zeros/")), b"\0" * (50 << 20),
                   compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def _table(good: Path, name: str) -> pa.Table:
    with zipfile.ZipFile(good) as z:
        return pq.read_table(io.BytesIO(z.read(name)))


def _with_index(table: pa.Table, n: int) -> pa.Table:
    i = table.column_names.index("episode_index")
    return table.set_column(i, table.schema.field(i), pa.array([n] * table.num_rows, pa.int64()))


def _zstd_bomb() -> bytes:
    """One 32 MiB zero string, zstd-compressed by parquet to a few KiB: the zip's ratio limit never sees it."""
    buf = io.BytesIO()
    pq.write_table(pa.table({"blob": pa.array([b"\0" * (32 << 20)], pa.binary())}), buf, compression="zstd")
    return buf.getvalue()


CASES = {
    # name: (status, reason, how to build the body from the good zip)
    "path traversal": (400, "path_traversal", lambda g, t: rebuild_zip(g, t, add=[("../../evil.txt", b"x")])),
    "absolute path": (400, "absolute_path", lambda g, t: rebuild_zip(g, t, add=[("/etc/cron.d/evil", b"x")])),
    "symlink member": (400, "symlink", lambda g, t: rebuild_zip(g, t, add=[(_symlink_info(
        "videos/chunk-000/link/episode-001.mp4"), b"/etc/passwd")])),
    "duplicate member": (400, "duplicate_member", lambda g, t: rebuild_zip(g, t, add=[("meta/info.json", b"{}")])),
    "case-folding twin": (400, "case_twin", lambda g, t: rebuild_zip(g, t, add=[(DATA.upper(), b"x")])),
    "dotfile": (400, "dotfile", lambda g, t: rebuild_zip(g, t, add=[("meta/episodes/.lock", b"")])),
    "wrong arcname": (400, "wrong_arcname", lambda g, t: rebuild_zip(g, t, add=[("notes.txt", b"hello")])),
    "legacy file- name": (400, "wrong_arcname", lambda g, t: rebuild_zip(
        g, t, replace={DATA: None, "data/chunk-000/file-001.parquet": zipfile.ZipFile(g).read(DATA)})),
    "two episodes": (400, "several_episodes", lambda g, t: rebuild_zip(
        g, t, add=[("videos/chunk-000/cam/episode-002.mp4", b"x")])),
    "missing info.json": (400, "missing_info", lambda g, t: rebuild_zip(g, t, replace={"meta/info.json": None})),
    "missing data": (400, "missing_data", lambda g, t: rebuild_zip(g, t, replace={DATA: None})),
    "missing manifest": (400, "missing_manifest", None),
    "unknown format": (422, "unknown_format", lambda g, t: rebuild_zip(g, t, replace={"meta/info.json": json.dumps(
        {**json.loads(zipfile.ZipFile(g).read("meta/info.json")), "format": "pooled_episodes_v9"}).encode()})),
    "truncated zip": (400, "not_a_zip", None),
    "manifest mismatch (bytes)": (400, "manifest_mismatch", lambda g, t: rebuild_zip(
        g, t, replace={VIDEO: zipfile.ZipFile(g).read(VIDEO)[:-1] + b"\x00"}, fix_manifest=False)),
    "manifest mismatch (unlisted)": (400, "manifest_mismatch", lambda g, t: rebuild_zip(
        g, t, add=[("videos/chunk-000/extra/episode-001.mp4", b"x")], fix_manifest=False)),
    "episode_index column disagrees with f": (422, "episode_index_mismatch", lambda g, t: rebuild_zip(
        g, t, replace={DATA: _parquet(_with_index(_table(g, DATA), 7)), ROW: _parquet(_with_index(_table(g, ROW), 7))})),
    "meta row disagrees": (422, "episode_index_mismatch", lambda g, t: rebuild_zip(
        g, t, replace={ROW: _parquet(_with_index(_table(g, ROW), 3))})),
    "declared 10 GiB (bomb)": (413, "member_too_large", None),
    "compression ratio (bomb)": (413, "compression_ratio", None),
    "meta row repeated (parquet bomb)": (422, "meta_rows", lambda g, t: rebuild_zip(
        g, t, replace={ROW: _parquet(_table(g, ROW).take(pa.array([0] * 5000)))})),
    "compressed page (parquet bomb)": (413, "compression_ratio", lambda g, t: rebuild_zip(
        g, t, replace={DATA: _zstd_bomb()})),
    "another fps": (409, "declaration_conflict", lambda g, t: rebuild_zip(g, t, replace={"meta/info.json": json.dumps(
        {**json.loads(zipfile.ZipFile(g).read("meta/info.json")), "fps": 1000.0}).encode()})),
    # "$" of a regex also matches before a final newline: the name "...mp4\n" is another file, never the stream
    "video name ending in a line break": (400, "bad_name", lambda g, t: rebuild_zip(
        g, t, replace={VIDEO: None, VIDEO + "\n": zipfile.ZipFile(g).read(VIDEO)})),
    "data name ending in a line break": (400, "bad_name", lambda g, t: rebuild_zip(
        g, t, replace={DATA: None, DATA + "\n": zipfile.ZipFile(g).read(DATA)})),
    "bidi override in a stream name": (400, "bad_name", lambda g, t: rebuild_zip(
        g, t, replace={VIDEO: None, VIDEO.replace("/cam/", "/cam\u202e/"): zipfile.ZipFile(g).read(VIDEO)})),
    "fails validation": (422, "validation", lambda g, t: rebuild_zip(
        g, t, replace={DATA: _parquet(_table(g, DATA).drop(["frame_index"]))})),
}


@pytest.mark.filterwarnings("ignore:Duplicate name")  # zipfile's own warning while building that case
@pytest.mark.parametrize("case", list(CASES))
def test_hostile_zip_is_refused_and_the_store_is_unchanged(setup, case: str, tmp_path: Path) -> None:
    srv, good, _ = setup
    status, reason, build = CASES[case]
    if case == "missing manifest":
        with zipfile.ZipFile(good) as z:
            body = _zip_with([(i.filename, z.read(i)) for i in z.infolist() if i.filename != "egopool_manifest.json"])
    elif case == "truncated zip":
        body = good.read_bytes()[: good.stat().st_size // 2]
    elif case == "declared 10 GiB (bomb)":
        body = _bomb(tmp_path, good)
    elif case == "compression ratio (bomb)":
        body = _ratio_bomb(good)
    else:
        body = build(good, tmp_path / "bad.zip").read_bytes()
    before = store_files(srv.store)

    resp = _post(srv, body)

    assert (resp.status_code, resp.json()["error"]) == (status, reason), resp.text
    assert resp.json()["message"]
    if reason == "validation":
        assert any("frame_index" in f["message"] for f in resp.json()["findings"])
        assert any(f["path"] == DATA for f in resp.json()["findings"])  # task-relative: the server's disk unnamed
    assert ".egopool-server" not in resp.text and str(srv.store) not in resp.text
    assert store_files(srv.store) == before
    for scratch in ("spool", "staging"):
        assert not list((srv.store / ".egopool-server" / scratch).iterdir())
    last = httpx.get(srv.url + "/api/v1/uploads?limit=1").json()["uploads"][0]
    assert (last["outcome"], last["status"], last["reason"]) == ("rejected", status, reason)


def test_form_episode_index_must_be_the_file_number(setup) -> None:
    srv, good, _ = setup
    before = store_files(srv.store)
    resp = _post(srv, good.read_bytes(), f="2")  # episode 2 is file 1; N = 2 is not what the form carries
    assert (resp.status_code, resp.json()["error"]) == (422, "episode_index_mismatch")
    assert _post(srv, good.read_bytes(), f="one").status_code == 400
    assert store_files(srv.store) == before


def test_malformed_requests(setup) -> None:
    srv, good, _ = setup
    url = srv.url + "/api/v1/session/upload"
    assert httpx.post(url, content=b"raw bytes", headers={"Content-Type": "application/zip"}).status_code == 400
    no_name = httpx.post(url, files={"file": ("e.zip", good.read_bytes(), "application/zip")})
    assert (no_name.status_code, no_name.json()["error"]) == (400, "bad_request")
    bad_name = _post(srv, good.read_bytes(), name="../etc")
    assert (bad_name.status_code, bad_name.json()["error"]) == (400, "bad_task_name")
    assert _post(srv, good.read_bytes(), name=".egopool-server").status_code == 400
    before = store_files(srv.store)
    for name in ("p" * 300, "pick\nevil", " pick", "pick ", "pick\u202e"):  # too long, control, spaces, bidi
        resp = _post(srv, good.read_bytes(), name=name)
        assert (resp.status_code, resp.json()["error"]) == (400, "bad_task_name"), (name, resp.text)
    assert store_files(srv.store) == before


def test_form_parts_and_headers_are_bounded(setup) -> None:
    """64 KiB per field is not a bound when the fields are countless: parts and headers are limited too."""
    srv, good, _ = setup
    url = srv.url + "/api/v1/session/upload"
    before = store_files(srv.store)
    many = {"name": "pick", "episode_index": "1", **{f"x{i}": "y" * 1000 for i in range(100)}}
    resp = httpx.post(url, data=many, files={"file": ("e.zip", good.read_bytes(), "application/zip")}, timeout=60)
    assert (resp.status_code, resp.json()["error"]) == (400, "bad_request") and "form parts" in resp.json()["message"]
    boundary = "qa"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\nX-Pad: {'p' * (64 << 10)}\r\n\r\n"
            f"pick\r\n--{boundary}--\r\n").encode()
    resp = httpx.post(url, content=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert (resp.status_code, resp.json()["error"]) == (400, "bad_request") and "header" in resp.json()["message"]
    assert store_files(srv.store) == before


def test_the_good_zip_is_accepted_after_all_that(setup) -> None:
    srv, good, _ = setup
    resp = _post(srv, good.read_bytes(), f=None)  # episode_index is only a cross-check: optional
    assert resp.status_code == 200 and resp.json()["episode_index"] == 2


def test_an_episode_removed_on_the_server_is_never_confirmed_as_a_duplicate(setup) -> None:
    """The server's admin deleted pooled episode 1; the client re-sends it (its registry lost): answering
    "duplicate" would confirm it and --delete-after would drop the last copy."""
    from egopool.layout import list_task_episodes
    from egopool.ops import delete_episodes

    srv, _, root = setup
    assert delete_episodes(srv.store / "pick", [1], registry=False).ok
    before = store_files(srv.store)
    report = upload_episodes(root / "pc" / "pick", [1], server=srv.url, registry=False, delete_after=True)
    (o,) = report.outcomes
    assert (o.status, o.deleted) == ("failed", None) and "removed" in o.message, o.to_dict()
    assert 1 in [g.index for g in list_task_episodes(root / "pc" / "pick")]  # the local copy stays
    assert store_files(srv.store) == before


def test_a_new_task_gets_a_tasks_jsonl_the_specs_reader_reads(setup, tmp_path: Path) -> None:
    """The first upload of a task gives the server task its tasks.jsonl: the uploaded lines' values, written
    one object per line in UTF-8 with LF ends (file_format.md §5: ``json.loads(f.readline())``); before, the
    uploaded bytes were published verbatim (CRLF, a line padded with spaces). A BOM is the validator's error."""
    srv, good, _ = setup
    with zipfile.ZipFile(good) as z:
        line = json.loads(z.read("meta/tasks.jsonl").decode().splitlines()[0])
    sent = json.dumps(line, indent=None, separators=(" ,", " :  ")).encode() + b"\r\n" + \
        b'{"task_index": 1, "task": "\xe6\x8b\xbf"}\r\n'
    with_bom = rebuild_zip(good, tmp_path / "bom.zip", replace={"meta/tasks.jsonl": b"\xef\xbb\xbf" + sent})
    assert _post(srv, with_bom.read_bytes(), name="bom_task").status_code == 422
    body = rebuild_zip(good, tmp_path / "crlf.zip", replace={"meta/tasks.jsonl": sent}).read_bytes()

    resp = _post(srv, body, name="crlf_task")

    assert resp.status_code == 200, resp.text
    stored = (srv.store / "crlf_task" / "meta" / "tasks.jsonl").read_bytes()
    assert stored == (json.dumps(line, ensure_ascii=False) + "\n" + '{"task_index": 1, "task": "拿"}\n').encode()
    with open(srv.store / "crlf_task" / "meta" / "tasks.jsonl", encoding="utf-8", newline="") as f:
        assert json.loads(f.readline()) == line and f.readline() == '{"task_index": 1, "task": "拿"}\n'
