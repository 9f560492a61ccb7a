"""``egopool compress``: bring a task's FFV1 depth to the normative 12-bit log HEVC (file_format.md §3, §8).

A recorder that cannot hold the HEVC preset in real time records depth losslessly (FFV1 ``gray16le``,
``.mkv``); this brings the task to the spec's 12-bit gray HEVC log code (``.mp4``) afterwards.
``video_extensions`` is task-level (§3), so the switch is for every episode of the task at once:
a reader or ``egopool validate`` sees either every depth stream FFV1 or every one HEVC, never a mix
(docs/decisions.md R30–R35).

The same steps for a task directory and for ``s3://bucket/prefix/task``, through the task's
:class:`~egopool.storage.Store` (issue 24, docs/decisions.md O40). A directory runs under the task lock
(taken without waiting: a task being recorded is refused). A bucket has no lock: the journal object is
created with ``If-None-Match`` (two runs cannot both own the job), each later write of it is a
compare-and-swap, and a later run takes over a journal only when its run is dead; each stream is
downloaded to a local scratch, encoded, checked and put under its final key ``episode-NNN.mp4`` (one
stream at a time: local disk holds one stream and its output), and the commit of step 5 is a
compare-and-swap of ``info.json`` made only while no publish into the task is in progress and no
episode arrived since the plan (else the task is planned again, finished streams re-used).

Steps:

1. plan: every committed episode's file of every depth key that ``video_extensions`` declares ``mkv``
   must be FFV1 depth (else one-line refusal naming the file; nothing is changed);
2. journal ``meta/.compress.json`` (a dotfile: every reader ignores it, §11);
3. encode each stream into a hidden ``.episode-NNN.mp4.compressing`` beside it (a bucket: under its final
   key) and check it (frame
   count, holes exact, error bound: :func:`~egopool.codecs.depth_transcode.transcode_depth`); the
   journal records each finished stream, so a resumed run re-uses it;
4. place: rename each hidden output to ``episode-NNN.mp4`` beside its ``.mkv`` (readers still take
   the declared ``.mkv``, R32; a bucket: already there);
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
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import task_lock, task_read_lock
from .._safe_read import read_parquet
from ..codecs.depth import LogDepthCodec
from ..codecs.depth_transcode import TranscodeCancelled, transcode_depth
from ..errors import EgopoolError, FormatError, LockError, OperationError, RegistryError, StorageError
from ..layout import TaskLayout
from ..meta import markers
from ..meta.drop_stats import clipped_key
from ..meta.digests import DIGEST_COLUMN, remapped_digests, sha256_of_key
from ..meta.episodes import EPISODE_COLUMNS, keep_digests, read_episode_row, restamp_table, row_bytes
from ..meta.info import read_info
from ..registry import Registry
from ..storage import ObjectPath, PreconditionFailed, PutMode, open_store
from ._common import Progress, open_registry
from ._store_task import StoreTask, json_bytes, open_store_task
from .compress_plan import HIDDEN, CompressReport, StreamJob, plan
from .migrate import refuse_during_migration

__all__ = ["JOURNAL", "CompressReport", "StreamJob", "compress_task"]

#: The journal of a compress under way (task-relative; a dotfile, ignored by readers, §11).
JOURNAL = "meta/.compress.json"
_PAUSE_ENV = "EGOPOOL_COMPRESS_PAUSE"
#: a bucket task re-planned this many times (publishes landing during the compress) before giving up
_ROUNDS = 5
_T = TypeVar("_T")


# -- journal -----------------------------------------------------------------------------------------
def _journal(t: StoreTask) -> tuple[dict[str, Any], str] | None:
    try:
        got = t.get_json(JOURNAL, "compress journal")
        if got is None:
            return None
        doc = got[0]
        [StreamJob.from_dict(d) for d in doc["streams"]]
        list(doc["keys"])
    except (FormatError, KeyError, TypeError, ValueError) as exc:
        reason = exc.message if isinstance(exc, FormatError) else repr(exc)
        raise OperationError(f"unreadable compress journal: {reason}", path=t.store.url(JOURNAL),
                             hint="inspect the task (`egopool validate TASK`), then remove the journal") from exc
    return dict(doc), got[1]


class _Journal:
    """The journal this run owns (its version on a bucket: each write is a compare-and-swap)."""

    def __init__(self, t: StoreTask, version: str | None) -> None:
        self.t, self.version = t, version

    def write(self, keys: list[str], jobs: list[StreamJob], state: str) -> None:
        self.version = self.t.write_journal(JOURNAL, {"state": state, "keys": keys,
                                                      "streams": [j.to_dict() for j in jobs]}, self.version,
                                            "compress")

    def remove(self) -> None:
        self.t.store.delete([JOURNAL])
        self.version = None


def _pause(t: StoreTask, stage: str) -> None:
    if os.environ.get(_PAUSE_ENV) == stage:
        t.store.put(f"meta/.compress-paused-{stage}", str(os.getpid()).encode())
        time.sleep(3600)


def _committed(info: dict[str, Any], keys: list[str]) -> bool:
    exts = info.get("video_extensions")
    exts = exts if isinstance(exts, dict) else {}
    return bool(keys) and all(exts.get(k) == "mp4" for k in keys)


def _staging(t: StoreTask, job: StreamJob) -> str:
    """Where an encoded stream waits for the commit: a hidden name beside its ``.mkv`` in a directory (renamed at
    the commit); its final key on a bucket (no rename there; readers take the declared ``.mkv`` until the commit)."""
    return job.hidden if t.local is not None else job.dst


def _reusable(t: StoreTask, finished: dict[tuple[int, str, str], StreamJob], job: StreamJob) -> StreamJob | None:
    """The finished output of an interrupted run for the same, unchanged source (staged or placed)."""
    prev = finished.get((job.index, job.key, job.src))
    if prev is None or (prev.bytes_before, prev.src_version) != (job.bytes_before, job.src_version):
        return None
    for where in (_staging(t, prev), prev.dst):
        m = t.store.head(where)
        if m is not None and m.size == prev.bytes_after:
            prev.reused = True
            return prev
    return None


def _discard(t: StoreTask, old: dict[str, Any] | None, keep: set[str]) -> None:
    """Remove what an interrupted run wrote that this run does not re-use (never a source file)."""
    if old is None:
        return
    for d in old["streams"]:
        prev = StreamJob.from_dict(d)
        for where in dict.fromkeys((prev.hidden, prev.dst)):
            if where in keep or not t.store.exists(where):
                continue
            # a hidden output is only ever ours; a placed .mp4 only while its source is still there (R37)
            if where.endswith(HIDDEN) or (where.endswith(".mp4") and t.store.exists(prev.src)):
                t.store.delete([where])


# -- the run -----------------------------------------------------------------------------------------
def _encode(t: StoreTask, fps: float, jobs: list[StreamJob], keys: list[str], journal: _Journal, preset: str,
            progress: Progress | None, cancel: threading.Event | None) -> None:
    """Encode and check every stream without a result; a bucket's stream goes through a local scratch (one at a
    time: disk bounded by one stream and its output) and is put under its final key."""
    with tempfile.TemporaryDirectory(prefix="egopool-compress-") as scratch:
        for i, job in enumerate(jobs):
            if job.result is not None:
                continue
            what = f"episode {job.index} {job.key} ({i + 1}/{len(jobs)})"
            total = 2 * max(job.frames, 1)

            def tick(done: int, what: str = what, total: int = total) -> None:
                if progress is not None:
                    progress(min(done, total), total, what)

            src = t.download(job.src, Path(scratch) / "source.mkv")
            out = t.local / job.hidden if t.local is not None else Path(scratch) / "output.mp4"
            try:
                res = transcode_depth(src, out, fps=fps, params=LogDepthCodec(), preset=preset,
                                      expect_frames=job.frames or None, progress=tick, cancel=cancel)
                size = out.stat().st_size
                if t.local is None:
                    t.store.put_file(job.dst, out, move=True)
            finally:
                if t.local is None:
                    src.unlink(missing_ok=True)
                    out.unlink(missing_ok=True)
            job.result, job.frames, job.bytes_after = res, res.frames, size
            journal.write(keys, jobs, "encoding")
            if i == 0:
                _pause(t, "encoded")


def _resumable(t: StoreTask, layout: TaskLayout, jobs: list[StreamJob]) -> list[StreamJob]:
    """The journal's streams of a committed switch that still have something to roll forward (R37).

    An episode deleted since (no ``meta/episodes`` row) is dropped; a stream whose output is gone
    while its ``.mkv`` is still there gets ``result`` None, to be encoded and checked again.
    """
    kept: list[StreamJob] = []
    for j in jobs:
        if not t.store.exists(t.key(layout.episodes_file(j.index))):
            continue  # `egopool delete` took the episode: nothing of it to switch
        if not t.store.exists(_staging(t, j)) and not t.store.exists(j.dst) and t.store.exists(j.src):
            j.result, j.reused = None, False
        kept.append(j)
    return kept


def _place(t: StoreTask, jobs: list[StreamJob]) -> None:
    """Each staged output under its final name beside the ``.mkv`` (idempotent; a directory's rename)."""
    for job in jobs:
        staged = _staging(t, job)
        if staged != job.dst and t.local is not None and t.store.exists(staged):
            t.store.put_file(job.dst, t.local / staged, move=True)
        elif not t.store.exists(job.dst):
            again = t.store.exists(job.src)
            raise OperationError(f"the compressed stream of episode {job.index} {job.key!r} is gone"
                                 + ("" if again else f", and so is its source {job.src}"), path=t.store.url(job.dst),
                                 hint="run `egopool compress TASK` again; it encodes it anew" if again else
                                 f"restore either from a backup, or `egopool delete TASK {job.index}`")


def _row_bytes(meta: Path | ObjectPath, codecs: dict[str, Any], drops: dict[str, Any],
               files: dict[str, str | None] | None = None) -> bytes:
    """N's row file with only ``video_codec`` and ``drop_stats`` replaced (every other column as stored); a row
    that records file digests gets ``files``' changes (task key -> new sha256, None: removed) in the same
    rewrite (docs/decisions.md X4)."""
    table = read_parquet(meta, what="episodes parquet")
    for name, value in (("video_codec", codecs), ("drop_stats", drops)):
        col = pa.array([json.dumps(value, ensure_ascii=False, allow_nan=False)], type=EPISODE_COLUMNS[name])
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, col)
        else:
            table = table.append_column(name, col)
    if files and DIGEST_COLUMN in table.column_names and table.num_rows == 1:
        try:
            kept = remapped_digests(table.column(DIGEST_COLUMN)[0].as_py(), changes=files)
        except ValueError:
            kept = None  # a damaged digest column stays as it is: validate names it
        if kept is not None:
            return row_bytes(restamp_table(table, kept))
    table = keep_digests(table)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _finish(t: StoreTask, layout: TaskLayout, jobs: list[StreamJob], reg: Registry | None) -> list[str]:
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
            digests: dict[str, str | None] = {j.src: None for j in group}
            digests.update({j.dst: sha256_of_key(t.store, j.dst) for j in group})
            t.store.put(t.key(meta), _row_bytes(meta, codecs, drops, digests))
        t.store.delete([j.src for j in group])
        if reg is not None and t.local is not None:
            root = t.local
            try:
                reg.refresh_files(root, n, written=[j.dst for j in group] + [t.key(meta)],
                                  gone=[j.src for j in group])
            except RegistryError as exc:
                problems.append(f"episode {n}: registry not updated ({exc.one_line()}); run `egopool compress TASK` "
                                "again")
        if k == 0:
            _pause(t, "finishing")
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
def _guard(t: StoreTask, hint: str, action: str) -> Iterator[None]:
    with _rehint(hint), StorageError.guard(t.local or t.uri, action=action):
        yield


