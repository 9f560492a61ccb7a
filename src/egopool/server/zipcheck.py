"""Checking an uploaded zip before anything in the store changes (file_format.md §9).

Two passes over the spooled zip:

1. :func:`inspect_zip` reads only the central directory and the manifest: every member
   name must be in the §9 arcname grammar (:func:`egopool.transfer.manifest.parse_arcname`),
   with no absolute path, no ``..``, no backslash, no dot segment, no symlink or directory
   entry, no duplicate and no twin that differs only in case; sizes declared by the zip
   must stay under the per-member and total limits, and a member larger than
   ``ratio_floor_bytes`` may not expand more than ``max_ratio`` times (zip bombs). The
   manifest must list exactly the other members.
2. :func:`extract_verified` streams each member into the staging directory at the path
   its parsed arcname gives (never the raw name), counting and hashing as it goes; a
   member larger than declared, a CRC error or a digest that differs from the manifest
   stops the import.

Every refusal is an :class:`~egopool.errors.UploadRejectedError` with the HTTP status and
a reason code.
"""

from __future__ import annotations

import hashlib
import shutil
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import FormatError, UploadRejectedError
from ..transfer.manifest import MANIFEST_NAME, Arcname, Manifest, MemberRecord, parse_arcname

__all__ = ["Limits", "ZipPlan", "check_parquet_bounds", "extract_verified", "inspect_zip"]

