"""Column changes of a task in place (docs/decisions.md E8): remove, rename, add per episode from a file.

Rules (multi_device_storage.md §2.4, file_format.md §3, §4, §7.2): a column is renamed in every episode at
once (the spec forbids a name that differs between episodes: ``features`` would keep both); the new name follows
the column grammar (``observation.<a-z0-9_>``, no forbidden name) and keeps its reserved-suffix kind; it must not
exist yet. A removed or renamed column leaves ``features``, ``sensors`` (``observation.<sensor>``) and its
``stats.json`` block with it; its ``_ns`` companion, ``slam_frames`` key and rows' ``slam_specs`` and
``force_matrix_specs`` entries follow (docs/decisions.md E27, E42). Key columns (§7.1) and ``action`` are never removed or renamed. An added column
holds one value (a number or a vector) per data row of one episode: its length must equal the episode's rows.
"""

from __future__ import annotations

import json
import re
import warnings

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import EpisodeNotFoundError, FormatError, OperationError, SchemaError
from ..schema import IMU_COLUMN, IMU_TS_COLUMN, check_column_name, companion_columns, owner_column, signal_kind
from .inplace import Change, shown_text
from .source import SourceTask

__all__ = ["AddColumn", "RemoveColumn", "RenameColumn", "companion", "column_specs_changed", "json_column_changed",
           "as_float32", "load_values", "slam_specs_changed"]

_FIXED = {"episode_index", "frame_index", "timestamp", "task_index", "wall_time", "hardware_ns", "action"}


def companion(column: str) -> str | None:
    """The ``_ns`` companion column of ``column`` (``observation.slam_trajectory`` ->
    ``observation.slam_trajectory_ns``), or None for a column of another kind (its name alone decides)."""
    comps = [c for c in companion_columns(column) if c == column + "_ns"]
    return comps[0] if comps else None


def _sensors(s: SourceTask) -> list[str]:
    """``info.json`` ``sensors`` (the glove sensor names, multi_device_storage.md §6.4)."""
    return [str(x) for x in s.info.get("sensors") or [] if isinstance(x, str)]


def _listed(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names)


def json_column_changed(row: dict[str, Any], key: str, change: Any) -> dict[str, Any] | None:
    """N's row with its JSON object column ``key`` (``slam_specs``, ``video_codec``: multi_device_storage.md
    §7.2, file_format.md §6.2) changed by ``change``, or None when it has none, does not parse, or is unchanged."""
    text = row.get(key)
    try:
        doc = json.loads(text) if isinstance(text, str) and text.strip() else None
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    new = change(doc)
    return None if new == doc else {**row, key: json.dumps(new, ensure_ascii=False)}


def slam_specs_changed(row: dict[str, Any], change: Any) -> dict[str, Any] | None:
    """N's row with its ``slam_specs`` JSON (multi_device_storage.md §7.2) changed by ``change``, or None."""
    return json_column_changed(row, "slam_specs", change)


def column_specs_changed(row: dict[str, Any], change: Any) -> dict[str, Any] | None:
    """N's row with both per-column spec objects keyed by column name, ``slam_specs`` (multi_device_storage.md
    §7.2) and ``force_matrix_specs`` (file_format.md §7.2.1, the authority on a matrix's scale), changed by
    ``change``, or None when neither changes (docs/decisions.md E42)."""
    out = row
    for key in ("slam_specs", "force_matrix_specs"):
        out = json_column_changed(out, key, change) or out
    return None if out is row else out


