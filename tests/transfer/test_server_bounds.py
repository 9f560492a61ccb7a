"""Bounded work per byte received, names and messages (issue 15 C, D), against a real `egopool serve`.

* a data parquet that decodes to 1 GiB from a 12 MB upload (plain pages at 85x, and a dictionary page
  repeated on every row) is a 413 naming ``--max-decode-mb``, and the server's peak RSS (VmHWM) and
  staging stay bounded;
* a video member that inflates 200 MiB from 3 MB (under the per-member 100x) is a 413 naming
  ``--max-zip-ratio`` before a byte is staged;
* the quoted-overlap zip bomb (64 members sharing one deflate tail, CPython #109858) is a 400
  ``overlapping_members`` with nothing but the spool written;
* token-less POSTs leave no trace in the upload log and write nothing;
* a CP437 member name (no UTF-8 flag) is a 400 ``name_encoding``;
* no error answer names a path of the server's disk;
* ``/api/v1/openapi.json`` needs the ``read`` scope like the rest of the read API.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import struct
import threading
import zipfile
import zlib
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transfer_helpers import (ServerProc, _digest, previews_settled, rebuild_zip, server_pids, store_files,
                              verify_workers, write_task)

from egopool.transfer import MANIFEST_NAME, pack_episode

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from egopool.transfer import upload_episodes  # noqa: E402

DATA = "data/chunk-000/episode-001.parquet"
VIDEO = "videos/chunk-000/cam/episode-001.mp4"
ROWS = 16
MiB = 1 << 20


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    from egopool.server.tokens import add_token

    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    return path, {"pc": add_token(path, "pc", ["upload:*", "declare:*"]), "reader": add_token(path, "reader", ["read"])}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packed zip of episode 2 of a task of 64-row episodes (episode 1 is uploaded by each server fixture)."""
    root = tmp_path_factory.mktemp("pc")
    task = write_task(root / "pc", episodes=2, rows=ROWS)
    return pack_episode(task, 2, root / "zips").path


@pytest.fixture()
def server(tmp_path: Path, tokens: tuple[Path, dict[str, str]], good: Path):
    """A fresh server per test (VmHWM is a per-process peak), holding episode 1 of "pick"."""
    with ServerProc(tmp_path / "store", "--tokens", str(tokens[0])) as srv:
        task = good.parent.parent / "pc" / "pick"
        assert upload_episodes(task, [1], server=srv.url, token=tokens[1]["pc"], registry=False).ok
        previews_settled(srv.store)  # its background preview is not what the tests measure
        yield srv.wait_workers()  # both verification workers have imported their modules before any RSS is read


def _post(srv: ServerProc, body: bytes, token: str | None, **headers: str) -> httpx.Response:
    h = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(srv.url + "/api/v1/session/upload", data={"name": "pick", "episode_index": "1"},
                      files={"file": ("episode.zip", body, "application/zip")}, headers={**h, **headers}, timeout=120)


def _one_status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _status_kib(pid: int, key: str) -> dict[int, int]:
    """``key`` of /proc/<p>/status for the server and each of its worker processes (the import runs in one)."""
    return {p: _one_status_kib(p, key) for p in server_pids(pid)}


def _grown_mib(before: dict[int, int], after: dict[int, int]) -> float:
    """The largest growth of one process's peak RSS (a process new since ``before`` counts from 0)."""
    return max(v - before.get(p, 0) for p, v in after.items()) / 1024


def _wchar(pid: int) -> int:
    """Bytes the server and its worker processes passed to write() so far (/proc/<pid>/io)."""
    total = 0
    for p in server_pids(pid):
        total += next(int(line.split()[1]) for line in Path(f"/proc/{p}/io").read_text().splitlines()
                      if line.startswith("wchar:"))
    return total


