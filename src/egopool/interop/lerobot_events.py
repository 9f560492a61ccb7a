"""Reviewers' events in a LeRobot export (docs/decisions.md P17): ``language_events`` and ``egopool_mapping.json``.

LeRobot 0.6.1 (``lerobot.datasets.language``) has two language columns. ``language_persistent`` holds
states broadcast to every frame of an episode (a subtask, a plan) and ``language_events`` holds rows that
*fire at one frame*: ``list<struct<role, content, style, camera, tool_calls>>`` on the frame whose timestamp
is the firing time, with ``style`` one of ``interjection`` / ``vqa`` / ``trace`` (the last two need a camera)
or None (then it must carry tool calls). A reviewer's event is a range with a label and a note, said by a
person about the recording: the nearest fit is an ``interjection`` row (``role`` ``user``, ``content``
``"<label>: <note>"`` or the label alone, no camera, no tool calls) on the frame where the range starts.
That is where it is written (lerobot >= 0.6; lerobot 0.4 has no language columns). The range's end, the
frames it covers, who made it and when have no place there: ``egopool_mapping.json`` lists every event
whole under ``events`` (with its LeRobot episode and frames), for any release. A task that already holds
``language_events`` (imported, :mod:`.lerobot_language`) keeps its rows; the reviewers' rows are added after them,
and one equal to a row already on its frame is not written again (docs/decisions.md I23).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..curation.review_events import ReviewEvent
from . import lerobot_format as fmt
from .lerobot_language import LANGUAGE_EVENTS, LANGUAGE_FEATURE, language_array, language_type, rows_of

__all__ = ["LANGUAGE_EVENTS", "ExportEvents", "add_events", "event_content", "events_mapping", "language_events_type",
           "write_language_events"]

_STYLE, _ROLE = "interjection", "user"


def language_events_type() -> pa.DataType:
    """LeRobot 0.6.1's ``language_events`` arrow type (``language_events_arrow_type``)."""
    return language_type(LANGUAGE_EVENTS)


def event_content(e: ReviewEvent) -> str:
    """The row's ``content``: ``"<label>: <note>"``, or the label when there is no note."""
    return f"{e.label}: {e.note}" if e.note else e.label


def _rows(events: Sequence[ReviewEvent], fps: float, length: int) -> list[list[dict[str, Any]]]:
    rows: list[list[dict[str, Any]]] = [[] for _ in range(length)]
    for e in events:
        f0, f1 = e.frames(fps, length)
        if f0 < f1:
            rows[f0].append({"role": _ROLE, "content": event_content(e), "style": _STYLE, "camera": None,
                             "tool_calls": None})
    return rows


def _merge(have: list[list[dict[str, Any]]], new: list[list[dict[str, Any]]]) -> tuple[list[list[dict[str, Any]]], int]:
    """Per frame the rows already in the data, then the reviewers' rows that are not among them; and how many were
    (docs/decisions.md I23: an event exported before and imported back is in the data once)."""
    merged, repeated = [], 0
    for old, add in zip(have, new, strict=True):
        fresh = [r for r in add if r not in old]
        repeated += len(add) - len(fresh)
        merged.append(old + fresh)
    return merged, repeated


def write_language_events(root: Path, parts: Sequence[tuple[int, tuple[int, int]]], fps: float,
                          events: Mapping[int, Sequence[ReviewEvent]]) -> tuple[int, int]:
    """Add the reviewers' rows to ``language_events`` of every episode's data parquet under ``root`` (a dataset
    being built) and its feature to ``meta/info.json``; return (rows written, rows already there).

    A data file that already has ``language_events`` (a pooled language column exported) keeps its rows; a
    reviewer's row equal to one already on its frame is not written again (docs/decisions.md I23).

    Parameters
    ----------
    root:
        The dataset root (``data/``, ``meta/info.json`` written).
    parts:
        Per episode ``(N, (chunk_index, file_index) of its data parquet)``; each parquet holds
        that episode alone (egopool's export writes one file per episode).
    fps:
        Frames per second (LeRobot ``timestamp`` = ``frame_index / fps``).
    events:
        ``{N: events}``; an episode without any gets the column with empty lists (one schema for every file).

    Raises
    ------
    OSError, pyarrow.ArrowInvalid
        A data parquet cannot be read or written (the caller's staging is removed).
    """
    written = repeated = 0
    typ = language_events_type()
    for n, (c, f) in parts:
        path = root / fmt.DATA_PATH.format(chunk_index=c, file_index=f)
        table = pq.read_table(path)
        rows = _rows(events.get(n, ()), fps, table.num_rows)
        written += sum(len(r) for r in rows)
        if LANGUAGE_EVENTS in table.column_names:
            at = table.column_names.index(LANGUAGE_EVENTS)
            rows, again = _merge(rows_of(table.column(at), LANGUAGE_EVENTS, where=f"{path}: "), rows)
            repeated += again
            table = table.set_column(at, pa.field(LANGUAGE_EVENTS, typ), language_array(rows, LANGUAGE_EVENTS))
        else:
            table = table.append_column(pa.field(LANGUAGE_EVENTS, typ), language_array(rows, LANGUAGE_EVENTS))
        tmp = path.with_name(path.name + ".events.tmp")
        pq.write_table(table, tmp, compression="zstd", row_group_size=max(table.num_rows, 1))
        tmp.replace(path)
    info_path = root / "meta" / "info.json"
    info = json.loads(info_path.read_text(encoding="utf-8"))
    info["features"][LANGUAGE_EVENTS] = dict(LANGUAGE_FEATURE)
    _write_json(info_path, info)
    return written - repeated, repeated


