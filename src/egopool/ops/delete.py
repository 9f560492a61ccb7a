"""Delete episodes by global N, all-or-nothing, verified (file_format.md §2, §9).

One delete of N, under the task lock:

1. plan: the group found by :func:`~egopool.layout.find_episode_files` plus every file
   :func:`pooled_episode_leftovers` sees for N (legacy ``file-`` names, a legacy
   shard holding N's row);
2. write a journal ``meta/.delete-<N>-<token>.json`` listing every planned move;
3. registry: mark N ``deleted`` and raise the task watermark to N;
4. *stage*: rename each file to a dot name in its own directory
   (``.episode-004.parquet.deleting-<token>``: same directory, so the rename is atomic
   and never crosses a file system; dotfiles are ignored by every reader, §11). A
   legacy shard is hard-linked to such a dot name and then atomically replaced by a
   copy without N's row;
5. verify :func:`pooled_episode_leftovers` is empty;
6. commit: the journal's ``state`` becomes ``committed`` (atomic write);
7. unlink the staged files, prune empty chunk directories, remove the registry row,
   unlink the journal.

Any failure before step 6 restores every staged file (and the registry status), so
the task is byte-identical to before. A crash before step 6 is rolled back, a crash
after it rolled forward, by the next ``egopool delete`` on the task
(:func:`recover_interrupted_deletes`). ``stats.json`` and ``total_episodes`` are never
rolled back and N is never handed out again (the registry watermark, and
``total_episodes`` raised to N if it was lower).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._atomic import atomic_write_bytes, atomic_write_json, fsync_dir, task_lock, task_read_lock, temp_path_for
from .._safe_read import read_bytes, read_json, read_parquet
from ..errors import EgopoolError, EpisodeNotFoundError, FormatError, LayoutError, OperationError, RegistryError
from ..layout import TaskLayout, find_episode_files
from ..meta.info import info_path, read_info, write_info
from ..registry import Registry, task_key
from ._common import (EXT_TAIL, Progress, open_registry, path_regex, prune_empty_dirs, rel, remove_stale_temps,
                      walk_rel)
from .migrate import refuse_during_migration

__all__ = [
    "DeleteOutcome",
    "DeletePlan",
    "DeleteReport",
    "delete_episodes",
    "plan_delete",
    "pooled_episode_leftovers",
    "recover_interrupted_deletes",
]

_JOURNAL_RE = re.compile(r"^\.delete-(\d+)-([0-9a-f]+)\.json$")


# -- finding an episode's files --------------------------------------------------------------------
def _shards_with(root: Path, layout: TaskLayout, index: int) -> list[Path]:
    """Legacy ``file-*.parquet`` files of N's chunk directory whose ``episode_index`` column holds N (§6.1).

    A v1.1.0 shard holds the rows of its own chunk (§2: named by the chunk's number), so only
    N's chunk is searched, as :func:`~egopool.layout.find_episode_files` does
    (docs/decisions.md L1): the cost does not grow with the task.
    """
    prefix, _ = path_regex(layout.episodes_path, layout.chunk_file(index)[0], None)
    out = []
    for r in walk_rel(root, prefix):
        name = r.rsplit("/", 1)[-1]
        if not (name.startswith("file-") and name.endswith(".parquet")):
            continue
        p = root / r
        try:
            col = read_parquet(p, ["episode_index"], what="legacy episodes shard").column("episode_index")
        except Exception as exc:
            reason = exc.message if isinstance(exc, EgopoolError) else str(exc)
            raise FormatError(f"cannot read episode_index column: {reason}", path=p,
                              hint="the legacy episodes shard is corrupt; restore it before deleting") from exc
        if index in col.to_pylist():
            out.append(p)
    return sorted(out)


def pooled_episode_leftovers(task_dir: str | Path, index: int, layout: TaskLayout | None = None) -> list[Path]:
    """Every file that still holds episode N in the three places (file_format.md §2, §9).

    Looks at the files themselves, not at an index: ``data/`` and ``videos/`` files
    whose name is N's ``(chunk, file)`` (``episode-`` or legacy ``file-`` prefix, every
    ``image_key``, every extension), a legacy PNG16 depth directory at N's stream place
    (``episode-000/`` or ``episode-000.png/`` holding any file, docs/decisions.md C4), N's
    ``meta/episodes`` file, and every legacy ``file-*.parquet`` episodes file of N's chunk
    whose ``episode_index`` column contains N. Dotfiles (temps, staged deletes) are not
    leftovers. Only N's own chunk directories are listed (no rescan of the task).

    Parameters
    ----------
    task_dir:
        The task directory.
    index:
        Global 1-based N.
    layout:
        Templates (read from ``info.json`` when omitted).

    Returns
    -------
    list[Path]
        Sorted paths; empty when N is really gone.

    Raises
    ------
    LayoutError
        ``index < 1``.
    FormatError
        ``info.json`` or a legacy shard cannot be read.
    """
    root = Path(task_dir)
    if layout is None:
        layout = TaskLayout.from_info(root, read_info(root))
    c, f = layout.chunk_file(index)
    found: set[Path] = set()
    prefix, rx = path_regex(layout.data_path, c, f)
    found.update(root / r for r in walk_rel(root, prefix) if rx.match(r))
    # videos, and a legacy PNG16 depth sequence: a directory at the stream's place, with or without
    # the ".{ext}" tail (docs/decisions.md C4); any file inside keeps it a leftover
    prefix, rx = path_regex(layout.video_path, c, f)
    _, rx_dir = path_regex(EXT_TAIL.sub("", layout.video_path), c, f)
    for r in walk_rel(root, prefix):
        if rx.match(r):
            found.add(root / r)
        parent = r.rsplit("/", 1)[0]
        if "/" in r and (rx.match(parent) or rx_dir.match(parent)):
            found.add(root / parent)
    ep = layout.episodes_file(index)
    if ep.is_file() and not ep.name.startswith("file-"):
        found.add(ep)
    found.update(_shards_with(root, layout, index))
    return sorted(found)


# -- plan ------------------------------------------------------------------------------------------
@dataclass
class DeletePlan:
    """What deleting N will do.

    Attributes
    ----------
    index:
        Global 1-based N.
    files:
        Paths removed whole (videos, data parquet, N's own ``meta/episodes`` file; a legacy
        PNG16 depth directory is one entry).
    shards:
        Legacy multi-row ``file-NNN.parquet`` episodes shards from which only N's row is
        removed (the shard is rewritten atomically without it).
    bytes:
        Total size of ``files`` (a directory counts the files inside it).
    """

    index: int
    files: list[Path] = field(default_factory=list)
    shards: list[Path] = field(default_factory=list)
    bytes: int = 0

    def to_dict(self, task_dir: Path) -> dict[str, Any]:
        """JSON form with task-relative paths."""
        return {"episode_index": self.index, "files": [rel(task_dir, p) for p in self.files],
                "shard_rows": [rel(task_dir, p) for p in self.shards], "bytes": self.bytes}


def _check_indices(indices: Sequence[int]) -> list[int]:
    if not indices:
        raise LayoutError("no episode given", hint="pass one or more 1-based global N, e.g. `egopool delete TASK 3`")
    out: list[int] = []
    for n in indices:
        if isinstance(n, bool) or not isinstance(n, int):
            raise LayoutError(f"episode index must be an integer, got {n!r}")
        if n < 1:
            raise LayoutError(f"episode {n} refused: global N is 1-based (episode-000 is N=1)",
                              hint="pass the global N shown by `egopool ls TASK`")
        if n not in out:
            out.append(n)
    return out


def plan_delete(task_dir: str | Path, indices: Sequence[int], layout: TaskLayout | None = None) -> list[DeletePlan]:
    """Plan the deletion of each N without changing anything.

    An interrupted delete that a real run would first roll back
    (:func:`recover_interrupted_deletes`) is taken into account: the files it staged
    count at their original places, so the plan is what the real run removes.

    Raises
    ------
    LayoutError
        An N < 1 (N=0 is refused) or no N given.
    EpisodeNotFoundError
        An N that :func:`~egopool.layout.find_episode_files` does not find ("no episode N
        in task"), including one already deleted.
    """
    root = Path(task_dir)
    wanted = _check_indices(indices)
    if layout is None:
        layout = TaskLayout.from_info(root, read_info(root))
    restored = {n: r for n, committed, r in _pending_journals(root) if not committed}
    plans = []
    for n in wanted:
        g = find_episode_files(root, layout, n)  # N's own paths: no rescan of the task (checklist §12.2)
        back = restored.get(n, {})
        if g is None and not back:
            raise EpisodeNotFoundError(root, n)
        found = set(pooled_episode_leftovers(root, n, layout)) | set(g.paths() if g else ()) | set(back)
        shards = sorted(p for p in found if _is_shard(p, n))
        files = sorted(found - set(shards))
        plans.append(DeletePlan(n, files, shards, sum(_size(back.get(p, p)) for p in files)))
    return plans


def _pending_journals(root: Path) -> list[tuple[int, bool, dict[Path, Path]]]:
    """Interrupted deletes, read only: ``(N, committed, {original path: where its bytes are now})``.

    For an uncommitted journal the mapping holds what a rollback puts back: staged files
    whose original place is free, and legacy shards whose pre-delete copy still exists.
    """
    meta = root / "meta"
    out: list[tuple[int, bool, dict[Path, Path]]] = []
    if not meta.is_dir():
        return out
    for jp in sorted(meta.iterdir()):
        if not _JOURNAL_RE.match(jp.name):
            continue
        try:
            journal = read_json(jp, what="delete journal")
            n = int(journal["index"])
        except (FormatError, OSError, ValueError, KeyError, TypeError) as exc:
            raise OperationError(f"unreadable delete journal: {exc}", path=jp,
                                 hint="inspect it and the .deleting-* files it names, then remove it") from exc
        back: dict[Path, Path] = {}
        for m in journal.get("moves", []):
            src, staged = root / m["path"], root / m["staged"]
            if staged.exists() and not src.exists():
                back[src] = staged
        for sh in journal.get("shards", []):
            if (root / sh["backup"]).exists():
                back[root / sh["path"]] = root / sh["backup"]
        out.append((n, journal.get("state") == "committed", back))
    return out


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a directory (a PNG16 depth sequence)."""
    if not path.is_dir():
        return path.stat().st_size
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(path) for f in names)