class _ScratchPeak:
    """Samples the bytes under the server's spool and staging directories while a request runs."""

    def __init__(self, store: Path) -> None:
        self.dirs = [store / ".egopool-server" / d for d in ("staging", "spool")]
        self.peak = {"staging": 0, "spool": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _size(self, d: Path) -> int:
        total = 0
        for dirpath, _, files in os.walk(d):
            for f in files:
                try:
                    total += os.stat(os.path.join(dirpath, f)).st_size
                except FileNotFoundError:
                    pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            for d in self.dirs:
                self.peak[d.name] = max(self.peak[d.name], self._size(d))
            self._stop.wait(0.005)

    def __enter__(self) -> _ScratchPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _table(good: Path) -> pa.Table:
    with zipfile.ZipFile(good) as z:
        return pq.read_table(io.BytesIO(z.read(DATA)))


def _blob(size: int, random_bytes: int) -> bytes:
    """``size`` bytes that zstd/deflate shrink about size/random_bytes times (random head, zero tail)."""
    return os.urandom(random_bytes) + bytes(size - random_bytes)


def _plain_bomb(good: Path) -> bytes:
    """The episode's data parquet plus a 64 MiB-per-row binary column: 1 GiB in one row group, ~12 MB of
    zstd pages (85x, under the 100x ratio limit). The 16 rows share one 64 MiB buffer (16 chunks of the
    same array), so the test itself holds 64 MiB."""
    one = pa.array([_blob(64 * MiB, 790_000)], pa.binary())
    col = pa.chunked_array([one] * ROWS)
    table = _table(good).append_column("observation.blob", col)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", use_dictionary=False, row_group_size=ROWS)
    return buf.getvalue()


def _dictionary_bomb(good: Path) -> bytes:
    """One 64 MiB value in a dictionary page, referenced by all 16 rows: the footer declares 64 MiB (ratio
    ~60x, under the limit), decoding materialises 1 GiB."""
    values = pa.DictionaryArray.from_arrays(pa.array([0] * ROWS, pa.int32()),
                                            pa.array([_blob(64 * MiB, 1 << 20)], pa.binary()))
    table = _table(good).append_column("observation.blob", values)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


@pytest.mark.parametrize("bomb", [_plain_bomb, _dictionary_bomb])
def test_a_data_parquet_decoding_to_1_gib_is_413_and_memory_stays_bounded(server: ServerProc, tokens, good: Path,
                                                                         tmp_path: Path, bomb) -> None:
    parquet = bomb(good)
    body = rebuild_zip(good, tmp_path / "bomb.zip", replace={DATA: parquet}).read_bytes()
    meta = pq.ParquetFile(io.BytesIO(parquet)).metadata
    assert meta.num_rows == ROWS and meta.num_row_groups == 1
    before = store_files(server.store)
    pid = server.proc.pid  # type: ignore[union-attr]
    rss_before = _status_kib(pid, "VmHWM")
    assert len(verify_workers(pid)) == 2  # --max-imports 2 verification workers, where the import runs

    with _ScratchPeak(server.store) as scratch:
        resp = _post(server, body, tokens[1]["pc"])

    assert (resp.status_code, resp.json()["error"]) == (413, "decode_too_large"), resp.text
    msg = resp.json()["message"]
    decodes = re.search(r"data/chunk-000/episode-001\.parquet row group 0 decodes to (\d+) MiB", msg)
    assert decodes and 1024 <= int(decodes[1]) <= 1100
    assert "the limit of what one import decodes at a time is 256 MiB" in msg
    assert "egopool serve --max-decode-mb" in msg
    grown_mib = _grown_mib(rss_before, _status_kib(pid, "VmHWM"))
    assert grown_mib < 200, f"the server's peak RSS grew by {grown_mib:.0f} MiB"
    assert scratch.peak["staging"] <= len(body)  # the members as unpacked: the zip's own size, nothing decoded
    assert store_files(server.store) == before
    for d in ("spool", "staging"):
        assert not list((server.store / ".egopool-server" / d).iterdir())


def test_a_member_inflating_200_mib_from_3_mb_is_413_before_anything_is_staged(server: ServerProc, tokens,
                                                                               good: Path, tmp_path: Path) -> None:
    piece = _blob(2 * MiB, 27_000)
    inflated = piece * 100  # 200 MiB, deflates ~70x: under the per-member limit of 100x
    zi = zipfile.ZipInfo("videos/chunk-000/zeros/episode-001.mp4", date_time=(2024, 1, 1, 0, 0, 0))
    zi.compress_type = zipfile.ZIP_DEFLATED
    body = rebuild_zip(good, tmp_path / "inflate.zip", add=[(zi, inflated)]).read_bytes()
    del inflated
    assert len(body) < 4 * MiB
    before = store_files(server.store)

    with _ScratchPeak(server.store) as scratch:
        resp = _post(server, body, tokens[1]["pc"])

    assert (resp.status_code, resp.json()["error"]) == (413, "zip_ratio"), resp.text
    assert "egopool serve --max-zip-ratio" in resp.json()["message"]
    assert scratch.peak["staging"] == 0
    assert store_files(server.store) == before


# -- the quoted-overlap zip bomb -------------------------------------------------------------------------
def _local_header(name: bytes, method: int, crc: int, csize: int, usize: int) -> bytes:
    return struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, method, 0, 0x5821, crc, csize, usize, len(name), 0) + name


