"""``egopool pack``: one episode -> one upload zip (file_format.md §9).

The zip is a single-episode slice whose arcnames are the pooled paths relative to the
task: the episode's videos, its data parquet, its one-row ``meta/episodes`` file, and
the task-level ``meta/info.json``, ``meta/stats.json``, ``meta/tasks.jsonl``; last comes
the manifest (:mod:`egopool.transfer.manifest`). Never a dotfile or a §11 file. A legacy
multi-row episodes shard is sliced to this episode's row, stored under the new
``episode-`` name; legacy ``file-`` names of data/videos are stored under ``episode-``
names too (§2, §9: the arcname grammar is the v1.1.2 one).

Packing streams: every member is copied in 1 MiB blocks, hashed on the way, into a
dot-temp zip that is published with ``os.replace`` when complete, so a 4 GB episode packs
in bounded memory and a killed packer leaves no half zip under the final name. Members
are stored with a fixed timestamp and order, so packing the same episode twice gives the
same bytes (videos, parquet are stored, JSON deflated). ``reencode_hevc`` re-encodes RGB
MP4 streams to HEVC (hvc1, CRF 30, §9); depth is never re-encoded and the episode row's
``video_codec`` stays as recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import socket
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import __version__
from .._safe_read import open_regular, read_parquet
from .._atomic import publish, temp_path_for
from ..codecs.video import reencode_rgb, video_info
from ..errors import EpisodeNotFoundError, FormatError, LayoutError, StorageError
from ..layout import EpisodeFiles, TaskLayout, find_episode_files
from ..meta.episodes import read_episode_row
from ..meta.info import DEFAULT_DATA_PATH, DEFAULT_EPISODES_PATH, DEFAULT_VIDEO_PATH, read_info
from ..identity import ClientIdentity, derive_client_key, host_id_of_key
from ..meta.digests import DIGEST_COLUMN, Mismatch, mismatch_line, parse_digests, row_digest, same_file
from ..meta.episodes import raw_episode_row
from ..registry import Registry, sha256_file, task_key
from .manifest import MANIFEST_NAME, Manifest, MemberRecord, video_arcname

__all__ = ["PackedEpisode", "Packer", "client_identity", "pack_episode", "pack_episodes", "zip_name"]

_BLOCK = 1 << 20
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed: the same episode packs to the same bytes
#: ``progress(done_bytes, total_bytes, what)`` while packing.
PackProgress = Callable[[int, int, str], None]


@dataclass
class PackedEpisode:
    """One packed episode.

    Attributes
    ----------
    path:
        The zip.
    task:
        Source task name.
    index:
        Global N (1-based).
    chunk, file:
        ``(c, f)``; ``file`` is what the upload form's ``episode_index`` carries (§9).
    size:
        Bytes of the zip.
    sha256:
        Hex digest of the zip.
    manifest:
        The manifest written into it (member sizes and digests, ``episode_digest``).
    reencoded:
        Arcnames of videos re-encoded to HEVC.
    """

    path: Path
    task: str
    index: int
    chunk: int
    file: int
    size: int
    sha256: str
    manifest: Manifest
    reencoded: list[str] = field(default_factory=list)

    @property
    def episode_digest(self) -> str:
        """The manifest's ``episode_digest``."""
        return self.manifest.episode_digest

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``egopool pack --json``)."""
        return {"zip": str(self.path), "task": self.task, "episode_index": self.index, "chunk": self.chunk,
                "file": self.file, "size": self.size, "sha256": self.sha256,
                "episode_digest": self.episode_digest, "reencoded": self.reencoded,
                "members": [m.to_dict() for m in self.manifest.members]}


def zip_name(task: str, chunk: int, file: int) -> str:
    """``<task>_chunk-{c:03d}_ep{f:06d}.zip``: the §2 upload suffix plus the chunk (f repeats per chunk)."""
    return f"{task}_chunk-{chunk:03d}_ep{file:06d}.zip"


def client_identity(task_dir: str | Path, registry: bool | str | Path | Registry | None = True) -> ClientIdentity:
    """The client identity of the recordings root holding ``task_dir`` (docs/decisions.md U11).

    The root's registry's :meth:`~egopool.registry.Registry.identity` (a copied root gets its
    own identity there, with a notice); without a registry, the key
    :func:`~egopool.identity.derive_client_key` gives the root on this machine (the key a
    registry stores on first use, so both agree while the root stays where it is).

    Raises
    ------
    RegistryError
        ``pipeline.db`` cannot be read or written.
    """
    reg = registry if isinstance(registry, Registry) else Registry.for_task(task_dir) if registry is True \
        else Registry(registry) if registry else None
    if reg is not None:
        return reg.identity()
    key = derive_client_key(Path(os.path.abspath(task_dir)).parent)
    return ClientIdentity(key, host_id_of_key(key), socket.gethostname())


class _HashingWriter:
    """Counts and hashes what is written through it."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink, self.size, self.hash = sink, 0, hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.sink.write(data)
        self.size += len(data)
        self.hash.update(data)