def _gripper_slam_frame_kept(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after`` with ``gripper_slam_frame`` (file_format.md §6.6) what its features make it when ``before`` had
    one: rig1's frame, or no key once no gripper trajectory is left (docs/decisions.md E43)."""
    from ..validate.declarations import expected_gripper_slam_frame

    if "gripper_slam_frame" not in before:
        return after
    frame = expected_gripper_slam_frame(after.get("features") or {})
    if frame is None:
        return {k: v for k, v in after.items() if k != "gripper_slam_frame"}
    return {**after, "gripper_slam_frame": frame}  # in its place


def _columns(s: SourceTask) -> set[str]:
    import pyarrow.parquet as pq

    names: set[str] = set(s.info.get("features") or {})
    for ref in s.episodes.values():
        with s.t.store.open_input(ref.data) as f:
            try:
                names |= set(pq.ParquetFile(f).schema_arrow.names)
            except (pa.ArrowException, OSError, ValueError) as exc:
                text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise FormatError(f"cannot read parquet ({text}): the file is damaged",
                                  path=s.t.store.url(ref.data), hint="`egopool validate TASK` names what is wrong; "
                                                                     "restore the file before editing") from exc
    return names


def _sensor(col: str) -> str | None:
    return col[len("observation."):] if col.startswith("observation.") else None


def _not_a_device_column(s: SourceTask, column: str) -> None:
    """Refuse a column a device of ``devices`` names as its own (a lite glove's ``slots`` hold its sensor name;
    ``sensor_column`` / ``sensor_columns``, multi_device_storage.md §6.4): the declaration would point at nothing.

    Raises
    ------
    SchemaError
        The column is a device's (named).
    """
    sensor = _sensor(column)
    for dev in s.info.get("devices") or []:
        if not isinstance(dev, dict):
            continue
        named = [str(x) for x in dev.get("slots") or []] + [str(x) for x in dev.get("sensor_columns") or []]
        named += [str(dev["sensor_column"])] if dev.get("sensor_column") else []
        if column in named or (sensor is not None and sensor in named):
            raise SchemaError(f"column {column!r} is written by device {dev.get('key')!r} (its devices[] entry "
                              f"names it) in {s.t.uri}", hint="a device's column keeps its name; nothing was changed")


class RemoveColumn(Change):
    """Remove ``column`` and its companions (:func:`egopool.schema.companion_columns`: ``imu_ts_ns``, ``_ns``
    stamps, a glove sensor's ``_imu_quat`` / ``_imu_valid`` / ``status.<sensor>``) from every episode,
    ``features``, ``sensors``, ``slam_frames``, the rows' column specs and ``stats.json`` (E27, E83)."""

    op = "remove-column"

    def __init__(self, column: str) -> None:
        self.column = column
        self.columns = [column] + companion_columns(column)  # the name's own; bind() adds a sensor's (E83)
        self.present: set[str] = set()

    def args(self) -> dict[str, Any]:
        return {"column": self.column}

    def bind(self, s: SourceTask) -> None:
        self.columns = [self.column] + companion_columns(self.column, _sensors(s))
        self.present = _columns(s)

    def notes(self) -> list[str]:
        comps = [c for c in self.columns[1:] if c in self.present]
        return [f"companions of {self.column!r} removed with it: {_listed(comps)} (docs/decisions.md E83)"] \
            if comps and self.column in self.present else []

    def check(self, s: SourceTask) -> None:
        if self.column in _FIXED:
            raise OperationError(f"{self.column!r} is a key column every episode must have (file_format.md §7.1)",
                                 hint="remove an observation.* or status.* column")
        have = self.present or _columns(s)
        if self.column not in have:
            raise SchemaError(f"no column {self.column!r} in {s.t.uri}", hint="see `egopool info TASK`")
        owner = owner_column(self.column, _sensors(s))
        if self.column == IMU_TS_COLUMN and owner in have:
            raise SchemaError(f"{IMU_TS_COLUMN!r} holds the stamps of {IMU_COLUMN!r}, one per sample (file_format.md "
                              f"§7.2, §12.9): {s.t.uri} cannot keep the IMU without them",
                              hint=f"`egopool edit remove-column TASK {IMU_COLUMN}` removes both; nothing was changed")
        for col in self.columns:
            if col in have:
                _not_a_device_column(s, col)

    def touches_data(self) -> bool:
        return True

    def touches_rows(self) -> bool:
        return True

    def data(self, n: int, table: pa.Table) -> pa.Table | None:
        gone = [c for c in self.columns if c in table.column_names]
        return table.drop_columns(gone) if gone else None

    def row(self, n: int, row: dict[str, Any]) -> dict[str, Any] | None:
        return column_specs_changed(row, lambda d: {k: v for k, v in d.items() if k not in self.columns})

    def finish(self, info: dict[str, Any]) -> dict[str, Any]:
        out = dict(info)
        out["features"] = {k: v for k, v in (info.get("features") or {}).items() if k not in self.columns}
        sn = _sensor(self.column)
        if sn is not None and "sensors" in info:
            out["sensors"] = [x for x in info["sensors"] if x != sn]
        if isinstance(info.get("slam_frames"), dict) and self.column in info["slam_frames"]:
            frames = {k: v for k, v in info["slam_frames"].items() if k != self.column}
            if frames:
                out["slam_frames"] = frames
            else:
                del out["slam_frames"]
        return _gripper_slam_frame_kept(info, out)

    def stats(self, doc: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in doc.items() if k not in self.columns}


class RenameColumn(Change):
    """Rename ``old`` to ``new`` and its companions with it (``C_ns`` -> ``D_ns``; a glove sensor's
    ``_imu_quat`` / ``_imu_valid`` / ``status.<sensor>``) in every episode, ``features``, ``sensors``,
    ``slam_frames``, the rows' column specs and ``stats.json`` (E27, E83). ``observation.imu`` and ``imu_ts_ns``
    keep their names (refused)."""

    op = "rename-column"

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new
        self.pairs: dict[str, str] = {old: new}
        self.present: set[str] = set()
        self._pair(companion_columns(old), companion_columns(new))  # the name's own; bind() adds a sensor's

    def _pair(self, olds: list[str], news: list[str]) -> None:
        self.pairs = {self.old: self.new}
        if len(olds) == len(news):  # companions follow by their place (E27, E83); a kind change is refused
            self.pairs.update(zip(olds, news, strict=True))

    def args(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new}

    def _new_sensor(self, s: SourceTask) -> str | None:
        """The sensor name ``new`` gives when ``old`` is a glove sensor's column, else None."""
        old_sn, new_sn = _sensor(self.old), _sensor(self.new)
        return new_sn if old_sn is not None and old_sn in _sensors(s) and new_sn is not None else None

    def bind(self, s: SourceTask) -> None:
        new_sn = self._new_sensor(s)
        self._pair(companion_columns(self.old, _sensors(s)),
                   companion_columns(self.new, [new_sn] if new_sn is not None else []))
        self.present = _columns(s)

    def notes(self) -> list[str]:
        comps = [f"{a!r} -> {b!r}" for a, b in self.pairs.items() if a != self.old and a in self.present]
        return [f"companions of {self.old!r} renamed with it: {', '.join(comps)} (docs/decisions.md E83)"] \
            if comps and self.old in self.present else []

    def check(self, s: SourceTask) -> None:
        if self.old in _FIXED:
            raise OperationError(f"{self.old!r} is a key column (file_format.md §7.1); its name is fixed",
                                 hint="rename an observation.* or status.* column")
        if IMU_COLUMN in (self.old, self.new) or IMU_TS_COLUMN in (self.old, self.new):
            raise SchemaError(f"{self.old!r} -> {self.new!r}: {IMU_COLUMN!r} and {IMU_TS_COLUMN!r}, its per-sample "
                              "stamps, are named by the spec (file_format.md §7.2, §12.9: readers find the IMU by "
                              "these names); neither is renamed",
                              hint=f"`egopool edit remove-column TASK {IMU_COLUMN}` removes both; nothing was changed")
        if not self.old.startswith(("observation.", "status.")):
            raise OperationError(f"{self.old!r} is a frame-key column (file_format.md §7.1); its name is fixed",
                                 hint="rename an observation.* or status.* column")
        have = self.present or _columns(s)
        if self.old not in have:
            raise SchemaError(f"no column {self.old!r} in {s.t.uri}", hint="see `egopool info TASK`")
        if self.new == self.old:
            raise SchemaError(f"column {self.old!r} is named so already in {s.t.uri}: nothing to rename",
                              hint="give the new name as the second argument")
        if self.new in have:
            raise SchemaError(f"column {self.new!r} exists already in {s.t.uri}", hint="choose another name")
        if self.old.startswith("observation.") != self.new.startswith("observation.") or \
                self.old.startswith("status.") != self.new.startswith("status."):
            raise SchemaError(f"{self.old!r} -> {self.new!r} changes the column's namespace",
                              hint="keep observation.* or status.*")
        if self.new.startswith("observation."):
            check_column_name(self.new, signal_kind(self.old))
            if signal_kind(self.new) != signal_kind(self.old):
                def kind(k: str | None) -> str:
                    return f"is a {k} column" if k else "has no reserved suffix"

                raise SchemaError(f"{self.new!r} {kind(signal_kind(self.new))}, {self.old!r} "
                                  f"{kind(signal_kind(self.old))} (multi_device_storage.md §2.4 reserved suffixes)",
                                  hint="keep the column's suffix" if signal_kind(self.old) else
                                  "choose a name without a reserved suffix")
        owner = owner_column(self.old, _sensors(s))
        if owner is not None and owner in have:
            follows = [c for c in companion_columns(owner, _sensors(s)) if c in have]
            raise SchemaError(f"{self.old!r} is the companion of {owner!r} and follows it (docs/decisions.md E27, "
                              "E83)", hint=f"rename {owner!r}; its companions ({_listed(follows)}) are renamed with it")
        new_sn = self._new_sensor(s)
        if _sensor(self.old) in _sensors(s) and (new_sn is None or "." in new_sn):
            raise SchemaError(f"{self.old!r} is the pressure column of glove sensor {_sensor(self.old)!r}: its new "
                              f"name is observation.<sensor>, one segment (multi_device_storage.md §2.2), not "
                              f"{self.new!r}", hint="e.g. observation.left_glove_2; its companions follow")
        if new_sn is not None:
            slots = set(s.info.get("video_extensions") or {}) | {
                str(x) for d in s.info.get("devices") or [] if isinstance(d, dict) for x in d.get("slots") or []}
            if new_sn in slots or new_sn in _sensors(s):
                raise SchemaError(f"{new_sn!r} is a slot or sensor of {s.t.uri} already: status.{new_sn} would name "
                                  "two things (multi_device_storage.md §3)", hint="choose another sensor name")
        for old, new in self.pairs.items():
            if old != self.old and (new in have or old in have):
                if new in have:
                    raise SchemaError(f"column {new!r} exists already in {s.t.uri} (the new name of {old!r}, the "
                                      f"companion of {self.old!r})", hint="choose another name")
                _not_a_device_column(s, old)
        _not_a_device_column(s, self.old)

    def touches_data(self) -> bool:
        return True

    def touches_rows(self) -> bool:
        return True

    def data(self, n: int, table: pa.Table) -> pa.Table | None:
        if not any(c in self.pairs for c in table.column_names):
            return None
        return table.rename_columns([self.pairs.get(c, c) for c in table.column_names])

    def row(self, n: int, row: dict[str, Any]) -> dict[str, Any] | None:
        return column_specs_changed(row, lambda d: {self.pairs.get(k, k): v for k, v in d.items()})

    def declare(self, info: dict[str, Any]) -> dict[str, Any]:
        out = dict(info)
        feats = dict(info.get("features") or {})
        for old, new in self.pairs.items():
            if old in feats:
                feats[new] = feats[old]
        out["features"] = feats
        return out

    def finish(self, info: dict[str, Any]) -> dict[str, Any]:
        out = self.declare(info)
        out["features"] = {k: v for k, v in out["features"].items() if k not in self.pairs}
        old_sn, new_sn = _sensor(self.old), _sensor(self.new)
        if old_sn is not None and new_sn is not None and "sensors" in info:
            out["sensors"] = [new_sn if x == old_sn else x for x in info["sensors"]]
        if isinstance(info.get("slam_frames"), dict):
            out["slam_frames"] = {self.pairs.get(k, k): v for k, v in info["slam_frames"].items()}
        return _gripper_slam_frame_kept(info, out)

    def stats(self, doc: dict[str, Any]) -> dict[str, Any]:
        return {self.pairs.get(k, k): v for k, v in doc.items()}


_NPY_EXPECTED = ("expected an array written by numpy.save: one number per data row of the episode, shape (rows,) "
                 "or (rows, d), a numeric dtype (stored as float32)")


def _check_npy(p: Path) -> None:
    """Refuse a ``.npy`` that is none (no ``\\x93NUMPY`` header, a truncated one) or that holds no numbers
    (Python objects, strings, records), naming the file and what is expected, before numpy's own messages
    ("Cannot load file containing pickled data") can mislead.

    Raises
    ------
    OperationError
        Not a valid .npy of numbers.
    """
    from numpy.lib import format as npy_format

    try:
        with open(p, "rb") as f:
            try:
                major, _ = npy_format.read_magic(f)
                header = (npy_format.read_array_header_1_0 if major == 1 else npy_format.read_array_header_2_0)(f)
            except (ValueError, EOFError, SyntaxError) as exc:
                raise OperationError(f"{p} is not a valid .npy file (no NumPy array header: "
                                     f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0]})",
                                     hint=_NPY_EXPECTED) from None
    except OSError as exc:
        raise OperationError(f"{p}: cannot read it ({exc.strerror or exc})", hint=_NPY_EXPECTED) from exc
    dtype = header[2]
    if dtype.hasobject or dtype.names is not None or dtype.kind not in "biuf":
        what = ("Python objects" if dtype.hasobject else "records" if dtype.names is not None else
                "text" if dtype.kind in "SU" else "complex numbers" if dtype.kind == "c" else "other values")
        raise OperationError(f"{p} is a .npy of {what} (dtype {dtype}), not real numbers", hint=_NPY_EXPECTED)