@contextmanager
def _locked(t: StoreTask, dry_run: bool) -> Iterator[None]:
    """A directory: its task lock (and no live recording). A bucket: nothing here; the journal is the ownership."""
    if t.local is None:
        if not dry_run and not t.store.conditional_writes:
            raise OperationError("this bucket does not honour conditional writes (If-None-Match / If-Match), so two "
                                 "runs or a publish could switch the task half-way", path=t.uri,
                                 hint="compress a local copy (`egopool sync`) and sync it back; nothing was changed")
        yield
        return
    root = t.local
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


def _publishing(t: StoreTask) -> str | None:
    """A bucket task's publish in progress (a journal of the pooling server or `egopool sync`), or None."""
    if t.local is not None or not isinstance(t.root, ObjectPath):
        return None
    from ..publish import JOURNALS, task_hash

    parent = open_store(str(t.root.parent))
    first = next(iter(parent.list(f"{JOURNALS}/{task_hash(t.root.name)}/")), None)
    return None if first is None else parent.url(first.key)


def _commit(t: StoreTask, keys: list[str]) -> bool:
    """``info.json`` with ``keys`` declared ``mp4``: a directory's atomic write under the task lock, a bucket's
    compare-and-swap. False when a publish changed ``info.json`` meanwhile (nothing written: plan again)."""
    got = t.get_json("meta/info.json", "info.json")
    if got is None:
        raise OperationError("meta/info.json vanished during the compress", path=t.uri,
                             hint="restore it; the task is still all-FFV1")
    info, version = got
    info["video_extensions"] = {**info.get("video_extensions", {}), **{k: "mp4" for k in keys}}
    try:
        t.store.put("meta/info.json", json_bytes(info), mode=PutMode.UPDATE, version=version)
    except PreconditionFailed:
        return False
    return True