def _check_templates(task_dir: Path, info: dict[str, Any]) -> None:
    for key, default in (("data_path", DEFAULT_DATA_PATH), ("video_path", DEFAULT_VIDEO_PATH),
                         ("episodes_path", DEFAULT_EPISODES_PATH)):
        if info.get(key, default) != default:
            raise FormatError(f"{key} is {info[key]!r}, but upload arcnames follow {default!r} (§9)",
                              path=task_dir / "meta" / "info.json",
                              hint="run `egopool migrate TASK --split-episodes` to switch to the v1.1.2 names first")


def _episode(task_dir: Path, layout: TaskLayout, index: int, info: dict[str, Any]) -> EpisodeFiles:
    if isinstance(index, bool) or not isinstance(index, int) or index < 1:
        raise LayoutError(f"episode {index!r} refused: global N is 1-based (episode-000 is N=1)",
                          hint="pass the global N shown by `egopool ls TASK`")
    g = find_episode_files(task_dir, layout, index, info.get("video_extensions"))  # N's own paths (issue 12 F)
    if g is None:
        raise EpisodeNotFoundError(task_dir, index)
    if g.data is None or g.meta is None:  # not complete
        raise FormatError(f"episode {index} is not complete (no {'data parquet' if g.data is None else 'meta row'}): "
                          "it is still being recorded or was interrupted", path=task_dir,
                          hint="finish or delete it; `egopool validate TASK` shows what is missing")
    for key, p in g.videos.items():
        if p.is_dir():
            raise FormatError(f"episode {index}: stream {key!r} is a legacy PNG16 depth sequence, which the "
                              "upload zip grammar (§9) cannot carry", path=p,
                              hint="re-encode it into a depth video before uploading")
    codecs = read_episode_row(g.meta, index).get("video_codec")
    missing = sorted(k for k in codecs if k not in g.videos) if isinstance(codecs, dict) else []
    if missing:  # a zip without them is an incomplete episode the server refuses after the upload
        raise FormatError(f"episode {index}: video_codec lists stream(s) {missing} but their video file is missing",
                          path=task_dir, hint="restore the video(s) or delete the episode; `egopool validate TASK` "
                                              "shows what is missing")
    return g


def _row_slice(path: Path, index: int) -> bytes:
    """N's row of a legacy multi-row shard as a one-row parquet (every stored column kept, §6.1)."""
    try:
        table = read_parquet(path, what="episodes shard")
        kept = table.filter(pc.equal(table.column("episode_index"), index))
    except FormatError:
        raise
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise FormatError(f"cannot read episodes shard: {exc}", path=path) from exc
    if kept.num_rows != 1:
        raise FormatError(f"legacy shard holds {kept.num_rows} rows with episode_index={index}, expected 1",
                          path=path, hint="run `egopool validate TASK`")
    buf = io.BytesIO()
    pq.write_table(kept, buf, compression="zstd")
    return buf.getvalue()


def _is_reencodable(key: str, path: Path, info: dict[str, Any]) -> bool:
    """An RGB MP4 slot (in ``cameras``) that is not HEVC already; depth never (§9)."""
    cams = info.get("cameras")
    if path.suffix != ".mp4" or not isinstance(cams, dict) or key not in cams:
        return False
    probe = video_info(path)
    return probe["codec"] != "hevc" and not str(probe["pix_fmt"]).startswith("gray")


