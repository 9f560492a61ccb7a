"""Checksums of an episode's files, recorded in its ``meta/episodes`` row (docs/decisions.md X1-X7).

The row's extra JSON column ``file_digests`` (a reader that knows only file_format.md §6.2 ignores it)::

    {"algorithm": "sha256",
     "files": {"data/chunk-000/episode-000.parquet": "<64 hex>",
               "videos/chunk-000/cam/episode-000.mp4": "<64 hex>",
               "videos/chunk-000/depth/episode-000/000000.png": "<64 hex>", ...},
     "row": "<64 hex>"}

``files`` keys are task-relative POSIX paths (§8's PNG16 folders: one entry per file inside). ``row`` is the
sha256 of the row's own content (:func:`row_digest`: every other column's value as stored), since the row file
cannot hold its own digest. The row is the commit object of every writer (decisions #5, U5), so its digests
are committed atomically with the episode.
"""

from __future__ import annotations

import hashlib
import os
import re
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..storage import ObjectPath, Store, TaskPath, store_failure

__all__ = ["ALGORITHM", "DIGEST_COLUMN", "CHUNK", "Digests", "Mismatch", "episode_digests", "file_digests_of",
           "mismatch_line", "parse_digests", "remapped_digests", "same_file", "row_digest", "sha256_bytes", "sha256_of_key", "sha256_path", "stamp"]

DIGEST_COLUMN = "file_digests"
ALGORITHM = "sha256"
#: Bytes hashed per read (a bucket object: one ranged GET each).
CHUNK = 8 << 20


@dataclass(frozen=True)
class Digests:
    """A row's recorded digests: ``files`` task-relative path -> sha256 hex; ``row`` the row content's sha256
    (None when the row was stamped without one)."""

    files: dict[str, str]
    row: str | None
    previous: dict[str, str] = field(default_factory=dict)

    def accepts(self, rel: str, sha: str | None) -> bool:
        """True when ``sha`` is the recorded digest of ``rel`` or the one it replaces while a rewrite of that
        file is rolling forward (``previous``, docs/decisions.md X3)."""
        return sha is not None and sha in (self.files.get(rel), self.previous.get(rel))


@dataclass(frozen=True)
class Mismatch:
    """One file whose bytes are not those recorded: ``actual`` None when the file is missing."""

    rel: str
    expected: str
    actual: str | None