_TEXT_EXPECTED = ("a text file holds one number per data row on each line, or one vector of numbers separated by "
                  "spaces or commas (the same count on every line); no blank line, no header")
_INT_LITERAL = re.compile(r"[+-]?[0-9][0-9_]*")


def _read_text(p: Path) -> tuple[np.ndarray, list[list[str]]]:
    """The numbers of a text file, float64 ``(rows, d)``, and its tokens (for the round-trip check): one row
    per line, values separated by whitespace and/or commas (a ``.csv`` of ``1,2,3`` lines is a 3-vector per row).

    Raises
    ------
    OperationError
        Not text, a blank line, a token that is no number, or a line whose count differs from the first's
        (named with its line number).
    """
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise OperationError(f"{p}: not UTF-8 text (nor a .npy file)", hint=_TEXT_EXPECTED) from None
    except OSError as exc:
        raise OperationError(f"{p}: cannot read it ({exc.strerror or exc})", hint=_TEXT_EXPECTED) from exc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    tokens: list[list[str]] = []
    rows: list[list[float]] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            raise OperationError(f"{p}: line {i} is blank; each line is the value(s) of one data row, in order",
                                 hint="remove the blank line (or give the row its value); nothing was written")
        parts = [t for t in re.split(r"[\s,]+", line.strip()) if t]
        if re.search(r",\s*(,|$)|^\s*,", line):
            raise OperationError(f"{p}: line {i} ({shown_text(line, 40)}) has an empty field between commas",
                                 hint=_TEXT_EXPECTED)
        values: list[float] = []
        for tok in parts:
            try:
                values.append(float(tok))
            except ValueError:
                raise OperationError(f"{p}: line {i}: {shown_text(tok, 40)} is not a number (expected "
                                     f"{'one number' if not rows else f'{len(rows[0])} number(s)'} per line)",
                                     hint=_TEXT_EXPECTED) from None
        if rows and len(values) != len(rows[0]):
            raise OperationError(f"{p}: line {i} holds {len(values)} value(s), line 1 holds {len(rows[0])}: every "
                                 "row of a column has one shape", hint=_TEXT_EXPECTED)
        rows.append(values)
        tokens.append(parts)
    if not rows:
        raise OperationError(f"{p}: holds no values (an empty file)", hint=_TEXT_EXPECTED)
    return np.asarray(rows, dtype=np.float64), tokens