def _is_shard(path: Path, index: int) -> bool:
    """True for a ``file-`` episodes parquet that holds rows other than N's."""
    if not (path.name.startswith("file-") and path.suffix == ".parquet" and "episodes" in path.parts):
        return False
    try:
        values = read_parquet(path, ["episode_index"]).column("episode_index").to_pylist()
    except Exception:
        return False
    return any(v != index for v in values)


# -- execution -------------------------------------------------------------------------------------
@dataclass
class DeleteOutcome:
    """What deleting one N did.

    Attributes
    ----------
    index:
        Global N.
    removed:
        Files removed.
    shard_rows_removed:
        Shards rewritten without N's row.
    not_removed:
        Paths that could not be removed after the commit (staged dot files left
        behind; the next ``egopool delete`` on the task finishes them). Empty on success.
    registry:
        ``"removed"``, ``"absent"`` (N had no registry row), ``"disabled"`` or an error message.
    """

    index: int
    removed: list[Path] = field(default_factory=list)
    shard_rows_removed: list[Path] = field(default_factory=list)
    not_removed: list[Path] = field(default_factory=list)
    registry: str = "disabled"

    def to_dict(self, task_dir: Path) -> dict[str, Any]:
        """JSON form with task-relative paths."""
        return {"episode_index": self.index, "removed": [rel(task_dir, p) for p in self.removed],
                "shard_rows_removed": [rel(task_dir, p) for p in self.shard_rows_removed],
                "not_removed": [rel(task_dir, p) for p in self.not_removed], "registry": self.registry}