def sha256_bytes(data: bytes) -> str:
    """sha256 hex of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_path(path: TaskPath | str) -> str:
    """sha256 hex of a file (a local path, or a bucket object read in :data:`CHUNK` ranges).

    Raises
    ------
    OSError, ObjectStoreError
        The file cannot be read; FormatError: it is not a regular file (a FIFO, a device, a folder).
    """
    h = hashlib.sha256()
    if isinstance(path, ObjectPath):
        try:
            with path.open_input() as f:
                while True:
                    b = f.read(CHUNK)
                    if not b:
                        break
                    h.update(b)
        except OSError as exc:  # pyarrow's read of a body the store cut short: the store's error (O3)
            failed = store_failure(exc, path)
            if failed is None:
                raise
            raise failed from exc
        return h.hexdigest()
    from .._safe_read import open_regular

    with open_regular(path, what="file to hash") as fh:  # a FIFO or a device never blocks or reads forever
        while True:
            b = fh.read(CHUNK)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def sha256_of_key(store: Store, key: str) -> str:
    """sha256 of object ``key``: the one the store recorded when it wrote it, else its bytes hashed.

    Raises
    ------
    FileNotFoundError
        No such object.
    StorageError
        The store failed.
    """
    meta = store.head(key)
    if meta is None:
        raise FileNotFoundError(2, "No such object", store.url(key))
    if meta.sha256:
        return meta.sha256
    local = store.local_path(key)
    if local is not None:
        return sha256_path(local)
    h = hashlib.sha256()
    with store.open_input(key) as f:
        for piece in iter(lambda: f.read(CHUNK), b""):
            h.update(piece)
    return h.hexdigest()


def remapped_digests(value: Any, *, moves: Mapping[str, str] | None = None,
                     changes: Mapping[str, str | None] | None = None) -> dict[str, str] | None:
    """A row's recorded files after an edit (issue 30 meets X1): ``moves`` old path -> new path (a renumbered
    episode, a renamed slot: the same bytes under a new name; a PNG16 folder moves every file in it), then
    ``changes`` path -> new sha256, or None when the file or folder is gone. None when the row records no
    digests.

    Raises
    ------
    ValueError
        The recorded value is damaged.
    """
    rec = parse_digests(value)
    if rec is None:
        return None
    files = dict(rec.files)
    for old, new in (moves or {}).items():
        for r in [r for r in files if r == old or r.startswith(old + "/")]:
            files[new + r[len(old):]] = files.pop(r)
    for rel, sha in (changes or {}).items():
        for r in [r for r in files if r == rel or r.startswith(rel + "/")]:
            files.pop(r)
        if sha is not None:
            files[rel] = sha
    return dict(sorted(files.items()))


def _rel(root: TaskPath, p: TaskPath) -> str:
    if isinstance(p, ObjectPath):
        return p.relative_to(str(root)).as_posix() if isinstance(root, ObjectPath) else p.name
    return Path(p).relative_to(Path(str(root))).as_posix()


def _expand(p: TaskPath) -> list[TaskPath]:
    """A file, or every file of a PNG16 folder (§8), sorted."""
    if isinstance(p, ObjectPath):
        if p.is_dir():
            return [q for _, q in p.walk_objects()]
        return [p]
    if Path(p).is_dir():
        return sorted(q for q in Path(p).rglob("*") if q.is_file() and not q.name.startswith("."))
    return [p]


def episode_digests(task_dir: TaskPath, paths: Iterable[TaskPath], *, skip_unreadable: bool = False,
                    known: Mapping[Path, str] | None = None) -> dict[str, str]:
    """Task-relative path -> sha256 of each file (folders expanded) of ``paths`` (an episode's data and videos;
    its row is excluded by the caller). ``skip_unreadable``: a local file that cannot be read, or is not a regular
    file, is left out (``validate``: its own checks name it) instead of raising; a bucket read the store cut short
    raises its ObjectStoreError all the same (:func:`sha256_path`; no verdict on the task, O3). ``known``: sha256 of local files
    already hashed by the caller (by absolute path), taken as they are.

    Raises
    ------
    OSError, ObjectStoreError, FormatError
        A file cannot be read (never for a local file with ``skip_unreadable``).
    """
    from ..errors import FormatError

    out: dict[str, str] = {}
    for p in paths:
        for f in _expand(p):
            done = known.get(Path(os.path.abspath(f))) if known and isinstance(f, Path) else None
            try:
                out[_rel(task_dir, f)] = done if done is not None else sha256_path(f)
            except (OSError, FormatError):
                if not skip_unreadable:
                    raise
    return dict(sorted(out.items()))


def file_digests_of(task_dir: Path, paths: Iterable[Path]) -> dict[str, str]:
    """:func:`episode_digests` of local files (the writers' form)."""
    return episode_digests(task_dir, list(paths))


_LEGACY_NAME = re.compile(r"/file-(\d+)(?=[./]|$)")


def same_file(rel: str) -> str:
    """``rel`` with a pre-v1.1.2 ``file-NNN`` name read as its ``episode-NNN`` name (file_format.md §2: the
    rename kept the numbers), so a digest recorded under one name vouches for the file under the other."""
    return _LEGACY_NAME.sub(r"/episode-\1", rel)


def _canonical(value: Any) -> Any:
    return value if not isinstance(value, float) else repr(value)


def row_digest(columns: Mapping[str, Any]) -> str:
    """sha256 of a row's content: every column but :data:`DIGEST_COLUMN`, by name, values as stored (JSON
    columns as their strings; floats by ``repr``, which round-trips), as canonical JSON."""
    body = {k: _canonical(v) for k, v in columns.items() if k != DIGEST_COLUMN}
    return sha256_bytes(json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode())


def stamp(columns: Mapping[str, Any], files: Mapping[str, str], previous: Mapping[str, str] | None = None) -> str:
    """The :data:`DIGEST_COLUMN` string for a row whose other columns (as stored) are ``columns``; ``previous``:
    the digests of files being replaced right now (accepted until the rewrite's roll-forward drops them)."""
    doc: dict[str, Any] = {"algorithm": ALGORITHM, "files": dict(sorted(files.items())), "row": row_digest(columns)}
    if previous:
        doc["previous"] = dict(sorted(previous.items()))
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def parse_digests(value: Any) -> Digests | None:
    """The recorded digests of a :data:`DIGEST_COLUMN` value (a string or a decoded dict); None when absent or
    empty (a task written before X1, or by a writer that knows only the spec).

    Raises
    ------
    ValueError
        The value is not the structure of the module docstring (a damaged row).
    """
    if value is None or value == "" or value == {}:
        return None
    doc = json.loads(value) if isinstance(value, str) else value
    if doc == {}:
        return None
    if not isinstance(doc, dict) or doc.get("algorithm") != ALGORITHM or not isinstance(doc.get("files"), dict):
        raise ValueError(f"{DIGEST_COLUMN} is not {{'algorithm': 'sha256', 'files': {{...}}}}")
    files = {str(k): str(v) for k, v in doc["files"].items()}
    row = doc.get("row")
    prev = doc.get("previous")
    previous = {str(k): str(v) for k, v in prev.items()} if isinstance(prev, dict) else {}
    return Digests(files, str(row) if row is not None else None, previous)


def mismatch_line(m: Mismatch, where: str | None = None, good_copy: str | None = None) -> str:
    """One line: the file (``where/rel``; only ``rel`` is named when ``where`` is None: a finding names the path
    itself), the expected and the actual digest, and where a good copy may be."""
    got = "it is missing" if m.actual is None else f"its bytes hash to sha256 {m.actual}"
    head = f"{where}/{m.rel}: checksum mismatch" if where is not None else "checksum mismatch"
    return (f"{head}, the episode row records sha256 {m.expected}, {got}; "
            + (f"a good copy may be at {good_copy}" if good_copy else
               "restore it from another copy of the task (the upload's source, a sync peer, a backup)"))
