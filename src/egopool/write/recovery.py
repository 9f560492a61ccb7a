"""Recovering from a recorder that died without cleaning up (SIGKILL, power loss; file_format.md §2, §7.5).

A killed process cannot write ``recycled_episode.json``. What it leaves is its
reservation ``meta/.reserved-<N>`` holding a pid that no longer runs, dot-temp files
of N, and — if it died while publishing — complete files of N under their final names.
The ``meta/episodes`` row is the commit record (decisions.md #5), so for every stale
reservation, under the task lock:

* **no row** (never committed): N's final data/video files and temps are removed and N
  is marked recycled, so the next recording reuses it ("异常终止不占号", §1.3);
* **row present, pending declarations present** (died between the commit and the
  ``info.json`` / ``stats.json`` merge): the declarations are merged into ``info.json``
  (a union, so merging twice changes nothing) and ``stats.json`` is recomputed from the
  committed episodes;
* **row present, nothing pending**: the episode finished; only the reservation goes.

The pending declarations are ``meta/.pending-<N>.json`` (a dotfile, ignored by readers
per §11), written atomically just before the row and removed after the merge. A pending
file left by a live process whose merge failed (``MetaUpdateError``: disk full...) is
replayed the same way once that process released N. A replay that fails again is left
for the next writer (RuntimeWarning); recording is never blocked by it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._atomic import atomic_write_json
from .._safe_read import read_json
from ..errors import EgopoolError
from ..layout import TaskLayout
from ..meta import markers
from ..meta.leftovers import find_leftovers
from ..meta.info import merge_info, read_info, write_info
from ..meta.stats import write_stats
from .local_paths import local_file
from .task_meta import committed_stats

__all__ = ["clear_pending", "pending_indices", "pending_path", "reclaim_stale", "remove_episode_temps",
           "sweep_stale_temps", "write_pending"]


def pending_path(task_dir: str | Path, index: int) -> Path:
    """``meta/.pending-<N>.json``: episode N's declarations between commit and merge."""
    return Path(task_dir) / "meta" / f".pending-{index}.json"


def write_pending(task_dir: str | Path, index: int, declarations: Mapping[str, Any]) -> None:
    """Atomically store N's ``info.json`` declarations before its row is committed. Caller holds the lock."""
    atomic_write_json(pending_path(task_dir, index), {"episode_index": index, "info": dict(declarations)},
                      indent=None)


def clear_pending(task_dir: str | Path, index: int) -> None:
    """Remove N's pending declarations once ``info.json`` and ``stats.json`` are merged."""
    with contextlib.suppress(FileNotFoundError):
        pending_path(task_dir, index).unlink()


def _episode_files(layout: TaskLayout, index: int) -> list[Path]:
    """N's data/video/episodes files under final names and their dot-temps."""
    out: list[Path] = []
    data, row = local_file(layout.data_file(index)), local_file(layout.episodes_file(index))
    for final in (data, row):
        if final.exists():
            out.append(final)
        if final.parent.is_dir():
            out += final.parent.glob(f".{final.name}.*.tmp")
    c, f = layout.chunk_file(index)
    vchunk = local_file(layout.video_file(index, "_", "x")).parent.parent
    if vchunk.is_dir():
        for slot in vchunk.iterdir():
            if slot.is_dir():
                out += slot.glob(f"episode-{f:03d}.*")
                out += slot.glob(f".episode-{f:03d}.*.tmp")
    return out


#: Meta files only ever written under the task lock: a temp of theirs seen by the lock holder is stale.
_LOCKED_META = ("info.json", "stats.json", "recycled_episode.json", "tasks.jsonl")


def _sweep_meta_temps(task_dir: Path) -> None:
    meta = task_dir / "meta"
    if not meta.is_dir():
        return
    for name in _LOCKED_META:
        for p in meta.glob(f".{name}.*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    for p in meta.glob("..pending-*.json.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _replay(task_dir: Path, index: int, layout: TaskLayout) -> bool:
    """Merge N's pending declarations into info.json and rebuild stats.json; False when it failed."""
    pending = pending_path(task_dir, index)
    try:
        if not pending.exists() and not pending.is_symlink():
            return True
        decl = read_json(pending, what="pending declarations")["info"]
    except (EgopoolError, OSError, ValueError, KeyError, TypeError):
        decl = {}  # a pending file is written atomically: unreadable means damaged; stats still rebuilt
    try:
        info = read_info(task_dir)
        if isinstance(decl, Mapping):
            info = merge_info(info, decl)
            write_info(task_dir, info)
        write_stats(task_dir, committed_stats(task_dir, info, layout))
    except (EgopoolError, OSError, ValueError) as exc:
        warnings.warn(f"episode {index} is saved but its info.json/stats.json merge could not be replayed "
                      f"({exc}); the next writer retries", RuntimeWarning, stacklevel=4)
        return False
    clear_pending(task_dir, index)
    return True


def pending_indices(task_dir: str | Path) -> list[int]:
    """N with a ``meta/.pending-<N>.json`` (a merge not finished yet), ascending."""
    out = []
    for p in (Path(task_dir) / "meta").glob(".pending-*.json"):
        try:
            out.append(int(p.name[len(".pending-"):-len(".json")]))
        except ValueError:
            continue
    return sorted(out)


def reclaim_stale(task_dir: str | Path, layout: TaskLayout) -> list[int]:
    """Clean up after every recorder of this task that died; returns the N rolled back.

    Also replays pending merges no live process holds, and removes temps of meta files
    that are only written under the task lock (``info.json``, ``stats.json``...): holding
    the lock, any such temp is a dead writer's. Caller holds the task lock (the dead
    process held it at most until it died: ``flock`` is released with the process).
    """
    task_dir = Path(task_dir)
    _sweep_meta_temps(task_dir)
    rolled: list[int] = []
    for n in markers.stale_reservations(task_dir):
        if not layout.episodes_file(n).exists():
            for p in _episode_files(layout, n):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            clear_pending(task_dir, n)
            recycled = markers.read_recycled(task_dir)
            if recycled is None or recycled > n or layout.episodes_file(recycled).exists():
                markers.write_recycled(task_dir, n)
            rolled.append(n)
        markers.release(task_dir, n)
    pending = pending_indices(task_dir)
    if pending:
        live = markers.live_reservations(task_dir)
        for n in pending:
            if n in live:
                continue  # its writer is inside finish() or about to report its own failure
            if layout.episodes_file(n).exists():
                _replay(task_dir, n, layout)
            else:
                clear_pending(task_dir, n)  # the row was never written: nothing to merge
    return rolled


def sweep_stale_temps(task_dir: str | Path, layout: TaskLayout) -> list[Path]:
    """Remove every dot-temp of a dead writer (:func:`egopool.meta.leftovers.find_leftovers`); returns them.

    Episode temps whose N no live process reserves, and every temp under ``meta/``: the caller holds
    the task lock, so no live writer is writing one. A writer that opens the task calls it once
    (:class:`~egopool.write.task_writer.TaskWriter`), ``egopool repair clean TASK`` on demand.
    """
    removed = []
    for p in find_leftovers(task_dir, layout, meta_temps=True).temps:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            removed.append(p)
    return removed


def remove_episode_temps(layout: TaskLayout, index: int) -> None:
    """Remove N's dot-temps (data, row, videos) before N is taken again; caller holds the task lock and N is
    reserved by no live process (a writer that failed before it could clean up, e.g. on a full disk)."""
    for p in _episode_files(layout, index):
        if p.name.startswith("."):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
