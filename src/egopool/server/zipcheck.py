"""Checking an uploaded zip before anything in the store changes (file_format.md §9).

Two passes over the spooled zip:

1. :func:`inspect_zip` reads only the central directory (at most ``max_members`` entries, checked
   on the end record before :mod:`zipfile` parses it) and the manifest: every member
   name must be in the §9 arcname grammar (:func:`egopool.transfer.manifest.parse_arcname`),
   in UTF-8 (flag bit 11, or plain ASCII: a CP437 name is refused, never guessed), with no
   control or format character,
   absolute path, no ``..``, no backslash, no dot segment, no symlink or directory entry,
   no duplicate and no twin that differs only in case; every member's bytes, from its local
   header to the end of its data, belong to it alone (overlapping members are the
   quoted-overlap zip bomb, CPython #109858: refused here whatever the Python); sizes
   declared by the zip must stay under the per-member and total limits, a member larger
   than ``ratio_floor_bytes`` may not expand more than ``max_ratio`` times and the whole
   zip not more than ``max_zip_ratio`` times (zip bombs). The manifest must list exactly
   the other members.
2. :func:`extract_verified` streams each member into the staging directory at the path
   its parsed arcname gives (never the raw name), counting and hashing as it goes; a
   member larger than declared, a CRC error or a digest that differs from the manifest
   stops the import.

What decoding a parquet file or a video may cost is bounded by :mod:`egopool.server.media_bounds`.

Every refusal is an :class:`~egopool.errors.UploadRejectedError` with the HTTP status and
a reason code; a 413 names the limit and the ``egopool serve`` option that raises it
(:data:`OPTIONS`). No message names a path of the server's disk.
"""

from __future__ import annotations

import hashlib
import shutil
import stat
import struct
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import FormatError, UploadRejectedError
from ..transfer.manifest import MANIFEST_NAME, Arcname, Manifest, MemberRecord, parse_arcname

__all__ = ["OPTIONS", "Limits", "ZipPlan", "extract_verified", "inspect_zip", "too_large"]