def _central(name: bytes, method: int, crc: int, csize: int, usize: int, offset: int) -> bytes:
    return struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, method, 0, 0x5821, crc, csize, usize,
                       len(name), 0, 0, 0, 0, 0o100644 << 16, offset) + name


def _overlap_bomb(good: Path, members: int = 64) -> tuple[bytes, int]:
    """The good zip's members (stored) plus ``members`` video members in David Fifield's quoted-overlap
    form: member k's deflate stream is a stored block quoting the local header of member k+1, then
    member k+1's stream, down to one shared 4 MiB kernel deflated ~99x. Each member is honestly
    declared and at most 100x; the manifest lists every member with its true size and sha256, so
    extracting them all writes members * 4 MiB. Returns (zip, bytes the members inflate to)."""
    with zipfile.ZipFile(good) as z:
        plain = {i.filename: z.read(i) for i in z.infolist() if i.filename != MANIFEST_NAME}
        manifest = json.loads(z.read(MANIFEST_NAME))
    content = _blob(4 * MiB, 40_000)  # the kernel: content of the last member
    co = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate, as in a zip
    kernel_data = co.compress(content) + co.flush()
    csize = len(kernel_data)
    names = [f"videos/chunk-000/k{k:02d}/episode-001.mp4".encode() for k in range(members)]
    headers: list[bytes] = [b""] * members
    facts: list[tuple[int, int, int, str]] = [(0, 0, 0, "")] * members  # crc, compressed, size, sha256
    for k in range(members - 1, -1, -1):  # content_k = LH_{k+1} + content_{k+1}; data_k = q(LH_{k+1}) + data_{k+1}
        facts[k] = (zlib.crc32(content), csize, len(content), hashlib.sha256(content).hexdigest())
        headers[k] = _local_header(names[k], 8, facts[k][0], csize, len(content))
        content = headers[k] + content
        csize += 5 + len(headers[k])
    out, central, records = bytearray(), bytearray(), []
    for name, data in plain.items():
        c = zlib.crc32(data)
        central += _central(name.encode(), 0, c, len(data), len(data), len(out))
        out += _local_header(name.encode(), 0, c, len(data), len(data)) + data
        records.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    for k in range(members):
        crc, comp, size, sha = facts[k]
        central += _central(names[k], 8, crc, comp, size, len(out))
        out += headers[k]
        if k + 1 < members:  # a stored, non-final deflate block whose payload is the next local header
            out += struct.pack("<BHH", 0, len(headers[k + 1]), 0xFFFF ^ len(headers[k + 1]))
        records.append({"name": names[k].decode(), "size": size, "sha256": sha})
    out += kernel_data
    manifest["members"] = records
    manifest["episode_digest"] = _digest(records)
    mbytes = json.dumps(manifest).encode()
    central += _central(MANIFEST_NAME.encode(), 0, zlib.crc32(mbytes), len(mbytes), len(mbytes), len(out))
    out += _local_header(MANIFEST_NAME.encode(), 0, zlib.crc32(mbytes), len(mbytes), len(mbytes)) + mbytes
    count = len(plain) + members + 1
    out += central + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, len(central), len(out), 0)
    return bytes(out), sum(f[2] for f in facts)