def _float32_changes(src: np.ndarray, f32: np.ndarray, tokens: list[list[str]] | None) -> np.ndarray:
    """Where float32 does not hold the source value (docs/decisions.md E76): an integer (an integer dtype, an
    integer literal of a text file, or a float with an integral value) float32 does not hold exactly, or a
    non-zero value float32 turns into zero or a subnormal. A fractional value is rounded to the nearest float32
    (7 significant digits, the precision of every float32 signal of the format) and is not a change here."""
    if src.dtype.kind in "iu":
        wide = np.uint64 if src.dtype.kind == "u" else np.int64
        f64 = f32.astype(np.float64)
        fits = np.abs(f64) < (2.0 ** 64 if wide is np.uint64 else 2.0 ** 63)
        back = np.where(fits, f64, 0).astype(wide)
        return ~fits | (back != src.astype(wide))
    if src.dtype.kind == "b":
        return np.zeros(src.shape, dtype=bool)
    back = f32.astype(src.dtype)
    integral = np.isfinite(src) & (np.floor(src) == src)
    tiny = (src != 0) & np.isfinite(src) & (np.abs(f32) < np.finfo(np.float32).tiny)
    out = (integral & (back != src)) | tiny
    if tokens is not None:  # an integer literal beyond float64's 2**53 was rounded on reading: compare the text
        for r, parts in enumerate(tokens):
            for c, tok in enumerate(parts):
                if _INT_LITERAL.fullmatch(tok) and np.isfinite(f32[r, c]) and int(f32[r, c]) != int(tok):
                    out[r, c] = True
    return out


