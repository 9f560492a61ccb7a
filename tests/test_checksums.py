"""Checksums recorded where the data lives and checked wherever it moves (issue 28, docs/decisions.md X1-X5).

Hold-out style: a writer-made task is copied and N bytes inside one kind of file are overwritten (a data
parquet value, the meta row's value, RGB mp4, depth mkv, a PNG16 frame); `validate` (directory and SeaweedFS)
exits 1 naming the file with both digests; `sync`, `upload` (pack) and the server's verification refuse it, and
the good copy is untouched.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from validate_support import DATA, META, RGB, build_task, reseal

from egopool.cli.app import main
from egopool.codecs.depth_png import encode_png16
from egopool.codecs.video import read_rgb_frames
from egopool.errors import FormatError, UploadRejectedError
from egopool.meta.digests import parse_digests, sha256_path
from egopool.meta.episodes import raw_episode_row
from egopool.ops.checksums import repair_checksums
from egopool.transfer.pack import pack_episode
from egopool.transfer.sync import sync_task
from egopool.validate import validate_task

sys.path.insert(0, str(Path(__file__).parent / "ops"))
sys.path.insert(0, str(Path(__file__).parent / "transfer"))
from backends import put_in_bucket  # noqa: E402
from transfer_helpers import rebuild_zip  # noqa: E402

DEPTH = "videos/chunk-000/d435_depth/episode-000.mkv"
PNG = "videos/chunk-000/d435_depth/episode-000/000005.png"
RULE = "docs/decisions.md X2 (file_digests)"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_task(tmp_path_factory.mktemp("ref"))


@pytest.fixture(scope="module")
def png_reference(reference: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference with its depth stream as a legacy PNG16 folder (§8), its checksums recorded."""
    from egopool.codecs.depth import read_depth_frames

    task = Path(shutil.copytree(reference, tmp_path_factory.mktemp("png") / reference.name))
    frames = list(read_depth_frames(task / DEPTH))
    (task / DEPTH).unlink()
    folder = task / "videos/chunk-000/d435_depth/episode-000"
    folder.mkdir()
    for i, d in enumerate(frames):
        (folder / f"{i:06d}.png").write_bytes(encode_png16(d))
    info = json.loads((task / "meta/info.json").read_text())
    info["video_extensions"]["d435_depth"] = "png"
    (task / "meta/info.json").write_text(json.dumps(info))
    reseal(task)
    return task


def _overwrite_middle(path: Path, n: int = 64, at: int | None = None) -> None:
    """Overwrite ``n`` bytes of ``path`` at ``at`` (default: its middle)."""
    b = bytearray(path.read_bytes())
    at = len(b) // 2 if at is None else at
    b[at:at + n] = bytes(x ^ 0x5A for x in b[at:at + n])
    path.write_bytes(bytes(b))


def _decodes(path: Path) -> bool:
    from egopool.codecs.depth import read_depth_frames
    from egopool.errors import EgopoolError

    try:
        if path.suffix == ".mp4":
            return len(list(read_rgb_frames(path))) == 12
        if path.suffix == ".mkv":
            return len(list(read_depth_frames(path))) == 12
        from egopool.codecs.depth_png import read_png16_frame

        read_png16_frame(path)
        return True
    except (EgopoolError, ValueError, OSError):
        return False


def _silent_damage(path: Path, n: int = 8) -> bool:
    """Overwrite ``n`` bytes somewhere in the second half of ``path`` such that it still decodes (the damage a
    decoder cannot see); True when such a place was found, else the middle is overwritten and False."""
    good = path.read_bytes()
    for k in range(40):
        at = len(good) // 2 + k * max(1, len(good) // 90)
        if at + n >= len(good) - 16:
            break
        _overwrite_middle(path, n, at)
        if _decodes(path):
            return True
        path.write_bytes(good)
    _overwrite_middle(path, n)
    return False


def _change_value(path: Path, column: str) -> None:
    """A value changed inside the parquet (still decodes, same schema, the other columns as stored)."""
    table = pq.read_table(path)
    i = table.column_names.index(column)
    old = table.column(i)
    new = pa.array([v + 1 for v in old.to_pylist()], type=old.type)
    pq.write_table(table.set_column(i, column, new), path, compression="zstd")