def test_overlap_bomb_is_built_right(good: Path) -> None:
    """The crafted zip is what it claims: each member declared honestly at most 100x, all inflating from
    one shared tail; a Python without the #109858 check reads each at its declared size and sha256."""
    body, inflated = _overlap_bomb(good, members=4)
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        infos = [i for i in z.infolist() if i.filename.startswith("videos/chunk-000/k")]
        assert len(infos) == 4 and all(1 << 20 < i.file_size <= 100 * i.compress_size for i in infos)
        sha = {m["name"]: m["sha256"] for m in json.loads(z.read(MANIFEST_NAME))["members"]}
        try:
            got = {i.filename: hashlib.sha256(z.read(i)).hexdigest() for i in infos}
        except zipfile.BadZipFile as exc:  # a Python with the #109858 fix refuses it itself
            assert "verlap" in str(exc)
            return
    assert got == {i.filename: sha[i.filename] for i in infos}
    assert inflated > 4 * 4 * MiB


def test_quoted_overlap_zip_bomb_is_refused_before_anything_is_extracted(server: ServerProc, tokens,
                                                                         good: Path) -> None:
    body, inflated = _overlap_bomb(good)
    assert inflated > 256 * MiB and len(body) < 120_000
    before = store_files(server.store)
    pid = server.proc.pid  # type: ignore[union-attr]
    written = _wchar(pid)

    with _ScratchPeak(server.store) as scratch:
        resp = _post(server, body, tokens[1]["pc"])

    written = _wchar(pid) - written
    assert (resp.status_code, resp.json()["error"]) == (400, "overlapping_members"), resp.text
    assert "overlap" in resp.json()["message"] and "videos/chunk-000/k" in resp.json()["message"]
    assert scratch.peak["staging"] == 0
    assert written - len(body) < 64 << 10, f"the server wrote {written} bytes for a {len(body)} byte upload"
    assert store_files(server.store) == before


# -- unauthenticated requests cost nothing -----------------------------------------------------------------
def test_token_less_posts_leave_no_row_and_write_nothing(server: ServerProc, tokens, good: Path) -> None:
    reader = {"Authorization": f"Bearer {tokens[1]['reader']}"}
    previews_settled(server.store)  # the earlier uploads' previews are built in the background
    log_before = httpx.get(server.url + "/api/v1/uploads?limit=1000", headers=reader).json()["uploads"]
    state = server.store / ".egopool-server"
    db_before = {p.name: p.stat().st_size for p in state.glob("server.db*")}
    pid = server.proc.pid  # type: ignore[union-attr]
    written = _wchar(pid)
    body = good.read_bytes()

    answers = [_post(server, body, None if i % 2 else "egp_" + "x" * 43) for i in range(50)]

    written = _wchar(pid) - written
    assert {(r.status_code, r.json()["error"]) for r in answers} == {(401, "unauthorized")}
    log_after = httpx.get(server.url + "/api/v1/uploads?limit=1000", headers=reader).json()["uploads"]
    assert log_after == log_before
    assert {p.name: p.stat().st_size for p in state.glob("server.db*")} == db_before
    assert not list((state / "spool").iterdir())
    assert written < 50 * 1024, f"50 refused requests made the server write {written} bytes"
    page = httpx.get(server.url + "/", headers=reader).text
    assert ">401<" not in page


# -- names and messages ------------------------------------------------------------------------------------
class _RawName(zipfile.ZipInfo):
    """A member whose name zipfile writes as the given bytes and flags (zipfile itself always writes
    a non-ASCII name as UTF-8 with flag bit 11)."""

    def __init__(self, name: str, raw: bytes, flags: int) -> None:
        super().__init__(name, date_time=(2024, 1, 1, 0, 0, 0))
        self._raw, self._flags = raw, flags

    def _encodeFilenameFlags(self) -> tuple[bytes, int]:  # noqa: N802 (zipfile's name)
        return self._raw, self.flag_bits | self._flags


def _renamed_video(good: Path, tmp_path: Path, name: str, raw: bytes, flags: int) -> bytes:
    with zipfile.ZipFile(good) as z:
        video = z.read(VIDEO)
    return rebuild_zip(good, tmp_path / "renamed.zip", replace={VIDEO: None},
                       add=[(_RawName(name, raw, flags), video)]).read_bytes()