def load_values(path: str | Path) -> np.ndarray:
    """The values of an added column: ``.npy`` (shape ``(rows,)`` or ``(rows, d)``), or text with one value (or a
    vector separated by spaces or commas) per line. Returned as float32 ``(rows, d)``: an added column is
    float32 (multi_device_storage.md §6.2, a plain numeric signal), and a value float32 does not hold is refused,
    never stored changed (docs/decisions.md E76).

    Raises
    ------
    OperationError
        The file does not read as numbers (a blank line, a token that is no number, rows of different counts:
        the line named), holds NaN/Infinity, or a value float32 cannot hold (beyond its range, an integer it does
        not hold exactly such as 29000000000000, a non-zero value it makes zero): the first named with its row,
        the value and what float32 makes of it.
    """
    p = Path(path)
    is_npy = p.suffix.lower() == ".npy"
    tokens: list[list[str]] | None = None
    if is_npy:
        _check_npy(p)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                src = np.asarray(np.load(p))
        except (OSError, ValueError, TypeError, EOFError) as exc:
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise OperationError(f"{p} is not a valid .npy file ({text})", hint=_NPY_EXPECTED) from exc
    else:
        src, tokens = _read_text(p)
    if src.ndim == 0 or src.size == 0 or src.shape[0] == 0:
        raise OperationError(f"{p}: holds no values (shape {list(src.shape)})",
                             hint=_NPY_EXPECTED if is_npy else _TEXT_EXPECTED)
    if src.ndim > 2:
        raise OperationError(f"{p}: shape {list(src.shape)}: one value or one vector per row is (rows,) or "
                             f"(rows, d)", hint=_NPY_EXPECTED)
    return as_float32(src, str(p), tokens)