def _damage(task: Path, kind: str) -> str:
    """Damage one file of ``task``; its task-relative path (the meta row for ``meta``)."""
    if kind == "data":
        _change_value(task / DATA, "timestamp")
        return DATA
    if kind == "meta":
        _change_value(task / META, "created_at")
        return META
    rel = {"rgb": RGB, "depth": DEPTH, "png16": PNG}[kind]
    _silent_damage(task / rel)
    return rel


KINDS = ["data", "meta", "rgb", "depth", "png16"]


def _copy(reference: Path, png_reference: Path, kind: str, tmp_path: Path) -> Path:
    src = png_reference if kind == "png16" else reference
    return Path(shutil.copytree(src, tmp_path / "copy" / src.name))


def test_writer_records_every_file_and_the_row_content(reference: Path, png_reference: Path) -> None:
    for task, want in ((reference, {DATA, RGB, DEPTH}), (png_reference, {DATA, RGB} | {
            f"videos/chunk-000/d435_depth/episode-000/{p.name}"
            for p in (png_reference / "videos/chunk-000/d435_depth/episode-000").iterdir()})):
        rec = parse_digests(raw_episode_row(task / META, 1)["file_digests"])
        assert rec is not None and rec.row is not None
        assert set(rec.files) == want
        assert all(rec.files[r] == sha256_path(task / r) for r in want)
        report = validate_task(task)  # PNG16 is legacy: warnings only
        assert report.ok and not report.errors and report.notes == []


