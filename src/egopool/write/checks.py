"""What the writer checks before it records anything, so that it never publishes what its own validator rejects.

* numbers that end up in JSON (``fps``, ``created_at``, declarations) are finite: JSON has
  no NaN / Infinity (file_format.md §3, §4); ``wall_time = created_at + timestamp`` can be
  stored strictly increasing (§7.3);
* a column or stream that the task already declares keeps its declaration: same
  ``dtype`` / ``shape`` / ``encoding`` (multi_device_storage.md §6.2, §6.7: ``features`` is
  a union where the latest episode wins, so a changed declaration would silently
  misdescribe every earlier episode), an image_key stays RGB or depth (§4.8, §6.3) with
  the same file extension (file_format.md §8). Force matrices may change ``scale`` /
  ``encoding`` and trajectories their ``frame`` between episodes: the episode's own
  ``force_matrix_specs`` / ``slam_specs`` are the authority for those (§7.3);
* an episode of ``seconds`` at ``fps`` has timestamps float32 can tell apart
  (file_format.md §7.1: ``timestamp`` is float32 seconds);
* ``meta/info.json`` and ``meta/stats.json`` can be merged at finish (parse, hold no
  NaN, blocks with the dimension of this episode's columns), because after the commit
  an episode can no longer be taken back (decisions.md #5).
"""

from __future__ import annotations

import json
import math
import numbers
import threading
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EgopoolError, FormatError, SchemaError
from ..meta.info import info_path, merge_info
from ..meta.stats import StatsBlock, needs_recalc, read_stats, stats_path
from ..schema import ColumnSpec
from ..unix_time import created_at_problem

__all__ = ["check_column_declarations", "check_created_at", "check_declaration_types", "check_episode_seconds",
           "check_feature_declarations", "check_finite_values",
           "check_json_value", "check_positive_number", "check_stream_declarations", "check_task_meta_mergeable",
           "check_task_name", "max_episode_rows", "max_episode_seconds"]

#: Declaration keys that may never change for a column the task already has.
_FIXED_KEYS = ("dtype", "shape", "encoding")