def as_float32(src: np.ndarray, name: str, tokens: list[list[str]] | None = None) -> np.ndarray:
    """``src`` (``(rows,)`` or ``(rows, d)``, any real dtype) as the float32 ``(rows, d)`` of an added column, every
    value checked (docs/decisions.md E76); ``name`` names the values in messages, ``tokens`` a text file's
    numbers as written (its rows are then named with their line).

    Raises
    ------
    OperationError
        NaN/Infinity, a value beyond float32's range, or one float32 changes (module rules), the first named.
    """
    src = np.asarray(src)
    if src.dtype.kind not in "biuf" or src.ndim not in (1, 2):
        raise OperationError(f"{name}: values of dtype {src.dtype} and shape {list(src.shape)}", hint=_NPY_EXPECTED)
    src = src[:, None] if src.ndim == 1 else src
    p = name

    def where(first: np.ndarray) -> str:
        return f"row {int(first[0])}, line {int(first[0]) + 1}" if tokens is not None else f"row {int(first[0])}"

    def shown(first: np.ndarray) -> str:
        if tokens is not None:
            tok = tokens[int(first[0])][int(first[1])]
            return tok if _INT_LITERAL.fullmatch(tok) else repr(float(tok))
        v = src[tuple(first)]
        return str(int(v)) if src.dtype.kind in "iub" else repr(float(v))

    if src.dtype.kind == "f":
        bad = ~np.isfinite(src)  # NaN/Infinity: refused before the journal (JSON) would refuse it (E41)
        if bad.any():
            first = np.argwhere(bad)[0]
            raise OperationError(f"{p}: {where(first)} holds {float(src[tuple(first)])!r} ({int(bad.sum())} "
                                 "non-finite value(s)); an added column takes finite values only",
                                 hint="replace NaN/Infinity by a value (or leave the episode without the column)")
    with np.errstate(over="ignore", under="ignore"):
        arr = src.astype(np.float32)
    over = ~np.isfinite(arr)  # beyond float32's ±3.4e38: never stored as inf without a word
    if over.any():
        first = np.argwhere(over)[0]
        raise OperationError(f"{p}: value {shown(first)} ({where(first)}) is beyond float32's range "
                             f"(±{float(np.finfo(np.float32).max):.4g}); an added column is float32",
                             hint="scale the values (e.g. to other units) so that they fit; nothing was written")
    changed = _float32_changes(src, arr, tokens)
    if changed.any():
        first = np.argwhere(changed)[0]
        stored = float(arr[tuple(first)])
        made = str(int(stored)) if stored.is_integer() else repr(stored)
        raise OperationError(f"{p}: {where(first)} holds {shown(first)}, which float32 (the dtype of an added "
                             f"column, multi_device_storage.md §6.2) stores as {made} ({int(changed.sum())} "
                             "value(s) would change)",
                             hint="float32 holds integers exactly up to 16777216 (2**24) and normal values from "
                                  "1.2e-38: subtract an offset or change the unit (e.g. ns to ms since the first "
                                  "row) so that every value fits; nothing was written")
    return arr