def test_a_cp437_member_name_is_refused(server: ServerProc, tokens, good: Path, tmp_path: Path) -> None:
    name = "videos/chunk-000/head_left_rgü/episode-001.mp4"
    body = _renamed_video(good, tmp_path, name, name.encode("cp437"), 0)  # 0x81, flag bit 11 unset
    with zipfile.ZipFile(io.BytesIO(body)) as z:  # what Python's zipfile makes of it: a valid-looking key
        assert name in z.namelist()
    before = store_files(server.store)
    resp = _post(server, body, tokens[1]["pc"])
    assert (resp.status_code, resp.json()["error"]) == (400, "name_encoding"), resp.text
    assert "UTF-8" in resp.json()["message"]
    assert store_files(server.store) == before


def test_a_utf8_flagged_name_that_is_not_utf8_is_refused(server: ServerProc, tokens, good: Path,
                                                         tmp_path: Path) -> None:
    body = _renamed_video(good, tmp_path, "videos/chunk-000/head_left_rgX/episode-001.mp4",
                          b"videos/chunk-000/head_left_rg\xff\xfe/episode-001.mp4", 0x800)
    resp = _post(server, body, tokens[1]["pc"])
    assert (resp.status_code, resp.json()["error"]) == (400, "name_encoding"), resp.text
    assert "UTF-8" in resp.json()["message"]


_ABSOLUTE = re.compile(r"(^|[\s'\"(=:\[,])/[A-Za-z0-9_.-]+/")


def test_no_error_answer_names_a_server_path(server: ServerProc, tokens, good: Path, tmp_path: Path) -> None:
    url = server.url + "/api/v1/session/upload"
    auth = {"Authorization": f"Bearer {tokens[1]['pc']}"}
    zero_row = rebuild_zip(good, tmp_path / "r.zip", replace={DATA: b"PAR1" + b"\0" * 64 + b"PAR1"}).read_bytes()
    answers = {
        "empty file part": httpx.post(url, data={"name": "pick"}, files={"file": ("e.zip", b"", "application/zip")},
                                      headers=auth),
        "truncated zip": _post(server, good.read_bytes()[:5000], tokens[1]["pc"]),
        "not a zip": _post(server, b"hello world, not a zip", tokens[1]["pc"]),
        "broken parquet": _post(server, zero_row, tokens[1]["pc"]),
        "no file part": httpx.post(url, data={"name": "pick"}, headers=auth),
        "not multipart": httpx.post(url, content=b"x", headers={**auth, "Content-Type": "application/zip"}),
        "unknown file": httpx.get(server.url + "/api/v1/tasks/pick/episodes/1/files/..%2F..%2Fetc%2Fpasswd",
                                  headers={"Authorization": f"Bearer {tokens[1]['reader']}"}),
    }
    assert (answers["empty file part"].status_code, answers["empty file part"].json()["error"]) == (400, "not_a_zip")
    assert "empty" in answers["empty file part"].json()["message"]
    for what, resp in answers.items():
        assert resp.status_code >= 400, what
        text = resp.text
        assert str(server.store) not in text and str(server.store.parent) not in text, (what, text)
        assert ".egopool-server" not in text and not _ABSOLUTE.search(text), (what, text)


def test_openapi_schema_needs_the_read_scope(server: ServerProc, tokens) -> None:
    url = server.url + "/api/v1/openapi.json"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {tokens[1]['pc']}"}).status_code == 403
    resp = httpx.get(url, headers={"Authorization": f"Bearer {tokens[1]['reader']}"})
    assert resp.status_code == 200 and "/api/v1/session/upload" in resp.json()["paths"]
    assert httpx.get(server.url + "/healthz").status_code == 200  # the one open route (besides /login)
    assert httpx.get(server.url + "/docs").status_code == 404 and httpx.get(server.url + "/redoc").status_code == 404