def _resume_committed(t: StoreTask, report: CompressReport, old: dict[str, Any], journal: _Journal,
                      info: dict[str, Any], layout: TaskLayout, reg: Registry | None, preset: str,
                      progress: Progress | None, cancel: threading.Event | None) -> CompressReport:
    report.resumed = "finished the interrupted switch to HEVC (info.json already declares mp4)"
    report.keys = list(old["keys"])
    report.streams = [StreamJob.from_dict(d) for d in old["streams"]]
    report.committed = True
    if report.dry_run:
        return report
    report.streams = _resumable(t, layout, report.streams)
    if any(j.result is None for j in report.streams):
        _encode(t, float(info.get("fps") or 30.0), report.streams, report.keys, journal, preset, progress, cancel)
    with _guard(t, _AFTER_COMMIT, "cannot finish the switch to HEVC"):
        _place(t, report.streams)
        report.notes += _finish(t, layout, report.streams, reg)
        if not report.notes:
            journal.remove()
    return report


def _run(location: str | Path | ObjectPath, *, dry_run: bool, registry: bool | str | Path | Registry | None,
         progress: Progress | None, preset: str, cancel: threading.Event | None) -> CompressReport:
    t = open_store_task(location)
    report = CompressReport(t.root, dry_run)
    info = read_info(t.root)
    layout = TaskLayout.from_info(t.root, info)
    reg = open_registry(t.local, registry) if t.local is not None else None
    with _locked(t, dry_run):
        refuse_during_migration(t.root, "compress depth")
        got = _journal(t)
        old, version = got if got is not None else (None, None)
        if old is not None and not dry_run:
            version = t.own_journal(JOURNAL, old, version, "compress")
        journal = _Journal(t, version)
        if old is not None and _committed(info, list(old["keys"])):
            return _resume_committed(t, report, old, journal, info, layout, reg, preset, progress, cancel)
        for _ in range(_ROUNDS):
            keys, jobs = plan(t, info, layout)
            report.keys, report.streams = keys, jobs
            if old is not None:
                report.resumed = "re-planned an interrupted compress (nothing had been switched)"
            if not jobs:
                report.notes.append("nothing to do: no depth stream of this task is FFV1 (already HEVC, or no depth)")
                if old is not None and not dry_run:
                    _discard(t, old, set())
                    journal.remove()
                return report
            finished = {(j.index, j.key, j.src): j
                        for j in (StreamJob.from_dict(d) for d in (old or {}).get("streams", []))
                        if j.result is not None}
            for i, job in enumerate(jobs):
                prev = _reusable(t, finished, job)
                if prev is not None:
                    jobs[i] = prev
            report.streams = jobs
            if dry_run:
                return report
            with _guard(t, _BEFORE_COMMIT, "cannot start the compress"):
                _discard(t, old, {w for j in jobs if j.reused for w in (_staging(t, j), j.dst)})
                journal.write(keys, jobs, "encoding")
            _encode_or_undo(t, info, jobs, keys, journal, preset, progress, cancel)
            with _guard(t, _BEFORE_COMMIT, "cannot switch the task to HEVC"):
                journal.write(keys, jobs, "placing")
                _place(t, jobs)
                _pause(t, "placed")
                busy = _publishing(t)
                if busy is None and t.local is None:  # a bucket: episodes published since the plan?
                    again = plan(t, read_info(t.root), layout)[1]
                    if [(j.index, j.key, j.src, j.src_version) for j in again] != \
                            [(j.index, j.key, j.src, j.src_version) for j in jobs]:
                        busy = "episodes were published into the task during the compress"
                if busy is None and _commit(t, keys):  # the commit: from here on the task is HEVC
                    break
            old = {"keys": keys, "streams": [j.to_dict() for j in jobs]}  # re-plan, re-using what is encoded
            info = read_info(t.root)
            time.sleep(1.0)
        else:
            raise OperationError("publishes kept changing the task during the compress; it was not switched",
                                 path=t.uri, hint=_BEFORE_COMMIT)
        report.committed = True
        _pause(t, "committed")
        with _guard(t, _AFTER_COMMIT, "cannot finish the switch to HEVC"):
            journal.write(keys, jobs, "committed")
            report.notes += _finish(t, layout, jobs, reg)
            if not report.notes:
                journal.remove()
    return report


