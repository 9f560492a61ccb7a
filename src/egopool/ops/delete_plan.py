"""Deleting episodes, the plan: what N's files are and what a delete will remove (file_format.md §2, §9).

:func:`pooled_episode_leftovers` looks at a task directory's files for N (the three places, legacy
``file-`` names and shards, PNG16 depth directories); :func:`plan_delete` turns the N asked for into
:class:`DeletePlan` s, taking an interrupted delete's staged files into account. :class:`DeleteOutcome`
and :class:`DeleteReport` are what :func:`egopool.ops.delete.delete_episodes` returns, for a directory
and for a bucket task alike (:mod:`egopool.ops.delete_bucket`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._safe_read import read_json, read_parquet
from ..errors import EgopoolError, EpisodeNotFoundError, FormatError, LayoutError, OperationError
from ..layout import TaskLayout, find_episode_files
from ..meta.info import read_info
from ._common import EXT_TAIL, path_regex, rel, walk_rel

__all__ = ["DeleteOutcome", "DeletePlan", "DeleteReport", "check_indices", "plan_delete", "pooled_episode_leftovers"]

JOURNAL_RE = re.compile(r"^\.delete-(\d+)-([0-9a-f]+)\.json$")


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
    if isinstance(ep, Path) and ep.is_file() and not ep.name.startswith("file-"):
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


def check_indices(indices: Sequence[int]) -> list[int]:
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
    wanted = check_indices(indices)
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
        if not JOURNAL_RE.match(jp.name):
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
    uri:
        ``s3://bucket/prefix/task`` for a task in a bucket (then ``task_dir`` is ``Path("")`` and every
        path of the plans and outcomes is a task-relative key), else ``""``.
    """

    task_dir: Path
    dry_run: bool
    plans: list[DeletePlan]
    outcomes: list[DeleteOutcome] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    uri: str = ""

    @property
    def ok(self) -> bool:
        """True when every file of every N is gone and the registry was updated (or is disabled/absent)."""
        return all(not o.not_removed and o.registry in ("removed", "absent", "disabled") for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool delete --json``)."""
        return {"task": self.uri or str(self.task_dir), "dry_run": self.dry_run, "ok": self.ok,
                "plans": [p.to_dict(self.task_dir) for p in self.plans],
                "outcomes": [o.to_dict(self.task_dir) for o in self.outcomes], "recovered": self.recovered}

