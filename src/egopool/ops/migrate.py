"""``egopool migrate``: bring a legacy pooled task to the v1.1.2 layout (file_format.md §2, §6.1, §11).

What it changes:

* ``--split-episodes``: every legacy multi-row ``meta/episodes/chunk-NNN/file-NNN.parquet``
  shard becomes one single-row ``episode-NNN.parquet`` per episode; rows are found by
  their ``episode_index`` (never by file name) and keep every value (columns an older
  row lacks get their defaults, §6.2 "追加旧任务"). Where N already has its own
  ``episode-`` file, that file wins (it is what every reader already uses) and the
  shard row is only kept in the backup.
* pre-v1.1.2 per-episode ``file-NNN`` names in ``data/``, ``videos/`` and ``meta/episodes``
  become ``episode-NNN`` (a rename: the bytes do not change); ``info.json`` path
  templates that still say ``file-`` are updated.
* the obsolete ``meta/.stats_state.json`` and ``_trash/`` are moved into the backup.

How it stays safe: the whole plan is computed first, then written as a journal
``_migrate_backup_<time>/migrate.json`` (the backup directory is prepared under a
dot name and renamed into place, so it exists only complete). Every step is
idempotent (a copy that exists is complete, a rename whose target exists is done, a
row write is atomic), so after a crash at any point, running ``egopool migrate``
again resumes the journal and reaches the same result as an uninterrupted run. A
second run on a migrated task finds nothing to do and changes nothing. Originals
of everything removed or rewritten (shards, ``info.json``) are copied into the
backup first.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._atomic import atomic_write_bytes, atomic_write_json, fsync_dir, task_lock, task_read_lock
from .._safe_read import read_json
from .._safe_read import read_parquet
from ..errors import EgopoolError, FormatError, OperationError
from ..layout import TaskLayout, list_task_episodes
from ..meta.episodes import EPISODE_COLUMNS, JSON_COLUMNS
from ..meta.info import read_info, write_info
from ..meta.stats import needs_recalc, read_stats
from ..registry import FileRecord, Registry, file_record, task_key
from ._common import (EXT_TAIL, Progress, backup_copy, open_registry, path_regex, rel, remove_stale_temps,
                      timestamp, walk_files)

__all__ = ["BACKUP_PREFIX", "JOURNAL_NAME", "MigrationReport", "Step", "migrate_task", "plan_migration",
           "refuse_during_migration"]

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
        The ``_migrate_backup_<time>`` directory, or None.
    done:
        Steps completed by this call.
    resumed:
        True when an interrupted migration was picked up.
    notes:
        Things the user should know (kept ``episode-`` files, legacy stats blocks...).
    """

    task_dir: Path
    dry_run: bool
    steps: list[Step]
    backup: Path | None = None
    done: int = 0
    resumed: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool migrate --json``)."""
        return {"task": str(self.task_dir), "dry_run": self.dry_run, "resumed": self.resumed,
                "backup": rel(self.task_dir, self.backup) if self.backup else None,
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


def _read_indices(path: Path) -> list[int | None]:
    try:
        values = read_parquet(path, ["episode_index"], what="legacy shard").column("episode_index").to_pylist()
    except Exception as exc:
        reason = exc.message if isinstance(exc, EgopoolError) else str(exc)
        raise FormatError(f"cannot read episode_index column: {reason}", path=path,
                          hint="restore the legacy shard from a backup before migrating") from exc
    return [None if v is None else int(v) for v in values]


def _episode_entries(root: Path, template: str) -> list[tuple[Path, re.Match[str]]]:
    """Files matching a path template, plus directories at a video's place (PNG16 sequences, decisions C4).

    A directory counts when it holds a file and its path matches the template, or the
    template without its ``.{ext}`` tail (``episode-000.png/`` and ``episode-000/``).
    """
    prefix, rx = path_regex(template)
    _, rx_dir = path_regex(EXT_TAIL.sub("", template)) if EXT_TAIL.search(template) else (None, None)
    out: dict[Path, re.Match[str]] = {}
    for p in walk_files(root, prefix):
        m = rx.match(rel(root, p))
        if m:
            out[p] = m
        elif rx_dir is not None and p.parent != root:
            parent = rel(root, p.parent)
            md = rx.match(parent) or rx_dir.match(parent)
            if md:
                out[p.parent] = md
    return sorted(out.items())


def plan_migration(task_dir: str | Path, *, split_episodes: bool = True) -> tuple[list[Step], list[str]]:
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
    root = Path(task_dir)
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
    legacy_meta: list[tuple[Path, list[int | None]]] = []
    prefix, rx = path_regex(layout.episodes_path)
    for p in sorted(walk_files(root, prefix)):
        m = rx.match(rel(root, p))
        if not m:
            continue
        if m["pfx"] == "episode":
            per_episode_existing.add(layout.index_of(int(m["c"]), int(m["f"])))
        else:
            legacy_meta.append((p, _read_indices(p)))
    renames: list[Step] = []
    for p, indices in legacy_meta:
        m = rx.match(rel(root, p))
        assert m is not None
        own = layout.index_of(int(m["c"]), int(m["f"])) if int(m["f"]) < layout.chunks_size else None
        if len(indices) == 1 and indices[0] == own and own is not None:
            if own in per_episode_existing:
                steps.append(Step("stash", rel(root, p), f"{bdir}/{rel(root, p)}"))
                notes.append(f"episode {own}: kept {rel(root, layout.episodes_file(own))}; the duplicate "
                             f"{rel(root, p)} went to the backup")
            else:
                renames.append(Step("rename", rel(root, p), rel(root, layout.episodes_file(own))))
                per_episode_existing.add(own)
            touched.add(own)
            continue
        if not split_episodes:
            notes.append(f"{rel(root, p)} is a legacy multi-row shard; run with --split-episodes to split it")
            continue
        copy = f"{bdir}/{rel(root, p)}"
        steps.append(Step("backup", rel(root, p), copy))
        seen: set[int] = set()
        for n in indices:
            if n is None or n < 1 or n in seen:
                if n is not None and n in seen:
                    notes.append(f"{rel(root, p)}: duplicate row for episode {n}; the first one was used")
                else:
                    notes.append(f"{rel(root, p)}: row with episode_index={n} skipped (not a valid N)")
                continue
            seen.add(n)
            if n in per_episode_existing:
                notes.append(f"episode {n}: kept {rel(root, layout.episodes_file(n))}; its row in "
                             f"{rel(root, p)} is only in the backup")
                continue
            steps.append(Step("split_row", copy, rel(root, layout.episodes_file(n)), index=n))
            per_episode_existing.add(n)
            touched.add(n)
        steps.append(Step("remove", rel(root, p)))

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
                steps.append(Step("stash", rel(root, p), f"{bdir}/{rel(root, p)}"))
                notes.append(f"episode {n}: kept {rel(root, target)}; the duplicate {rel(root, p)} went to the backup")
            else:
                renames.append(Step("rename", rel(root, p), rel(root, target)))
            touched.add(n)
    steps += renames

    for name in _OBSOLETE:
        if (root / name).exists():
            steps.append(Step("stash", name, f"{bdir}/{name}"))
    if steps and touched:
        steps.append(Step("registry", value=sorted(touched)))
    with contextlib.suppress(FormatError):
        if needs_recalc(read_stats(root)):
            notes.append("stats.json has legacy blocks without count: run `egopool stats recalc TASK`")
    return steps, notes


# -- running steps ----------------------------------------------------------------------------------
def _row_bytes(shard: Path, index: int) -> bytes:
    """N's row of a shard as a one-row parquet: every stored column kept, missing ones defaulted (§6.2)."""
    table = read_parquet(shard, what="legacy shard")
    rows = table.filter(pc.equal(table.column("episode_index"), index))
    if rows.num_rows == 0:
        raise OperationError(f"no row with episode_index={index}", path=shard)
    row = rows.slice(0, 1)  # the reader also takes the first row of a duplicated N
    cols: dict[str, pa.Array] = {}
    for name, typ in EPISODE_COLUMNS.items():
        if name in row.column_names:
            col = row.column(name)
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


