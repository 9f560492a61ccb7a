"""The plan of ``egopool migrate`` (file_format.md §2, §6.1, §11): the steps that bring a legacy task to the
v1.1.2 layout, computed without changing anything, for a task directory or ``s3://bucket/prefix/task`` alike
(its files are listed through the task's path). :mod:`egopool.ops.migrate` runs them in a directory,
:mod:`egopool.ops.migrate_store` in a bucket; both keep the journal ``_migrate_backup_<time>/migrate.json``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._safe_read import read_json, read_parquet
from ..errors import EgopoolError, FormatError, OperationError
from ..layout import TaskLayout
from ..meta.episodes import EPISODE_COLUMNS, JSON_COLUMNS
from ..meta.info import read_info
from ..meta.stats import needs_recalc, read_stats
from ..storage import ObjectPath, as_path
from ._common import EXT_TAIL, path_regex, rel, walk_files

__all__ = ["BACKUP_PREFIX", "JOURNAL_NAME", "MigrationReport", "Step", "pause_after", "pending_journal",
           "plan_migration", "refuse_during_migration", "row_bytes"]

_PAUSE_ENV = "EGOPOOL_MIGRATE_PAUSE"


def pause_after(done: int, write: Callable[[str, bytes], object]) -> None:
    """``EGOPOOL_MIGRATE_PAUSE=<k>``: after step k (and its checkpoint), write ``.migrate-paused-<k>`` at the task
    root with ``write(key, bytes)`` and sleep: the seam the crash tests SIGKILL a real run at. Unset in production."""
    if os.environ.get(_PAUSE_ENV) == str(done):
        write(f".migrate-paused-{done}", str(os.getpid()).encode())
        time.sleep(3600)

BACKUP_PREFIX = "_migrate_backup_"
JOURNAL_NAME = "migrate.json"
_TEMPLATE_KEYS = ("data_path", "video_path", "episodes_path")
_OBSOLETE = ("meta/.stats_state.json", "_trash")


@dataclass(frozen=True)
class Step:
    """One idempotent migration step; paths are task-relative POSIX strings.

    ``kind``:

    * ``backup``: copy ``src`` to ``dst`` (inside the backup directory);
    * ``templates``: set ``info.json`` path templates to ``value`` (a dict);
    * ``split_row``: write N=``index``'s row from the shard copy ``src`` to ``dst``;
    * ``remove``: unlink ``src`` (a shard whose rows are all written; its copy is in the backup);
    * ``rename``: ``src`` -> ``dst`` (``file-`` -> ``episode-``, same bytes);
    * ``stash``: move ``src`` (a file or directory) to ``dst`` inside the backup directory;
    * ``registry``: refresh N=``index``'s file list and hashes in ``pipeline.db``.
    """

    kind: str
    src: str | None = None
    dst: str | None = None
    index: int | None = None
    value: Any = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the journal and ``--json``)."""
        return {k: v for k, v in (("kind", self.kind), ("src", self.src), ("dst", self.dst), ("index", self.index),
                                  ("value", self.value)) if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        """Inverse of :meth:`to_dict`."""
        return cls(d["kind"], d.get("src"), d.get("dst"), d.get("index"), d.get("value"))

    def describe(self) -> str:
        """One line for people."""
        if self.kind == "split_row":
            return f"write episode {self.index}'s row from shard {self.src} to {self.dst}"
        if self.kind == "templates":
            return f"set info.json templates to {self.value}"
        if self.kind == "registry":
            ns = [int(n) for n in (self.value or [])]
            if len(ns) <= 5:
                return f"refresh registry files of episodes {', '.join(map(str, ns))}"
            return f"refresh registry files of {len(ns)} episodes ({ns[0]} … {ns[-1]})"
        if self.kind == "remove":
            return f"remove {self.src} (copy in the backup)"
        return f"{self.kind} {self.src} -> {self.dst}"


@dataclass
class MigrationReport:
    """Result of :func:`migrate_task`.

    Attributes
    ----------
    steps:
        The plan (empty: nothing to migrate; nothing was changed).
    backup:
        The ``_migrate_backup_<time>`` directory (on a bucket: that prefix), or None.
    done:
        Steps completed by this call.
    resumed:
        True when an interrupted migration was picked up.
    notes:
        Things the user should know (kept ``episode-`` files, legacy stats blocks...).
    """

    task_dir: Path | ObjectPath
    dry_run: bool
    steps: list[Step]
    backup: Path | ObjectPath | None = None
    done: int = 0
    resumed: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool migrate --json``)."""
        return {"task": str(self.task_dir), "dry_run": self.dry_run, "resumed": self.resumed,
                "backup": _rel(self.task_dir, self.backup) if self.backup else None,
                "steps": [s.to_dict() for s in self.steps], "done": self.done, "notes": self.notes}


def _new_templates(info: dict[str, Any]) -> dict[str, str]:
    from ..layout import DEFAULT_DATA_PATH, DEFAULT_EPISODES_PATH, DEFAULT_VIDEO_PATH

    defaults = {"data_path": DEFAULT_DATA_PATH, "video_path": DEFAULT_VIDEO_PATH, "episodes_path": DEFAULT_EPISODES_PATH}
    out = {}
    for key in _TEMPLATE_KEYS:
        t = str(info.get(key, defaults[key]))
        head, _, name = t.rpartition("/")
        if name.startswith("file-"):
            t = f"{head}/episode-{name[len('file-'):]}" if head else "episode-" + name[len("file-"):]
        out[key] = t
    return out


def _read_indices(path: Path | ObjectPath) -> list[int | None]:
    try:
        values = read_parquet(path, ["episode_index"], what="legacy shard").column("episode_index").to_pylist()
    except Exception as exc:
        reason = exc.message if isinstance(exc, EgopoolError) else str(exc)
        raise FormatError(f"cannot read episode_index column: {reason}", path=str(path),
                          hint="restore the legacy shard from a backup before migrating") from exc
    return [None if v is None else int(v) for v in values]


def _walk(root: Path | ObjectPath, top: str) -> list[Path | ObjectPath]:
    """Files under ``root/top`` (a directory or a bucket prefix), skipping every dot or ``_`` component (§11)."""
    if isinstance(root, Path):
        return list(walk_files(root, top))
    start = root / top if top else root
    out: list[Path | ObjectPath] = []
    for key, _size in start.walk_files():
        if any(part.startswith((".", "_")) for part in key.split("/")):
            continue
        out.append(start / key)
    return out


def _holds_something(p: Path | ObjectPath) -> bool:
    """A file, or a directory / prefix with an object under it (a bucket's empty directory markers are nothing)."""
    if isinstance(p, Path):
        return p.exists()
    return p.is_file() or any(k and not k.endswith("/") for k, _ in p.walk_files())


def _rel(root: Path | ObjectPath, path: Path | ObjectPath) -> str:
    if isinstance(root, Path) and isinstance(path, Path):
        return rel(root, path)
    base = str(root).rstrip("/") + "/"
    text = str(path)
    if not text.startswith(base):
        raise ValueError(f"{text} is not under {base}")
    return text[len(base):]


def _episode_entries(root: Path | ObjectPath, template: str) -> list[tuple[Path | ObjectPath, re.Match[str]]]:
    """Files matching a path template, plus directories at a video's place (PNG16 sequences, decisions C4).

    A directory counts when it holds a file and its path matches the template, or the
    template without its ``.{ext}`` tail (``episode-000.png/`` and ``episode-000/``).
    """
    prefix, rx = path_regex(template)
    _, rx_dir = path_regex(EXT_TAIL.sub("", template)) if EXT_TAIL.search(template) else (None, None)
    out: dict[Path | ObjectPath, re.Match[str]] = {}
    for p in _walk(root, prefix):
        m = rx.match(_rel(root, p))
        if m:
            out[p] = m
        elif rx_dir is not None and p.parent != root:
            parent = _rel(root, p.parent)
            md = rx.match(parent) or rx_dir.match(parent)
            if md:
                out[p.parent] = md
    return sorted(out.items(), key=lambda kv: kv[0].parts)


def plan_migration(task_dir: str | Path | ObjectPath, *, split_episodes: bool = True) -> tuple[list[Step], list[str]]:
    """Compute the migration plan without changing anything.

    Returns
    -------
    (steps, notes):
        Ordered :class:`Step` list with backup paths under ``_migrate_backup_@`` (the
        ``@`` is replaced by the run's timestamp), and notes for the user.

    Raises
    ------
    FormatError
        ``info.json`` or a legacy shard cannot be read.
    """
    root = as_path(task_dir)
    info = read_info(root)
    new_t = _new_templates(info)
    layout = TaskLayout.from_info(root, {**info, **new_t})
    bdir = BACKUP_PREFIX + "@"
    steps: list[Step] = []
    notes: list[str] = []
    touched: set[int] = set()
    changes_templates = any(info.get(k) not in (None, new_t[k]) for k in _TEMPLATE_KEYS)
    if changes_templates:
        steps += [Step("backup", "meta/info.json", f"{bdir}/meta/info.json"), Step("templates", value=new_t)]

    # meta/episodes: legacy file- files are either per-episode (one row, own N) or shards
    per_episode_existing = set()
    legacy_meta: list[tuple[Path | ObjectPath, list[int | None]]] = []
    prefix, rx = path_regex(layout.episodes_path)
    for p in sorted(_walk(root, prefix), key=lambda q: q.parts):
        m = rx.match(_rel(root, p))
        if not m:
            continue
        if m["pfx"] == "episode":
            per_episode_existing.add(layout.index_of(int(m["c"]), int(m["f"])))
        else:
            legacy_meta.append((p, _read_indices(p)))
    renames: list[Step] = []
    for p, indices in legacy_meta:
        m = rx.match(_rel(root, p))
        assert m is not None
        own = layout.index_of(int(m["c"]), int(m["f"])) if int(m["f"]) < layout.chunks_size else None
        if len(indices) == 1 and indices[0] == own and own is not None:
            if own in per_episode_existing:
                steps.append(Step("stash", _rel(root, p), f"{bdir}/{_rel(root, p)}"))
                notes.append(f"episode {own}: kept {_rel(root, layout.episodes_file(own))}; the duplicate "
                             f"{_rel(root, p)} went to the backup")
            else:
                renames.append(Step("rename", _rel(root, p), _rel(root, layout.episodes_file(own))))
                per_episode_existing.add(own)
            touched.add(own)
            continue
        if not split_episodes:
            notes.append(f"{_rel(root, p)} is a legacy multi-row shard; run with --split-episodes to split it")
            continue
        copy = f"{bdir}/{_rel(root, p)}"
        steps.append(Step("backup", _rel(root, p), copy))
        seen: set[int] = set()
        for n in indices:
            if n is None or n < 1 or n in seen:
                if n is not None and n in seen:
                    notes.append(f"{_rel(root, p)}: duplicate row for episode {n}; the first one was used")
                else:
                    notes.append(f"{_rel(root, p)}: row with episode_index={n} skipped (not a valid N)")
                continue
            seen.add(n)
            if n in per_episode_existing:
                notes.append(f"episode {n}: kept {_rel(root, layout.episodes_file(n))}; its row in "
                             f"{_rel(root, p)} is only in the backup")
                continue
            steps.append(Step("split_row", copy, _rel(root, layout.episodes_file(n)), index=n))
            per_episode_existing.add(n)
            touched.add(n)
        steps.append(Step("remove", _rel(root, p)))

    # data/ and videos/: per-episode file- names (a legacy PNG16 depth directory is one entry)
    for template in (layout.data_path, layout.video_path):
        for p, m in _episode_entries(root, template):
            if m["pfx"] != "file" or int(m["f"]) >= layout.chunks_size:
                continue
            n = layout.index_of(int(m["c"]), int(m["f"]))
            gd = m.groupdict()
            if template == layout.data_path:
                target = layout.data_file(n)
            elif gd.get("ext") is not None:
                target = layout.video_file(n, gd["image_key"], gd["ext"])
            else:  # PNG16 directory without the ".{ext}" tail: episode-NNN/
                target = p.with_name("episode-" + p.name[len("file-"):])
            if target.exists():
                steps.append(Step("stash", _rel(root, p), f"{bdir}/{_rel(root, p)}"))
                notes.append(f"episode {n}: kept {_rel(root, target)}; the duplicate {_rel(root, p)} went to the backup")
            else:
                renames.append(Step("rename", _rel(root, p), _rel(root, target)))
            touched.add(n)
    steps += renames

    for name in _OBSOLETE:
        if _holds_something(root / name):
            steps.append(Step("stash", name, f"{bdir}/{name}"))
    if steps and touched:
        steps.append(Step("registry", value=sorted(touched)))
    with contextlib.suppress(FormatError):
        if needs_recalc(read_stats(root)):
            notes.append("stats.json has legacy blocks without count: run `egopool stats recalc TASK`")
    return steps, notes


# -- shared by both runners ----------------------------------------------------------------------
def row_bytes(shard: Path | ObjectPath, index: int) -> bytes:
    """N's row of a shard as a one-row parquet: every stored column kept, missing ones defaulted (§6.2)."""
    table = read_parquet(shard, what="legacy shard")
    rows = table.filter(pc.equal(table.column("episode_index"), index))
    if rows.num_rows == 0:
        raise OperationError(f"no row with episode_index={index}", path=str(shard))
    row = rows.slice(0, 1)  # the reader also takes the first row of a duplicated N
    cols: dict[str, pa.Array] = {}
    for name, typ in EPISODE_COLUMNS.items():
        if name in row.column_names:
            col = row.column(name)
            # a legacy column that cannot take the spec's type is kept as stored, never altered: `validate`
            # names its type on the migrated row (as before the move out of migrate.py)
            with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
                col = col.cast(typ)
            cols[name] = col
        elif name in JSON_COLUMNS:
            cols[name] = pa.array(["{}"], type=typ)
        elif name == "task_index":
            cols[name] = pa.array([0], type=typ)
    for name in row.column_names:
        if name not in cols:
            cols[name] = row.column(name)
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf, compression="zstd")
    return buf.getvalue()