@dataclass
class DeleteReport:
    """Result of :func:`delete_episodes`.

    Attributes
    ----------
    task_dir:
        The task.
    dry_run:
        True when nothing was changed.
    plans:
        One plan per N, in the order given.
    outcomes:
        One outcome per N deleted (empty on a dry run).
    recovered:
        Interrupted earlier deletes that were finished or rolled back first.
    """

    task_dir: Path
    dry_run: bool
    plans: list[DeletePlan]
    outcomes: list[DeleteOutcome] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every file of every N is gone and the registry was updated (or is disabled/absent)."""
        return all(not o.not_removed and o.registry in ("removed", "absent", "disabled") for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool delete --json``)."""
        return {"task": str(self.task_dir), "dry_run": self.dry_run, "ok": self.ok,
                "plans": [p.to_dict(self.task_dir) for p in self.plans],
                "outcomes": [o.to_dict(self.task_dir) for o in self.outcomes], "recovered": self.recovered}


def _stage_rename(src: Path, dst: Path) -> None:
    """Move a file to its staged dot name (a seam: tests inject failures here)."""
    os.rename(src, dst)


def _staged_name(path: Path, token: str) -> Path:
    return path.with_name(f".{path.name}.deleting-{token}")


def _journal_path(root: Path, index: int, token: str) -> Path:
    return root / "meta" / f".delete-{index}-{token}.json"