@pytest.mark.parametrize("kind", KINDS)
def test_validate_names_the_damaged_file(kind: str, reference: Path, png_reference: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    task = _copy(reference, png_reference, kind, tmp_path)
    rel = _damage(task, kind)
    if kind == "rgb":  # the damage is silent for a decoder: every frame still decodes
        assert _decodes(task / rel)
    report = validate_task(task)
    named = [f for f in report.errors if f.path == str(task / rel)]
    assert len(named) == 1, [f.one_line() for f in report.findings]  # one finding for the file
    hits = [f for f in report.errors if f.rule == RULE]
    if not hits:  # the damage also broke decoding (FFV1 slice / PNG CRC): the decoder's finding names the file
        assert kind in ("depth", "png16"), [f.one_line() for f in report.findings]
        return
    assert hits == named
    if kind == "meta":
        assert "row content hashes to sha256" in hits[0].message and "altered" in hits[0].message
    else:
        good = sha256_path((png_reference if kind == "png16" else reference) / rel)
        assert f"records sha256 {good}" in hits[0].message
        assert f"hash to sha256 {sha256_path(task / rel)}" in hits[0].message
    assert main(["validate", str(task)]) == 1
    assert rel.split("/")[-1] in capsys.readouterr().out
    fast = validate_task(task, fast=True)  # --fast skips the hashing (the row's own content digest is free)
    assert [f.rule for f in fast.errors if f.rule == RULE] == (["docs/decisions.md X2 (file_digests)"]
                                                               if kind == "meta" else [])


@pytest.mark.parametrize("kind", KINDS)
def test_validate_on_a_bucket_names_the_damaged_file(kind: str, reference: Path, png_reference: Path,
                                                     tmp_path: Path, s3_server) -> None:
    task = _copy(reference, png_reference, kind, tmp_path)
    rel = _damage(task, kind)
    uri = put_in_bucket(s3_server, task)
    report = validate_task(uri)
    assert [f.path for f in report.errors] == [f"{uri}/{rel}"], [f.one_line() for f in report.findings]


@pytest.mark.parametrize("kind", ["data", "meta", "rgb", "depth"])
def test_sync_upload_and_server_refuse_a_damaged_file(kind: str, reference: Path, png_reference: Path,
                                                      tmp_path: Path, s3_server) -> None:
    task = _copy(reference, png_reference, kind, tmp_path)
    rel = _damage(task, kind)
    before = {p: p.read_bytes() for p in task.rglob("*") if p.is_file()}
    # sync into a directory and into a bucket: refused, nothing of the episode placed
    dst = tmp_path / "dst" / task.name
    out = sync_task(str(task), str(dst))
    assert [o.status for o in out.outcomes] == ["refused"] and rel in (out.outcomes[0].reason or "")
    assert not (dst / META).exists() and not (dst / DATA).exists()
    (tmp_path / "empty").mkdir()
    bucket_dst = put_in_bucket(s3_server, tmp_path / "empty") + "/" + task.name  # a fresh prefix
    out = sync_task(str(task), bucket_dst)
    assert [o.status for o in out.outcomes] == ["refused"], out.to_dict()
    from egopool.storage import open_store

    assert not [m.key for m in open_store(bucket_dst).list() if "episode-000" in m.key]
    # upload: the client refuses before sending
    with pytest.raises(FormatError) as exc:
        pack_episode(task, 1, tmp_path / "zips")
    assert rel in exc.value.one_line() and ("checksum mismatch" in exc.value.one_line()
                                            or "altered" in exc.value.one_line())
    assert not list((tmp_path / "zips").glob("*.zip"))
    # the server refuses a zip whose manifest matches the damaged bytes (an old client that did not check)
    from egopool.server.verify import verify_upload
    from egopool.server.zipcheck import Limits

    good = pack_episode(reference, 1, tmp_path / "good")
    bad = rebuild_zip(good.path, tmp_path / "bad.zip", replace={rel: (task / rel).read_bytes()})
    with pytest.raises(UploadRejectedError) as rej:
        verify_upload(bad, tmp_path / "staging", Limits(max_ratio=1e6),  # the re-written test parquet is sparse
                      form_index=None, client_key=None, token_id=None)
    assert rej.value.status == 422 and rel.split("/")[-1] in str(rej.value)
    assert {p: p.read_bytes() for p in task.rglob("*") if p.is_file()} == before  # nothing repaired or moved
    assert sha256_path(reference / rel) != sha256_path(task / rel)  # the good copy is untouched


def _strip_digests(task: Path) -> None:
    table = pq.read_table(task / META)
    pq.write_table(table.drop_columns(["file_digests"]), task / META, compression="zstd")


@pytest.mark.parametrize("backend", ["dir", "bucket"])
def test_an_old_task_validates_with_one_note_and_repair_records_its_checksums(
        backend: str, reference: Path, tmp_path: Path, s3_server) -> None:
    task = Path(shutil.copytree(reference, tmp_path / "old" / reference.name))
    _strip_digests(task)
    where = str(task) if backend == "dir" else put_in_bucket(s3_server, task)
    report = validate_task(where)
    assert report.ok and report.findings == [] and len(report.notes) == 1
    assert "1 of 1 episode(s) record no checksums" in report.notes[0] and "repair checksums" in report.notes[0]
    dry = repair_checksums(where, dry_run=True)
    assert [e.status for e in dry.episodes] == ["would record"] and set(dry.episodes[0].files) == {DATA, RGB, DEPTH}
    assert validate_task(where).notes  # a dry run writes nothing
    done = repair_checksums(where)
    assert [e.status for e in done.episodes] == ["recorded"] and done.backup is not None
    report = validate_task(where)
    assert report.ok and report.findings == [] and report.notes == []
    again = repair_checksums(where)
    assert again.already == 1 and again.episodes == []
    if backend == "dir":  # and now a damaged file is caught
        assert _silent_damage(task / RGB)
        assert [(f.rule, f.path) for f in validate_task(task).errors] == [(RULE, str(task / RGB))]


def test_digests_the_caller_computed_are_taken_instead_of_hashing_again(reference: Path, tmp_path: Path,
                                                                         monkeypatch) -> None:
    """`validate_task(digests=...)` (the server's extraction, docs/decisions.md U33): a given sha256 is the one
    compared with the row's record (a wrong one is reported as that file's mismatch), and a given file is not
    read again; the server's verification hashes each staged file once."""
    import egopool.meta.digests as digests_mod
    from egopool.server.verify import verify_upload
    from egopool.server.zipcheck import Limits

    task = tmp_path / "t" / reference.name
    shutil.copytree(reference, task)
    data = (task / DATA).resolve()
    hashed: list[str] = []
    real = digests_mod.sha256_path
    monkeypatch.setattr(digests_mod, "sha256_path", lambda p: hashed.append(str(p)) or real(p))
    assert validate_task(task, digests={data: sha256_path(data)}).ok
    assert hashed and str(data) not in hashed
    bad = validate_task(task, digests={data: "0" * 64})
    assert [f.rule for f in bad.findings if f.severity == "error"] == [RULE]
    assert "0" * 12 in bad.findings[0].message or DATA.split("/")[-1] in bad.findings[0].path
    hashed.clear()
    zipped = pack_episode(reference, 1, tmp_path / "zips")
    (tmp_path / "staging" / "task").mkdir(parents=True)
    verify_upload(zipped.path, tmp_path / "staging" / "task", Limits(max_ratio=1e6), form_index=None, client_key=None,
                  token_id=None)
    assert not [p for p in hashed if "/staging/" in p]  # the extraction's sha256 served the checksum check