def test_request_limits_name_their_option_and_one_receive_slot_serves_all(tmp_path: Path, good: Path) -> None:
    """--max-upload-mb is named by both 413s (Content-Length up front, and a chunked body counted as it
    arrives); with --max-receiving 1, concurrent uploads wait for the slot and all succeed."""
    task = good.parent.parent / "pc" / "pick"
    with ServerProc(tmp_path / "store", "--max-upload-mb", "0.05", "--max-receiving", "1") as srv:
        url = srv.url + "/api/v1/session/upload"
        body = good.read_bytes() + bytes(100_000)  # over 51 KiB either way
        resp = httpx.post(url, data={"name": "pick"}, files={"file": ("e.zip", body, "application/zip")})
        assert (resp.status_code, resp.json()["error"]) == (413, "too_large")
        assert "egopool serve --max-upload-mb" in resp.json()["message"]

        def chunked():
            yield b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"e.zip\"\r\n\r\n"
            for i in range(0, len(body), 8192):
                yield body[i:i + 8192]

        resp = httpx.post(url, content=chunked(), headers={"Content-Type": "multipart/form-data; boundary=b"})
        assert (resp.status_code, resp.json()["error"]) == (413, "too_large")
        assert "egopool serve --max-upload-mb" in resp.json()["message"]
    with ServerProc(tmp_path / "store2", "--max-receiving", "1") as srv:
        results: list[bool] = []
        threads = [threading.Thread(target=lambda i=i: results.append(
            upload_episodes(task, [i], server=srv.url, registry=False, retries=0).ok)) for i in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [True, True]
        assert sorted(p.name for p in (srv.store / "pick/data/chunk-000").iterdir()) == \
            ["episode-000.parquet", "episode-001.parquet"]


def test_a_small_dictionary_column_is_counted_exactly(tmp_path: Path) -> None:
    """300 distinct 3000-byte values on 10,000 rows: the footer alone bounds it at 10,000 x the chunk
    (~9 GB); read as a DictionaryArray it decodes to 30 MB, under 256 MiB, over 16 MiB."""
    import numpy as np

    from egopool.errors import UploadRejectedError
    from egopool.server.media_bounds import check_parquet_bounds
    from egopool.server.zipcheck import Limits

    values = pa.array([os.urandom(3000) for _ in range(300)], pa.binary())
    column = pa.DictionaryArray.from_arrays(pa.array(np.arange(10_000) % 300, pa.int32()), values)
    path = tmp_path / "staging" / "pick" / "data" / "chunk-000" / "episode-000.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"status.x": column}), path)
    meta = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert meta.has_dictionary_page and meta.num_values * meta.total_uncompressed_size > 8e9
    check_parquet_bounds(path, Limits())
    with pytest.raises(UploadRejectedError) as err:
        check_parquet_bounds(path, Limits(max_decode_bytes=16 << 20))
    assert err.value.reason == "decode_too_large" and "data/chunk-000/episode-000.parquet row group 0" in err.value.message
    assert re.search(r"decodes to 3[0-2] MiB", err.value.message), err.value.message


def test_video_frames_are_bounded_from_the_container_header(tmp_path: Path) -> None:
    """A 1920x1080 yuv420p stream (3 MiB a frame, 4 held while decoding) against --max-decode-mb 8:
    413 before the validator decodes a frame; the same upload passes at the default."""
    import numpy as np

    from egopool import StreamSpec, TaskWriter, vector_column

    tw = TaskWriter(tmp_path / "pc", "hd", fps=30.0)
    ep = tw.begin_episode(columns=[vector_column("observation.right_glove", [4])],
                          streams=[StreamSpec("cam", "rgb", 1920, 1080)], sensors=["right_glove"], sensor_dim=4)
    for i in range(2):
        ep.add_frame({"observation.right_glove": np.zeros(4, np.float32)},
                     images={"cam": np.full((1080, 1920, 3), 40 * i, np.uint8)})
    ep.finish()
    with ServerProc(tmp_path / "store", "--max-decode-mb", "8") as srv:
        (o,) = upload_episodes(tmp_path / "pc" / "hd", server=srv.url, registry=False, retries=0).outcomes
        assert o.status == "failed" and "413" in o.message, o.to_dict()
        last = httpx.get(srv.url + "/api/v1/uploads?limit=1").json()["uploads"][0]
        assert (last["status"], last["reason"]) == (413, "decode_too_large")
        assert "videos/chunk-000/cam/episode-000.mp4: 1920x1080 frames (yuv420p) decode to 3 MiB each" \
            in last["message"] and "egopool serve --max-decode-mb" in last["message"]
        assert store_files(srv.store) == {}
    with ServerProc(tmp_path / "store2") as srv:
        assert upload_episodes(tmp_path / "pc" / "hd", server=srv.url, registry=False).ok


def test_a_parquet_footer_of_11_mb_is_413_before_pyarrow_parses_it(server: ServerProc, tokens, good: Path,
                                                                  tmp_path: Path) -> None:
    """1000 one-byte columns x 150 row groups: a 16 MB data parquet (1.1 MB deflated) whose footer alone is
    11 MB and parses to ~300 MiB (nothing in it decodes to much, so the decode and ratio bounds pass it):
    the footer's length, from the file's last 8 bytes, is counted against --max-decode-mb first."""
    table = pa.table({f"observation.c{i}": pa.array([0] * 150, pa.int8()) for i in range(1000)})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="none", write_statistics=False, row_group_size=1)
    footer = pq.ParquetFile(io.BytesIO(buf.getvalue())).metadata.serialized_size
    assert 8 * MiB < footer < 12 * MiB
    body = rebuild_zip(good, tmp_path / "footer.zip", replace={DATA: buf.getvalue()}).read_bytes()
    before = store_files(server.store)
    pid = server.proc.pid  # type: ignore[union-attr]
    rss_before = _status_kib(pid, "VmHWM")

    resp = _post(server, body, tokens[1]["pc"])

    assert (resp.status_code, resp.json()["error"]) == (413, "decode_too_large"), resp.text
    msg = resp.json()["message"]
    assert "data/chunk-000/episode-001.parquet: its footer" in msg and f"is {footer / MiB:.0f} MiB" in msg, msg
    assert "egopool serve --max-decode-mb" in msg
    grown_mib = _grown_mib(rss_before, _status_kib(pid, "VmHWM"))
    assert grown_mib < 100, f"the server's peak RSS grew by {grown_mib:.0f} MiB"
    assert store_files(server.store) == before