def pending_journal(root: Path | ObjectPath) -> Path | ObjectPath | None:
    backups: list[Path | ObjectPath] = list(root.glob(BACKUP_PREFIX + "*"))
    for d in sorted(backups, key=str, reverse=True):
        j = d / JOURNAL_NAME
        if j.is_file():
            try:
                state = read_json(j, what="migration journal").get("state")
            except (FormatError, OSError, ValueError, AttributeError) as exc:
                raise OperationError(f"unreadable migration journal: {exc}", path=str(j),
                                     hint="inspect the backup directory; remove the journal to re-plan") from exc
            if state != "done":
                return j
    return None


def refuse_during_migration(task_dir: str | Path | ObjectPath, what: str) -> None:
    """Raise when an interrupted migration is pending (``_migrate_backup_*/migrate.json`` not ``done``).

    A resumed migration re-writes ``meta/episodes`` rows from its shard copies and renames
    files it planned, so a delete or a row repair in between would be undone or block it.

    Raises
    ------
    OperationError
        Naming the journal and ``egopool migrate TASK`` (which resumes it).
    """
    root = as_path(task_dir)
    journal = pending_journal(root)
    if journal is not None:
        raise OperationError(f"cannot {what} during an interrupted migration ({_rel(root, journal)} is not done)",
                             path=str(root), hint="run `egopool migrate TASK` to finish it first")