def events_mapping(events: Mapping[int, Sequence[ReviewEvent]], episodes: Mapping[int, tuple[int, int]], fps: float,
                   *, source: str, in_column: bool) -> dict[str, Any]:
    """The ``events`` block of ``egopool_mapping.json``: where they came from, where they went, every event.

    ``episodes``: ``{N: (LeRobot episode_index, length)}`` of the exported episodes (events of other
    episodes are counted as left out); ``in_column``: written to ``language_events`` too.
    """
    listed, left_out = [], 0
    for n, evs in sorted(events.items()):
        if n not in episodes:
            left_out += len(evs)
            continue
        lr, length = episodes[n]
        for e in evs:
            f0, f1 = e.frames(fps, length)
            listed.append({**e.to_dict(), "lerobot_episode_index": lr, "frames": [f0, f1],
                           "language_events": ({"frame_index": f0, "timestamp": f0 / fps, "role": _ROLE,
                                                "style": _STYLE, "content": event_content(e)}
                                               if in_column and f0 < f1 else None)})
    return {"from": source,
            "column": (f"{LANGUAGE_EVENTS}: one {_STYLE!r} row (role {_ROLE!r}, content \"<label>: <note>\") on the "
                       "frame where each range starts; the whole range, who and when only here")
            if in_column else "not written to the data (lerobot 0.4 has no language columns); listed here only",
            "frames": "[f0, f1): the frames whose start i / fps is in [t0, t1)",
            "caveats": ("a recipe that binds style 'interjection' renders these rows into prompts; lerobot-annotate's "
                        "validator expects an interjection to pair with a speech atom (none is written: a "
                        "reviewer's note is not speech to the robot)") if in_column else None,
            "left_out": left_out, "events": listed}


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=4, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class ExportEvents:
    """Events given to an export (``--events-from``).

    Attributes
    ----------
    source:
        Where they were read (file, or URL without its query), recorded in the mapping.
    by_episode:
        ``{N: events}`` of the exported task (:func:`~egopool.curation.review_events.events_by_episode`).
    """

    source: str
    by_episode: Mapping[int, Sequence[ReviewEvent]]


def add_events(root: Path, events: ExportEvents, fps: float, target: str,
               episodes: Sequence[tuple[int, int, int, tuple[int, int]]]) -> int:
    """Put ``events`` into the dataset being built at ``root`` (data, ``meta/`` and the mapping written):
    ``language_events`` for ``target`` other than ``"0.4"``, and the ``events`` block of ``egopool_mapping.json``.
    Return how many events were already in ``language_events`` (a pooled language column, I23) and were not
    written again.

    ``episodes``: per exported episode ``(N, LeRobot episode_index, length, (chunk, file) of its data)``.

    Raises
    ------
    OSError, pyarrow.ArrowInvalid
        A file of the dataset cannot be read or written (the caller removes its staging).
    """
    in_column = target != "0.4"
    repeated = 0
    if in_column:
        _, repeated = write_language_events(root, [(n, cf) for n, _, _, cf in episodes], fps, events.by_episode)
    mapping_path = root / "egopool_mapping.json"
    mapping = json.loads(mapping_path.read_text(encoding="utf-8"))
    mapping["events"] = events_mapping(events.by_episode, {n: (lr, length) for n, lr, length, _ in episodes}, fps,
                                       source=events.source, in_column=in_column)
    if in_column:
        mapping["events"]["already_in_data"] = repeated
        entry = mapping["features"].get(LANGUAGE_EVENTS) or {"from": [], "how": "language", "pooled": {}}
        entry["from"] = [*entry["from"], "review events"]
        entry["review_events"] = mapping["events"]["column"]
        mapping["features"][LANGUAGE_EVENTS] = entry
    _write_json(mapping_path, mapping)
    return repeated