class AddColumn(Change):
    """Add ``column`` (``list<float32, d>``, one value per data row) to episode ``index``; declare it."""

    op = "add-column"

    def __init__(self, column: str, index: int, values: np.ndarray, source: str = "") -> None:
        self.column, self.index, self.source = column, index, source
        self.values = as_float32(values, source or "the values")  # a library caller's array: checked too (E76)

    def args(self) -> dict[str, Any]:
        return {"column": self.column, "episode": self.index, "file": self.source,
                "values": self.values.tolist()}

    def check(self, s: SourceTask) -> None:
        if self.index not in s.episodes:
            raise EpisodeNotFoundError(s.t.uri, self.index)
        if not self.column.startswith("observation."):
            raise SchemaError(f"{self.column!r}: an added column is an observation.* signal",
                              hint="e.g. observation.grip_label")
        check_column_name(self.column, None)
        kind = signal_kind(self.column)
        if kind is not None:  # an added column is plain float32 values; a reserved kind has its own layout (§2.4)
            raise SchemaError(f"{self.column!r} ends with a reserved suffix that means {kind!r} "
                              "(multi_device_storage.md §2.4); an added column is a plain float32 signal",
                              hint="pick a name that does not end in a reserved suffix, e.g. observation.grip_label")
        table = s.table(s.episodes[self.index])
        if self.column in table.column_names:
            raise SchemaError(f"episode {self.index} has a column {self.column!r} already", hint="remove it first")
        declared = (s.info.get("features") or {}).get(self.column)
        if declared is not None and list(declared.get("shape") or []) != [self.values.shape[1]]:
            raise SchemaError(f"{self.column!r} is declared with shape {declared.get('shape')}, the file gives "
                              f"{self.values.shape[1]} value(s) per row", hint="give values of the declared shape")
        if len(self.values) != table.num_rows:
            raise OperationError(f"{self.source or 'the values'}: {len(self.values)} value(s) for episode "
                                 f"{self.index}, which has {table.num_rows} rows", hint="one value per data row")

    def touches_data(self) -> bool:
        return True

    def data(self, n: int, table: pa.Table) -> pa.Table | None:
        if n != self.index or self.column in table.column_names:
            return None
        d = self.values.shape[1]
        flat = pa.array(self.values.reshape(-1), type=pa.float32())
        col = pa.FixedSizeListArray.from_arrays(flat, d).cast(pa.list_(pa.float32()))
        return table.append_column(self.column, col)

    def declare(self, info: dict[str, Any]) -> dict[str, Any]:
        out = dict(info)
        feats = dict(info.get("features") or {})
        feats.setdefault(self.column, {"dtype": "float32", "shape": [int(self.values.shape[1])]})
        out["features"] = feats
        return out

    def finish(self, info: dict[str, Any]) -> dict[str, Any]:
        return self.declare(info)