def _directory_bomb(members: int) -> bytes:
    """One empty stored member, then ``members`` central directory entries (47 bytes each, all naming it)
    behind a zip64 end record: a 47 MB zip that :mod:`zipfile` turns into a million ZipInfo objects."""
    name = b"a"
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0) + name
    entry = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0, 0, 0, 0, 0,
                        0) + name
    cd = entry * members
    end64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, members, members, len(cd), len(local))
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, len(local) + len(cd), 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return local + cd + end64 + locator + end


def test_a_central_directory_of_a_million_members_is_413_before_zipfile_parses_it(server: ServerProc, tokens
                                                                                  ) -> None:
    """The member limit (256) is checked on the end record's count and directory size, before zipfile
    materialises the directory: a 47 MB upload made the server's RSS grow by ~320 MiB and its CPU
    spend ~5 s before the 413."""
    body = _directory_bomb(1_000_000)
    with zipfile.ZipFile(io.BytesIO(_directory_bomb(1000))) as z:  # a zip zipfile reads, member by member
        assert len(z.infolist()) == 1000
    pid = server.proc.pid  # type: ignore[union-attr]
    rss_before = _status_kib(pid, "VmHWM")

    resp = _post(server, body, tokens[1]["pc"])

    grown_mib = _grown_mib(rss_before, _status_kib(pid, "VmHWM"))
    assert grown_mib < 100, f"the server's peak RSS grew by {grown_mib:.0f} MiB"
    assert (resp.status_code, resp.json()["error"]) == (413, "too_many_members"), resp.text
    assert "central directory declares 1000000 members" in resp.json()["message"]


def test_a_footer_length_beyond_the_file_is_left_to_pyarrow(tmp_path: Path) -> None:
    """A truncated file whose last 8 bytes claim a 4 GiB footer is a broken parquet (422), not a 413."""
    from egopool.errors import UploadRejectedError
    from egopool.server.media_bounds import check_parquet_bounds
    from egopool.server.zipcheck import Limits

    path = tmp_path / "staging" / "pick" / "data" / "chunk-000" / "episode-000.parquet"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PAR1" + bytes(64) + struct.pack("<I", 0xFFFFFFF0) + b"PAR1")
    with pytest.raises(UploadRejectedError) as err:
        check_parquet_bounds(path, Limits())
    assert (err.value.status, err.value.reason) == (422, "validation"), err.value.message