def _move(src: Path, dst: Path, what: str) -> None:
    """Idempotent rename: done when ``src`` is gone and ``dst`` exists."""
    if not src.exists() and not src.is_symlink():
        if dst.exists():
            return
        raise OperationError(f"{what}: neither {src} nor {dst} exists", path=src,
                             hint="the task changed since the migration was planned; inspect the backup")
    if dst.exists():
        raise OperationError(f"{what}: target {dst} already exists", path=src,
                             hint="the task changed since the migration was planned; inspect the backup")
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.rename(src, dst)
    fsync_dir(dst.parent)


def _refresh_registry(root: Path, registry: Registry, indices: list[int], renames: dict[str, str]) -> None:
    """Point registry rows of migrated episodes at the new names.

    A renamed file keeps its bytes, so its size and sha256 are carried over (no
    re-hashing of videos); a new per-episode meta row file is hashed; files that no
    longer exist (stashed duplicates, split shards) are dropped.
    """
    key = task_key(root)
    rows = {r.episode_index: r for r in registry.recordings(key)}
    if not rows:
        return
    layout = TaskLayout.from_info(root, read_info(root))
    for n in indices:
        rec = rows.get(n)
        if rec is None:
            continue
        files: dict[str, FileRecord] = {}
        for f in rec.files:
            path = renames.get(f.path, f.path)
            if (root / path).is_file():
                files[path] = FileRecord(path, f.size, f.sha256)
        meta = layout.episodes_file(n)
        if meta.is_file():
            r = file_record(root, meta)
            files[r.path] = r
        registry.replace_files(key, n, sorted(files.values(), key=lambda f: f.path))


