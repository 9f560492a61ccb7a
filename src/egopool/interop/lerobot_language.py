"""LeRobot 0.6's language columns in a pooled task and back (docs/decisions.md I22, I23).

lerobot 0.6.1 (``lerobot.datasets.language``, #3467) has two data columns of "language rows", both
``list<struct>`` per frame, declared ``{"dtype": "language", "shape": [1], "names": None}`` in ``info.json``:

* ``language_persistent``: rows ``{role, content, style, timestamp, camera, tool_calls}`` that are *states*
  (styles ``subtask``, ``plan``, ``memory``, ``motion``, ``task_aug``): each row's ``timestamp`` (s, on the
  dataset's frame clock ``frame_index / fps``, float32) is when it becomes active; lerobot's annotation writer
  puts the episode's whole list, the same, on every frame of the episode;
* ``language_events``: rows ``{role, content, style, camera, tool_calls}`` that *fire at one frame* (styles
  ``interjection``, ``vqa``, ``trace``, or None for a tool call such as ``say``): they stand on the frame whose
  timestamp is the firing time and carry no timestamp of their own.

``tool_calls`` is a list of JSON values (OpenAI-style calls) or null. The dataset's ``tools`` (``info.json``,
the schemas of the callable tools) go with the rows.

A pooled task holds each as a string column (file_format.md §7, multi_device_storage.md §2.4:
``observation.language_persistent`` / ``observation.language_events``): per data row the JSON text of that
frame's list of rows, exactly as LeRobot gives them (``"[]"`` for none; an empty string, a row without a sample,
§5.5, reads as none), declared as ``dtype string, shape [1]`` with an ``info`` saying what the text is and the
dataset's ``tools``. Plain rows of a string column, they travel with the episode through sync, the server and
``egopool edit`` like any other column. ``export lerobot`` (lerobot >= 0.6) writes them back as LeRobot's
columns, in lerobot's own arrow types (:func:`language_type`); ``--lerobot 0.4`` (no language columns) exports
the JSON text as a string feature under the pooled name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import FormatError
from ..schema import ColumnSpec

__all__ = ["LANGUAGE_COLUMNS", "LANGUAGE_EVENTS", "LANGUAGE_FEATURE", "LANGUAGE_PERSISTENT", "POOLED", "STYLES",
           "TASK_COLUMN", "TASK_FEATURE", "VIEW_STYLES", "dumps_rows", "is_language_feature", "language_array",
           "language_feature_of", "language_spec", "language_type", "language_type_problem", "lerobot_name",
           "loads_rows", "row_problem", "rows_of"]

LANGUAGE_PERSISTENT = "language_persistent"
LANGUAGE_EVENTS = "language_events"
LANGUAGE_COLUMNS = (LANGUAGE_PERSISTENT, LANGUAGE_EVENTS)
#: LeRobot column -> the pooled column holding it.
POOLED = {name: f"observation.{name}" for name in LANGUAGE_COLUMNS}
#: The pooled string column holding LeRobot's per-frame ``task`` (its instruction; decisions I24): the pooled format has
#: one task string per task (``tasks.jsonl``, spec: task_index is always 0), so an imported dataset's tasks live here
#: and ``export lerobot`` writes ``task_index`` / ``meta/tasks.parquet`` from it.
TASK_COLUMN = "observation.language_task"
#: Its declaration.
TASK_FEATURE: dict[str, Any] = {"dtype": "string", "shape": [1], "names": None,
                                "info": {"lerobot": "task", "value": "LeRobot's task (instruction) of this frame"}}
#: The ``info.json`` feature of either column (``lerobot.datasets.language.language_feature_info``).
LANGUAGE_FEATURE: dict[str, Any] = {"dtype": "language", "shape": [1], "names": None}
#: Each row's fields, in lerobot's order (``PERSISTENT_ROW_FIELDS`` / ``EVENT_ROW_FIELDS``).
FIELDS = {LANGUAGE_PERSISTENT: ("role", "content", "style", "timestamp", "camera", "tool_calls"),
          LANGUAGE_EVENTS: ("role", "content", "style", "camera", "tool_calls")}
_WHAT = {LANGUAGE_PERSISTENT: "states active from their timestamp (s, frame_index / fps): the episode's list on "
                              "every frame",
         LANGUAGE_EVENTS: "rows that fire on this frame (no timestamp of their own)"}


#: lerobot 0.6.1's styles per column (``PERSISTENT_STYLES``; ``EVENT_ONLY_STYLES`` and None, ``column_for_style``)
#: and the styles whose rows must name a camera (``VIEW_DEPENDENT_STYLES``; every other style's camera is null).
STYLES: dict[str, frozenset[str | None]] = {
    LANGUAGE_PERSISTENT: frozenset({"subtask", "plan", "memory", "motion", "task_aug"}),
    LANGUAGE_EVENTS: frozenset({"interjection", "vqa", "trace", None})}
VIEW_STYLES = frozenset({"vqa", "trace"})


def row_problem(row: Mapping[str, Any], name: str) -> tuple[str, str] | None:
    """``(field, why)`` when ``row`` (one row of LeRobot column ``name``, as a dict) breaks lerobot 0.6.1's row
    schema (``lerobot.datasets.language``: its fields, a string ``role``, a number ``timestamp`` for persistent
    rows, the column's styles, ``camera`` set iff the style is view-dependent, ``tool_calls`` a list or null);
    None when it holds. A field lerobot does not name counts only when it holds a value (pyarrow infers an
    always-null field)."""
    extra = sorted(k for k, v in row.items() if k not in FIELDS[name] and v is not None)
    if extra:
        return extra[0], f"is not a field of LeRobot's {name} rows ({', '.join(FIELDS[name])})"
    if not isinstance(row.get("role"), str):
        return "role", f"is {row.get('role')!r}, not a string (lerobot's role is never null)"
    if name == LANGUAGE_PERSISTENT:
        ts = row.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            return "timestamp", f"is {ts!r}, not a finite number of seconds"
    style = row.get("style")
    if style not in STYLES[name]:
        allowed = sorted(str(x) for x in STYLES[name])
        return "style", f"is {style!r}, not one of lerobot 0.6.1's {name} styles ({', '.join(allowed)})"
    camera = row.get("camera")
    if style in VIEW_STYLES and not (isinstance(camera, str) and camera):
        return "camera", f"is {camera!r}: a {style} row names the observation.images.* camera it is about"
    if style not in VIEW_STYLES and camera is not None:
        return "camera", f"is {camera!r}: only vqa/trace rows name a camera (lerobot's rule)"
    if not isinstance(row.get("tool_calls"), (list, type(None))):
        return "tool_calls", f"is {row.get('tool_calls')!r:.60}, not a list or null"
    return None


def _json_type() -> pa.DataType:
    return pa.json_() if hasattr(pa, "json_") else pa.string()


def language_type(name: str) -> pa.ListType:
    """lerobot 0.6.1's arrow type of column ``name`` (``language_persistent_arrow_type`` /
    ``language_events_arrow_type``), built here so that nothing needs lerobot."""
    fields = [pa.field("role", pa.string(), nullable=False), pa.field("content", pa.string()),
              pa.field("style", pa.string())]
    if name == LANGUAGE_PERSISTENT:
        fields.append(pa.field("timestamp", pa.float32(), nullable=False))
    fields += [pa.field("camera", pa.string()), pa.field("tool_calls", pa.list_(_json_type()))]
    return pa.list_(pa.struct(fields))


def lerobot_name(pooled: str, feature: Any = None) -> str | None:
    """The LeRobot column a pooled column holds (by its declaration's ``info.lerobot``, else its name), or None."""
    info = feature.get("info") if isinstance(feature, Mapping) else None
    declared = info.get("lerobot") if isinstance(info, Mapping) else None
    if declared in LANGUAGE_COLUMNS:
        return str(declared)
    return next((n for n, p in POOLED.items() if p == pooled), None)


def is_language_feature(name: str, feature: Mapping[str, Any]) -> bool:
    """True for a LeRobot language column of an ``info.json`` (its dtype, or one of the two names)."""
    return feature.get("dtype") == "language" or name in LANGUAGE_COLUMNS


def language_feature_of(name: str, tools: Any = None) -> dict[str, Any]:
    """The pooled declaration of the column holding LeRobot column ``name`` (``tools``: the dataset's, if a list)."""
    info: dict[str, Any] = {"lerobot": name, "value": f"JSON list of LeRobot 0.6 {name} rows "
                                                      f"{{{', '.join(FIELDS[name])}}}: {_WHAT[name]}"}
    if isinstance(tools, list) and tools:
        info["tools"] = tools
    return {"dtype": "string", "shape": [1], "names": None, "info": info}


def language_spec(name: str, pooled: str | None = None, tools: Any = None,
                  feature: Mapping[str, Any] | None = None) -> ColumnSpec:
    """The ColumnSpec of the pooled string column holding LeRobot column ``name`` (default name :data:`POOLED`;
    ``feature``: a declaration to keep, e.g. from ``egopool_mapping.json``)."""
    return ColumnSpec(pooled or POOLED[name], "string", "str", None, dict(feature or language_feature_of(name, tools)),
                      sparse=True)


def language_type_problem(name: str, typ: pa.DataType) -> str | None:
    """Why a parquet column of type ``typ`` cannot be LeRobot language column ``name`` (a phrase), or None.

    A list of structs with a string ``role``; any other field lerobot names may be there (lerobot's annotation
    writer lets pyarrow infer the types: ``tool_calls`` then is a list of structs, a field always null is null).
    """
    if isinstance(typ, pa.BaseExtensionType):
        typ = typ.storage_type
    ok = (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and pa.types.is_struct(typ.value_type)
    item = typ.value_type if ok else None
    if item is None or item.get_field_index("role") < 0 or not (
            pa.types.is_string(item.field("role").type) or pa.types.is_large_string(item.field("role").type)):
        return f"holds {typ}, not LeRobot's {name} rows (a list of structs with a string role)"
    return None


def _plain(value: Any, where: str) -> Any:
    """A value of a row as JSON allows it (the text of a JSON-typed value parsed)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    raise FormatError(f"{where}: a value of type {type(value).__name__} is not JSON")


def rows_of(column: pa.Array | pa.ChunkedArray, name: str, *, where: str = "") -> list[list[dict[str, Any]]]:
    """A language column's arrow values -> per frame the list of rows (dicts of lerobot's fields, in its order).

    A JSON-typed value (lerobot's ``tool_calls`` items) is parsed; a null list is an empty one. Fields that
    lerobot does not name are left out, and fields it names that are missing are None.

    Raises
    ------
    FormatError
        A ``tool_calls`` item that is not JSON text, or a value JSON cannot hold (``where`` names the place).
    """
    json_items = False
    typ = column.type
    if isinstance(typ, pa.BaseExtensionType):
        typ = typ.storage_type
    item = typ.value_type if pa.types.is_list(typ) or pa.types.is_large_list(typ) else None
    if item is not None and pa.types.is_struct(item) and item.get_field_index("tool_calls") >= 0:
        calls = item.field("tool_calls").type
        inner = calls.value_type if pa.types.is_list(calls) or pa.types.is_large_list(calls) else None
        json_items = isinstance(inner, pa.BaseExtensionType) and inner.extension_name == "arrow.json"
    out: list[list[dict[str, Any]]] = []
    for i, frame in enumerate(column.to_pylist()):
        rows = []
        for row in frame or ():
            bad = row_problem(row, name)
            if bad is not None:
                raise FormatError(f"{where}frame {i}: a {name} row's {bad[0]} {bad[1]}",
                                  hint="fix or remove the row (lerobot 0.6.1's lerobot.datasets.language rules)")
            got = {k: row.get(k) for k in FIELDS[name]}
            calls_value = got.get("tool_calls")
            if json_items and calls_value is not None:
                try:
                    got["tool_calls"] = [None if c is None else json.loads(c) for c in calls_value]
                except ValueError as exc:
                    raise FormatError(f"{where}row {i}: a {name} tool call is not JSON ({exc})") from None
            rows.append(_plain(got, f"{where}row {i}: {name}"))
        out.append(rows)
    return out


def dumps_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """One frame's rows as the pooled column's text (compact JSON, UTF-8 kept, no NaN)."""
    return json.dumps(list(rows), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def loads_rows(text: str | None, name: str, *, where: str = "") -> list[dict[str, Any]]:
    """The pooled column's text of one frame -> its rows ("" or None: none).

    Raises
    ------
    FormatError
        Not a JSON list of objects with a string ``role`` (``where`` names the place).
    """
    if not text:
        return []
    try:
        rows = json.loads(text)
    except ValueError as exc:
        raise FormatError(f"{where}{POOLED[name]} is not JSON ({exc})",
                          hint="it holds the JSON list of the frame's LeRobot rows; restore or remove the column") \
            from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("role"), str) for r in rows):
        raise FormatError(f"{where}{POOLED[name]} is not a JSON list of rows {{\"role\": str, ...}}",
                          hint="it holds the JSON list of the frame's LeRobot rows; restore or remove the column")
    for r in rows:
        bad = row_problem(r, name)
        if bad is not None:
            raise FormatError(f"{where}{POOLED[name]}: a row's {bad[0]} {bad[1]}",
                              hint="fix or remove the row (lerobot 0.6.1's lerobot.datasets.language rules)")
    return [{k: r.get(k) for k in FIELDS[name]} for r in rows]


def _strings(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    return pa.array([None if v is None else str(v) for v in values], type=typ)


def language_array(rows: Sequence[Sequence[Mapping[str, Any]]], name: str) -> pa.Array:
    """Per frame a list of rows -> the column in lerobot's type (:func:`language_type`), nulls kept.

    Built from its parts because pyarrow cannot convert Python values to the JSON type of ``tool_calls``.

    Raises
    ------
    FormatError
        A row without a string ``role``, a ``timestamp`` that is not a number, ``tool_calls`` not a list or null.
    """
    typ = language_type(name)
    item = typ.value_type
    flat = [r for frame in rows for r in frame]
    for r in flat:
        ts = r.get("timestamp")
        if not isinstance(r.get("role"), str) or (name == LANGUAGE_PERSISTENT and (
                isinstance(ts, bool) or not isinstance(ts, (int, float)))) or not isinstance(
                r.get("tool_calls"), (list, type(None))):
            raise FormatError(f"a {name} row {dict(r)!r:.120} is not LeRobot's (a string role"
                              + (", a number timestamp" if name == LANGUAGE_PERSISTENT else "")
                              + ", tool_calls a list or null)")
    children = []
    for f in item:
        if f.name == "tool_calls":
            calls = [r.get("tool_calls") for r in flat]
            texts = [json.dumps(c, ensure_ascii=False, allow_nan=False) for cs in calls if cs is not None for c in cs]
            storage = pa.array(texts, type=pa.string())
            values = pa.ExtensionArray.from_storage(f.type.value_type, storage) if isinstance(
                f.type.value_type, pa.BaseExtensionType) else storage
            offsets = np.cumsum([0, *(len(cs) if cs is not None else 0 for cs in calls)]).astype(np.int32)
            mask = pa.array([cs is None for cs in calls], type=pa.bool_())
            children.append(pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=f.type, mask=mask))
        elif f.name == "timestamp":
            children.append(pa.array(np.asarray([float(r["timestamp"]) for r in flat], np.float32), type=f.type))
        else:
            children.append(_strings([r.get(f.name) for r in flat], f.type))
    struct = pa.StructArray.from_arrays(children, fields=list(item),
                                        mask=pa.array([False] * len(flat)) if flat else None)
    offsets = np.cumsum([0, *(len(frame) for frame in rows)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), struct, type=typ)
