"""What dead writers leave inside a task: dot-temp files and reservations of processes that no longer run.

Every file egopool writes starts as a dot-temp ``.<final name>.<8 hex>.tmp`` beside its final
name (:func:`egopool._atomic.temp_path_for`); an episode being recorded holds ``meta/.reserved-<N>``
with its writer's pid (:mod:`egopool.meta.markers`). A writer killed by SIGKILL, a power loss or a
failure it could not clean up after (a full disk) leaves both behind. Readers ignore them (dotfiles,
file_format.md §11), but they hold disk space (a killed ``simulate`` left 115 MB) and nothing said so.

A temp is **stale** when no live writer can still be writing it:

* under ``data/``, ``videos/`` (episode files): its episode N is not reserved by a live process
  (a recorder writes N's temps only while it holds N's reservation, and publishes or removes them
  before releasing it);
* under ``meta/`` (rows, ``info.json``, ``stats.json``, markers, journals): always, for a caller
  that holds the task lock (these are written under the lock only).

This module only finds them (read-only; ``egopool validate``); removing them is
:func:`egopool.write.recovery.sweep_stale_temps` under the task lock (``egopool repair clean TASK``,
and every writer when it opens the task).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..layout import TaskLayout
from ..storage import as_local_path
from . import markers

__all__ = ["Leftovers", "TEMP_NAME", "find_leftovers"]

#: A dot-temp name: ``.<final name>.<8 hex>.tmp``.
TEMP_NAME = re.compile(r"^\.(?P<final>.+)\.[0-9a-f]{8}\.tmp$")

_MARK_KEY, _MARK_EXT = "\x01", "\x02"


@dataclass
class Leftovers:
    """Stale files of dead writers in one task.

    Attributes
    ----------
    temps:
        Dot-temp files no live writer is writing (absolute paths, sorted).
    reservations:
        N whose ``meta/.reserved-<N>`` names a process that no longer runs (ascending).
    """

    temps: list[Path] = field(default_factory=list)
    reservations: list[int] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        """Bytes the stale temps hold."""
        total = 0
        for p in self.temps:
            try:
                total += p.stat().st_size
            except OSError:
                continue
        return total

    def __bool__(self) -> bool:
        return bool(self.temps or self.reservations)


def _live_finals(root: Path, layout: TaskLayout, live: set[int]) -> tuple[set[Path], set[tuple[Path, str]]]:
    """Final paths of data/row files, and ``(video chunk dir, name prefix)`` of videos, of the live N."""
    files: set[Path] = set()
    videos: set[tuple[Path, str]] = set()
    for n in live:
        files.add(root / layout.data_key(n))
        files.add(root / layout.episodes_key(n))
        parts = PurePosixPath(layout.video_key(n, _MARK_KEY, _MARK_EXT)).parts
        k = next((i for i, p in enumerate(parts) if _MARK_KEY in p), None)
        if k is not None:
            videos.add((root.joinpath(*parts[:k]), parts[-1].split(_MARK_EXT)[0]))
    return files, videos


def _temps_under(top: Path) -> list[Path]:
    out: list[Path] = []
    if not top.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]  # staged deletes, backups: not temps
        out += [Path(dirpath) / f for f in filenames if TEMP_NAME.match(f)]
    return out


def find_leftovers(task_dir: str | os.PathLike[str], layout: TaskLayout, *, meta_temps: bool = True) -> Leftovers:
    """Stale temps and dead reservations of the task (read-only; see the module docstring).

    Parameters
    ----------
    task_dir:
        The task directory.
    layout:
        Its path templates.
    meta_temps:
        Also list temps under ``meta/`` (only correct while the caller holds the task lock, shared
        or exclusive: they are written under it).

    Returns
    -------
    Leftovers

    Raises
    ------
    FormatError
        ``task_dir`` is an ``s3://`` location: dot-temps and reservations of local processes exist
        in a local task only (docs/decisions.md O7).
    """
    root = as_local_path(task_dir, what="looking for stale temp files")
    found = _temps_under(root / "data") + _temps_under(root / "videos")
    metas = _temps_under(root / "meta") if meta_temps else []
    live = markers.live_reservations(root, prune=False)  # after listing: a temp seen before its writer left
    files, videos = _live_finals(root, layout, live)
    temps = list(metas)
    for p in found:
        m = TEMP_NAME.match(p.name)
        if m is None:  # _temps_under lists only names it matches
            continue
        final = p.with_name(m["final"])
        if final in files or any(final.parent.parent == d and final.name.startswith(prefix) for d, prefix in videos):
            continue
        if p.exists():
            temps.append(p)
    dead = sorted(set(markers.stale_reservations(root)))
    return Leftovers(sorted(temps), dead)