def _without_row(shard: Path, index: int) -> bytes:
    table = read_parquet(shard, what="legacy episodes shard")
    kept = table.filter(pc.not_equal(table.column("episode_index"), index))
    buf = io.BytesIO()
    pq.write_table(kept, buf, compression="zstd")
    return buf.getvalue()


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _rollback(root: Path, journal: dict[str, Any], info_bytes: bytes | None = None) -> list[str]:
    """Undo a staged (uncommitted) delete; returns what could not be restored.

    ``info_bytes``: ``info.json`` as it was before this delete (in-process undo: restored
    byte for byte). After a crash only the journal is known: a ``total_episodes`` this
    delete raised to N is set back when it still says N.
    """
    failed = []
    before = journal.get("total_episodes_before")
    if before is not None:
        remove_stale_temps(info_path(root))
        try:
            if info_bytes is not None:
                if read_bytes(info_path(root), what="info.json") != info_bytes:
                    atomic_write_bytes(info_path(root), info_bytes)
            else:
                info = read_info(root)
                if info.get("total_episodes") == journal["index"]:
                    info["total_episodes"] = before
                    write_info(root, info)
        except (OSError, EgopoolError) as exc:
            failed.append(f"meta/info.json: total_episodes not set back to {before} ({exc})")
    for m in reversed(journal["moves"]):
        src, staged = root / m["path"], root / m["staged"]
        if staged.exists() and not src.exists():
            try:
                os.rename(staged, src)
            except OSError as exc:
                failed.append(f"{m['path']} is at {m['staged']} ({exc.strerror or exc})")
        elif staged.exists():
            failed.append(f"{m['path']} exists again; the staged copy {m['staged']} was kept")
    for s in reversed(journal["shards"]):
        path, backup = root / s["path"], root / s["backup"]
        if backup.exists():
            try:
                if path.exists() and os.path.samefile(backup, path):
                    backup.unlink()  # still the hard link of the untouched shard (rename would be a no-op)
                else:
                    os.replace(backup, path)
            except OSError as exc:
                failed.append(f"{s['path']}: original is at {s['backup']} ({exc.strerror or exc})")
        remove_stale_temps(path)  # the rewrite of a process killed mid-write
    return failed


def _finish(root: Path, journal: dict[str, Any]) -> list[Path]:
    """Unlink a committed delete's staged files; returns those that could not be unlinked."""
    left = []
    for item in [*journal["moves"], *journal["shards"]]:
        staged = root / item.get("staged", item.get("backup", ""))
        try:
            if staged.is_dir() and not staged.is_symlink():
                shutil.rmtree(staged)  # a PNG16 depth sequence (docs/decisions.md C4)
            else:
                staged.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            left.append(staged)
    return left


