"""Downloads from the pages, scope ``read``, streamed (docs/decisions.md P22).

* ``GET /api/v1/tasks/{task}/episodes/{n}/download.zip``: the episode's files (data parquet, videos,
  its meta row) and ``meta/info.json``, at their task-relative paths under ``<task>/``;
* ``GET .../episodes/{n}/download.rrd``: the episode as a Rerun recording
  (:func:`egopool.interop.rerun.export_rerun`; 501 naming the ``interop`` extra without rerun-sdk);
* ``GET /api/v1/tasks/{task}/download/episodes.zip?<filters>``: a zip holding one
  ``<task>-<N>.zip`` (as above) per pooled episode matching the task page's filters;
* ``GET /api/v1/tasks/{task}/download/lerobot.zip?<filters>``: those episodes exported by
  :func:`egopool.interop.lerobot_export.export_lerobot` (a LeRobot v3.0 dataset) under ``<task>-lerobot/``.

A zip is written by the stdlib :mod:`zipfile` into a non-seekable sink (sizes in data descriptors,
ZIP64 when needed) that the response drains after every block: memory holds one block, never a file.
An export (``.rrd``, LeRobot) is written to the server's staging directory first (those tools write
files), streamed from there and removed (:mod:`egopool.server.download_scratch`: when the response ends,
also when the client goes away mid-stream; a stale one at the next export; all at the next start).
The LeRobot export carries the task's reviewers' events from ``server.db`` as ``--events-from`` would
(``language_events`` and the mapping's ``events``; P34).
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from ..curation.review_events import ReviewEvent, events_by_episode
from ..errors import UploadRejectedError
from ..interop.lerobot_events import ExportEvents
from .catalog import episode_entry
from .download_scratch import make_scratch, release_scratch
from .events import MAX_EVENTS_PAGE, find_events
from .store import ServerStore

__all__ = ["BLOCK", "episode_zip", "episodes_zip", "file_stream", "lerobot_export_dir", "lerobot_stream", "rerun_file",
           "rerun_ready", "scratch_dir", "server_events"]

#: bytes read from a source file per step (and so, roughly, per chunk of the response)
BLOCK = 1 << 20
#: members stored as they are (videos and parquet are compressed already): no CPU spent on deflate
_STORED = zipfile.ZIP_STORED


class _Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class _Sink:
    """A write-only, non-seekable file for :class:`zipfile.ZipFile`: what it writes waits in :attr:`parts`
    until :meth:`drain` hands it to the response."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, b: bytes, /) -> int:
        self.parts.append(bytes(b))
        return len(b)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None

    def drain(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


def _copy_into(zf: zipfile.ZipFile, sink: _Sink, name: str, src: _Readable) -> Iterator[bytes]:
    """Write ``src`` as member ``name``, yielding the zip bytes made after each :data:`BLOCK`."""
    info = zipfile.ZipInfo(name)
    info.compress_type = _STORED
    with zf.open(info, "w", force_zip64=True) as w:
        while True:
            block = src.read(BLOCK)
            if not block:
                break
            w.write(block)
            out = sink.drain()
            if out:
                yield out
    yield sink.drain()


def _episode_members(store: ServerStore, task: str, index: int) -> list[str]:
    """Task-relative paths of episode ``index``'s files and ``meta/info.json``."""
    entry = episode_entry(store, task, index)
    if entry is None:
        raise FileNotFoundError(f"no episode {index} in task {task!r}")
    return ["meta/info.json", *entry["files"]]


def _zip_of(store: ServerStore, task: str, members: Sequence[str], prefix: str) -> Iterator[bytes]:
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", compression=_STORED, allowZip64=True) as zf:
        for rel in members:
            with store.objects.open_input(f"{task}/{rel}") as src:
                yield from _copy_into(zf, sink, f"{prefix}{rel}", src)
    yield sink.drain()


def episode_zip(store: ServerStore, task: str, index: int) -> Iterator[bytes]:
    """The zip of episode ``index`` (module docstring), as response chunks.

    Raises
    ------
    FileNotFoundError
        No committed episode ``index`` (raised here, before the response starts).
    """
    return _zip_of(store, task, _episode_members(store, task, index), f"{task}/")


class _Chunks:
    """A file-like reader over an iterator of byte chunks (an inner zip copied into an outer one)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._it, self._buf = chunks, b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buf) < n:
            nxt = next(self._it, None)
            if nxt is None:
                break
            self._buf += nxt
        out, self._buf = (self._buf, b"") if n < 0 else (self._buf[:n], self._buf[n:])
        return out

    def __enter__(self) -> _Chunks:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def episodes_zip(store: ServerStore, task: str, indices: Sequence[int]) -> Iterator[bytes]:
    """A zip of one ``<task>-<N>.zip`` (:func:`episode_zip`) per N of ``indices``, streamed end to end.
    An episode deleted meanwhile is left out (its name is listed in ``MISSING.txt``)."""
    sink = _Sink()
    missing: list[int] = []
    with zipfile.ZipFile(sink, "w", compression=_STORED, allowZip64=True) as zf:
        for n in indices:
            try:
                members = _episode_members(store, task, n)
            except FileNotFoundError:
                missing.append(n)
                continue
            src = _Chunks(_zip_of(store, task, members, f"{task}/"))
            yield from _copy_into(zf, sink, f"{task}-{n}.zip", src)
        if missing:
            zf.writestr("MISSING.txt", "episodes deleted while this zip was made: "
                        + ", ".join(str(n) for n in missing) + "\n")
    yield sink.drain()


def scratch_dir(store: ServerStore) -> Path:
    """A fresh directory under the server's staging area for one export (released by the caller, swept when stale,
    or removed by :meth:`~egopool.server.store.ServerStore.clean_scratch` at the next start)."""
    return make_scratch(store.staging_dir)


def file_stream(path: Path, cleanup: Path | None = None) -> Iterator[bytes]:
    """``path``'s bytes in :data:`BLOCK` chunks; ``cleanup`` (a directory) is removed at the end or when the
    client goes away."""
    try:
        with open(path, "rb") as f:
            while True:
                block = f.read(BLOCK)
                if not block:
                    break
                yield block
    finally:
        if cleanup is not None:
            release_scratch(cleanup)


def rerun_ready() -> None:
    """Check that rerun-sdk is installed in a release egopool drives, without importing it.

    Raises
    ------
    EgopoolError
        It is not (the hint names the ``interop`` extra, or the pip command of a release that fits).
    """
    from ..interop._releases import RERUN

    RERUN.require()


def rerun_file(store: ServerStore, task: str, index: int) -> tuple[Path, Path]:
    """Write episode ``index`` as ``<task>-<N>.rrd`` in a scratch directory; ``(file, directory)``.

    Raises
    ------
    EgopoolError
        rerun-sdk is not installed (its hint names the ``interop`` extra) or is a release egopool does not
        drive; the episode does not export. The scratch directory is removed first.
    """
    from ..interop.rerun import export_rerun

    d = scratch_dir(store)
    try:
        out = d / f"{task}-{index}.rrd"
        export_rerun(store.task_location(task), out, [index])
    except BaseException:
        release_scratch(d)
        raise
    return out, d


def server_events(store: ServerStore, task: str) -> ExportEvents:
    """Every reviewer's event of ``task`` in this server's ``server.db`` (all pages of ``find_events``), as the
    export takes them (what ``egopool export lerobot --events-from <this server's GET /api/v1/events>`` reads)."""
    rows, after = [], 0
    while True:
        page = find_events(store.db, task=task, after=after, limit=MAX_EVENTS_PAGE)
        rows += page
        if len(page) < MAX_EVENTS_PAGE:
            break
        after = page[-1].id
    events = [ReviewEvent(r.task, r.episode_index, r.t0, r.t1, r.label, r.note, r.token_id, r.updated_by,
                          r.created_at, r.updated_at, r.id) for r in rows]
    return ExportEvents(f"this server's events (GET /api/v1/events?task={task})", events_by_episode(events, task))


def lerobot_export_dir(store: ServerStore, task: str, indices: Sequence[int]) -> tuple[Path, Path]:
    """Export ``indices`` of ``task`` as a LeRobot dataset into a scratch directory: ``(directory, dataset root)``
    (stream it with :func:`lerobot_stream`).

    Raises
    ------
    UploadRejectedError
        501: the store is a bucket (``export lerobot`` reads a task directory here).
    EgopoolError
        The export fails (the scratch directory is removed first).

    The task's events in ``server.db`` go with it (:func:`server_events`): ``language_events`` and
    ``egopool_mapping.json``'s ``events``, as ``--events-from`` writes them.
    """
    from ..interop.lerobot_export import export_lerobot

    if store.root is None:
        raise UploadRejectedError(501, "not_available", "a LeRobot download reads the task from a directory store; "
                                                        "this server's store is a bucket",
                                  hint="run `egopool export lerobot s3://… OUT` where the bucket is reachable")
    events = server_events(store, task)
    d = scratch_dir(store)
    try:
        out = d / f"{task}-lerobot"
        export_lerobot(store.root / task, out, episodes=list(indices), events=events)
    except BaseException:
        release_scratch(d)
        raise
    return d, out


def lerobot_stream(task: str, d: Path, out: Path) -> Iterator[bytes]:
    """The dataset root ``out`` as a zip (members under ``<task>-lerobot/``); ``d`` is removed at the end."""
    try:
        sink = _Sink()
        with zipfile.ZipFile(sink, "w", compression=_STORED, allowZip64=True) as zf:
            for p in sorted(out.rglob("*")):
                if p.is_file():
                    with open(p, "rb") as src:
                        yield from _copy_into(zf, sink, f"{task}-lerobot/{p.relative_to(out).as_posix()}", src)
        yield sink.drain()
    finally:
        release_scratch(d)