_BLOCK = 1 << 20
_MiB = 1 << 20
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, then name and extra field lengths at offset 26
_UTF8_FLAG = 0x800  # general purpose bit 11: the name is UTF-8 (APPNOTE 4.4.4)


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
        Declared uncompressed size of all members (default 8 GiB): the staging disk one upload uses.
    max_ratio:
        Largest uncompressed/compressed ratio of a member above ``ratio_floor_bytes``, and
        largest decoded/file ratio of a parquet file above it.
    ratio_floor_bytes:
        Members up to this size are not ratio-checked (small JSON compresses well), 1 MiB.
    max_zip_ratio:
        Largest ratio of all members' uncompressed size to the zip's size (default 10; egopool
        stores videos and zstd parquet, so its zips unpack to about 1x), when they unpack to
        more than ``zip_ratio_floor_bytes`` (64 MiB).
    max_decode_bytes:
        Decoded parquet bytes one import holds at a time (default 256 MiB; the writer's row
        groups are at most 32 MiB): every row group, and the columns without lists over the
        whole file (the validator reads those whole).
    max_members:
        Members in one zip (fixed: an episode has one zip member per stream plus five files).
    max_json_bytes:
        Manifest, ``info.json``, ``stats.json``, ``tasks.jsonl`` each (they are read whole; fixed).
    free_reserve_bytes:
        Disk space that must stay free after extraction (else 507).
    """

    max_request_bytes: int = 8 << 30
    max_member_bytes: int = 8 << 30
    max_total_bytes: int = 8 << 30
    max_ratio: float = 100.0
    ratio_floor_bytes: int = 1 << 20
    max_zip_ratio: float = 10.0
    zip_ratio_floor_bytes: int = 64 << 20
    max_decode_bytes: int = 256 << 20
    max_members: int = 256
    max_json_bytes: int = 64 << 20
    free_reserve_bytes: int = 256 << 20


#: The ``egopool serve`` option that raises each limit (named in every 413).
OPTIONS = {"max_request_bytes": "--max-upload-mb", "max_member_bytes": "--max-upload-mb",
           "max_total_bytes": "--max-upload-mb", "max_ratio": "--max-ratio", "max_zip_ratio": "--max-zip-ratio",
           "max_decode_bytes": "--max-decode-mb"}


def too_large(reason: str, message: str, limit: str) -> UploadRejectedError:
    """A 413 whose message ends with the ``egopool serve`` option that raises ``limit`` (a :class:`Limits` field)."""
    return UploadRejectedError(413, reason, f"{message}; raise the limit with `egopool serve {OPTIONS[limit]}`")


def _mib(n: float) -> str:
    return f"{n / _MiB:.0f} MiB" if n >= _MiB else f"{n / _MiB:.2f} MiB"


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
    if not info.flag_bits & _UTF8_FLAG and not name.isascii():
        raise _reject(400, "name_encoding", f"member name {ascii(name)} is not UTF-8: zip flag bit 11 is unset and "
                                            "it holds non-ASCII bytes (a CP437 or local code page name); pack it "
                                            "with a zip writer that stores names in UTF-8 (egopool pack does)")
    control = next((c for c in name if unicodedata.category(c) in ("Cc", "Cf")), None)
    if control is not None:  # a line break, tab, NUL, bidi override or zero-width mark: never in a §9 name
        raise _reject(400, "bad_name", f"member name {ascii(name)} holds the control character "
                                       f"U+{ord(control):04X}; §9 names are paths of printable characters")
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


def _check_ranges(path: Path, infos: list[zipfile.ZipInfo], directory: int) -> None:
    """Every member's ``[local header, end of data)`` is its own: disjoint, and before the central directory.

    The range is read from the member's local header (30 bytes + name + extra field) and the
    central directory's compressed size, never from what a decompressor does with it: a member
    whose data holds another member's header (the quoted-overlap zip bomb) is refused before
    one byte is inflated.

    Raises
    ------
    UploadRejectedError
        400 ``overlapping_members``, ``bad_local_header``.
    """
    ranges: list[tuple[int, int, str]] = []
    with open(path, "rb") as fh:
        for info in infos:
            fh.seek(info.header_offset)
            head = fh.read(_LOCAL_HEADER.size)
            if len(head) < _LOCAL_HEADER.size or head[:4] != b"PK\x03\x04":
                raise _reject(400, "bad_local_header", f"member {info.filename!r}: no local file header where the "
                                                       "central directory says it starts; truncated or forged zip")
            _, name_len, extra_len = _LOCAL_HEADER.unpack(head)
            end = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len + info.compress_size
            ranges.append((info.header_offset, end, info.filename))
    ranges.sort()
    for (_, end, name), (start, _, other) in zip(ranges, ranges[1:], strict=False):
        if start < end:
            raise _reject(400, "overlapping_members", f"members {name!r} and {other!r} overlap in the zip (bytes "
                                                      f"{start}..{end}); each member's bytes belong to it alone "
                                                      "(quoted-overlap zip bomb?)")
    if ranges and ranges[-1][1] > directory:
        raise _reject(400, "overlapping_members", f"member {ranges[-1][2]!r} runs into the central directory; "
                                                  "truncated or forged zip")


_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record (APPNOTE 4.3.16)
_EOCD64 = struct.Struct("<4sQ2H2L4Q")  # its zip64 form (4.3.14), found through the locator (4.3.15)
_LOCATOR64 = struct.Struct("<4sLQL")
#: Central directory bytes one member may take: 46 fixed + name + extra field + comment (an egopool
#: entry: ~100); the directory is parsed whole into memory before a member is looked at.
_CD_ENTRY_MAX = 46 + 1024


def _central_directory(path: Path, size: int) -> tuple[int, int] | None:
    """(members, bytes) the central directory declares, from the end records alone (nothing parsed);
    None when there is no end record (:mod:`zipfile` then says what is wrong)."""
    with open(path, "rb") as fh:
        start = max(0, size - _EOCD.size - 0xFFFF)  # the record, then a comment of at most 64 KiB
        fh.seek(start)
        tail = fh.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < _EOCD.size:
            return None
        _, _, _, _, count, cd_size, _, _ = _EOCD.unpack_from(tail, at)
        if (count == 0xFFFF or cd_size == 0xFFFFFFFF) and at >= _LOCATOR64.size:
            sig, _, offset, _ = _LOCATOR64.unpack_from(tail, at - _LOCATOR64.size)
            if sig == b"PK\x06\x07" and offset + _EOCD64.size <= size:
                fh.seek(offset)
                rec = fh.read(_EOCD64.size)
                if rec[:4] == b"PK\x06\x06":
                    count, cd_size = _EOCD64.unpack(rec)[7:9]
    return count, cd_size


def inspect_zip(path: Path, limits: Limits) -> ZipPlan:
    """Check the zip's structure and read its manifest (pass 1, nothing extracted).

    Raises
    ------
    UploadRejectedError
        400 not a zip / empty / truncated, overlapping members, a name not in UTF-8, hostile or
        unknown member names, missing members, several episodes, a bad or mismatching
        manifest; 413 a size or ratio limit.
    """
    size = path.stat().st_size if path.exists() else 0
    if size == 0:
        raise _reject(400, "not_a_zip", "the file part is empty (0 bytes); send the episode zip")
    directory = _central_directory(path, size)
    if directory is not None and (directory[0] > limits.max_members
                                  or directory[1] > limits.max_members * _CD_ENTRY_MAX):
        raise _reject(413, "too_many_members", f"the zip's central directory declares {directory[0]} members in "
                                               f"{directory[1]} bytes, the limit is {limits.max_members} members "
                                               f"in {limits.max_members * _CD_ENTRY_MAX} bytes (an episode zip "
                                               "holds its streams and five files, §9)")
    try:
        zf = zipfile.ZipFile(path)
    except UnicodeDecodeError as exc:  # a name flagged UTF-8 (bit 11) that is not
        raise _reject(400, "name_encoding", f"a member name is flagged UTF-8 but is not ({exc.reason} at byte "
                                            f"{exc.start}); store names in UTF-8") from exc
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise _reject(400, "not_a_zip", f"the upload is not a readable zip ({exc}); truncated?") from exc
    except OSError as exc:
        raise _reject(400, "not_a_zip", f"the upload is not a readable zip ({exc.strerror}); truncated?") from exc
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_members:
            raise _reject(413, "too_many_members", f"{len(infos)} members, limit {limits.max_members} (an episode "
                                                   "zip holds its streams and five files, §9)")
        _check_ranges(path, infos, getattr(zf, "start_dir", size))
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
                raise too_large("member_too_large", f"member {info.filename!r} declares {info.file_size} bytes, "
                                                    f"the limit is {limits.max_member_bytes}", "max_member_bytes")
            total += info.file_size
            if total > limits.max_total_bytes:
                raise too_large("too_large_uncompressed", f"members declare more than {limits.max_total_bytes} "
                                                          "bytes uncompressed, the limit", "max_total_bytes")
            if info.file_size > limits.ratio_floor_bytes and \
                    info.file_size > limits.max_ratio * max(info.compress_size, 1):
                raise too_large("compression_ratio", f"member {info.filename!r} expands "
                                                     f"{info.file_size / max(info.compress_size, 1):.0f}x, the "
                                                     f"limit is {limits.max_ratio:g}x (zip bomb?)", "max_ratio")
            if arc.kind == "manifest":
                manifest_info = info
            else:
                parsed.append((info, arc))
        if total > limits.zip_ratio_floor_bytes and total > limits.max_zip_ratio * size:
            raise too_large("zip_ratio", f"the zip's {size} bytes unpack to {_mib(total)} ({total / size:.0f}x), "
                                         f"the limit is {limits.max_zip_ratio:g}x above "
                                         f"{_mib(limits.zip_ratio_floor_bytes)} (egopool zips store videos and "
                                         "parquet: about 1x; zip bomb?)", "max_zip_ratio")
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
                raise _reject(413, "member_too_large", f"{info.filename} declares {info.file_size} bytes, the "
                                                       f"limit of a meta JSON file is {limits.max_json_bytes}")
        try:
            raw = zf.read(manifest_info)
            manifest = Manifest.from_bytes(raw)
        except FormatError as exc:
            raise _reject(400, "bad_manifest", exc.message) from exc
        except (zipfile.BadZipFile, ValueError, EOFError) as exc:
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
        400 a corrupt member (CRC, truncated), one longer than it declares or one that differs from the
        manifest; 507 not enough disk space.
    """
    free = shutil.disk_usage(dest if dest.exists() else dest.parent).free
    if free < plan.total_bytes + limits.free_reserve_bytes:
        raise _reject(507, "insufficient_storage", f"the server has {free} bytes free, the upload needs "
                                                   f"{plan.total_bytes}")
    expected = plan.manifest.by_name()
    out: dict[str, MemberRecord] = {}
    made: set[Path] = set()  # directories created (a mkdir per member costs more than its small file)
    with zipfile.ZipFile(path) as zf:
        for info, _arc in plan.infos:
            name = info.filename
            target = dest.joinpath(*name.split("/"))  # the validated arcname: never '..', never absolute
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            h = hashlib.sha256()
            size = 0
            try:
                with zf.open(info) as src, open(target, "wb") as fh:
                    while block := src.read(_BLOCK):
                        size += len(block)
                        if size > info.file_size:
                            raise _reject(400, "member_too_large", f"member {name!r} is longer than it declares")
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