def check_positive_number(value: Any, what: str) -> float:
    """``value`` as a float when it is a finite real number > 0 (bool and str refused).

    Raises
    ------
    SchemaError
        Naming ``what`` and the value.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SchemaError(f"{what} must be a number, got {type(value).__name__} {value!r}")
    try:
        x = float(value)
    except OverflowError:  # an int beyond float64
        digits = len(str(abs(math.trunc(value))))
        raise SchemaError(f"{what} must be finite and > 0, got an integer of {digits} digits, "
                          "beyond float64") from None
    if not math.isfinite(x) or x <= 0:
        raise SchemaError(f"{what} must be finite and > 0, got {value!r}")
    return x


def check_created_at(created_at: Any, fps: float) -> float:
    """``created_at`` (episode start, Unix s) as a float when ``wall_time`` can be built on it.

    A number > 0 on which float64 ``wall_time = created_at + timestamp`` (file_format.md §7.3)
    stays finite and steps finer than a row (``1/fps`` s) for the longest episode at ``fps``.
    Values outside 2000–2100 that pass are the validator's warning, not a refusal (an
    import may carry an older or synthetic clock; docs/decisions.md V5).

    Raises
    ------
    SchemaError
        Not a finite number > 0, or one ``wall_time`` cannot build on (1e18: nanoseconds).
    """
    x = check_positive_number(created_at, "created_at")
    found = created_at_problem(x, fps=fps, seconds=max_episode_seconds(fps))
    if found is not None and found[0] == "error":
        raise SchemaError(found[1])
    return x


def max_episode_seconds(fps: float) -> float:
    """Longest episode whose float32 ``timestamp`` (i / fps s, file_format.md §7.1) still tells every row apart.

    float32 has 24 significant bits: in ``[2^k, 2^(k+1))`` s its step is ``2^(k-23)`` s.
    Rows ``1/fps`` apart stay distinct while that step is at most ``1/fps``, i.e. up to
    the first power of two ``T`` whose step exceeds it: 16384 s (4.55 h) at 1000 fps,
    32768 s (9.1 h) at 500 fps, 524288 s (6.1 days) at 30 fps. Every row with
    ``i / fps < T`` is safe; the first row at or past ``T`` may round onto its predecessor.

    Raises
    ------
    SchemaError
        ``fps`` is not a finite number > 0.
    """
    return max_episode_rows(fps) / check_positive_number(fps, "fps")


def max_episode_rows(fps: float) -> int:
    """Rows an episode at ``fps`` may hold so that float32 ``timestamp`` stays strictly increasing.

    See :func:`max_episode_seconds`; checked exhaustively near the limit in the tests.

    Raises
    ------
    SchemaError
        ``fps`` is not a finite number > 0.
    """
    f = check_positive_number(fps, "fps")
    k = math.floor(math.log2(1.0 / f)) + 24  # first k with 2**(k - 23) > 1/fps
    while 2.0 ** (k - 23) <= 1.0 / f:
        k += 1
    while k > -126 and 2.0 ** (k - 24) > 1.0 / f:
        k -= 1
    return int(math.ceil(2.0 ** k * f))


def check_episode_seconds(seconds: float, fps: float, what: str = "seconds") -> int:
    """Rows of an episode of ``seconds`` at ``fps``; refuses a length float32 ``timestamp`` cannot time.

    Returns
    -------
    int
        ``max(1, round(seconds * fps))``.

    Raises
    ------
    SchemaError
        ``seconds`` or ``fps`` not finite and > 0, or more rows than :func:`max_episode_rows`
        (one line naming the limit at this fps and what to do).
    """
    s = check_positive_number(seconds, what)
    f = check_positive_number(fps, "fps")
    rows = max(1, int(round(s * f)))
    limit = max_episode_rows(f)
    if rows > limit:
        raise SchemaError(f"{what} = {s:g} at {f:g} fps is {rows} rows, but float32 timestamps (file_format.md §7.1) "
                          f"tell rows apart only for the first {limit / f:.0f} s ({limit / f / 3600:.2f} h, {limit} "
                          "rows) of an episode", hint=f"record at most {math.floor(limit / f)} s per episode, or "
                                                      "lower the fps")
    return rows


def check_json_value(value: Any, what: str) -> None:
    """``value`` can be written as standard JSON (no NaN / Infinity, only JSON types).

    Raises
    ------
    SchemaError
        ``value`` holds NaN / Infinity or something JSON cannot store.
    """
    try:
        json.dumps(value, allow_nan=False)
    except ValueError as exc:
        raise SchemaError(f"{what} holds NaN or Infinity, which JSON cannot store ({exc})") from exc
    except TypeError as exc:
        raise SchemaError(f"{what} is not JSON-serialisable ({exc})") from exc


def check_declaration_types(devices: Any, device_names: Any, calibration: Any, sensors: Any, sensor_dim: Any,
                            info_extra: Any) -> None:
    """The declarations of :meth:`TaskWriter.begin_episode` have the JSON types of multi_device_storage.md §6.4
    and file_format.md §3: ``devices`` a list of objects, ``device_names`` an object of strings, ``calibration``
    an object of objects (one per device), ``sensors`` a list of names, ``sensor_dim`` an integer >= 1,
    ``info_extra`` an object. None stands for "none" where the parameter allows it.

    Raises
    ------
    SchemaError
        Naming the declaration and what it got (a str for ``sensors`` would become one sensor per letter).
    """
    def refuse(what: str, want: str, got: Any) -> SchemaError:
        return SchemaError(f"{what} must be {want}, got {type(got).__name__} {str(got)[:60]!r}")

    if isinstance(devices, (str, bytes, Mapping)) or not isinstance(devices, Iterable) \
            or not all(isinstance(d, Mapping) for d in devices):
        raise refuse("devices", "a list of objects", devices)
    for what, value in (("device_names", device_names), ("calibration", calibration), ("info_extra", info_extra)):
        if value is not None and not isinstance(value, Mapping):
            raise refuse(what, "an object", value)
    if device_names and not all(isinstance(k, str) and isinstance(v, str) for k, v in device_names.items()):
        raise refuse("device_names", "an object of slot -> name strings", device_names)
    if calibration and not all(isinstance(k, str) and isinstance(v, Mapping) for k, v in calibration.items()):
        raise refuse("calibration", "an object of device -> calibration objects", calibration)
    if sensors is not None and (isinstance(sensors, (str, bytes, Mapping)) or not isinstance(sensors, Iterable)
                                or not all(isinstance(x, str) for x in sensors)):
        raise refuse("sensors", "a list of sensor names", sensors)
    if sensor_dim is not None and (isinstance(sensor_dim, bool) or not isinstance(sensor_dim, (int, np.integer))
                                   or sensor_dim < 1):
        raise refuse("sensor_dim", "an integer >= 1", sensor_dim)


def check_finite_values(column: str, value: np.ndarray, row: int) -> None:
    """A value of a column that enters ``stats.json`` must be finite (file_format.md §4).

    One NaN would make the task's mean/std NaN for good and ``stats.json`` invalid JSON.

    Raises
    ------
    SchemaError
        Naming the column, the row and the first offending element.
    """
    arr = np.asarray(value)
    if arr.dtype.kind in "fc" and arr.size and not np.isfinite(arr).all():
        bad = arr.reshape(-1)[~np.isfinite(arr.reshape(-1))][0]
        raise SchemaError(f"row {row} holds {bad} ({int((~np.isfinite(arr)).sum())} non-finite value(s)); "
                          "stats.json accumulates this column and JSON has no NaN/Infinity", column=column,
                          hint="write the last valid sample or 0 for a missing reading")


_NAME_MAX = 255  # bytes of one directory name (ext4, APFS, NTFS)


def check_task_name(name: Any) -> str:
    """A task name is one directory name: not empty, no ``/`` or ``\\``, not starting with ``.`` or ``_`` (§1),
    no leading/trailing whitespace, no control or invisible format character (line breaks, bidi
    overrides: names people cannot read back), at most 255 bytes in UTF-8.

    Chinese and other non-ASCII names are allowed (file_format.md §1 "可含中文").

    Raises
    ------
    EgopoolError
        Naming the value and the rule.
    """
    if not isinstance(name, str):
        raise EgopoolError(f"task name must be a str, got {type(name).__name__} {name!r}")
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name or name.startswith((".", "_")):
        raise EgopoolError(f"invalid task name {name!r}",
                           hint="a task name is a single directory name, Chinese allowed, no '/' or leading '.'/'_'")
    if name != name.strip() or any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in name):
        raise EgopoolError(f"invalid task name {name!r}: leading/trailing spaces or a control character",
                           hint="use letters, digits, '_', '-' (Chinese allowed); no line breaks, tabs or "
                                "invisible characters")
    if len(name.encode("utf-8")) > _NAME_MAX:
        raise EgopoolError(f"invalid task name {name[:40]!r}...: {len(name.encode('utf-8'))} bytes in UTF-8, "
                           f"a directory name holds at most {_NAME_MAX}", hint="use a shorter task name")
    return name


def check_column_declarations(info: Mapping[str, Any], columns: Iterable[ColumnSpec]) -> None:
    """Columns the task already declares keep ``dtype`` / ``shape`` / ``encoding`` (multi_device_storage.md §6.7).

    A key the task never declared may be added. Force matrices are exempt (scale and
    encoding are per episode, ``force_matrix_specs``, file_format.md §7.2.1); trajectory
    ``frame`` / ``time`` / ``owner`` may change (per-episode ``slam_specs``, §7.2).

    Raises
    ------
    SchemaError
        Naming the column, the existing declaration and the new one.
    """
    check_feature_declarations(info, {spec.name: spec.feature for spec in columns
                                      if spec.feature is not None and spec.kind != "force_matrix"})


def check_feature_declarations(info: Mapping[str, Any], features: Mapping[str, Any]) -> None:
    """:func:`check_column_declarations` for declarations given as ``info.json`` ``features`` entries.

    Used where no :class:`~egopool.schema.ColumnSpec` exists (an uploaded slice's ``info.json``);
    force-matrix columns (``*_force_matrix``) are exempt as there.

    Raises
    ------
    SchemaError
        Naming the column, the existing declaration and the new one.
    """
    feats = info.get("features")
    if not isinstance(feats, Mapping):
        return
    for name, new in features.items():
        old = feats.get(name)
        if not isinstance(old, Mapping) or not isinstance(new, Mapping) or name.endswith("_force_matrix"):
            continue
        for key in _FIXED_KEYS:
            if key in old and old[key] != new.get(key):
                raise SchemaError(f"the task declares {key} {old[key]!r} (info.json features), this episode "
                                  f"{new.get(key)!r}; earlier episodes would no longer match their declaration",
                                  column=name, path=None,
                                  hint="keep the declaration, or record into a new task")


def check_stream_declarations(info: Mapping[str, Any], streams: Iterable[tuple[str, str, str]], *,
                              path: Path | None = None) -> None:
    """An image_key the task already has stays RGB or depth, with the same file extension.

    ``streams`` holds ``(image_key, kind, ext)``. An existing slot is RGB when it is in
    ``cameras`` and depth when it is only in ``video_extensions`` (multi_device_storage.md
    §4.8, §6.3); the file extension of a slot is task-wide (file_format.md §8). ``path`` is the
    task's ``info.json`` (named in the error).

    Raises
    ------
    SchemaError
        Naming the stream, the existing declaration and, for a depth slot, the ``--depth-codec`` that
        records into it (a task compressed by ``egopool compress`` is HEVC from then on, R36).
    """
    raw_cams, raw_exts = info.get("cameras"), info.get("video_extensions")
    cams: Mapping[str, Any] = raw_cams if isinstance(raw_cams, Mapping) else {}
    exts: Mapping[str, Any] = raw_exts if isinstance(raw_exts, Mapping) else {}
    for key, kind, ext in streams:
        if key not in cams and key not in exts:
            continue
        old_kind = "rgb" if key in cams else "depth"
        if old_kind != kind:
            was = "an RGB slot in this task (info.json cameras)" if old_kind == "rgb" else \
                "a depth slot in this task (info.json video_extensions, not cameras)"
            raise SchemaError(f"stream {key!r} is {was}, this episode records it as "
                              f"{'RGB' if kind == 'rgb' else 'depth'}", path=path,
                              hint="use another image_key for the new stream")
        if key in exts and exts[key] != ext:
            depth_fix = {"mp4": "record depth with --depth-codec hevc12 or auto (auto keeps the task's codec)",
                         "mkv": "record depth with --depth-codec ffv1 or auto (auto keeps the task's codec), or "
                                "run `egopool compress TASK` first to bring the task to HEVC"}
            hint = depth_fix.get(str(exts[key])) if kind == "depth" else None
            raise SchemaError(f"stream {key!r} is stored as .{exts[key]} in this task (info.json "
                              f"video_extensions), this episode would write .{ext}", path=path,
                              hint=hint or "record it with the codec of the earlier episodes; depth: hevc12 -> mp4, "
                                           "ffv1 -> mkv")


def check_task_meta_mergeable(task_dir: Path, info: Mapping[str, Any], declarations: Mapping[str, Any],
                              stats_dims: Mapping[str, int]) -> None:
    """``info.json`` and ``stats.json`` can take this episode at finish (file_format.md §3, §4).

    Parameters
    ----------
    task_dir:
        The task directory.
    info:
        ``meta/info.json`` as read under the task lock.
    declarations:
        What the episode will merge into ``info.json`` (a trial merge is run on a copy).
    stats_dims:
        Stats column -> values per sample this episode will accumulate.

    Raises
    ------
    FormatError
        Naming ``info.json`` / ``stats.json`` and the fix (``egopool stats recalc TASK``).
    """
    ipath = info_path(task_dir)
    try:
        json.dumps(dict(info), allow_nan=False)
    except ValueError:
        bad = [k for k, v in info.items() if not _json_clean(v)]
        raise FormatError(f"holds NaN or Infinity (key {bad[0] if bad else '?'}), which is not JSON; nothing "
                          "can be merged into it", path=ipath, hint="replace the value with a finite number") from None
    try:
        merge_info(info, declarations)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise FormatError(f"cannot merge this episode's declarations: {exc}", path=ipath,
                          hint="a key has the wrong JSON type; run `egopool validate TASK`") from exc
    dims = _stored_dims(task_dir)
    if dims is None:
        return  # legacy blocks without count: finish rebuilds the file from data/ (§4)
    for col, have in dims.items():
        dim = stats_dims.get(col)
        if dim is not None and have != dim:
            raise FormatError(f"block {col!r} has {have} values per sample, this episode's column has {dim}",
                              path=stats_path(task_dir), hint="run `egopool stats recalc TASK` to rebuild it from "
                                                               "data/")


#: stats.json path -> (its identity, :func:`_read_stored_dims` of it): a server checks each upload against the
#: same file, which changes (a new inode: it is replaced by a rename) once per published group.
_DIMS_SEEN: dict[str, tuple[tuple[int, ...], dict[str, int] | None]] = {}
_DIMS_SEEN_MAX = 64
_DIMS_LOCK = threading.Lock()  # the server checks uploads into several tasks in several threads


def _identity(path: Path) -> tuple[int, ...] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _stored_dims(task_dir: Path) -> dict[str, int] | None:
    """:func:`_read_stored_dims`, read again only when ``stats.json`` is another file or was written since (its
    device, inode, size, mtime and ctime); a file that fails the checks is read again every time."""
    spath = stats_path(task_dir)
    before = _identity(spath)
    if before is not None:
        seen = _DIMS_SEEN.get(str(spath))
        if seen is not None and seen[0] == before:
            return seen[1]
    dims = _read_stored_dims(task_dir)
    if before is not None and _identity(spath) == before:  # unchanged while it was read
        with _DIMS_LOCK:
            if len(_DIMS_SEEN) >= _DIMS_SEEN_MAX:
                _DIMS_SEEN.pop(next(iter(_DIMS_SEEN)), None)
            _DIMS_SEEN[str(spath)] = (before, dims)
    return dims


def _read_stored_dims(task_dir: Path) -> dict[str, int] | None:
    """Column -> values per sample of every non-empty block of ``stats.json``, each block checked (readable, its
    four arrays of one length, finite); None when it holds legacy blocks without count (rebuilt at finish).

    Raises
    ------
    FormatError
        Naming ``stats.json`` and ``egopool stats recalc TASK``.
    """
    stored = read_stats(task_dir)  # FormatError with the recalc hint when unparsable
    if needs_recalc(stored):
        return None
    spath = stats_path(task_dir)
    hint = "run `egopool stats recalc TASK` to rebuild it from data/"
    dims: dict[str, int] = {}
    for col, raw in stored.items():
        if col == "action":
            continue
        try:
            block = StatsBlock.from_dict(raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"block {col!r} cannot be read ({type(exc).__name__}: {exc})", path=spath,
                              hint=hint) from exc
        if block.empty:
            continue  # count 0 holds no samples: its placeholder values never enter a merge (§4)
        if len({a.shape for a in (block.mean, block.std, block.min, block.max)}) != 1:
            raise FormatError(f"block {col!r}: mean/std/min/max have different lengths", path=spath, hint=hint)
        if not all(np.isfinite(a).all() for a in (block.mean, block.std, block.min, block.max)):
            raise FormatError(f"block {col!r} holds NaN or Infinity", path=spath, hint=hint)
        dims[col] = int(block.mean.shape[0])
    return dims


def _json_clean(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError):
        return False
    return True
