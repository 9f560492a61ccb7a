"""Checks of the task-level meta files: ``info.json``, ``tasks.jsonl``, ``stats.json`` and leftovers.

Implements file_format.md §1 (format key, v1.0 leftovers), §3 (MUST keys and their
types, path templates), §4 (stats blocks with ``count``), §5 (tasks.jsonl one JSON
object per line) and §11 (obsolete ``.stats_state.json``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from .._safe_read import loads_json, read_json, read_text
from ..errors import EgopoolError, LegacyLayoutError, ObjectStoreError
from ..storage import ObjectPath, TaskPath, require_bucket
from ..layout import TEMPLATE_FIELDS, TaskLayout, parse_template
from ..meta.info import FORMAT, INFO_MUST_KEYS, edit_midway, info_path, parse_format, read_info, unfinished_edit
from ..unix_time import created_at_problem
from .context import Context, json_float
from .report import Report

__all__ = ["check_bom", "check_info_file", "check_info_keys", "check_leftovers", "check_stats", "check_tasks_jsonl",
           "check_templates", "non_finite_paths"]

R_LAYOUT = "file_format.md §1"
R_INFO = "file_format.md §3"
R_STATS = "file_format.md §4"
R_TASKS = "file_format.md §5"
R_IGNORED = "file_format.md §11"

_SESSION_DIR_RE = re.compile(r"_\d{6}$")
_BOM = b"\xef\xbb\xbf"


def check_bom(report: Report, path: TaskPath, rule: str, reader: str, fix: str) -> None:
    """An error when a meta file that egopool read begins with a UTF-8 byte order mark.

    egopool's reader drops the mark (``_safe_read.read_text``), the spec's own readers do not:
    ``json.loads(f.readline())`` (§5) and ``json.load(f)`` of a file opened as UTF-8 fail with
    "Unexpected UTF-8 BOM", so the file breaks every other program reading the task. Called only
    after the file was read as a regular file.
    """
    try:
        with path.open("rb", buffering=len(_BOM)) if isinstance(path, ObjectPath) else open(path, "rb") as fh:
            head = fh.read(len(_BOM))
    except (OSError, EgopoolError):
        return
    if head == _BOM:
        report.error(rule, path, f"begins with a UTF-8 byte order mark (EF BB BF): the spec's reader {reader} fails "
                                 f"on it (egopool reads past it); {fix}")

#: MUST key -> accepted JSON types (bool is never accepted where int is meant).
_INFO_TYPES: dict[str, tuple[type, ...]] = {
    "format": (str,), "chunks_size": (int,), "data_path": (str,), "video_path": (str,),
    "episodes_path": (str,), "codebase_version": (str,), "app_version": (str,), "fps": (int, float),
    "video": (bool,), "task_name": (str,), "features": (dict,), "cameras": (dict,), "devices": (list,),
    "device_names": (dict,), "sensors": (list,), "sensor_dim": (int,), "created_at": (int, float),
    "calibration": (dict,), "total_episodes": (int,), "video_extensions": (dict,),
}
_JSON_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object", list: "array"}


def non_finite_paths(obj: Any, where: str = "") -> list[str]:
    """JSON paths (``a.b[2]``) of NaN / Infinity values in a parsed document (Python's json accepts
    them, standard JSON has no such values and other readers reject the file)."""
    if isinstance(obj, float):
        return [] if math.isfinite(obj) else [where or "(document)"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in non_finite_paths(v, f"{where}.{k}" if where else str(k))]
    if isinstance(obj, list):
        if _all_finite_numbers(obj):  # a stats vector: checked in C, not value by value (U20)
            return []
        return [p for i, v in enumerate(obj) for p in non_finite_paths(v, f"{where}[{i}]")]
    return []


def _all_finite_numbers(values: list[Any]) -> bool:
    """True when every item is a finite float or an int float64 holds (so none is a NaN/Infinity path);
    False for any other list, which is then walked item by item."""
    if not set(map(type, values)) <= {float, int}:
        return False
    try:
        return all(map(math.isfinite, values))
    except OverflowError:  # an int beyond float64: walk the list
        return False


def beyond_float64_paths(obj: Any, where: str = "") -> list[str]:
    """JSON paths of integers that float64 cannot hold (``-1`` followed by 400 zeros is valid JSON; most
    readers turn it into Infinity or refuse it, docs/decisions.md V7)."""
    if isinstance(obj, int) and not isinstance(obj, bool):
        x = json_float(obj)
        return [] if x is not None and math.isfinite(x) else [where or "(document)"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in beyond_float64_paths(v, f"{where}.{k}" if where else str(k))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in beyond_float64_paths(v, f"{where}[{i}]")]
    return []


def _type_ok(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


def check_info_file(root: TaskPath, report: Report) -> dict[str, Any] | None:
    """Load ``meta/info.json`` and check ``format`` (file_format.md §1, §12.1).

    Returns the info dict, or None after adding an error finding when the path is not
    a ``pooled_episodes_v1`` task (missing directory, empty directory, no info.json,
    bad JSON, missing or unknown ``format``, legacy v1.0 per-session layout). Nothing
    else can be checked then: the spec says to fail on an unknown format, never guess.
    """
    building = None if info_path(root).exists() else unfinished_edit(root)  # a target before its commit (E58)
    if building is not None:
        report.error(R_LAYOUT, root, f"{building.message} ({building.hint})")
        return None
    exists = root.exists()  # asked once: on a bucket each ask of a prefix is a HEAD and a LIST (O33)
    midway = edit_midway(root) if exists else None  # an in-place edit interrupted or running (E63)
    if midway is not None:
        report.error(R_LAYOUT, root, f"{midway.message} ({midway.hint})")
    if not exists:
        if isinstance(root, ObjectPath):
            require_bucket(root)  # a missing bucket is said as such (ObjectStoreError), not as a missing task
            report.error(R_LAYOUT, root, f"no task at {root} (check the URI; the prefix holds no object)")
            return None
        report.error(R_LAYOUT, root, "task directory does not exist; pass the directory holding data/, videos/, meta/")
        return None
    if not root.is_dir():
        report.error(R_LAYOUT, root, "not a directory; pass the task directory holding data/, videos/, meta/")
        return None
    path = info_path(root)
    try:
        info = read_info(root, check_format=False)
    except LegacyLayoutError as exc:
        report.error(R_LAYOUT, exc.path or root, f"{exc.message} ({exc.hint})" if exc.hint else exc.message)
        return None
    except ObjectStoreError:
        raise  # the store failed, not the task: no verdict on what could not be read (O3)
    except EgopoolError as exc:
        if not path.exists() and not path.is_symlink():
            report.error(R_LAYOUT, path, "not a pooled_episodes_v1 task: meta/info.json is missing; point egopool "
                                         "at a task directory (the one holding data/, videos/, meta/ with "
                                         f"\"format\": \"{FORMAT}\")")
        else:
            report.error(R_INFO, path, f"{exc.message} ({exc.hint})" if exc.hint else exc.message)
        return None
    try:
        parse_format(info, path)
    except ObjectStoreError:
        raise  # the store failed, not the task: no verdict on what could not be read (O3)
    except EgopoolError as exc:
        msg = exc.message if "format" in exc.message else f"'format': {exc.message}"
        report.error(R_LAYOUT, path, f"{msg} ({exc.hint})" if exc.hint else msg)
        return None
    check_bom(report, path, R_INFO, "json.load(f)", "re-save it as UTF-8 without the mark (the next writer of "
                                                     "the task rewrites it without one)")
    return info


#: Row rates (Hz) a recording of this format can have: below 0.01 Hz a float32 ``timestamp`` step
#: is over 100 s per row, above 100 kHz two rows are 10 µs apart (float32 cannot tell rows apart
#: after about 2 minutes).
PLAUSIBLE_FPS = (0.01, 100_000.0)


def check_info_keys(ctx: Context) -> None:
    """Every MUST key of file_format.md §3 present with the right JSON type and sane values."""
    path = info_path(ctx.root)
    info = ctx.info
    bad = non_finite_paths(info)
    if bad:
        ctx.report.error(R_INFO, path, f"holds NaN/Infinity at {', '.join(bad[:3])}, which is not JSON (other "
                                       "readers reject the file); replace them with finite numbers")
    huge = beyond_float64_paths(info)
    if huge:
        ctx.report.error(R_INFO, path, f"holds integers beyond float64 at {', '.join(huge[:3])} (other JSON readers "
                                       "read them as Infinity or refuse them); replace them with numbers in range")
    for key in INFO_MUST_KEYS:
        if key not in info:
            ctx.report.error(R_INFO, path, f"MUST key {key!r} is missing; add it (file_format.md §3 lists every "
                                           "key a pooled task declares)")
            continue
        types = _INFO_TYPES.get(key)
        if types and not _type_ok(info[key], types):
            want = " or ".join(_JSON_NAMES[t] for t in types)
            fix = _TYPE_FIX.get(key, f"write it as a JSON {want} (file_format.md §3)")
            ctx.report.error(R_INFO, path, f"key {key!r} must be a JSON {want}, got {info[key]!r:.60}; {fix}")
    cs = info.get("chunks_size")
    if isinstance(cs, int) and not isinstance(cs, bool) and cs < 1:
        ctx.report.error(R_INFO, path, f"chunks_size must be >= 1, got {cs}; set the number of episodes per chunk "
                                       "folder the file names use (the spec's default is 1000)")
    fps = json_float(info.get("fps"))
    # NaN / Infinity (and ints beyond float64) are not usable JSON: the non-finite check reports them once
    if fps is not None and math.isfinite(fps):
        if not fps > 0:
            ctx.report.error(R_INFO, path, f"fps must be > 0, got {fps}")
        elif math.isfinite(fps) and not PLAUSIBLE_FPS[0] <= fps <= PLAUSIBLE_FPS[1]:
            ctx.report.warning(R_INFO, path, f"fps = {fps:g} rows per second is outside {PLAUSIBLE_FPS[0]:g}-"
                                             f"{PLAUSIBLE_FPS[1]:g}: float32 timestamps (§7.1) cannot time such "
                                             "rows usefully; set the recording's real frame rate")
    created = json_float(info.get("created_at"))
    if created is not None and math.isfinite(created):
        found = created_at_problem(created)  # the task's creation time: no wall_time is built on it
        if found is not None:
            ctx.report.warning(R_INFO, path, found[1])
    te = info.get("total_episodes")
    if isinstance(te, int) and not isinstance(te, bool) and te < 0:
        ctx.report.error(R_INFO, path, f"total_episodes must be >= 0, got {te}")
    name = info.get("task_name")
    if isinstance(name, str) and name != ctx.root.resolve().name:
        ctx.report.warning(R_INFO, path, f"task_name {name!r} differs from the directory name "
                                         f"{ctx.root.resolve().name!r} (task_name = directory name)")
    if info.get("video") is False and ctx.video_extensions:
        ctx.report.warning(R_INFO, path, "video is false but video_extensions declares streams; set video to true")


#: the fix a wrongly typed info.json key names, where a generic "write it as a JSON ..." says too little
_TYPE_FIX = {
    "fps": "set the recording's frame rate in rows per second as a number, e.g. 30",
    "chunks_size": "set the number of episodes per chunk folder as an integer (the spec's default is 1000)",
    "total_episodes": "set the number of episodes as an integer (`egopool repair` recounts it)",
}


def check_templates(ctx: Context) -> TaskLayout | None:
    """The path templates (§3, checklist §12.2) must be usable: right fields, and they must format.

    Returns the layout, or None (with an error finding) when the episodes cannot be
    enumerated from these templates.
    """
    path = info_path(ctx.root)
    cs = ctx.info.get("chunks_size", 1)
    if isinstance(cs, bool) or not isinstance(cs, int) or cs < 1:
        return None  # check_info_keys reported it once; the layout cannot be built without it
    ok = True
    for key in TEMPLATE_FIELDS:
        tpl = ctx.info.get(key)
        if tpl is None or not isinstance(tpl, str):
            continue  # missing / wrong type already reported by check_info_keys
        try:
            parse_template(key, tpl, path)
        except ObjectStoreError:
            raise  # the store failed, not the task: no verdict on what could not be read (O3)
        except EgopoolError as exc:
            ctx.report.error(R_INFO, path, f"{exc.message} (e.g. the spec's default template)")
            ok = False
    if not ok:
        return None
    usable = {k: v for k, v in ctx.info.items() if not (k in TEMPLATE_FIELDS and not isinstance(v, str))}
    try:
        return TaskLayout.from_info(ctx.root, usable)
    except ObjectStoreError:
        raise  # the store failed, not the task: no verdict on what could not be read (O3)
    except EgopoolError as exc:
        ctx.report.error(R_INFO, path, exc.message)
        return None


def check_tasks_jsonl(ctx: Context) -> None:
    """``meta/tasks.jsonl``: every line one complete JSON object (§5, §12.5); several lines (a merged task's
    instructions) each with its own ``task_index`` and its own string (a repeated one: a warning, E61)."""
    path = ctx.rel("meta", "tasks.jsonl")
    if not path.exists() and not path.is_symlink():
        ctx.report.error(R_TASKS, path, "meta/tasks.jsonl is missing; create it with the single line "
                                        '{"task_index": 0, "task": "<task name>"}')
        return
    try:
        text = read_text(path, what="meta/tasks.jsonl")
    except ObjectStoreError:
        raise  # the store failed, not the task: no verdict on what could not be read (O3)
    except EgopoolError as exc:
        ctx.report.error(R_TASKS, path, f"cannot read as UTF-8 text: {exc.message}")
        return
    check_bom(ctx.report, path, R_TASKS, "json.loads(f.readline())",
              "re-save it as UTF-8 without the mark (writers never rewrite an existing tasks.jsonl)")
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        ctx.report.error(R_TASKS, path, 'is empty; write the single line {"task_index": 0, "task": "<task name>"}')
        return
    index_line: dict[int, int] = {}
    text_line: dict[str, int] = {}
    for i, line in lines:
        try:
            obj = loads_json(line, path=path)
        except ObjectStoreError:
            raise  # the store failed, not the task: no verdict on what could not be read (O3)
        except EgopoolError as exc:
            ctx.report.error(R_TASKS, path, f"line {i} is not a complete JSON object ({exc.message}): tasks.jsonl "
                                            "must hold one JSON object per line and must not be pretty-printed "
                                            "(first-line readers break); rewrite it on one line")
            return
        if not isinstance(obj, dict):
            ctx.report.error(R_TASKS, path, f"line {i} is not a JSON object; write "
                                            '{"task_index": 0, "task": "<task name>"}')
            return
        if not _type_ok(obj.get("task_index"), (int,)) or not isinstance(obj.get("task"), str):
            ctx.report.error(R_TASKS, path, f"line {i} needs an integer 'task_index' and a string 'task', "
                                            f"got keys {sorted(obj)}")
            continue
        # several lines are the spec's (one object per line, read line by line, §5): a merged task's instructions
        # (docs/decisions.md E61); one index or one string on two lines is what makes them ambiguous
        k, text = int(obj["task_index"]), obj["task"]
        if k in index_line:
            ctx.report.warning(R_TASKS, path, f"lines {index_line[k]} and {i} both have task_index {k}: which "
                                              "instruction its frames carry is ambiguous; renumber one (and the "
                                              "task_index of its episodes)")
        if text in text_line:
            ctx.report.warning(R_TASKS, path, f"lines {text_line[text]} and {i} hold the same task string "
                                              f"{text!r}: one instruction under two task_index; keep one line")
        index_line.setdefault(k, i)
        text_line.setdefault(text, i)


def check_stats(ctx: Context, has_episodes: bool) -> None:
    """``meta/stats.json`` blocks ``{count, mean, std, min, max}`` (§4, checklist §12.4).

    A block without ``count`` is the v1.1.0 layout: a warning (readers ignore it and
    warn, §12.4; the next writer rebuilds it), telling the user to run
    ``egopool stats recalc``.
    """
    path = ctx.rel("meta", "stats.json")
    if not path.exists() and not path.is_symlink():
        if has_episodes:
            ctx.report.error(R_STATS, path, "meta/stats.json is missing although the task has episodes; "
                                            "run `egopool stats recalc TASK` to rebuild it from data/")
        return
    try:
        doc = read_json(path, what="stats.json")
    except ObjectStoreError:
        raise  # the store failed, not the task: no verdict on what could not be read (O3)
    except EgopoolError as exc:
        ctx.report.error(R_STATS, path, f"cannot parse JSON ({exc.message}); run `egopool stats recalc TASK`")
        return
    check_bom(ctx.report, path, R_STATS, "json.load(f)", "run `egopool stats recalc TASK` to rewrite it")
    if not isinstance(doc, dict):
        ctx.report.error(R_STATS, path, "is not a JSON object of blocks; run `egopool stats recalc TASK`")
        return
    bad = non_finite_paths(doc)
    if bad:
        ctx.report.error(R_STATS, path, f"holds NaN/Infinity at {', '.join(bad[:3])}, which is not JSON; run "
                                        "`egopool stats recalc TASK` (writers refuse non-finite stats values)")
    legacy = []
    for col, block in doc.items():
        if not isinstance(block, dict):
            ctx.report.error(R_STATS, path, f"block {col!r} is not an object {{count, mean, std, min, max}}")
            continue
        if "count" not in block:
            legacy.append(col)
        elif not _type_ok(block["count"], (int,)) or block["count"] < 0:
            ctx.report.error(R_STATS, path, f"block {col!r}: count must be a non-negative integer, "
                                            f"got {block['count']!r}; run `egopool stats recalc TASK`")
        missing = [k for k in ("mean", "std", "min", "max") if k not in block]
        if missing:
            ctx.report.error(R_STATS, path, f"block {col!r} lacks {missing}; run `egopool stats recalc TASK`")
            continue
        lens = {k: len(block[k]) if isinstance(block[k], list) else None for k in ("mean", "std", "min", "max")}
        if None in lens.values() or len(set(lens.values())) != 1:
            ctx.report.error(R_STATS, path, f"block {col!r}: mean/std/min/max must be lists of the column's "
                                            f"dimension, got lengths {lens}; run `egopool stats recalc TASK`")
    if legacy:
        ctx.report.warning(R_STATS, path, f"block(s) {legacy} have no 'count' (legacy v1.1.0 stats, not an "
                                          "accumulator); run `egopool stats recalc TASK`")
    action = doc.get("action")
    if isinstance(action, dict) and action.get("count", 0) != 0:
        ctx.report.warning(R_STATS, path, f"the 'action' block is a placeholder with count 0, got "
                                          f"{action.get('count')!r}")


def check_leftovers(ctx: Context) -> None:
    """Obsolete sidecars (§11) and v1.0 per-session leftovers inside a pooled task (§1)."""
    sidecar = ctx.rel("meta", ".stats_state.json")
    if sidecar.exists():
        ctx.report.warning(R_IGNORED, sidecar, "obsolete v1.1.0 stats sidecar, ignored; delete it "
                                               "(`egopool migrate` removes it)")
    for name in ("calibration", "metadata.json", "timestamps.json"):
        p = ctx.rel(name)
        if p.exists():
            ctx.report.warning(R_LAYOUT, p, "v1.0 leftover: a pooled task has no calibration/, metadata.json or "
                                            "timestamps.json (calibration lives in info.json); move it out")
    dirs: list[TaskPath]
    try:
        if isinstance(ctx.root, ObjectPath):  # one LIST says which children are prefixes
            dirs = sorted(e.path for e in ctx.root.scandir() if e.is_dir())
        else:
            dirs = [p for p in sorted(ctx.root.iterdir()) if p.is_dir()]
    except OSError:
        return
    for p in dirs:
        if _SESSION_DIR_RE.search(p.name):
            ctx.report.warning(R_LAYOUT, p, "v1.0 per-session directory inside a pooled task; egopool ignores "
                                            "it, move it out of the task")
