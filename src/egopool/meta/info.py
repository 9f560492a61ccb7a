"""``meta/info.json``: read, check ``format``, merge, write (file_format.md §3, multi_device_storage.md §6).

Merge semantics (§6.7): ``features`` / ``cameras`` / ``video_extensions`` /
``device_names`` / ``calibration`` / ``slam_frames`` are unions where the latest
episode wins; ``sensors`` is an ordered union; ``devices`` are merged by ``key``;
``total_episodes`` never decreases; no key is ever removed (§6.1 "只加不改").
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, overload

from .._atomic import atomic_write_json
from .._safe_read import read_json
from ..storage import ObjectPath, TaskPath, TaskPathLike, as_local_path, as_path, require_bucket
from ..errors import EgopoolError, FormatError, LegacyLayoutError, ObjectStoreError

__all__ = [
    "FORMAT",
    "INFO_MUST_KEYS",
    "INPLACE_EDITS",
    "edit_midway",
    "info_path",
    "merge_info",
    "new_info",
    "parse_format",
    "read_info",
    "write_info",
]

# info.json's path-template defaults (file_format.md §2, §6.1): N = chunk * chunks_size + file + 1
DEFAULT_CHUNKS_SIZE = 1000
DEFAULT_DATA_PATH = "data/chunk-{c:03d}/episode-{f:03d}.parquet"
DEFAULT_VIDEO_PATH = "videos/chunk-{c:03d}/{image_key}/episode-{f:03d}.{ext}"
DEFAULT_EPISODES_PATH = "meta/episodes/chunk-{c:03d}/episode-{f:03d}.parquet"

FORMAT = "pooled_episodes_v1"
CODEBASE_VERSION = "v3.0"

#: Every MUST key of file_format.md §3 / multi_device_storage.md §6.1.
INFO_MUST_KEYS: tuple[str, ...] = (
    "format", "chunks_size", "data_path", "video_path", "episodes_path", "codebase_version",
    "app_version", "fps", "video", "task_name", "features", "cameras", "devices", "device_names",
    "sensors", "sensor_dim", "created_at", "calibration", "total_episodes", "video_extensions",
)

_LEGACY_SESSION_RE = re.compile(r"_\d{6}$")


@overload
def info_path(task_dir: Path) -> Path: ...
@overload
def info_path(task_dir: TaskPathLike) -> TaskPath: ...
def info_path(task_dir: TaskPathLike) -> TaskPath:
    """``<task>/meta/info.json`` (a local task's is a ``Path``)."""
    return as_path(task_dir) / "meta" / "info.json"


def _legacy_sessions(task_dir: TaskPath) -> list[str]:
    if not task_dir.is_dir():
        return []
    return sorted(p.name for p in task_dir.iterdir() if p.is_dir() and _LEGACY_SESSION_RE.search(p.name))


def parse_format(info: Mapping[str, Any], path: TaskPath) -> str:
    """Accept only ``format == "pooled_episodes_v1"`` (§1, checklist §12.1).

    Raises
    ------
    LegacyLayoutError
        ``format`` missing and ``<task>_NNNNNN`` session directories exist (v1.0).
    FormatError
        ``format`` missing or unknown.
    """
    fmt = info.get("format")
    if fmt == FORMAT:
        return FORMAT
    if fmt is None:
        sessions = _legacy_sessions(path.parent.parent)
        if sessions:
            raise LegacyLayoutError(
                f"no 'format' key and per-session directories ({sessions[0]}, ...): this is the "
                "legacy v1.0 per-session layout, which egopool does not read", path=path,
                hint="convert it with the collector's migration tool first")
        raise FormatError("no 'format' key", path=path,
                          hint=f'a pooled task declares "format": "{FORMAT}"')
    raise FormatError(f"unknown format {fmt!r}", path=path, hint=f"egopool reads only {FORMAT!r}")


#: the edits that change a task in place (egopool.edit.inplace): their journal in a task means some episodes are
#: changed and some not yet (docs/decisions.md E63)
INPLACE_EDITS = frozenset({"remove-column", "rename-column", "add-column", "remove-slot", "rename-slot", "set-task"})


def _edit_journal(root: TaskPath) -> tuple[TaskPath, dict[str, Any]] | None:
    """``(path, document)`` of the task's edit journal (``meta/.edit.json``; ``{}`` when it does not read), None
    when there is none."""
    journal = root / "meta" / ".edit.json"
    if isinstance(journal, ObjectPath):  # one HEAD when there is none, never the LIST of is_file() (O33)
        from .._holders import journal_doc

        try:
            return journal, journal_doc(journal.read_bytes())
        except FileNotFoundError:
            return None
    try:
        if not journal.is_file():
            return None
        doc = read_json(journal, what="edit journal")
    except ObjectStoreError:
        raise
    except EgopoolError:
        doc = {}
    return journal, doc if isinstance(doc, dict) else {}


def unfinished_edit(root: TaskPath) -> FormatError | None:
    """The error for ``root`` without ``meta/info.json`` that holds an edit's journal (``meta/.edit.json``): the
    new task of a ``merge`` / ``split`` (or a bucket ``rename``) interrupted before its commit, which writes
    ``info.json`` last (docs/decisions.md E6, E58). It names that edit and the fix (``egopool edit resume``, or
    wait while its run is alive). None when there is no journal."""
    got = _edit_journal(root)
    if got is None:
        return None
    from .._holders import edit_in_progress

    err = edit_in_progress(got[1], str(got[0]), str(root),
                           "it is no task until that edit commits (meta/info.json is written last)")
    return FormatError(f"not a task yet, the new task of an unfinished edit: {err.message}", path=root,
                       hint=err.hint)


def edit_midway(root: TaskPathLike) -> FormatError | None:
    """The error for a task that holds the journal of an in-place edit (:data:`INPLACE_EDITS`: ``edit
    rename-column`` and the like): some of its episodes are changed and some not yet, until that edit finishes
    (docs/decisions.md E63). It names the edit and the fix (``egopool edit resume TASK``, or wait while its run is
    alive), as :func:`unfinished_edit` does. None when there is no such journal (a merge's hold of its source,
    a merge appending into the task: each episode is whole, the task is valid)."""
    path = as_path(root)
    got = _edit_journal(path)
    if got is None or got[1].get("op") not in INPLACE_EDITS:
        return None
    from .._holders import edit_in_progress

    err = edit_in_progress(got[1], str(got[0]), str(path),
                           "until it finishes some episodes are changed and some are not")
    return FormatError(f"the task is mid-edit: {err.message}", path=path, hint=err.hint)


def read_info(task_dir: TaskPathLike, *, check_format: bool = True) -> dict[str, Any]:
    """Load and check ``meta/info.json``.

    Raises
    ------
    LegacyLayoutError
        The directory is the v1.0 per-session layout.
    FormatError
        The new task of an unfinished edit (:func:`unfinished_edit`: named, with ``egopool edit resume``); file
        missing or not a regular file, not UTF-8, not JSON (or nested deeper than any
        spec document), not a JSON object, or wrong ``format``.
    """
    root = as_path(task_dir)
    path = info_path(root)
    if not path.exists() and not path.is_symlink():
        building = unfinished_edit(root)
        if building is not None:
            raise building
        sessions = _legacy_sessions(root)
        if sessions:
            raise LegacyLayoutError(
                f"no meta/info.json but per-session directories ({sessions[0]}, ...): legacy v1.0 "
                "per-session layout, which egopool does not read", path=root,
                hint="convert it with the collector's migration tool first")
        if not root.exists():
            if isinstance(root, ObjectPath):
                require_bucket(root)
                raise FormatError(f"no task at {root}", hint="check the URI: the prefix holds no object; `egopool ls` of "
                                                             "a task lists its episodes")
            raise FormatError("task directory does not exist", path=root,
                              hint="pass the task directory holding data/, videos/, meta/")
        if not root.is_dir():
            raise FormatError("not a directory", path=root,
                              hint="pass the task directory holding data/, videos/, meta/")
        raise FormatError("not a pooled_episodes_v1 task: meta/info.json is missing", path=root,
                          hint="point egopool at the task directory holding data/, videos/, meta/")
    info = read_json(path, what="info.json", hint="restore info.json from a backup")
    if not isinstance(info, dict):
        raise FormatError(f"info.json is not a JSON object (it holds a JSON {_JSON_KIND.get(type(info), 'value')})", path=path,
                          hint="info.json is one JSON object {...} with the keys of file_format.md §3; restore it "
                               "from a backup or another copy of the task")
    if check_format:
        parse_format(info, path)
    return info


#: what a JSON document that is not an object holds, in JSON's words
_JSON_KIND = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def new_info(task_name: str, *, fps: float = 30.0, app_version: str, created_at: float | None = None,
             chunks_size: int = DEFAULT_CHUNKS_SIZE) -> dict[str, Any]:
    """A fresh ``info.json`` dict holding every MUST key (§3) with empty declarations."""
    return {
        "format": FORMAT,
        "chunks_size": chunks_size,
        "data_path": DEFAULT_DATA_PATH,
        "video_path": DEFAULT_VIDEO_PATH,
        "episodes_path": DEFAULT_EPISODES_PATH,
        "codebase_version": CODEBASE_VERSION,
        "app_version": app_version,
        "fps": float(fps),
        "video": False,
        "task_name": task_name,
        "features": {"action": {"dtype": "float32", "shape": [1]}},
        "cameras": {},
        "devices": [],
        "device_names": {},
        "sensors": [],
        "sensor_dim": 256,
        "created_at": float(time.time() if created_at is None else created_at),
        "calibration": {},
        "total_episodes": 0,
        "video_extensions": {},
    }


_DICT_UNION_KEYS = ("features", "cameras", "video_extensions", "device_names", "calibration", "slam_frames")


def merge_info(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Merge one episode's declarations ``new`` into the task's ``old`` info (§6.7).

    Dict-valued declarations are unions where ``new`` wins per key; ``sensors`` is an
    ordered union; ``devices`` merge by ``key`` (new wins, order of first appearance);
    ``total_episodes`` is the max; ``created_at`` keeps the oldest; ``video`` is sticky;
    every other key takes ``new``'s value when ``new`` has it. No key of ``old`` is
    ever removed.
    """
    out: dict[str, Any] = json.loads(json.dumps(dict(old)))  # deep copy
    for key, value in new.items():
        if key in _DICT_UNION_KEYS and isinstance(value, Mapping):
            merged = dict(out.get(key) or {})
            merged.update(json.loads(json.dumps(dict(value))))
            out[key] = merged
        elif key == "sensors":
            seen = list(out.get("sensors") or [])
            seen += [s for s in value if s not in seen]
            out["sensors"] = seen
        elif key == "devices":
            by_key: dict[str, Any] = {}
            for dev in list(out.get("devices") or []) + list(value):
                k = dev.get("key") if isinstance(dev, Mapping) else None
                by_key[str(k)] = dict(dev) if k is not None else dev
            out["devices"] = list(by_key.values())
        elif key == "total_episodes":
            out[key] = max(int(out.get(key) or 0), int(value))
        elif key == "created_at":
            out[key] = min(float(out.get(key) or value), float(value))
        elif key == "video":
            out[key] = bool(out.get(key)) or bool(value)
        else:
            out[key] = json.loads(json.dumps(value))
    return out


def write_info(task_dir: str | os.PathLike[str], info: Mapping[str, Any], *, sync_dir: bool = True) -> None:
    """Write ``meta/info.json`` atomically, indented, UTF-8 (§3). Caller holds the task lock.
    ``sync_dir=False``: the caller fsyncs ``meta/`` after a further rename there.

    Raises
    ------
    FormatError
        ``task_dir`` is an ``s3://`` location (a local task only, :func:`~egopool.storage.as_local_path`).
    """
    root = as_local_path(task_dir, what="writing meta/info.json")
    atomic_write_json(info_path(root), dict(info), indent=2, sync_dir=sync_dir)