def pack_episode(task_dir: str | Path, index: int, out_dir: str | Path, *, reencode_hevc: bool = False,
                 host_id: str | None = None, hostname: str | None = None,
                 progress: PackProgress | None = None) -> PackedEpisode:
    """Pack episode N of a task into ``out_dir/<task>_chunk-CCC_epFFFFFF.zip`` (file_format.md §9).

    Parameters
    ----------
    task_dir:
        The task directory.
    index:
        Global 1-based N (as ``egopool ls`` shows).
    out_dir:
        Where the zip goes (created); an existing zip of the same name is replaced atomically.
    reencode_hevc:
        Re-encode RGB MP4 streams to HEVC (hvc1, CRF 30) inside the zip; depth is never re-encoded.
    host_id, hostname:
        Client identity for the manifest (default: :func:`client_identity`).
    progress:
        ``progress(done_bytes, total_bytes, what)`` after each block.

    Returns
    -------
    PackedEpisode

    Raises
    ------
    LayoutError
        N < 1.
    EpisodeNotFoundError
        No episode N.
    FormatError
        The episode is incomplete, a stream is a PNG16 directory, the task's path templates
        are not the v1.1.2 ones, or a file cannot be read.
    CodecError
        A video could not be re-encoded.
    StorageError
        The zip cannot be written (disk full...); nothing is left under the final name.
    """
    return pack_episodes(task_dir, [index], out_dir, reencode_hevc=reencode_hevc, host_id=host_id,
                         hostname=hostname, progress=progress)[0]


def pack_episodes(task_dir: str | Path, indices: Sequence[int], out_dir: str | Path, *, reencode_hevc: bool = False,
                  host_id: str | None = None, hostname: str | None = None,
                  registry: bool | str | Path | Registry | None = True,
                  progress: PackProgress | None = None) -> list[PackedEpisode]:
    """:func:`pack_episode` for several N (one zip each), checking every N before packing any.

    ``registry`` decides where the client identity comes from when ``host_id`` is not given
    (:func:`client_identity`).
    """
    root = Path(task_dir)
    packer = Packer(root, out_dir, reencode_hevc=reencode_hevc, host_id=host_id, hostname=hostname,
                    registry=registry)
    chosen = [packer.episode(n) for n in dict.fromkeys(indices)]
    if not chosen:
        raise LayoutError("no episode given", hint="pass one or more global N, e.g. `egopool pack TASK 3 -o DIR`")
    return [packer.pack_files(g, progress) for g in chosen]


