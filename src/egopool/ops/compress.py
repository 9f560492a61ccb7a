"""``egopool compress``: bring a task's FFV1 depth to the normative 12-bit log HEVC (file_format.md §3, §8).

A recorder that cannot hold the HEVC preset in real time records depth losslessly (FFV1 ``gray16le``,
``.mkv``); this brings the task to the spec's 12-bit gray HEVC log code (``.mp4``) afterwards.
``video_extensions`` is task-level (§3), so the switch is for every episode of the task at once:
a reader or ``egopool validate`` sees either every depth stream FFV1 or every one HEVC, never a mix
(docs/decisions.md R30–R35).

Steps, under the task lock (taken without waiting: a task being recorded is refused):

1. plan: every committed episode's file of every depth key that ``video_extensions`` declares ``mkv``
   must be FFV1 depth (else one-line refusal naming the file; nothing is changed);
2. journal ``meta/.compress.json`` (a dotfile: every reader ignores it, §11);
3. encode each stream into a hidden ``.episode-NNN.mp4.compressing`` beside it and check it (frame
   count, holes exact, error bound: :func:`~egopool.codecs.depth_transcode.transcode_depth`); the
   journal records each finished stream, so a resumed run re-uses it;
4. place: rename each hidden output to ``episode-NNN.mp4`` beside its ``.mkv`` (readers still take
   the declared ``.mkv``, R32);
5. **commit**: ``info.json`` rewritten atomically with those keys' ``video_extensions`` = ``mp4``;
6. roll forward, idempotently: per episode the row's ``video_codec`` entry (and ``drop_stats``
   ``<key>_clipped_count`` when the log code clipped pixels, decision 22) is rewritten, the ``.mkv``
   removed and the registry's file list (size, sha256) updated; then the journal is removed.

A run killed before step 5 leaves the task all-FFV1 and valid; the next run re-plans (episodes
recorded meanwhile included) and re-uses the finished streams. Killed after step 5, the task is
all-HEVC (``info.json`` is the commit record) and the next run finishes step 6. RGB streams are
never touched.

``EGOPOOL_COMPRESS_PAUSE=<stage>`` (``encoded``: one stream encoded; ``placed``: every output in
place, before the commit; ``committed``: right after it; ``finishing``: one episode rolled forward)
stops a run there, writes ``meta/.compress-paused-<stage>`` and sleeps: the seam the crash tests
SIGKILL it at. Unset in production.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import atomic_write_bytes, atomic_write_json, fsync_dir, task_lock, task_read_lock
from .._safe_read import read_json, read_parquet
from ..codecs.depth import LogDepthCodec, probe_depth
from ..codecs.depth_transcode import TranscodeCancelled, TranscodeResult, transcode_depth
from ..codecs.video import video_info
from ..errors import (CodecError, EgopoolError, FormatError, LockError, OperationError, RegistryError,
                      StorageError)
from ..layout import TaskLayout, list_task_episodes
from ..meta import markers
from ..meta.drop_stats import clipped_key
from ..meta.episodes import EPISODE_COLUMNS, read_episode_row
from ..meta.info import read_info, write_info
from ..registry import Registry, file_record, task_key
from ._common import Progress, open_registry, rel
from .migrate import refuse_during_migration

__all__ = ["JOURNAL", "CompressReport", "StreamJob", "compress_task"]

#: The journal of a compress under way (task-relative; a dotfile, ignored by readers, §11).
JOURNAL = "meta/.compress.json"
_PAUSE_ENV = "EGOPOOL_COMPRESS_PAUSE"
_HIDDEN = ".compressing"  # suffix of an output before it is placed (not a `.tmp`: writers would sweep it)
_T = TypeVar("_T")


@dataclass
class StreamJob:
    """One depth stream of the plan, and what became of it.

    Attributes
    ----------
    index, key:
        Global N and image_key.
    src, dst:
        Task-relative paths of the FFV1 ``.mkv`` and of the HEVC ``.mp4`` that replaces it.
    frames:
        Frames (the episode row's ``length``; the encoded count once done).
    bytes_before, bytes_after:
        Sizes of the ``.mkv`` and of the ``.mp4`` (0 until encoded).
    result:
        The check of the encoded stream (None until encoded; R31).
    reused:
        True when a finished output of an interrupted run was taken over.
    """

    index: int
    key: str
    src: str
    dst: str
    frames: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    result: TranscodeResult | None = None
    reused: bool = False
    src_mtime_ns: int = 0

    @property
    def hidden(self) -> str:
        """Where the output is written before it is placed: ``.episode-NNN.mp4.compressing``."""
        head, _, name = self.dst.rpartition("/")
        return f"{head}/.{name}{_HIDDEN}" if head else f".{name}{_HIDDEN}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (journal and ``--json``)."""
        return {"episode_index": self.index, "key": self.key, "src": self.src, "dst": self.dst,
                "frames": self.frames, "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "src_mtime_ns": self.src_mtime_ns, "reused": self.reused,
                "result": self.result.to_dict() if self.result is not None else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StreamJob:
        """Inverse of :meth:`to_dict`."""
        res = d.get("result")
        return cls(int(d["episode_index"]), str(d["key"]), str(d["src"]), str(d["dst"]), int(d.get("frames", 0)),
                   int(d.get("bytes_before", 0)), int(d.get("bytes_after", 0)),
                   TranscodeResult.from_dict(res) if isinstance(res, dict) else None, bool(d.get("reused")),
                   int(d.get("src_mtime_ns", 0)))


@dataclass
class CompressReport:
    """Result of :func:`compress_task`.

    Attributes
    ----------
    keys:
        Depth image_keys switched (or to switch) from ``mkv`` to ``mp4``.
    streams:
        One :class:`StreamJob` per depth stream.
    committed:
        True when ``info.json`` now declares ``mp4`` for ``keys`` (the switch happened, by this run or
        one it resumed).
    resumed:
        What an interrupted earlier run left and this one took over (empty when nothing).
    notes:
        Things to know (nothing to do, why).
    wall_seconds, cpu_seconds:
        Elapsed and process CPU time of this call (s); CPU counts every thread of the process.
    """

    task_dir: Path
    dry_run: bool
    keys: list[str] = field(default_factory=list)
    streams: list[StreamJob] = field(default_factory=list)
    committed: bool = False
    resumed: str = ""
    notes: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def frames(self) -> int:
        """Depth frames in the plan."""
        return sum(s.frames for s in self.streams)

    @property
    def bytes_before(self) -> int:
        """Bytes of the FFV1 streams."""
        return sum(s.bytes_before for s in self.streams)

    @property
    def bytes_after(self) -> int:
        """Bytes of the HEVC streams (0 on a dry run)."""
        return sum(s.bytes_after for s in self.streams)

    @property
    def max_error_mm(self) -> float:
        """Largest error of any depth pixel against its (range-clipped) FFV1 original, mm."""
        return max((s.result.max_error_mm for s in self.streams if s.result is not None), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool compress --json``)."""
        return {"task": str(self.task_dir), "dry_run": self.dry_run, "committed": self.committed,
                "resumed": self.resumed, "keys": self.keys, "streams": len(self.streams), "frames": self.frames,
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "max_error_mm": self.max_error_mm,
                "max_rel_error": max((s.result.max_rel_error for s in self.streams if s.result), default=0.0),
                "clipped": sum(s.result.clipped for s in self.streams if s.result),
                "wall_seconds": round(self.wall_seconds, 3), "cpu_seconds": round(self.cpu_seconds, 3),
                "notes": self.notes, "details": [s.to_dict() for s in self.streams]}


# -- planning ----------------------------------------------------------------------------------------
def _refuse(message: str, path: Path, hint: str | None = None) -> OperationError:
    return OperationError(message, path=path, hint=hint or "nothing was changed")


def _plan(root: Path, info: dict[str, Any], layout: TaskLayout) -> tuple[list[str], list[StreamJob]]:
    """Depth keys declared ``mkv`` and their streams; refuses (one line, naming the file) what cannot go."""
    exts = info.get("video_extensions") if isinstance(info.get("video_extensions"), dict) else {}
    cameras = info.get("cameras") if isinstance(info.get("cameras"), dict) else {}
    keys = sorted(k for k, e in exts.items() if e == "mkv")
    for k in keys:
        if k in cameras:
            raise _refuse(f"stream {k!r} is an RGB camera stored as .mkv (non-depth FFV1): compress converts depth "
                          "only", root / "meta" / "info.json")
    jobs: list[StreamJob] = []
    for g in list_task_episodes(root, layout):
        if g.meta is None:
            raise _refuse(f"episode {g.index} has no meta/episodes row (unfinished or being written)",
                          g.data or next(iter(g.videos.values()), root),
                          "run `egopool repair clean TASK` or finish the recording first; nothing was changed")
        if g.meta_is_shard:
            raise _refuse(f"episode {g.index}'s row is in a legacy multi-row shard", g.meta,
                          "run `egopool migrate --split-episodes TASK` first; nothing was changed")
        rows = None
        for key, path in sorted(g.videos.items()):
            if key not in keys:
                if path.suffix == ".mkv":
                    raise _refuse(f"stream {key!r} is a .mkv that video_extensions does not declare mkv",
                                  path, "run `egopool validate TASK`; nothing was changed")
                continue
            if path.suffix == ".mp4" and path.is_file() and _is_hevc12(path):
                continue  # already the log code (a task mixed by hand): the switch makes it declared right
            if path.suffix != ".mkv" or path.is_dir():
                raise _refuse(f"episode {g.index}'s {key!r} is not an FFV1 .mkv, and video_extensions is task-level: "
                              f"every episode's {key!r} must switch at once", path,
                              "convert or delete that episode first; nothing was changed")
            _check_ffv1_depth(path)
            if rows is None:
                rows = int(read_episode_row(g.meta, g.index).get("length") or 0)
            st = path.stat()
            jobs.append(StreamJob(g.index, key, rel(root, path), rel(root, path.with_suffix(".mp4")), rows,
                                  st.st_size, src_mtime_ns=st.st_mtime_ns))
    return keys, jobs


def _is_hevc12(path: Path) -> bool:
    try:
        return probe_depth(path).kind == "hevc12"
    except CodecError:
        return False


def _check_ffv1_depth(path: Path) -> None:
    """Refuse a ``.mkv`` that is not lossless depth (an FFV1 colour stream, a damaged file), naming it."""
    try:
        kind = probe_depth(path).kind
    except CodecError as exc:
        try:
            probe = video_info(path)
        except CodecError:
            raise _refuse(f"damaged depth stream ({exc.message})", path,
                          "restore it from a backup or delete the episode; nothing was changed") from exc
        raise _refuse(f"not a depth stream: {probe.get('codec')} {probe.get('pix_fmt')} (non-depth FFV1 or another "
                      "codec); compress converts FFV1 gray16le depth only", path) from exc
    if kind != "ffv1":
        raise _refuse(f"declared mkv but holds {kind} depth, not FFV1", path,
                      "run `egopool validate TASK`; nothing was changed")


# -- journal -----------------------------------------------------------------------------------------
def _journal(root: Path) -> dict[str, Any] | None:
    path = root / JOURNAL
    if not path.is_file():
        return None
    try:
        doc = read_json(path, what="compress journal")
        [StreamJob.from_dict(d) for d in doc["streams"]]
        list(doc["keys"])
    except (FormatError, KeyError, TypeError, ValueError) as exc:
        raise OperationError(f"unreadable compress journal: {exc}", path=path,
                             hint="inspect the task (`egopool validate TASK`), then remove the journal") from exc
    return dict(doc)


def _write_journal(root: Path, keys: list[str], jobs: list[StreamJob], state: str) -> None:
    atomic_write_json(root / JOURNAL, {"state": state, "keys": keys, "streams": [j.to_dict() for j in jobs]})


def _pause(root: Path, stage: str) -> None:
    if os.environ.get(_PAUSE_ENV) == stage:
        (root / "meta" / f".compress-paused-{stage}").write_text(str(os.getpid()))
        time.sleep(3600)


def _committed(info: dict[str, Any], keys: list[str]) -> bool:
    exts = info.get("video_extensions") if isinstance(info.get("video_extensions"), dict) else {}
    return bool(keys) and all(exts.get(k) == "mp4" for k in keys)


def _reusable(root: Path, finished: dict[tuple[int, str, str], StreamJob], job: StreamJob) -> StreamJob | None:
    """The finished output of an interrupted run for the same, unchanged source (hidden or placed)."""
    prev = finished.get((job.index, job.key, job.src))
    if prev is None or (prev.bytes_before, prev.src_mtime_ns) != (job.bytes_before, job.src_mtime_ns):
        return None
    for where in (prev.hidden, prev.dst):
        p = root / where
        if p.is_file() and p.stat().st_size == prev.bytes_after:
            prev.reused = True
            return prev
    return None


def _discard(root: Path, old: dict[str, Any] | None, keep: set[str]) -> None:
    """Remove what an interrupted run wrote that this run does not re-use (never a source file)."""
    if old is None:
        return
    for d in old["streams"]:
        prev = StreamJob.from_dict(d)
        for where in (prev.hidden, prev.dst):
            p = root / where
            if where in keep or not p.is_file():
                continue
            # a hidden output is only ever ours; a placed .mp4 only while its source is still there (R37)
            if p.name.endswith(_HIDDEN) or (p.suffix == ".mp4" and (root / prev.src).exists()):
                p.unlink()


# -- the run -----------------------------------------------------------------------------------------
def _encode(root: Path, fps: float, jobs: list[StreamJob], keys: list[str], preset: str,
            progress: Progress | None, cancel: threading.Event | None) -> None:
    for i, job in enumerate(jobs):
        if job.result is not None:
            continue
        what = f"episode {job.index} {job.key} ({i + 1}/{len(jobs)})"
        total = 2 * max(job.frames, 1)

        def tick(done: int, what: str = what, total: int = total) -> None:
            if progress is not None:
                progress(min(done, total), total, what)

        out = root / job.hidden
        res = transcode_depth(root / job.src, out, fps=fps, params=LogDepthCodec(), preset=preset,
                              expect_frames=job.frames or None, progress=tick, cancel=cancel)
        job.result, job.frames, job.bytes_after = res, res.frames, out.stat().st_size
        _write_journal(root, keys, jobs, "encoding")
        if i == 0:
            _pause(root, "encoded")


def _resumable(root: Path, layout: TaskLayout, jobs: list[StreamJob]) -> list[StreamJob]:
    """The journal's streams of a committed switch that still have something to roll forward (R37).

    An episode deleted since (no ``meta/episodes`` row) is dropped; a stream whose output is gone
    while its ``.mkv`` is still there gets ``result`` None, to be encoded and checked again.
    """
    kept: list[StreamJob] = []
    for j in jobs:
        if not layout.episodes_file(j.index).is_file():
            continue  # `egopool delete` took the episode: nothing of it to switch
        if not (root / j.hidden).is_file() and not (root / j.dst).is_file() and (root / j.src).is_file():
            j.result, j.reused = None, False
        kept.append(j)
    return kept


def _place(root: Path, jobs: list[StreamJob]) -> None:
    """Rename each hidden output to its final name beside the ``.mkv`` (idempotent)."""
    dirs = set()
    for job in jobs:
        hidden, dst = root / job.hidden, root / job.dst
        if hidden.exists():
            os.replace(hidden, dst)
            dirs.add(dst.parent)
        elif not dst.is_file():
            again = (root / job.src).is_file()
            raise OperationError(f"the compressed stream of episode {job.index} {job.key!r} is gone"
                                 + ("" if again else f", and so is its source {job.src}"), path=dst,
                                 hint="run `egopool compress TASK` again; it encodes it anew" if again else
                                 f"restore either from a backup, or `egopool delete TASK {job.index}`")
    for d in dirs:
        fsync_dir(d)


def _row_bytes(meta: Path, codecs: dict[str, Any], drops: dict[str, Any]) -> bytes:
    """N's row file with only ``video_codec`` and ``drop_stats`` replaced (every other column as stored)."""
    table = read_parquet(meta, what="episodes parquet")
    for name, value in (("video_codec", codecs), ("drop_stats", drops)):
        col = pa.array([json.dumps(value, ensure_ascii=False, allow_nan=False)], type=EPISODE_COLUMNS[name])
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, col)
        else:
            table = table.append_column(name, col)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _finish(root: Path, layout: TaskLayout, jobs: list[StreamJob], reg: Registry | None) -> list[str]:
    """Roll the committed switch forward (idempotent): rows, ``.mkv`` removal, registry. Returns problems."""
    problems: list[str] = []
    by_n: dict[int, list[StreamJob]] = {}
    for j in jobs:
        by_n.setdefault(j.index, []).append(j)
    for k, (n, group) in enumerate(sorted(by_n.items())):
        meta = layout.episodes_file(n)
        row = read_episode_row(meta, n)
        codecs = dict(row.get("video_codec") or {})
        drops = dict(row.get("drop_stats") or {})
        changed = False
        for j in group:
            assert j.result is not None
            entry = codecs.get(j.key)
            if isinstance(entry, dict) and entry.get("codec") == "hevc12" and "compressed_from" in entry:
                continue  # this row was already rewritten by the run we resume
            codecs[j.key] = {**j.result.video_codec, "compressed_from": entry if entry is not None else {},
                             "compressed_at": time.time()}
            if j.result.clipped:
                drops[clipped_key(j.key)] = int(drops.get(clipped_key(j.key)) or 0) + j.result.clipped
            changed = True
        if changed:
            atomic_write_bytes(meta, _row_bytes(meta, codecs, drops))
        for j in group:
            (root / j.src).unlink(missing_ok=True)
        if reg is not None:
            try:
                rec = reg.get(task_key(root), n)
                if rec is not None:
                    gone = {j.src for j in group} | {j.dst for j in group} | {rel(root, meta)}
                    files = [f for f in rec.files if f.path not in gone]
                    files += [file_record(root, root / j.dst) for j in group] + [file_record(root, meta)]
                    reg.replace_files(task_key(root), n, sorted(files, key=lambda f: f.path))
            except RegistryError as exc:
                problems.append(f"episode {n}: registry not updated ({exc.one_line()}); run `egopool compress TASK` "
                                "again")
        if k == 0:
            _pause(root, "finishing")
    return problems


_BEFORE_COMMIT = ("free disk space (or fix what is named) and run `egopool compress TASK` again: the task is still "
                  "all-FFV1 and valid, finished streams are re-used")
_AFTER_COMMIT = ("the task is already HEVC (info.json switched) and valid; free disk space (or fix what is named) and "
                 "run `egopool compress TASK` again to finish the rows, .mkv removal and registry")


@contextmanager
def _rehint(hint: str) -> Iterator[None]:
    """A :class:`StorageError` raised inside says where the task stands (R39), in place of the generic hint."""
    try:
        yield
    except StorageError as exc:
        exc.hint = hint
        exc.args = (exc.one_line(),)
        raise


@contextmanager
def _locked(root: Path, dry_run: bool) -> Iterator[None]:
    if dry_run:
        with task_read_lock(root):
            yield
        return
    with task_lock(root, wait=False):
        live = sorted(markers.live_reservations(root, prune=False))
        if live:
            raise LockError(f"episode(s) {', '.join(map(str, live))} are being recorded into this task",
                            path=root, hint="compress it between recording sessions; nothing was changed")
        yield


def _run(root: Path, *, dry_run: bool, registry: bool | str | Path | Registry | None, progress: Progress | None,
         preset: str, cancel: threading.Event | None) -> CompressReport:
    report = CompressReport(root, dry_run)
    info = read_info(root)
    layout = TaskLayout.from_info(root, info)
    reg = open_registry(root, registry)
    with _locked(root, dry_run):
        refuse_during_migration(root, "compress depth")
        old = _journal(root)
        if old is not None and _committed(info, list(old["keys"])):
            report.resumed = "finished the interrupted switch to HEVC (info.json already declares mp4)"
            report.keys = list(old["keys"])
            report.streams = [StreamJob.from_dict(d) for d in old["streams"]]
            report.committed = True
            if not dry_run:
                report.streams = _resumable(root, layout, report.streams)
                redo = [j for j in report.streams if j.result is None]
                if redo:
                    _encode(root, float(info.get("fps") or 30.0), report.streams, report.keys, preset, progress,
                            cancel)
                with _rehint(_AFTER_COMMIT), \
                        StorageError.guard(root, action="cannot finish the switch to HEVC"):
                    _place(root, report.streams)
                    report.notes += _finish(root, layout, report.streams, reg)
                if not report.notes:
                    (root / JOURNAL).unlink()
            return report
        keys, jobs = _plan(root, info, layout)
        report.keys, report.streams = keys, jobs
        if old is not None:
            report.resumed = "re-planned an interrupted compress (nothing had been switched)"
        if not jobs:
            report.notes.append("nothing to do: no depth stream of this task is FFV1 (already HEVC, or no depth)")
            if old is not None and not dry_run:
                _discard(root, old, set())
                (root / JOURNAL).unlink()
            return report
        finished = {(j.index, j.key, j.src): j for j in (StreamJob.from_dict(d) for d in (old or {}).get("streams", []))
                    if j.result is not None}
        for i, job in enumerate(jobs):
            prev = _reusable(root, finished, job)
            if prev is not None:
                jobs[i] = prev
        report.streams = jobs
        if dry_run:
            return report
        with _rehint(_BEFORE_COMMIT), StorageError.guard(root, action="cannot start the compress"):
            _discard(root, old, {w for j in jobs if j.reused for w in (j.hidden, j.dst)})
            _write_journal(root, keys, jobs, "encoding")
        try:
            _encode(root, float(info.get("fps") or 30.0), jobs, keys, preset, progress, cancel)
        except (EgopoolError, OSError) as exc:  # a damaged source or a failed check: undo every output
            for j in jobs:
                for where in (j.hidden, j.dst):
                    (root / where).unlink(missing_ok=True)
            (root / JOURNAL).unlink(missing_ok=True)
            if isinstance(exc, EgopoolError):
                if "nothing was changed" not in (exc.hint or ""):
                    exc.hint = f"{exc.hint}; nothing was changed" if exc.hint else "nothing was changed"
                raise
            raise OperationError(f"cannot write the compressed stream: {exc}", path=root,
                                 hint="free disk space and run it again; nothing was changed") from exc
        with _rehint(_BEFORE_COMMIT), \
                StorageError.guard(root, action="cannot switch the task to HEVC"):
            _write_journal(root, keys, jobs, "placing")
            _place(root, jobs)
            _pause(root, "placed")
            info = read_info(root)
            info["video_extensions"] = {**info.get("video_extensions", {}), **{k: "mp4" for k in keys}}
            write_info(root, info)  # the commit: from here on the task is HEVC
        report.committed = True
        _pause(root, "committed")
        with _rehint(_AFTER_COMMIT), StorageError.guard(root, action="cannot finish the switch to HEVC"):
            _write_journal(root, keys, jobs, "committed")
            report.notes += _finish(root, layout, jobs, reg)
        if not report.notes:
            (root / JOURNAL).unlink()
            fsync_dir(root / "meta")
    return report


def _niced(work: Callable[[threading.Event], _T]) -> _T:
    """Run ``work`` on a thread of its own at the lowest CPU priority (nice 19), the caller's untouched.

    On Linux a nice value belongs to a thread, and the threads it starts (x265's pool, FFmpeg's
    decoders) inherit it; I/O of a thread without an explicit I/O priority follows its CPU nice under
    the CFQ/BFQ schedulers (docs/decisions.md R34). Ctrl-C in the caller stops the work at the next frame.
    """
    box: dict[str, Any] = {}
    cancel = threading.Event()

    def run() -> None:
        try:
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            except (OSError, AttributeError):  # not Linux: the thread keeps its priority
                pass
            box["value"] = work(cancel)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, name="egopool-compress", daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(0.2)
    except BaseException:
        cancel.set()
        t.join()
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def compress_task(task_dir: str | Path, *, progress: Progress | None = None, dry_run: bool = False,
                  nice: bool = False, registry: bool | str | Path | Registry | None = True,
                  preset: str = "veryfast") -> CompressReport:
    """Convert every FFV1 depth stream of a task to 12-bit log HEVC, all or none (module docstring).

    Parameters
    ----------
    task_dir:
        The task directory.
    progress:
        ``progress(done, total, what)`` per stream: ``what`` names episode and stream, ``total`` is
        twice its frame count (encoded, then checked). Called from the worker thread when ``nice``.
    dry_run:
        Only plan (shared lock, nothing written): the report lists the streams and their sizes.
    nice:
        Work at the lowest CPU priority (nice 19) on a thread of its own, so a recorder in the same
        process keeps its priority (R34).
    registry:
        ``pipeline.db`` whose file lists and sha256 follow (True = beside the task, False = leave out).
    preset:
        x265 preset (``veryfast``: docs/decisions.md #11).

    Returns
    -------
    CompressReport
        ``committed`` says whether the task is now HEVC; ``notes`` say why nothing was done, or what
        is left (a registry that could not be written: run it again).

    Raises
    ------
    LockError
        Another process holds the task lock, or an episode is being recorded into the task.
    OperationError
        A refusal (an RGB stream stored as .mkv, a damaged or non-depth .mkv, an unfinished episode, a
        pending migration): one line naming the file; nothing was changed.
    CodecError
        A stream failed its check after encoding (named; every output removed, nothing changed).
    StorageError
        The journal, an output, ``info.json`` or a row could not be written (a full disk): one line naming
        the task and saying whether it is still all-FFV1 or already HEVC; run it again (R39).
    FormatError
        ``info.json`` cannot be read.
    """
    root = Path(task_dir)
    t0, c0 = time.monotonic(), time.process_time()

    def work(cancel: threading.Event | None) -> CompressReport:
        return _run(root, dry_run=dry_run, registry=registry, progress=progress, preset=preset, cancel=cancel)

    try:
        report = _niced(work) if nice and not dry_run else work(None)
    except TranscodeCancelled:
        raise KeyboardInterrupt from None
    report.wall_seconds, report.cpu_seconds = time.monotonic() - t0, time.process_time() - c0
    return report