def _encode_or_undo(t: StoreTask, info: dict[str, Any], jobs: list[StreamJob], keys: list[str], journal: _Journal,
                    preset: str, progress: Progress | None, cancel: threading.Event | None) -> None:
    """Encode the streams; a damaged source or a failed check removes every output and the journal."""
    try:
        _encode(t, float(info.get("fps") or 30.0), jobs, keys, journal, preset, progress, cancel)
    except (EgopoolError, OSError) as exc:
        if isinstance(exc, LockError):
            raise
        for j in jobs:
            t.store.delete(dict.fromkeys((_staging(t, j), j.dst)))
        journal.remove()
        if isinstance(exc, EgopoolError):
            if "nothing was changed" not in (exc.hint or ""):
                exc.hint = f"{exc.hint}; nothing was changed" if exc.hint else "nothing was changed"
            raise
        raise OperationError(f"cannot write the compressed stream: {exc}", path=t.local or t.uri,
                             hint="free disk space and run it again; nothing was changed") from exc


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
    return box["value"]


def compress_task(task_dir: str | Path | ObjectPath, *, progress: Progress | None = None, dry_run: bool = False,
                  nice: bool = False, registry: bool | str | Path | Registry | None = True,
                  preset: str = "veryfast") -> CompressReport:
    """Convert every FFV1 depth stream of a task to 12-bit log HEVC, all or none (module docstring).

    Parameters
    ----------
    task_dir:
        The task directory, or ``s3://bucket/prefix/task`` (the same steps through its store; module docstring).
    progress:
        ``progress(done, total, what)`` per stream: ``what`` names episode and stream, ``total`` is
        twice its frame count (encoded, then checked). Called from the worker thread when ``nice``.
    dry_run:
        Only plan (shared lock, nothing written): the report lists the streams and their sizes.
    nice:
        Work at the lowest CPU priority (nice 19) on a thread of its own, so a recorder in the same
        process keeps its priority (R34).
    registry:
        ``pipeline.db`` whose file lists and sha256 follow (True = beside the task, False = leave out; a
        directory's only: a bucket task has none).
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
        Another process holds the task lock, or an episode is being recorded into the task; on a bucket,
        another live run owns the task's journal.
    OperationError
        A refusal (an RGB stream stored as .mkv, a damaged or non-depth .mkv, an unfinished episode, a
        pending migration): one line naming the file; nothing was changed.
    CodecError
        A stream failed its check after encoding (named; every output removed, nothing changed).
    StorageError
        The journal, an output, ``info.json`` or a row could not be written (a full disk): one line naming
        the task and saying whether it is still all-FFV1 or already HEVC; run it again (R39).
    FormatError
        ``info.json`` cannot be read, or the location is not a task (a missing directory or bucket: one line).
    ObjectStoreError
        The bucket refuses the request (credentials, endpoint): one line naming the URI.
    """
    t0, c0 = time.monotonic(), time.process_time()

    def work(cancel: threading.Event | None) -> CompressReport:
        return _run(task_dir, dry_run=dry_run, registry=registry, progress=progress, preset=preset, cancel=cancel)

    try:
        report = _niced(work) if nice and not dry_run else work(None)
    except TranscodeCancelled:
        raise KeyboardInterrupt from None
    report.wall_seconds, report.cpu_seconds = time.monotonic() - t0, time.process_time() - c0
    return report
