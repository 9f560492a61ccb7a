"""``egopool sync SRC DST``: copy a task between a directory and a bucket, episode by episode (decisions O15, O16).

An episode is its files (file_format.md §2): the videos, the data parquet and the
``meta/episodes`` row. For each committed episode N of SRC (its row exists, §9 / U5):

- DST has N committed with the same files, byte for byte (sha256): **skipped**;
- DST has N committed with other content, or N is being written there by someone else:
  **refused**, naming N (never overwritten, never renumbered: a copy keeps its N so that
  the two places name one episode alike);
- otherwise **copied**, with the destination's commit order: every file first, verified by
  sha256 after it is written, the row last. Into a bucket N is claimed first
  (:func:`egopool.publish.claim`) exactly as the pooling server does, so a
  server publishing into the same task and a sync never share an N; into a directory the
  work runs under the task lock (DESIGN §5) and files go to a temporary name, then renamed.

Then ``info.json`` (union, latest wins) and ``stats.json`` (the episode's blocks) are merged
as the writer and the server merge them. A new destination task gets SRC's ``tasks.jsonl``
and ``info.json`` after its first row. An interrupted run is resumed by running it again:
committed episodes are skipped by content, a half-copied one is finished (directory: files
with the source's bytes are taken as they are) or undone first (bucket: this machine's own
journals of the task are rolled back or forward, :func:`~egopool.publish.recover`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._atomic import atomic_write_bytes, exclusive_lock, fsync_dir, fsync_file, task_lock
from .._state import state_dir
from ..errors import EgopoolError, FormatError
from ..layout import EpisodeFiles, TaskLayout, find_episode_files, list_task_episodes
from ..meta import markers
from ..meta.digests import DIGEST_COLUMN, Mismatch, mismatch_line, parse_digests, row_digest, same_file
from ..meta.info import merge_info, read_info, write_info
from ..meta.retired import retired_key
from ..meta.stats import episode_stats_file
from ..registry import sha256_file
from ..publish import Publication, claim, finish, journal_doc, journal_key, new_owner_id, recover
from ..storage import ObjectPath, as_path, require_conditional_writes
from ..storage.bucket import Bucket, is_bucket_uri
from ..storage.s3_store import S3Store
from ..write.task_meta import merge_task_meta

__all__ = ["SyncOutcome", "SyncReport", "sync_task"]

#: ``info.json`` keys that describe the layout: SRC and DST must agree on them
_LAYOUT_KEYS = ("chunks_size", "data_path", "video_path", "episodes_path")
#: keys a copy does not merge as declarations (the destination owns them)
_OWNED = ("format", *_LAYOUT_KEYS, "task_name", "created_at", "fps")


@dataclass
class SyncOutcome:
    """What happened to one episode: ``status`` is ``copied``, ``skipped``, ``refused``, ``uncommitted`` (files
    in SRC without their row: not copied, O25) or (``--dry-run``) ``would_copy``; ``bytes`` copied; ``reason``
    for a refusal or an uncommitted group."""

    index: int
    status: str
    bytes: int = 0
    reason: str | None = None


@dataclass
class SyncReport:
    """The run: source, destination, one outcome per source episode file group (ascending N)."""

    src: str
    dst: str
    dry_run: bool
    outcomes: list[SyncOutcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing was refused."""
        return not any(o.status == "refused" for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        count = {s: sum(1 for o in self.outcomes if o.status == s) for s in ("copied", "skipped", "refused",
                                                                             "would_copy", "uncommitted")}
        return {"src": self.src, "dst": self.dst, "dry_run": self.dry_run, "ok": self.ok, **count,
                "bytes": sum(o.bytes for o in self.outcomes), "episodes": [o.__dict__ for o in self.outcomes]}


def _split_task_uri(uri: str) -> tuple[Bucket, str]:
    """``s3://b/p/task`` -> (bucket ``s3://b/p``, ``task``).

    Raises
    ------
    FormatError
        An empty, ``.`` or ``..`` component (``s3://b/p//task``): refused as every reader refuses it,
        so that the task written is the one the URI names (docs/decisions.md O22).
    EgopoolError
        No task component, or a bucket name under 3 characters.
    """
    path = as_path(uri)
    if not isinstance(path, ObjectPath) or not path.key:
        raise EgopoolError(f"{uri!r} names no task", hint="write s3://BUCKET/PREFIX/TASK")
    return Bucket(str(path.parent)), path.name


def _rel(root: Any, p: Any) -> str:
    return str(p)[len(str(root).rstrip("/")) + 1:]


def _episode_rels(root: Any, g: EpisodeFiles) -> list[str]:
    """Task-relative names of every file of the episode. A legacy PNG16 depth stream is a directory of frames
    (file_format.md §8; a stream path without a suffix): its files are listed, each copied as a file."""
    out: list[str] = []
    for p in g.paths():
        if p.suffix:
            out.append(_rel(root, p))
        elif isinstance(p, Path):
            out.extend(_rel(root, f) for f in sorted(p.rglob("*")) if f.is_file() and not f.name.startswith("."))
        else:
            out.extend(_rel(root, p / key) for key, _size in p.walk_files() if not key.rsplit("/", 1)[-1].startswith("."))
    return sorted(out)


def _pause(stage: str) -> None:
    """``EGOPOOL_SYNC_PAUSE=placed``: stop with every file of an episode but its row written, write
    ``<state>/sync-paused-placed`` and sleep until it is removed (the tests' crash seam, like the server's)."""
    if os.environ.get("EGOPOOL_SYNC_PAUSE") == stage:
        marker = state_dir() / f"sync-paused-{stage}"
        marker.write_text(str(os.getpid()))
        while marker.exists():
            time.sleep(0.05)


def _owner_id() -> str:
    """This machine's sync owner id (journals it leaves in a bucket; kept under the per-user state dir)."""
    base = state_dir()
    base.mkdir(parents=True, exist_ok=True)
    p = base / "sync-owner-id"
    if not p.is_file():
        atomic_write_bytes(p, ("sync-" + new_owner_id() + "\n").encode())
    return p.read_text().strip()


@contextlib.contextmanager
def _dest_guard(dst: str) -> Iterator[None]:
    """One sync per destination on this machine (a second one waits): the own-journal sweep is then safe."""
    base = state_dir() / "sync-locks"
    base.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(base / (hashlib.sha1(dst.encode()).hexdigest()[:20] + ".lock")):
        yield


class _Source:
    """The committed episodes of SRC and a local file for each of their files."""

    def __init__(self, src: str, tmp: Path) -> None:
        self.uri = src
        self.root = as_path(src)
        self.info = read_info(self.root)
        self.layout = TaskLayout.from_info(self.root, self.info)
        self.tmp = tmp
        self.bucket: Bucket | None = None
        self.task = ""
        #: The episode being copied: its row's recorded digests (same_file path -> sha256), checked by fetch (X4).
        self.expect: dict[str, str] = {}
        self.previous: dict[str, str] = {}
        if is_bucket_uri(src):
            self.bucket, self.task = _split_task_uri(src)

    def episodes(self) -> list[EpisodeFiles]:
        """Every episode file group of SRC, committed or not (an uncommitted one is reported, not copied)."""
        return list_task_episodes(self.root, self.layout, committed_only=False)

    def tasks_jsonl(self) -> bytes | None:
        p = self.root / "meta" / "tasks.jsonl"
        return p.read_bytes() if p.exists() else None

    def sha(self, rel: str) -> str | None:
        """A recorded sha256 without reading the bytes (bucket metadata), else None."""
        return self.bucket.sha256_of(f"{self.task}/{rel}") if self.bucket is not None else None

    def fetch(self, rel: str) -> tuple[Path, str]:
        """A local file with the bytes of ``rel`` and their sha256 (checked against a recorded one).

        Raises
        ------
        _SourceDamaged
            The bytes read are not those the bucket recorded (a damaged object).
        """
        if self.bucket is None:
            assert isinstance(self.root, Path)  # not an s3:// URI: a directory
            p = self.root / rel
            return p, self._expected(rel, sha256_file(p))
        dest = self.tmp / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.bucket.download(f"{self.task}/{rel}", dest)
        got, recorded = sha256_file(dest), self.sha(rel)
        if recorded is not None and recorded != got:
            dest.unlink()
            raise _SourceDamaged(f"the source's {self.bucket.url(self.task + '/' + rel)}: its bytes hash to "
                                 f"{got[:12]}..., the sha256 recorded with it is {recorded[:12]}...",
                                 hint="the object is damaged; restore it from another copy")
        try:
            return dest, self._expected(rel, got)
        except _SourceDamaged:
            dest.unlink()
            raise

    def _expected(self, rel: str, got: str) -> str:
        """``got`` when it is the sha256 the episode's row records for ``rel`` (or records none).

        Raises
        ------
        _SourceDamaged
            The bytes are not those the row records: one line naming the file and both digests.
        """
        want = self.expect.get(same_file(rel))
        if want is not None and want != got and self.previous.get(same_file(rel)) != got:
            raise _SourceDamaged(mismatch_line(Mismatch(rel, want, got), where=self.uri.rstrip("/")),
                                 hint="nothing was copied; the destination is untouched")
        return got

    def release(self, path: Path) -> None:
        if self.bucket is not None:
            path.unlink(missing_ok=True)


class _SourceDamaged(EgopoolError):
    """An episode of SRC whose data parquet does not read: refused, never committed in DST (O23)."""


def _stats_of(source: _Source, data: Path, rel: str, info: dict[str, Any], n: int) -> dict[str, Any]:
    """The episode's ``stats.json`` blocks from its data parquet (a local copy of SRC's ``rel``).

    Raises
    ------
    _SourceDamaged
        The parquet does not read: named by its place in SRC, not by the local copy.
    """
    try:
        return episode_stats_file(data, info)
    except FormatError as exc:
        raise _SourceDamaged(f"the source's {source.uri.rstrip('/')}/{rel} does not read ({exc.message}); "
                             f"restore it in the source or delete episode {n} there") from exc


def _check_row(source: _Source, g: EpisodeFiles) -> None:
    """The source's ``meta/episodes`` row of N reads as parquet and names N: the row is the commit object, so a
    truncated or foreign one is never copied (issue 24: a truncated row was copied and the run exited 0).

    Raises
    ------
    _SourceDamaged
        The row does not read, or holds no row for N.
    """
    from .._safe_read import read_parquet

    assert g.meta is not None
    rel = _rel(source.root, g.meta)
    path, _ = source.fetch(rel)
    try:
        table = read_parquet(path, what="meta/episodes row")
        indices = table.column("episode_index").to_pylist() if "episode_index" in table.column_names else []
    except FormatError as exc:
        raise _SourceDamaged(f"the source's {source.uri.rstrip('/')}/{rel} does not read ({exc.message}); "
                             f"restore it in the source or delete episode {g.index} there") from exc
    finally:
        source.release(path)
    if g.index not in indices:
        raise _SourceDamaged(f"the source's {source.uri.rstrip('/')}/{rel} holds no row of episode {g.index}",
                             hint=f"restore it in the source or delete episode {g.index} there")
    raw = table.to_pylist()[indices.index(g.index)]
    try:
        rec = parse_digests(raw.get(DIGEST_COLUMN))
    except ValueError as exc:
        raise _SourceDamaged(f"the source's {source.uri.rstrip('/')}/{rel}: {exc}",
                             hint="restore the row in the source from another copy") from exc
    if rec is not None and rec.row is not None and row_digest(raw) != rec.row:
        raise _SourceDamaged(f"the source's {source.uri.rstrip('/')}/{rel}: the row's content hashes to sha256 "
                             f"{row_digest(raw)}, the row records {rec.row} (altered after it was written)",
                             hint="nothing was copied; restore the row in the source from another copy")
    source.expect = {same_file(k): v for k, v in rec.files.items()} if rec is not None else {}
    source.previous = {same_file(k): v for k, v in rec.previous.items()} if rec is not None else {}


def _check_layouts(src: dict[str, Any], dst: dict[str, Any] | None, dst_uri: str) -> None:
    if dst is None:
        return
    for k in _LAYOUT_KEYS:
        if src.get(k) != dst.get(k):
            raise FormatError(f"{dst_uri}: info.json {k} is {dst.get(k)!r}, the source's {src.get(k)!r}; episodes "
                              "cannot be copied between tasks laid out differently", hint="copy into a new task")


def sync_task(src: str, dst: str, *, dry_run: bool = False,
              progress: Callable[[int, int], None] | None = None) -> SyncReport:
    """Copy the committed episodes of task SRC into task DST (module docstring).

    Parameters
    ----------
    src, dst:
        A task directory or ``s3://bucket/prefix/task`` each (endpoint and credentials from the
        AWS environment, :class:`~egopool.storage.S3Settings`).
    dry_run:
        Decide every episode (copy / skip / refuse) without writing anything.
    progress:
        ``progress(done, total)`` after each episode.

    Returns
    -------
    SyncReport
        One outcome per committed source episode; ``ok`` False when one was refused.

    Raises
    ------
    FormatError
        SRC is not a task, or SRC and DST are laid out differently (``chunks_size``, templates).
    ObjectStoreError
        A bucket cannot be reached.
    """
    report = SyncReport(src, dst, dry_run)
    with tempfile.TemporaryDirectory(prefix="egopool-sync-") as tmp, _dest_guard(dst):
        source = _Source(src, Path(tmp))
        dest: _BucketDest | _DirDest = _BucketDest(dst) if is_bucket_uri(dst) else _DirDest(Path(dst))
        _check_layouts(source.info, dest.info(), dst)
        if not dry_run:
            dest.recover()
        groups = source.episodes()
        for i, g in enumerate(groups):
            if not g.committed:  # no meta/episodes row: not an episode yet (§9, U5); named, never copied (O25)
                report.outcomes.append(SyncOutcome(g.index, "uncommitted", reason=(
                    f"episode {g.index} of the source has files but no meta/episodes row (being written, or "
                    "left by a crash): not copied; run the sync again once its row is written")))
                continue
            try:
                report.outcomes.append(_one(source, dest, g, dry_run))
            except _SourceDamaged as exc:  # undone by copy: nothing of it stays in DST; the next ones go on
                report.outcomes.append(SyncOutcome(g.index, "refused", reason=exc.one_line()))
            if progress is not None:
                progress(i + 1, len(groups))
    return report


def _one(source: _Source, dest: _BucketDest | _DirDest, g: EpisodeFiles, dry_run: bool) -> SyncOutcome:
    n = g.index
    source.expect, source.previous = {}, {}
    rels = _episode_rels(source.root, g)
    held = dest.committed_files(n, source)
    if held is not None:
        if set(held) == set(rels) and all(held[r] == _src_sha(source, r) for r in rels):
            return SyncOutcome(n, "skipped")
        return SyncOutcome(n, "refused", reason=f"the destination holds another episode {n} (other files or bytes); "
                                                "it is never overwritten")
    busy = dest.busy(n, source, rels)
    if busy:
        return SyncOutcome(n, "refused", reason=busy)
    _check_row(source, g)
    if dry_run:
        return SyncOutcome(n, "would_copy")
    return dest.copy(n, source, g, rels)


def _src_sha(source: _Source, rel: str) -> str:
    recorded = source.sha(rel)
    if recorded is not None:
        return recorded
    path, sha = source.fetch(rel)
    source.release(path)
    return sha


class _BucketDest:
    """DST in a bucket: claim, PUT + read back, row last, merge (O11-O13 of the server, owner = this machine)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.bucket, self.task = _split_task_uri(uri)
        self.bucket.ensure_bucket()
        self.store = S3Store(self.bucket.uri)
        require_conditional_writes(self.store, "sync into a bucket")
        self.owner = _owner_id()
        self._info: dict[str, Any] | None = None
        got = self.bucket.get(f"{self.task}/meta/info.json")
        if got is not None:
            try:
                self._info = json.loads(got[0].decode("utf-8"))
            except ValueError as exc:
                raise FormatError(f"{self.bucket.url(self.task + '/meta/info.json')} is not JSON ({exc})") from exc

    def info(self) -> dict[str, Any] | None:
        return self._info

    def recover(self) -> None:
        recover(self.store, self.owner, task=self.task)

    def _layout(self, source: _Source) -> TaskLayout:
        return TaskLayout.from_info(Path(self.task), self._info or source.info)

    def committed_files(self, n: int, source: _Source) -> dict[str, str] | None:
        layout = self._layout(source)
        if not self.bucket.exists(layout.episodes_file(n).as_posix()):
            return None
        c, f = layout.chunk_file(n)
        out: dict[str, str] = {}
        keys = [layout.data_file(n).as_posix(), layout.episodes_file(n).as_posix()]
        keys += [o.key for o in self.bucket.list_objects(f"{self.task}/videos/chunk-{c:03d}/")
                 if o.key.rsplit("/", 1)[-1].startswith(f"episode-{f:03d}.")]
        for k in keys:
            sha = self.bucket.sha256_of(k)
            if sha is None and self.bucket.exists(k):
                h = hashlib.sha256()
                for piece in self.bucket.stream(k):  # 1 MiB at a time: a video is never held whole
                    h.update(piece)
                sha = h.hexdigest()
            if sha is not None:
                out[k[len(self.task) + 1:]] = sha
        return out

    def busy(self, n: int, source: _Source, rels: list[str]) -> str | None:
        if self.bucket.exists(journal_key(self.task, n)):
            return (f"episode {n} is being published into the destination by another writer (its journal "
                    f"{self.bucket.url(journal_key(self.task, n))} exists); run the sync again once it has finished")
        return None

    def copy(self, n: int, source: _Source, g: EpisodeFiles, rels: list[str]) -> SyncOutcome:
        layout = self._layout(source)
        row_rel = _rel(source.root, g.meta)
        keys = [f"{self.task}/{r}" for r in rels if r != row_rel]
        row_key = f"{self.task}/{row_rel}"
        new = self._info is None
        decl = {k: v for k, v in source.info.items() if k not in _OWNED}
        doc = journal_doc(self.task, n, self.owner, [*keys, row_key], row_key, declarations=decl,
                          new_info=source.info if new else None,
                          tasks_jsonl=(source.tasks_jsonl() or b"").decode("utf-8") if new else None)
        if layout.episodes_file(n).as_posix() != row_key or not claim(self.store, self.task, n, doc):
            if self.store.exists(f"{self.task}/{retired_key(n)}"):  # the claim withdrew: N was deleted there
                return SyncOutcome(n, "refused", reason=f"episode {n} was deleted from the destination and its "
                                                        "number is never reused; a sync cannot bring it back (copy "
                                                        "it into a new task, or `egopool edit merge` one)")
            return SyncOutcome(n, "refused", reason=f"episode {n} was claimed in the destination by another writer; "
                                                    "run the sync again once it has finished")
        size = 0
        try:
            data_local: Path | None = None
            for r in rels:
                if r == row_rel:
                    continue
                path, sha = source.fetch(r)
                size += path.stat().st_size
                self.bucket.upload(path, f"{self.task}/{r}", sha256=sha)
                back = hashlib.sha256()
                for piece in self.bucket.stream(f"{self.task}/{r}"):
                    back.update(piece)
                if back.hexdigest() != sha:
                    raise EgopoolError(f"{self.bucket.url(self.task + '/' + r)} reads back other bytes than were "
                                       "sent", hint="run the sync again")
                if g.data is not None and r == _rel(source.root, g.data):
                    data_local = path
                else:
                    source.release(path)
            blocks = _stats_of(source, data_local, _rel(source.root, g.data), source.info, n) \
                if data_local is not None and g.data is not None else {}
            if data_local is not None:
                source.release(data_local)
            _pause("placed")
            row_path, row_sha = source.fetch(row_rel)
            size += row_path.stat().st_size
            self.bucket.put(row_key, row_path.read_bytes(), if_none_match=True, sha256=row_sha)  # the commit
            source.release(row_path)
        except BaseException:
            with contextlib.suppress(EgopoolError):  # unreachable: the next run undoes it (its own journal)
                if not self.bucket.exists(row_key):
                    self.bucket.delete([*keys, journal_key(self.task, n)])
            raise
        tasks_jsonl = source.tasks_jsonl() if new else None
        problem = finish(self.store, [Publication(self.task, n, [], (Path(), row_key), {**decl, "total_episodes": n},
                                                  blocks, new_info=source.info if new else None,
                                                  tasks_jsonl=tasks_jsonl)], lambda s: None)
        if new:
            got = self.bucket.get(f"{self.task}/meta/info.json")
            self._info = json.loads(got[0].decode("utf-8")) if got else None
        return SyncOutcome(n, "copied", size, problem)


class _DirDest:
    """DST a directory: under the task lock, files to temporary names, verified, renamed; the row last."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def info(self) -> dict[str, Any] | None:
        return read_info(self.root) if (self.root / "meta" / "info.json").is_file() else None

    def recover(self) -> None:
        return None  # a half-copied episode is finished in place (busy / copy take files with the source's bytes)

    def committed_files(self, n: int, source: _Source) -> dict[str, str] | None:
        info = self.info()
        if info is None:
            return None
        g = find_episode_files(self.root, TaskLayout.from_info(self.root, info), n, info.get("video_extensions"))
        if g is None or not g.committed:
            return None
        return {_rel(self.root, p): sha256_file(p) for p in g.paths()}

    def busy(self, n: int, source: _Source, rels: list[str]) -> str | None:
        if self.root.is_dir() and n in markers.live_reservations(self.root):
            return f"episode {n} is being recorded into the destination"
        for r in rels:
            p = self.root / r
            if p.exists() and sha256_file(p) != _src_sha(source, r):
                return (f"the destination holds an uncommitted {r} with other bytes (a writer's episode {n} in "
                        "progress or its leftovers); it is never overwritten")
        return None

    def copy(self, n: int, source: _Source, g: EpisodeFiles, rels: list[str]) -> SyncOutcome:
        row_rel = _rel(source.root, g.meta)
        self.root.mkdir(parents=True, exist_ok=True)
        size = 0
        with task_lock(self.root):
            if self.committed_files(n, source) is not None or self.busy(n, source, rels):
                return SyncOutcome(n, "refused", reason=f"episode {n} appeared in the destination meanwhile")
            decl = {k: v for k, v in source.info.items() if k not in _OWNED}
            decl["total_episodes"] = n
            blocks: dict[str, Any] = {}
            placed: list[Path] = []
            try:
                for r in [*[r for r in rels if r != row_rel], row_rel]:  # the row last: its rename is the commit
                    if r == row_rel:
                        _pause("placed")
                    path, sha = source.fetch(r)
                    final = self.root / r
                    final.parent.mkdir(parents=True, exist_ok=True)
                    tmp = final.with_name(f".{final.name}.sync-tmp")
                    shutil.copyfile(path, tmp)
                    fsync_file(tmp)
                    source.release(path)
                    if sha256_file(tmp) != sha:
                        tmp.unlink()
                        raise EgopoolError(f"{final}: the copy reads back other bytes than the source's {r}",
                                           hint="run the sync again")
                    if g.data is not None and r == _rel(source.root, g.data):  # read before anything commits
                        try:
                            blocks = _stats_of(source, tmp, r, merge_info(self.info() or source.info, decl), n)
                        except _SourceDamaged:
                            tmp.unlink()
                            raise
                    size += tmp.stat().st_size
                    os.replace(tmp, final)
                    placed.append(final)
                    fsync_dir(final.parent)
            except _SourceDamaged:
                for p in placed:  # this episode's files, uncommitted: not left as a damaged group
                    p.unlink(missing_ok=True)
                raise
            info = self.info()
            if info is None:
                atomic_write_bytes(self.root / "meta" / "tasks.jsonl", source.tasks_jsonl() or b"")
                write_info(self.root, source.info)
                info = source.info
            problem = None
            try:
                merge_task_meta(self.root, n, decl, blocks, TaskLayout.from_info(self.root, info))
            except EgopoolError as exc:
                problem = exc.one_line()
        return SyncOutcome(n, "copied", size, problem)