class Packer:
    """Packs episodes of one task into ``out_dir``, reading and checking the task once (file_format.md §9).

    ``meta/info.json`` is parsed, its path templates checked (§9 arcnames are the v1.1.2 ones) and
    the layout built once, in the constructor; each :meth:`pack` then finds N's own paths (no scan
    of the task) and snapshots the task files (``info.json``, ``stats.json``, ``tasks.jsonl``) into
    that zip as they are at that moment. ``egopool upload`` keeps one per run (docs/decisions.md U22).

    Parameters
    ----------
    task_dir:
        The task directory.
    out_dir:
        Where the zips go (created when missing, on the first :meth:`pack`).
    reencode_hevc, host_id, hostname, registry:
        As :func:`pack_episodes`.
    durable:
        True (``egopool pack``): each zip is fsynced and published with ``os.replace`` and a
        directory fsync, so it survives a power loss. False (``egopool upload``'s private spool,
        decisions.md U12): the zip is a temporary file removed once sent, so neither fsync is
        made (a killed run's spool is swept by the next run; nothing reads it but this run).
    info:
        The task's ``info.json`` already read (:func:`~egopool.meta.info.read_info`), or None.

    Raises
    ------
    FormatError
        ``info.json`` unreadable, or path templates that are not the v1.1.2 ones.
    RegistryError
        ``pipeline.db`` cannot be read or written (the client identity, on the first pack when
        ``host_id`` is None).
    """

    def __init__(self, task_dir: str | Path, out_dir: str | Path, *, reencode_hevc: bool = False,
                 host_id: str | None = None, hostname: str | None = None,
                 registry: bool | str | Path | Registry | None = True, durable: bool = True,
                 info: dict[str, Any] | None = None) -> None:
        self.root = Path(task_dir)
        self.info = read_info(self.root) if info is None else info
        _check_templates(self.root, self.info)
        self.layout = TaskLayout.from_info(self.root, self.info)
        self.task = task_key(self.root)
        self.out = Path(out_dir)
        self.reencode = reencode_hevc
        self.durable = durable
        self.host_id, self.hostname, self._registry = host_id, hostname, registry
        self._out_made = False

    def episode(self, index: int) -> EpisodeFiles:
        """N's files, checked packable (complete, no PNG16 stream, every ``video_codec`` stream present).

        Raises
        ------
        LayoutError, EpisodeNotFoundError, FormatError
            As :func:`pack_episode`.
        """
        return _episode(self.root, self.layout, index, self.info)

    def pack(self, index: int, progress: PackProgress | None = None) -> PackedEpisode:
        """Pack N into ``out_dir/<task>_chunk-CCC_epFFFFFF.zip`` (:func:`pack_episode`'s errors;
        ``out_dir`` is created on the first pack)."""
        return self.pack_files(self.episode(index), progress)

    def pack_files(self, g: EpisodeFiles, progress: PackProgress | None = None) -> PackedEpisode:
        """Pack the episode :meth:`episode` returned."""
        if self.host_id is None:  # on the first pack: nothing is written for a refused N
            ident = client_identity(self.root, self._registry)
            self.host_id, self.hostname = ident.host_id, self.hostname or ident.hostname
        self.hostname = self.hostname or socket.gethostname()
        if not self._out_made:
            with StorageError.guard(self.out, action="cannot create the output directory"):
                self.out.mkdir(parents=True, exist_ok=True)
            self._out_made = True
        return _pack_one(self.root, self.task, self.info, g, self.out, self.reencode, self.host_id, self.hostname,
                         progress, self.durable)


def _pack_one(root: Path, task: str, info: dict[str, Any], g: EpisodeFiles, out: Path, reencode: bool,
              host_id: str, hostname: str, progress: PackProgress | None, durable: bool = True) -> PackedEpisode:
    c, f = g.chunk, g.file
    assert g.data is not None and g.meta is not None
    # (arcname, source file or bytes); videos sorted by image_key, then data, row, task files
    plan: list[tuple[str, Path | bytes]] = []
    for key in sorted(g.videos):
        p = g.videos[key]
        plan.append((video_arcname(c, f, key, p.suffix.lstrip(".")), p))
    plan.append((f"data/chunk-{c:03d}/episode-{f:03d}.parquet", g.data))
    row_name = f"meta/episodes/chunk-{c:03d}/episode-{f:03d}.parquet"
    plan.append((row_name, _row_slice(g.meta, g.index) if g.meta_is_shard else g.meta))
    expect = _recorded(root, g)
    for name in ("meta/info.json", "meta/stats.json", "meta/tasks.jsonl"):
        p = root / name
        if p.is_file():
            try:
                plan.append((name, p.read_bytes()))  # a snapshot: writers replace these atomically
            except OSError as exc:
                raise FormatError(f"cannot read: {exc.strerror or exc}", path=p) from exc
    total = sum(len(s) if isinstance(s, bytes) else s.stat().st_size for _, s in plan)
    final = out / zip_name(task, c, f)
    tmp = temp_path_for(final)
    members: list[MemberRecord] = []
    reencoded: list[str] = []
    done = 0
    try:
        with StorageError.guard(final, action="cannot write the upload zip"), \
                zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
            for name, src in plan:
                source_sha = None
                if isinstance(src, Path) and name.startswith("videos/") and reencode and \
                        _is_reencodable(name.split("/")[2], src, info):
                    source_sha = sha256_file(src)
                    enc = temp_path_for(out / Path(name).name)
                    try:
                        reencode_rgb(src, enc, codec="hevc", crf=30)
                        rec = _add(zf, name, enc, lambda n: None)
                    finally:
                        with contextlib.suppress(FileNotFoundError):
                            enc.unlink()
                    reencoded.append(name)
                    members.append(MemberRecord(name, rec.size, rec.sha256, source_sha, "hevc"))
                    _check_member(root, name, source_sha, expect)
                    done += src.stat().st_size
                else:
                    base = done

                    def tick(n: int, base: int = base) -> None:
                        if progress is not None:
                            progress(base + n, total, f"episode {g.index}")

                    members.append(_add(zf, name, src, tick))
                    if name != row_name:
                        _check_member(root, name, members[-1].sha256, expect)
                    done += members[-1].size
                if progress is not None:
                    progress(done, total, f"episode {g.index}")
            manifest = Manifest(task, g.index, c, f, host_id, hostname, __version__, time.time(), members)
            _add(zf, MANIFEST_NAME, manifest.to_bytes(), lambda n: None)
        if durable:
            publish(tmp, final)
        else:  # a spool zip (Packer): renamed into place, never synced
            os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return PackedEpisode(final, task, g.index, c, f, final.stat().st_size, sha256_file(final), manifest, reencoded)