def _run_step(root: Path, step: Step, registry: Registry | None, renames: dict[str, str]) -> None:
    def p(x: str | None) -> Path:
        assert x is not None
        return root / x

    if step.kind == "backup":
        if not p(step.dst).exists():
            if not p(step.src).exists():
                raise OperationError(f"cannot back up {step.src}: it is gone and no copy exists", path=root)
            backup_copy(root, p(step.src), root / Path(step.dst).parts[0])  # type: ignore[arg-type]
    elif step.kind == "templates":
        info = read_info(root)
        if any(info.get(k) != v for k, v in step.value.items()):
            info.update(step.value)
            write_info(root, info)
    elif step.kind == "split_row":
        atomic_write_bytes(p(step.dst), _row_bytes(p(step.src), int(step.index or 0)))
    elif step.kind == "remove":
        with contextlib.suppress(FileNotFoundError):
            p(step.src).unlink()
    elif step.kind in ("rename", "stash"):
        _move(p(step.src), p(step.dst), step.kind)
    elif step.kind == "registry":
        if registry is not None:
            _refresh_registry(root, registry, [int(n) for n in step.value], renames)
    else:
        raise OperationError(f"unknown migration step {step.kind!r} in the journal", path=root)


def _sweep_temps(root: Path, steps: list[Step], journal: Path) -> None:
    """Remove the dot-temps a migration killed mid-write left beside the files its steps write."""
    finals = {journal, root / "meta" / "info.json"}
    finals.update(root / st.dst for st in steps if st.kind in ("backup", "split_row") and st.dst)
    for final in finals:
        remove_stale_temps(final)