_BLOCK = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Size limits of one upload (bytes unless said otherwise).

    Attributes
    ----------
    max_request_bytes:
        Whole HTTP request body (default 8 GiB); larger is 413 before the body is read.
    max_member_bytes:
        Declared uncompressed size of one member (default 8 GiB).
    max_total_bytes:
        Declared uncompressed size of all members (default 8 GiB).
    max_ratio:
        Largest uncompressed/compressed ratio of a member above ``ratio_floor_bytes``.
    ratio_floor_bytes:
        Members up to this size are not ratio-checked (small JSON compresses well), 1 MiB.
    max_members:
        Members in one zip.
    max_json_bytes:
        Manifest, ``info.json``, ``stats.json``, ``tasks.jsonl`` each (they are read whole).
    free_reserve_bytes:
        Disk space that must stay free after extraction (else 507).
    """

    max_request_bytes: int = 8 << 30
    max_member_bytes: int = 8 << 30
    max_total_bytes: int = 8 << 30
    max_ratio: float = 100.0
    ratio_floor_bytes: int = 1 << 20
    max_members: int = 256
    max_json_bytes: int = 64 << 20
    free_reserve_bytes: int = 256 << 20


@dataclass
class ZipPlan:
    """What :func:`inspect_zip` found.

    Attributes
    ----------
    infos:
        The members other than the manifest, with their parsed arcnames.
    chunk, file:
        The episode's ``(c, f)`` shared by every episode member.
    manifest:
        The parsed manifest.
    total_bytes:
        Declared uncompressed size of every member.
    """

    infos: list[tuple[zipfile.ZipInfo, Arcname]]
    chunk: int
    file: int
    manifest: Manifest
    total_bytes: int


def _reject(status: int, reason: str, message: str) -> UploadRejectedError:
    return UploadRejectedError(status, reason, message)


def _check_name(info: zipfile.ZipInfo) -> Arcname:
    name = info.filename
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise _reject(400, "absolute_path", f"member {name!r} has an absolute path")
    parts = name.split("/")
    if ".." in parts or "\\" in name and ".." in name.split("\\"):
        raise _reject(400, "path_traversal", f"member {name!r} climbs out of the task with '..'")
    if "\\" in name or "\x00" in name or "" in parts:
        raise _reject(400, "bad_name", f"member {name!r}: backslash, NUL or empty path segment")
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise _reject(400, "symlink", f"member {name!r} is a symbolic link")
    if info.is_dir():
        raise _reject(400, "directory_member", f"member {name!r} is a directory entry; §9 zips hold files only")
    if any(p.startswith(".") for p in parts):
        raise _reject(400, "dotfile", f"member {name!r} is a dotfile; dotfiles never go into an upload (§9)")
    if info.flag_bits & 0x1:
        raise _reject(400, "encrypted", f"member {name!r} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise _reject(400, "compression", f"member {name!r} uses compression method {info.compress_type}; "
                                          "only stored and deflate are accepted")
    arc = parse_arcname(name)
    if arc is None:
        raise _reject(400, "wrong_arcname", f"member {name!r} is not a pooled path of §9 (videos/, data/, "
                                            "meta/episodes/ of one episode, meta/info.json, stats.json, tasks.jsonl)")
    return arc


def inspect_zip(path: Path, limits: Limits) -> ZipPlan:
    """Check the zip's structure and read its manifest (pass 1, nothing extracted).

    Raises
    ------
    UploadRejectedError
        400 not a zip / truncated, hostile or unknown member names, missing members,
        several episodes, a bad or mismatching manifest; 413 a size or ratio limit.
    """
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise _reject(400, "not_a_zip", f"the upload is not a readable zip ({exc}); truncated?") from exc
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_members:
            raise _reject(413, "too_many_members", f"{len(infos)} members, limit {limits.max_members}")
        seen: dict[str, str] = {}
        parsed: list[tuple[zipfile.ZipInfo, Arcname]] = []
        manifest_info = None
        total = 0
        for info in infos:
            if info.filename in seen:
                raise _reject(400, "duplicate_member", f"member {info.filename!r} appears twice")
            twin = seen.get(info.filename.casefold())
            if twin is not None:
                raise _reject(400, "case_twin", f"members {twin!r} and {info.filename!r} differ only in case")
            seen[info.filename] = seen[info.filename.casefold()] = info.filename
            arc = _check_name(info)
            if info.file_size > limits.max_member_bytes:
                raise _reject(413, "member_too_large", f"member {info.filename!r} declares {info.file_size} bytes, "
                                                       f"limit {limits.max_member_bytes}")
            total += info.file_size
            if total > limits.max_total_bytes:
                raise _reject(413, "too_large_uncompressed", f"members declare more than {limits.max_total_bytes} "
                                                             "bytes uncompressed")
            if info.file_size > limits.ratio_floor_bytes and \
                    info.file_size > limits.max_ratio * max(info.compress_size, 1):
                raise _reject(413, "compression_ratio", f"member {info.filename!r} expands "
                                                        f"{info.file_size / max(info.compress_size, 1):.0f}x, "
                                                        f"limit {limits.max_ratio:.0f}x (zip bomb?)")
            if arc.kind == "manifest":
                manifest_info = info
            else:
                parsed.append((info, arc))
        kinds = [a.kind for _, a in parsed]
        for kind, what in (("info", "meta/info.json"), ("data", "the data parquet"),
                           ("row", "the meta/episodes row file")):
            if kind not in kinds:
                raise _reject(400, f"missing_{kind}", f"the zip has no {what} (§9)")
        if kinds.count("data") > 1 or kinds.count("row") > 1:
            raise _reject(400, "several_episodes", "the zip holds more than one episode; §9 zips hold one")
        cf = {(a.chunk, a.file) for _, a in parsed if a.chunk is not None}
        if len(cf) != 1:
            raise _reject(400, "several_episodes", f"members name several episodes {sorted(cf)}; §9 zips hold one")
        chunk, file = cf.pop()
        assert chunk is not None and file is not None
        if manifest_info is None:
            raise _reject(400, "missing_manifest", f"the zip has no {MANIFEST_NAME}",)
        for info in [manifest_info] + [i for i, a in parsed if a.kind in ("info", "stats", "tasks")]:
            if info.file_size > limits.max_json_bytes:
                raise _reject(413, "member_too_large", f"{info.filename} declares {info.file_size} bytes, limit "
                                                       f"{limits.max_json_bytes}")
        try:
            raw = zf.read(manifest_info)
            manifest = Manifest.from_bytes(raw)
        except FormatError as exc:
            raise _reject(400, "bad_manifest", exc.message) from exc
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise _reject(400, "corrupt_member", f"{MANIFEST_NAME} cannot be read ({exc})") from exc
    listed = {m.name for m in manifest.members}
    present = {i.filename for i, _ in parsed}
    if listed != present:
        extra, missing = sorted(present - listed), sorted(listed - present)
        raise _reject(400, "manifest_mismatch", f"the manifest does not list the zip's members (unlisted: {extra}, "
                                                f"absent: {missing})")
    if (manifest.chunk, manifest.file) != (chunk, file):
        raise _reject(400, "manifest_mismatch", f"the manifest says chunk {manifest.chunk} file {manifest.file}, "
                                                f"the members chunk-{chunk:03d} episode-{file:03d}")
    return ZipPlan(parsed, chunk, file, manifest, total)


def extract_verified(path: Path, plan: ZipPlan, dest: Path, limits: Limits) -> dict[str, MemberRecord]:
    """Stream every member into ``dest`` (a staging task directory) and check it against the manifest.

    Returns
    -------
    dict
        arcname -> what was extracted (size, sha256; the manifest's ``source_sha256``).

    Raises
    ------
    UploadRejectedError
        400 a corrupt member (CRC, truncated) or one that differs from the manifest; 413 a
        member longer than declared; 507 not enough disk space.
    """
    free = shutil.disk_usage(dest if dest.exists() else dest.parent).free
    if free < plan.total_bytes + limits.free_reserve_bytes:
        raise _reject(507, "insufficient_storage", f"the server has {free} bytes free, the upload needs "
                                                   f"{plan.total_bytes}")
    expected = plan.manifest.by_name()
    out: dict[str, MemberRecord] = {}
    with zipfile.ZipFile(path) as zf:
        for info, _arc in plan.infos:
            name = info.filename
            target = dest.joinpath(*name.split("/"))  # the validated arcname: never '..', never absolute
            target.parent.mkdir(parents=True, exist_ok=True)
            h = hashlib.sha256()
            size = 0
            try:
                with zf.open(info) as src, open(target, "wb") as fh:
                    while block := src.read(_BLOCK):
                        size += len(block)
                        if size > info.file_size:
                            raise _reject(413, "member_too_large", f"member {name!r} is longer than it declares")
                        h.update(block)
                        fh.write(block)
            except (zipfile.BadZipFile, EOFError, ValueError) as exc:
                raise _reject(400, "corrupt_member", f"member {name!r} cannot be read ({exc})") from exc
            want = expected[name]
            got = h.hexdigest()
            if size != want.size or got != want.sha256:
                raise _reject(400, "manifest_mismatch", f"member {name!r} has {size} bytes sha256 {got[:12]}..., "
                                                        f"the manifest says {want.size} bytes {want.sha256[:12]}...")
            out[name] = MemberRecord(name, size, got, want.source_sha256, want.reencoded)
    return out


def check_parquet_bounds(path: Path, limits: Limits, *, rows: int | None = None) -> None:
    """Refuse a parquet bomb from its footer alone, before any page of it is decoded.

    Compressed pages (zstd, gzip) expand like a zip bomb and the zip's own ratio limit never
    sees them: the column chunks' declared uncompressed size may be at most ``max_ratio``
    times the file (files up to ``ratio_floor_bytes`` decoded are exempt). ``rows``: the
    row count the file must hold (1 for the §6.1 single-row ``meta/episodes`` file), so
    a row file repeating its row millions of times (dictionary encoded: a few KiB on
    disk, GiB decoded) is refused before the validator reads it whole.

    Raises
    ------
    UploadRejectedError
        422 ``validation`` an unreadable footer, ``meta_rows`` another row count; 413 ``compression_ratio``.
    """
    import pyarrow.parquet as pq

    name = "/".join(path.parts[-4:])
    try:
        meta = pq.ParquetFile(str(path)).metadata
    except Exception as exc:  # pyarrow raises several types for a broken footer
        raise _reject(422, "validation", f"{name}: cannot read the parquet footer ({exc})") from exc
    if rows is not None and meta.num_rows != rows:
        raise _reject(422, "meta_rows", f"{name} holds {meta.num_rows} rows; a per-episode meta file holds "
                                         f"exactly {rows} (file_format.md §6.1)")
    declared = sum(meta.row_group(i).column(j).total_uncompressed_size
                   for i in range(meta.num_row_groups) for j in range(meta.num_columns))
    size = path.stat().st_size
    if declared > limits.ratio_floor_bytes and declared > limits.max_ratio * max(size, 1):
        raise _reject(413, "compression_ratio", f"{name} expands {declared / max(size, 1):.0f}x when decoded, "
                                                f"limit {limits.max_ratio:.0f}x (parquet bomb?)")