def recover_interrupted_deletes(task_dir: str | Path, registry: Registry | None = None) -> list[str]:
    """Finish (committed) or roll back (uncommitted) deletes that a crash interrupted.

    Caller holds the task lock. Dot-temps a killed delete left (of its journal, of a
    legacy shard's rewrite, of ``info.json``) are removed too. Returns one line per
    journal handled.

    Raises
    ------
    OperationError
        A staged file could not be restored or removed (the journal is kept).
    """
    root = Path(task_dir)
    meta = root / "meta"
    done: list[str] = []
    if not meta.is_dir():
        return done
    for p in meta.glob("..delete-*.json.*.tmp"):  # a journal write killed mid-way: nothing else happened yet
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    for jp in sorted(meta.iterdir()):
        m = _JOURNAL_RE.match(jp.name)
        if not m:
            continue
        remove_stale_temps(jp)
        try:
            journal = read_json(jp, what="delete journal")
        except (FormatError, OSError, ValueError) as exc:
            raise OperationError(f"unreadable delete journal: {exc}", path=jp,
                                 hint="inspect it and the .deleting-* files it names, then remove it") from exc
        n = int(journal["index"])
        if journal.get("state") == "committed":
            left = _finish(root, journal)
            if left:
                names = [rel(root, p) for p in left]
                raise OperationError(f"cannot finish interrupted delete of episode {n}: could not remove "
                                     f"{', '.join(names)}", details=names, path=jp,
                                     hint="fix the cause (permissions, read-only file system) and run "
                                          "`egopool delete TASK N...` again: it finishes this delete first")
            if registry is not None:
                registry.remove(task_key(root), n)
            done.append(f"finished interrupted delete of episode {n}")
        else:
            failed = _rollback(root, journal)
            if failed:
                raise OperationError(f"cannot roll back interrupted delete of episode {n}: {'; '.join(failed)}",
                                     details=failed, path=jp)
            if registry is not None and journal.get("registry_status"):
                registry.set_status(task_key(root), n, journal["registry_status"])
            done.append(f"rolled back interrupted delete of episode {n}")
        jp.unlink()
        fsync_dir(meta)
    return done


def _delete_one(root: Path, plan: DeletePlan, layout: TaskLayout, registry: Registry | None) -> DeleteOutcome:
    """Delete one planned N (caller holds the task lock). See the module docstring for the steps."""
    n = plan.index
    token = uuid.uuid4().hex[:12]
    jpath = _journal_path(root, n, token)
    key = task_key(root)
    prior = registry.get(key, n) if registry is not None else None
    info_bytes = read_bytes(info_path(root), what="info.json")
    total = int(read_info(root).get("total_episodes") or 0)
    journal: dict[str, Any] = {
        "index": n, "state": "staging", "registry_status": prior.status if prior else None,
        "total_episodes_before": total if total < n else None,
        "moves": [{"path": rel(root, p), "staged": rel(root, _staged_name(p, token))} for p in plan.files],
        "shards": [{"path": rel(root, p), "backup": rel(root, _staged_name(p, token))} for p in plan.shards],
    }
    atomic_write_json(jpath, journal)
    outcome = DeleteOutcome(n)

    def undo(reason: str) -> OperationError:
        failed = _rollback(root, journal, info_bytes)
        if registry is not None and prior is not None:
            with contextlib.suppress(RegistryError):
                registry.set_status(key, n, prior.status)
        if failed:
            return OperationError(f"delete of episode {n} failed ({reason}) and could not be fully undone: "
                                  f"{'; '.join(failed)}", details=failed, path=root,
                                  hint=f"re-run `egopool delete TASK {n}` to finish the recovery")
        jpath.unlink()
        return OperationError(f"delete of episode {n} failed ({reason}); nothing was removed", path=root)

    try:
        if registry is not None:
            registry.bump_watermark(key, n)
            if prior is not None:
                registry.set_status(key, n, "deleted")
        for m in journal["moves"]:
            _stage_rename(root / m["path"], root / m["staged"])
        for s in journal["shards"]:
            shard, backup = root / s["path"], root / s["backup"]
            _link_or_copy(shard, backup)
            atomic_write_bytes(shard, _without_row(backup, n))
        left = pooled_episode_leftovers(root, n, layout)
        if left:
            raise OperationError(f"still present after staging: {', '.join(rel(root, p) for p in left)}")
        if journal["total_episodes_before"] is not None:  # watermark: a deleted N is never handed out again
            info = read_info(root)
            info["total_episodes"] = n
            write_info(root, info)
        journal["state"] = "committed"
        atomic_write_json(jpath, journal)
    except (OSError, EgopoolError) as exc:
        reason = exc.one_line() if isinstance(exc, EgopoolError) else f"{type(exc).__name__}: {exc}"
        raise undo(reason) from exc
    outcome.not_removed = _finish(root, journal)
    outcome.removed = [p for p in plan.files]
    outcome.shard_rows_removed = list(plan.shards)
    prune_empty_dirs(root, plan.files)
    if registry is None:
        outcome.registry = "disabled"
    else:
        try:
            outcome.registry = "removed" if registry.remove(key, n) else "absent"
        except RegistryError as exc:
            outcome.registry = exc.one_line()
    if not outcome.not_removed:
        jpath.unlink()
        fsync_dir(jpath.parent)
    return outcome


