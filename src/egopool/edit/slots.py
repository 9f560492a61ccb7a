"""Stream slots and task strings of a task, changed in place (docs/decisions.md E9, E10).

A slot (``image_key``, file_format.md §8, multi_device_storage.md §5.2) is removed from every episode's videos,
``video_extensions``, ``cameras``, ``device_names``, the ``slots`` of its device in ``devices`` (a device left
without a slot goes) and the rows' ``video_codec`` entry of that slot. A rename moves every episode's video to
the new slot name (bytes unchanged) and renames it in each of those declarations. The new name must be a slot
name (:func:`~egopool.schema.check_slot_name`, the writer's rule) that no device uses yet: two devices never share
an ``image_key`` (§5.2 rule 1). A slot's ``status.<slot>`` data column (a UVC slot's connection state) follows
it: renamed with it (the new name must then make a column name, ``[a-z0-9_]``), removed with it. ``set-task`` rewrites one line of ``tasks.jsonl`` (the language instruction of ``task_index``),
single-line JSON as §5 requires; a string another line holds is refused (one string, one ``task_index``: E59).
A slot's new name must say its stream's kind (``*_depth`` / ``*_depth_N`` for depth and only for depth: E60).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import OperationError, SchemaError
from ..meta.episodes import decode_row
from ..schema import check_column_name, check_slot_name
from .columns import json_column_changed, slam_specs_changed
from .inplace import Change, shown_text
from .source import SourceTask, parquet_table

__all__ = ["RemoveSlot", "RenameSlot", "SetTask", "check_task_string"]


def check_task_string(text: str) -> None:
    """Refuse a task string (``tasks.jsonl``'s ``task``, file_format.md §5) that is empty, spans lines (E24), holds
    a control character (tab, ``\\x01``, DEL...: Unicode category Cc) or begins or ends with whitespace
    (``"b "`` beside ``"b"`` would be two instructions that print alike; docs/decisions.md E78).

    Raises
    ------
    OperationError
        Which rule, with the first offending character's position and code point.
    """
    import unicodedata

    if not text.strip() or text.splitlines() != [text]:  # \n, \r, U+2028, U+0085...
        raise OperationError("the task string is empty or spans lines (a line break, U+2028 or the like)",
                             hint="one line of text; nothing was changed")
    bad = next((i for i, ch in enumerate(text) if unicodedata.category(ch) == "Cc"), None)
    if bad is not None:
        name = {"\t": "a tab", "\x1b": "escape", "\x7f": "DEL"}.get(text[bad], "a control character")
        raise OperationError(f"the task string {shown_text(text)} holds {name} (U+{ord(text[bad]):04X}) at "
                             f"character {bad + 1}: a task string is printable text",
                             hint="replace it by a space or remove it; nothing was changed")
    if text != text.strip():
        end, ch = ("begins", text[0]) if text[0].isspace() else ("ends", text[-1])
        raise OperationError(f"the task string {shown_text(text)} {end} with whitespace (U+{ord(ch):04X}): it "
                             "would print like the string without it, yet be another instruction",
                             hint=f"give {shown_text(text.strip())}; nothing was changed")

_SLOT_DICTS = ("video_extensions", "cameras", "device_names")


def _slots(s: SourceTask) -> set[str]:
    out = set(s.info.get("video_extensions") or {})
    for ref in s.episodes.values():
        out |= set(ref.videos)
    return out


def _codec(row: dict[str, Any], change: Any) -> dict[str, Any] | None:
    return json_column_changed(row, "video_codec", change)


def _naming_columns(info: dict[str, Any], slot: str) -> list[str]:
    """The columns whose ``features[...].source_slot`` is ``slot`` (multi_device_storage.md §6.6)."""
    return [k for k, v in sorted((info.get("features") or {}).items())
            if isinstance(v, dict) and v.get("source_slot") == slot]


def _status_columns(s: SourceTask) -> set[str]:
    """The ``status.*`` columns of every episode's data (schemas only). They are never declared (§6.8.2), so the
    data says which exist; ``status.<slot>`` is a UVC slot's connection state (multi_device_storage.md §3)."""
    out: set[str] = set()
    for ref in s.episodes.values():
        schema = pq.read_schema(pa.BufferReader(s.read(ref.data)))
        out |= {c for c in schema.names if c.startswith("status.")}
    return out


def _is_depth_stream(s: SourceTask, slot: str) -> bool:
    """Whether ``slot`` holds depth (multi_device_storage.md §4.8, as ``validate`` decides it): a slot in
    ``cameras`` is RGB; otherwise depth when named like a depth slot or when an episode's ``video_codec`` entry
    describes a depth encoding (``hevc12`` / ``ffv1``, a gray pixel format); else RGB."""
    from ..validate.declarations import is_depth_name

    cams = s.info.get("cameras")
    if isinstance(cams, dict) and slot in cams:
        return False
    if is_depth_name(slot):
        return True
    for ref in s.episodes.values():
        if slot not in ref.videos:
            continue
        raw = parquet_table(s.read(ref.row), s.t.store.url(ref.row)).to_pylist()
        codecs = decode_row(raw[0]).get("video_codec") if raw else None
        codec = codecs.get(slot) if isinstance(codecs, dict) else None
        if isinstance(codec, dict):
            return codec.get("codec") in ("hevc12", "ffv1") or "depth_codec" in codec or \
                str(codec.get("pix_fmt", "")).startswith("gray")
    return False


def check_slot_kind(name: str, depth: bool, old: str) -> None:
    """A slot's name says its kind (multi_device_storage.md §2.1, §4.4, §4.8: ``<prefix>_rgb`` /
    ``<prefix>_depth``, a second device ``_2``; ``stereo_depth``): a name ending in ``depth`` or ``depth_N``
    holds a depth stream and only a depth stream (readers and ``validate`` decode a slot outside ``cameras`` by
    that name).

    Raises
    ------
    SchemaError
        ``name`` is a depth name for an RGB stream, or a depth stream's new name is not one (the rule and a valid
        name of that kind).
    """
    from ..validate.declarations import is_depth_name

    if is_depth_name(name) == depth:
        return
    base = re.sub(r"_(rgb|depth)(_\d+)?$", "", old) or old
    if depth:
        raise SchemaError(f"slot {old!r} holds a depth stream and {name!r} is no depth slot name: a depth slot is "
                          "named <prefix>_depth (a second device <prefix>_depth_2; multi_device_storage.md §2.1, "
                          "§4.8)", hint=f"e.g. {base}_depth; nothing was changed")
    raise SchemaError(f"slot {old!r} holds an RGB stream and {name!r} is a depth slot name (it ends in 'depth'; "
                      "multi_device_storage.md §2.1, §4.8: readers decode such a slot as depth)",
                      hint=f"name an RGB slot <prefix>_rgb, e.g. {base}_rgb; nothing was changed")


def _resourced(decl: Any, old: str, new: str) -> Any:
    """A column declaration (``features[...]`` or a row's ``slam_specs`` entry) with ``source_slot`` ``old`` ->
    ``new``."""
    return {**decl, "source_slot": new} if isinstance(decl, dict) and decl.get("source_slot") == old else decl


class RemoveSlot(Change):
    """Remove the stream slot ``slot`` everywhere (module docstring)."""

    op = "remove-slot"

    def __init__(self, slot: str) -> None:
        self.slot = slot

    def args(self) -> dict[str, Any]:
        return {"slot": self.slot}

    def check(self, s: SourceTask) -> None:
        if self.slot not in _slots(s):
            raise SchemaError(f"no stream slot {self.slot!r} in {s.t.uri}", hint="see `egopool info TASK`")
        named = _naming_columns(s.info, self.slot)
        if named:  # E28: a trajectory's source_slot would name nothing (multi_device_storage.md §6.6)
            raise SchemaError(f"slot {self.slot!r} is the source_slot of {named[0]!r} in {s.t.uri}",
                              hint=f"remove that column first (`egopool edit remove-column TASK {named[0]}`), "
                                   "or keep the slot; nothing was changed")

    def videos(self, n: int, videos: dict[str, tuple[str, str]]) -> list[tuple[str, str | None]]:
        return [(self.slot, None)] if self.slot in videos else []

    def touches_data(self) -> bool:
        return True

    def data(self, n: int, table: pa.Table) -> pa.Table | None:  # the slot's status column goes with it (E35)
        gone = f"status.{self.slot}"
        return table.drop_columns([gone]) if gone in table.column_names else None

    def touches_rows(self) -> bool:
        return True

    def row(self, n: int, row: dict[str, Any]) -> dict[str, Any] | None:
        return _codec(row, lambda d: {k: v for k, v in d.items() if k != self.slot})

    def finish(self, info: dict[str, Any]) -> dict[str, Any]:
        out = dict(info)
        for key in _SLOT_DICTS:
            if isinstance(info.get(key), dict):
                out[key] = {k: v for k, v in info[key].items() if k != self.slot}
        devices = []
        for dev in info.get("devices") or []:
            if isinstance(dev, dict) and self.slot in (dev.get("slots") or []):
                dev = {**dev, "slots": [x for x in dev["slots"] if x != self.slot]}
                if not dev["slots"]:
                    continue
            devices.append(dev)
        if "devices" in info:
            out["devices"] = devices
        if info.get("video") is True and isinstance(out.get("video_extensions"), dict) and \
                not out["video_extensions"]:
            out["video"] = False  # no stream left: the writer's `video: bool(streams)` (E79)
        return out


class RenameSlot(Change):
    """Rename the stream slot ``old`` to ``new`` everywhere (module docstring)."""

    op = "rename-slot"

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def args(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new}

    def check(self, s: SourceTask) -> None:
        slots = _slots(s)
        if self.old not in slots:
            raise SchemaError(f"no stream slot {self.old!r} in {s.t.uri}", hint="see `egopool info TASK`")
        check_slot_name(self.new)  # the writer's rule (StreamSpec), E31
        check_slot_kind(self.new, _is_depth_stream(s, self.old), self.old)  # E60
        users = [str(d.get("key")) for d in s.info.get("devices") or []
                 if isinstance(d, dict) and self.new in (d.get("slots") or [])]
        if self.new in slots or users:
            who = f" (device {users[0]})" if users else ""
            raise SchemaError(f"slot {self.new!r} is used already{who}: two devices never share an image_key "
                              "(multi_device_storage.md §5.2)", hint="choose a free slot name")
        status = _status_columns(s)
        old_col, new_col = f"status.{self.old}", f"status.{self.new}"
        if old_col in status:  # E35: the slot's status column follows it, so the new name must make a column name
            if new_col in status:
                raise SchemaError(f"slot {self.old!r} has the column {old_col}, which would become {new_col}, a "
                                  f"column the task has already", hint="choose another slot name")
            try:
                check_column_name(new_col)
            except SchemaError:
                raise SchemaError(f"slot {self.old!r} has the column {old_col}, which follows the slot, and "
                                  f"{new_col!r} is no column name (multi_device_storage.md §2.4: [a-z0-9_])",
                                  hint="choose a slot name of lowercase ASCII letters, digits and '_'") from None

    def videos(self, n: int, videos: dict[str, tuple[str, str]]) -> list[tuple[str, str | None]]:
        return [(self.old, self.new)] if self.old in videos else []

    def touches_data(self) -> bool:
        return True

    def data(self, n: int, table: pa.Table) -> pa.Table | None:  # the slot's status column follows it (E35)
        old = f"status.{self.old}"
        if old not in table.column_names:
            return None
        return table.rename_columns([f"status.{self.new}" if c == old else c for c in table.column_names])

    def touches_rows(self) -> bool:
        return True

    def row(self, n: int, row: dict[str, Any]) -> dict[str, Any] | None:
        out = _codec(row, lambda d: {(self.new if k == self.old else k): v for k, v in d.items()})
        specs = slam_specs_changed(out or row, lambda d: {k: _resourced(v, self.old, self.new) for k, v in d.items()})
        return specs if specs is not None else out

    def declare(self, info: dict[str, Any]) -> dict[str, Any]:
        out = dict(info)
        for key in _SLOT_DICTS:
            if isinstance(info.get(key), dict) and self.old in info[key]:
                out[key] = {**info[key], self.new: info[key][self.old]}
        return out

    def finish(self, info: dict[str, Any]) -> dict[str, Any]:
        out = self.declare(info)
        for key in _SLOT_DICTS:
            if isinstance(out.get(key), dict):
                out[key] = {k: v for k, v in out[key].items() if k != self.old}
        if "devices" in info:
            out["devices"] = [{**d, "slots": [self.new if x == self.old else x for x in d.get("slots") or []]}
                              if isinstance(d, dict) else d for d in info["devices"]]
        if isinstance(info.get("features"), dict):  # E28: a trajectory's source_slot follows its slot
            out["features"] = {k: _resourced(v, self.old, self.new) for k, v in out["features"].items()}
        return out


class SetTask(Change):
    """Set the task string (language instruction) of ``task_index`` in ``tasks.jsonl``."""

    op = "set-task"

    def __init__(self, text: str, task_index: int = 0) -> None:
        self.text, self.task_index = text, task_index

    def args(self) -> dict[str, Any]:
        return {"task": self.text, "task_index": self.task_index}

    def check(self, s: SourceTask) -> None:
        check_task_string(self.text)
        rows = s.tasks()
        if self.task_index not in {int(r.get("task_index") or 0) for r in rows}:
            raise OperationError(f"no task_index {self.task_index} in {s.t.uri}/meta/tasks.jsonl",
                                 hint="see the file; task_index 0 is the task's own")
        other = next((int(r.get("task_index") or 0) for r in rows if str(r.get("task")) == self.text
                      and int(r.get("task_index") or 0) != self.task_index), None)
        if other is not None:  # E59: one string, one task_index (LeRobot v3 keys its tasks by the string)
            raise OperationError(f"the task string {shown_text(self.text)} is task_index {other} of "
                                 f"{s.t.uri}/meta/tasks.jsonl already: two lines with one string make the "
                                 f"instruction of task_index {self.task_index} ambiguous",
                                 hint="give this line another string; nothing was changed")

    def tasks(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "task": self.text} if int(r.get("task_index") or 0) == self.task_index else r for r in rows]
