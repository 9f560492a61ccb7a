"""Helpers shared by the maintenance operations: progress callbacks, backups, registry choice, paths."""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .._atomic import fsync_dir, temp_path_for
from ..registry import Registry
from ..storage import ObjectPath

__all__ = ["BACKUP_DIR", "EXT_TAIL", "Progress", "backup_copy", "new_backup_dir", "open_registry", "path_regex",
           "prune_empty_dirs", "rel", "remove_stale_temps", "timestamp", "walk_files", "walk_rel"]

#: ``progress(done, total, what)``: called after each unit of work (an episode, a step).
Progress = Callable[[int, int, str], None]

#: Backups of delete / recalc / repair live in this dot directory of the task (dotfiles are
#: ignored by every reader and never uploaded, file_format.md §11, checklist §12.8).
BACKUP_DIR = ".egopool_backup"

#: A video path template's ``.{ext}`` tail; without it the template names a legacy PNG16
#: depth directory ``episode-NNN/`` (docs/decisions.md C4).
EXT_TAIL = re.compile(r"\.\{ext(?::[^}]*)?\}$")


def timestamp() -> str:
    """UTC ``YYYYmmddTHHMMSSffffffZ`` for backup directory names (sortable, unique per µs)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def new_backup_dir(task_dir: Path, op: str) -> Path:
    """A fresh, empty ``<task>/.egopool_backup/<op>-<timestamp>/`` (created)."""
    d = Path(task_dir) / BACKUP_DIR / f"{op}-{timestamp()}"
    d.mkdir(parents=True, exist_ok=False)
    return d


def backup_copy(task_dir: Path, src: Path, backup_dir: Path) -> Path:
    """Copy ``src`` (a file inside ``task_dir``) to the same relative path under ``backup_dir``.

    The copy is written to a dot-temp and renamed into place, so a backup that exists
    is complete. An existing complete backup is kept (idempotent). Returns its path.
    """
    dst = backup_dir / Path(src).relative_to(task_dir)
    if dst.exists():
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(dst)
    try:
        shutil.copy2(src, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(dst.parent)
    return dst


def open_registry(task_dir: Path, registry: bool | str | Path | Registry | None) -> Registry | None:
    """Resolve the ``registry`` argument of an operation: True = beside the task, False/None = none."""
    if isinstance(registry, Registry):
        return registry
    if registry is True:
        return Registry.for_task(task_dir)
    if registry:
        return Registry(registry)
    return None


def rel(task_dir: Path | ObjectPath, path: Path | ObjectPath) -> str:
    """POSIX path of ``path`` relative to the task directory (for reports and journals); for a task in a
    bucket, the key relative to the task's prefix."""
    if isinstance(task_dir, ObjectPath) or isinstance(path, ObjectPath):
        base, full = str(task_dir).rstrip("/") + "/", str(path)
        if not full.startswith(base):
            raise ValueError(f"{full} is not inside {base}")
        return full[len(base):]
    return Path(path).relative_to(task_dir).as_posix()


def path_regex(template: str, chunk: int | None = None, file: int | None = None) -> tuple[str, re.Pattern[str]]:
    """(static directory prefix, regex of task-relative paths) for a path template (file_format.md §2).

    ``{c}``/``{f}`` (or ``chunk_index``/``file_index``) are filled in when ``chunk``/``file``
    are given, else captured as groups ``c``/``f``; ``{image_key}`` and ``{ext}`` are
    captured as one path segment / one extension (never starting with a dot). The
    literal ``episode-`` also matches the pre-v1.1.2 ``file-`` prefix, captured as
    group ``pfx``.
    """
    marks = {"c": "\x01", "f": "\x02", "image_key": "\x03", "ext": "\x04"}
    c = marks["c"] if chunk is None else chunk
    f = marks["f"] if file is None else file
    fmt = template.replace("{chunk_index", "{c").replace("{file_index", "{f")
    fmt = re.sub(r"\{([cf]):[^}]*\}", lambda m: "{" + m.group(1) + "}" if (chunk if m.group(1) == "c" else file) is None
                 else m.group(0), fmt)
    text = fmt.format(c=c, f=f, image_key=marks["image_key"], ext=marks["ext"])
    prefix = re.split("[\x01-\x04]", text, maxsplit=1)[0]
    prefix = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
    pattern = re.escape(text)
    pattern = pattern.replace(re.escape("episode-"), "(?P<pfx>episode|file)-", 1)
    groups = {"c": r"(?P<c>\d+)", "f": r"(?P<f>\d+)", "image_key": r"(?P<image_key>[^/.][^/]*)",
              "ext": r"(?P<ext>[^/.]+)"}
    for name, mark in marks.items():
        pattern = pattern.replace(re.escape(mark), groups[name], 1).replace(re.escape(mark), f"(?P={name})")
    return prefix, re.compile("^" + pattern + "$")


def walk_files(root: Path, top: str) -> Iterator[Path]:
    """Files under ``root/top``, skipping every dot or ``_`` entry (temps, staged deletes, backups, §11)."""
    start = root / top if top else root
    if not start.is_dir():
        return
    stack = [start]
    while stack:
        d = stack.pop()
        for e in os.scandir(d):
            if e.name.startswith((".", "_")):
                continue
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
            elif e.is_file():
                yield Path(e.path)


def walk_rel(root: Path, top: str) -> Iterator[str]:
    """Task-relative POSIX paths of the files under ``root/top`` (as :func:`walk_files`, skipping every
    dot or ``_`` entry), as plain strings: a chunk directory holds up to ``chunks_size`` files per
    stream, and building a ``Path`` for each one is most of the cost of a per-N search."""
    start = os.path.join(root, top) if top else str(root)
    if not os.path.isdir(start):
        return
    stack = [(start, top)]
    while stack:
        d, rel = stack.pop()
        with os.scandir(d) as it:
            for e in it:
                if e.name.startswith((".", "_")):
                    continue
                r = f"{rel}/{e.name}" if rel else e.name
                if e.is_dir(follow_symlinks=False):
                    stack.append((e.path, r))
                elif e.is_file():
                    yield r


def remove_stale_temps(final: Path) -> list[Path]:
    """Unlink the dot-temps of ``final`` (``.{name}.<8 hex>.tmp``, :func:`~egopool._atomic.temp_path_for`).

    Only for files written under the task lock by the caller's operation: a temp of
    theirs that the lock holder sees was left by a process killed mid-write. Returns
    what was removed.
    """
    final = Path(final)
    if not final.parent.is_dir():
        return []
    rx = re.compile(r"^\." + re.escape(final.name) + r"\.[0-9a-f]{8}\.tmp$")
    out = []
    for e in os.scandir(final.parent):
        if rx.match(e.name) and e.is_file(follow_symlinks=False):
            try:
                os.unlink(e.path)
            except FileNotFoundError:
                continue
            out.append(Path(e.path))
    return out


def prune_empty_dirs(root: Path, paths: Iterable[Path]) -> None:
    """Remove chunk / image_key directories left empty by removing ``paths`` (never data/, videos/, meta/)."""
    keep = {root, root / "data", root / "videos", root / "meta", root / "meta" / "episodes"}
    for p in sorted({q.parent for q in paths}, key=lambda d: len(d.parts), reverse=True):
        d = p
        while d not in keep and root in d.parents:
            try:
                d.rmdir()
            except OSError:
                break
            d = d.parent