def _pending_journal(root: Path) -> Path | None:
    for d in sorted(root.glob(BACKUP_PREFIX + "*"), reverse=True):
        j = d / JOURNAL_NAME
        if j.is_file():
            try:
                state = read_json(j, what="migration journal").get("state")
            except (FormatError, OSError, ValueError, AttributeError) as exc:
                raise OperationError(f"unreadable migration journal: {exc}", path=j,
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
    root = Path(task_dir)
    journal = _pending_journal(root)
    if journal is not None:
        raise OperationError(f"cannot {what} during an interrupted migration ({rel(root, journal)} is not done)",
                             path=root, hint="run `egopool migrate TASK` to finish it first")


def _start(root: Path, steps: list[Step], notes: list[str]) -> tuple[Path, list[Step]]:
    """Create the backup directory with its journal atomically (prepared under a dot name)."""
    stamp = timestamp()
    name = BACKUP_PREFIX + stamp
    def fill(x: str | None) -> str | None:
        return x.replace(BACKUP_PREFIX + "@", name, 1) if x is not None else None

    concrete = [Step(s.kind, fill(s.src), fill(s.dst), s.index, s.value) for s in steps]
    tmp = root / f".{name}.tmp"
    tmp.mkdir()
    atomic_write_json(tmp / JOURNAL_NAME, {"state": "running", "created": stamp, "completed": 0,
                                          "steps": [s.to_dict() for s in concrete], "notes": notes})
    os.rename(tmp, root / name)
    fsync_dir(root)
    return root / name, concrete


def migrate_task(task_dir: str | Path, *, split_episodes: bool = True, dry_run: bool = False,
                 registry: bool | str | Path | Registry | None = True, progress: Progress | None = None,
                 checkpoint_every: int = 50) -> MigrationReport:
    """Migrate a legacy pooled task in place (file_format.md §2, §6.1, §11); see the module docstring.

    Parameters
    ----------
    task_dir:
        The task directory.
    split_episodes:
        Split legacy multi-row ``meta/episodes`` shards into per-episode files.
    dry_run:
        Only plan (or show the interrupted plan that a real run would resume).
    registry:
        ``pipeline.db`` whose file lists follow renamed episodes (True = beside the task).
    progress:
        ``progress(done, total, what)`` after every step. An exception raised from it
        stops the migration like a crash would; running again resumes it.
    checkpoint_every:
        Steps between journal checkpoints (steps are idempotent, so at most this many
        are re-run after a crash).

    Returns
    -------
    MigrationReport

    Raises
    ------
    FormatError
        ``info.json`` or a shard cannot be read.
    OperationError
        A step found the task changed under it (names the file); the journal is kept
        so a re-run resumes after the cause is fixed.
    """
    root = Path(task_dir)
    read_info(root)  # format check and a one-line error for a wrong directory
    reg = open_registry(root, registry)
    with task_read_lock(root) if dry_run else task_lock(root):  # a dry run writes nothing (decisions.md #24)
        for stale in [] if dry_run else root.glob(f".{BACKUP_PREFIX}*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)  # a crash while preparing: nothing was changed
        journal = _pending_journal(root)
        if journal is not None:
            doc = read_json(journal, what="migration journal")
            steps = [Step.from_dict(d) for d in doc["steps"]]
            report = MigrationReport(root, dry_run, steps, journal.parent, resumed=True, notes=list(doc.get("notes", [])))
            start = int(doc.get("completed", 0))
        else:
            steps, notes = plan_migration(root, split_episodes=split_episodes)
            report = MigrationReport(root, dry_run, steps, notes=notes)
            if dry_run or not steps:
                return report
            report.backup, steps = _start(root, steps, notes)
            report.steps = steps
            doc = read_json(report.backup / JOURNAL_NAME, what="migration journal")
            journal, start = report.backup / JOURNAL_NAME, 0
        if dry_run:
            return report
        if report.resumed:
            _sweep_temps(root, steps, journal)
        renames = {st.src: st.dst for st in steps if st.kind == "rename" and st.src and st.dst}
        for i in range(start, len(steps)):
            try:
                _run_step(root, steps[i], reg, renames)
            except EgopoolError:
                raise
            except OSError as exc:
                raise OperationError(f"migration step {i + 1}/{len(steps)} failed ({steps[i].describe()}): {exc}",
                                     path=root,
                                     hint="fix the cause and run `egopool migrate TASK` again to resume") from exc
            report.done += 1
            if (i + 1) % checkpoint_every == 0:
                doc["completed"] = i + 1
                atomic_write_json(journal, doc)
            if progress is not None:
                progress(i + 1, len(steps), steps[i].describe())
        doc["completed"], doc["state"] = len(steps), "done"
        atomic_write_json(journal, doc)
    return report