def _recorded(root: Path, g: EpisodeFiles) -> dict[str, str] | None:
    """The digests N's row records (task-relative path -> sha256), None when it records none; a row whose content
    does not match its own digest is refused (docs/decisions.md X4).

    Raises
    ------
    FormatError
        The row's digests are damaged, or the row was altered after it was written.
    """
    assert g.meta is not None
    raw = raw_episode_row(g.meta, g.index)
    try:
        rec = parse_digests(raw.get(DIGEST_COLUMN))
    except ValueError as exc:
        raise FormatError(f"episode {g.index}'s row: {exc}", path=g.meta,
                          hint="restore the row from another copy; nothing was sent") from exc
    if rec is None:
        return None
    if rec.row is not None and row_digest(raw) != rec.row:
        raise FormatError(f"episode {g.index}'s row content hashes to sha256 {row_digest(raw)}, the row records "
                          f"{rec.row}: it was altered after it was written", path=g.meta,
                          hint="restore the row from another copy (a backup, a sync peer); nothing was sent")
    out = {same_file(k): v for k, v in rec.files.items()}
    out.update({"previous:" + same_file(k): v for k, v in rec.previous.items()})
    return out


def _check_member(root: Path, name: str, sha: str | None, expect: dict[str, str] | None) -> None:
    """Refuse a file whose bytes are not those its row records (the zip is removed by the caller's cleanup).

    Raises
    ------
    FormatError
        One line naming the file, the expected and the actual digest.
    """
    want = expect.get(same_file(name)) if expect is not None else None
    before = expect.get("previous:" + same_file(name)) if expect is not None else None
    if want is not None and sha is not None and want != sha and before != sha:
        raise FormatError(mismatch_line(Mismatch(name, want, sha), where=str(root)),
                          hint="nothing was sent; restore the file from another copy, then upload again")


def _add(zf: zipfile.ZipFile, name: str, src: Path | bytes, tick: Callable[[int], None]) -> MemberRecord:
    """Stream one member into the zip, hashing it; JSON deflated, everything else stored."""
    zi = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
    zi.compress_type = zipfile.ZIP_DEFLATED if name.endswith((".json", ".jsonl")) else zipfile.ZIP_STORED
    zi.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
    fh = None
    if not isinstance(src, bytes):  # opened first: a FIFO or directory is refused before the member starts
        try:
            fh = open_regular(src, what="episode file")
        except FormatError as exc:
            raise FormatError(f"cannot read: {exc.message}", path=src,
                              hint="the episode changed while packing, or the file is damaged; run "
                                   "`egopool validate TASK`") from exc
    with zf.open(zi, "w", force_zip64=True) as dst:
        w = _HashingWriter(dst)
        if fh is None:
            assert isinstance(src, bytes)
            w.write(src)
        else:
            with fh:
                while block := fh.read(_BLOCK):
                    w.write(block)
                    tick(w.size)
    return MemberRecord(name, w.size, w.hash.hexdigest())