def delete_episodes(task_dir: str | Path, indices: Sequence[int], *, dry_run: bool = False,
                    registry: bool | str | Path | Registry | None = True,
                    progress: Progress | None = None) -> DeleteReport:
    """Delete episodes by global N (file_format.md §2, §9; ``egopool delete``).

    Every N is checked before anything is touched: N < 1 is refused, an N that
    :func:`~egopool.layout.find_episode_files` does not find (or that was already
    deleted) is an error. Each N is then deleted all-or-nothing (see the module
    docstring) and verified gone with :func:`pooled_episode_leftovers`; its registry
    row is removed. ``stats.json`` and ``total_episodes`` are not rolled back; N is
    never reused.

    Parameters
    ----------
    task_dir:
        The task directory.
    indices:
        Global 1-based N (duplicates are ignored).
    dry_run:
        Only plan: report exactly which files and shard rows would be removed.
    registry:
        ``pipeline.db`` to update: True = beside the task, a path / Registry, False = none.
    progress:
        ``progress(done, total, what)`` after each N.

    Returns
    -------
    DeleteReport

    Raises
    ------
    LayoutError
        N < 1 or no N.
    EpisodeNotFoundError
        "no episode N in task".
    OperationError
        A delete failed; the message says whether it was undone (nothing removed) or
        what is left where. Episodes before it in ``indices`` stay deleted.
    """
    root = Path(task_dir)
    _check_indices(indices)
    info = read_info(root)
    layout = TaskLayout.from_info(root, info)
    reg = open_registry(root, registry)
    with task_read_lock(root) if dry_run else task_lock(root):  # a dry run writes nothing (decisions.md #24)
        refuse_during_migration(root, "delete episodes")
        if dry_run:
            recovered = [f"would {'finish' if committed else 'roll back'} interrupted delete of episode {n}"
                         for n, committed, _ in _pending_journals(root)]
        else:
            recovered = recover_interrupted_deletes(root, reg)
        plans = plan_delete(root, indices, layout)
        report = DeleteReport(root, dry_run, plans, recovered=recovered)
        if dry_run:
            return report
        for i, plan in enumerate(plans):
            try:
                report.outcomes.append(_delete_one(root, plan, layout, reg))
            except OperationError as exc:
                done = [o.index for o in report.outcomes]
                if done:
                    exc.message += f"; already deleted: {', '.join(map(str, done))}"
                rest = [p.index for p in plans[i + 1:]]
                if rest:
                    exc.message += f"; not attempted: {', '.join(map(str, rest))}"
                raise OperationError(exc.message, details=exc.details, path=exc.path, hint=exc.hint) from exc
            if progress is not None:
                progress(i + 1, len(plans), f"episode {plan.index}")
    return report
