"""What a task becomes in a LeRobot v3.0 dataset: the feature mapping of ``egopool export lerobot``.

The plan is computed from the episodes' own schemas and streams (multi_device_storage.md
§6.7: an episode's parquet says which columns it has) before anything is written; ``--dry-run``
prints it and stops. Every pooled column and stream is either exported (same name, or renamed
with the reason) or dropped with the reason; the plan is written as ``egopool_mapping.json``
beside the dataset and is what ``egopool import lerobot`` reads to restore the pooled names.

Rules (docs/decisions.md I1):

* LeRobot ``timestamp`` = ``frame_index / fps`` (the clock of the video frames, which lerobot
  looks up by it); the pooled ``timestamp`` goes to ``pooled_timestamp``. ``episode_index`` is
  0-based and contiguous in N order; N is kept in the mapping and in ``meta/episodes``.
* Fixed-shape columns (scalars, ``status.*`` strings, vectors and matrices declared with a
  ``shape``) keep their name and element shape. Variable-length columns (IMU samples,
  trajectories and their ``_ns``) and force matrices (187500 values a row) are dropped.
* ``--state`` / ``--action`` columns are concatenated, flattened, as float32 into
  ``observation.state`` / ``action`` (they must be float32 or small integers, which float32
  holds exactly); without ``--action`` the pooled ``action`` placeholder is exported as is.
* RGB streams -> ``observation.images.<key>`` video features. Depth streams, for lerobot >= 0.6 (the
  default target): ``observation.images.<key>`` LeRobot depth videos (``is_depth_map``, its 12-bit
  quantisation, :mod:`.lerobot_depth`, decisions I14); for ``--lerobot 0.4``: ``observation.depth.<key>``
  uint16 ``[H, W]`` mm per frame in the data parquet (lerobot 0.4 has no depth video feature).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from .. import __version__
from ..arrowutil import numpy_dtype
from ..errors import EgopoolError, FormatError, SchemaError
from ..read.reader import Episode, Task
from ..schema import signal_kind
from ..storage import ObjectPath
from ._checks import episode_streams
from .lerobot_language import LANGUAGE_COLUMNS, LANGUAGE_FEATURE, TASK_COLUMN, lerobot_name

__all__ = ["IMPORTED_ACTION", "PRESETS", "TARGETS", "preset_state", "ColumnMap", "EpisodeJob", "LeRobotPlan",
           "StreamMap", "plan_export"]

#: What a LeRobot reader does to the float64 Unix ``wall_time`` (issue 31): said in the mapping and the README.
WALL_TIME_NOTE = ("float64 Unix seconds in the parquet, but LeRobot's items (its torch transform) return float32, "
                  "whose step at today's Unix times is 128 s: an item's wall_time is up to 64 s off; read the "
                  "parquet column (hf_dataset.data) or use pooled_timestamp (s since the episode start)")
#: ``--preset`` -> the ``observation.state`` columns of that rig kind (those every exported episode has, in this
#: order; a ``*`` matches one device prefix such as ``gripper_2_``). TCP poses are SLAM trajectories, a variable
#: number of points per row, which a LeRobot feature cannot hold, so the gripper preset is its width/state.
PRESETS: dict[str, tuple[str, ...]] = {
    "gripper": ("observation.gripper_state", "observation.*gripper_state"),
    "hand": ("observation.left_hand_pose", "observation.right_hand_pose"),
    "glove": ("observation.left_glove", "observation.right_glove"),
}
#: LeRobot releases an export is written for: "0.6" (default, lerobot >= 0.6) and "0.4" (lerobot 0.4.x).
TARGETS = ("0.6", "0.4")

#: Column kinds whose rows hold a variable number of items (multi_device_storage.md §4.6, §7.2).
_VARIABLE_KINDS = {"slam_trajectory", "slam_trajectory_ns", "imu", "imu_ts"}
#: Element dtypes float32 holds exactly (allowed in observation.state / action).
#: Where ``import lerobot`` puts a dataset's ``action`` (the pooled ``action`` is the spec's placeholder); the
#: export's default ``--action`` when the task has it (issue 27 review, decisions I25).
IMPORTED_ACTION = "observation.action"
_STATE_DTYPES = {"float32", "float16", "int8", "int16", "uint8", "uint16", "bool"}
_HANDLED_KEYS = {"episode_index", "frame_index", "timestamp", "task_index"}


@dataclass(frozen=True)
class ColumnMap:
    """One exported non-video LeRobot feature and where its values come from.

    Attributes
    ----------
    name:
        LeRobot feature name.
    sources:
        Pooled columns (several for ``observation.state`` / ``action``; a depth feature
        names its stream).
    kind:
        ``"column"`` (copied), ``"concat"`` (state/action), ``"depth"``, ``"language"`` (a pooled language
        column's JSON text -> LeRobot 0.6's language rows, :mod:`.lerobot_language`; an episode without the
        column gets none).
    feature:
        The LeRobot feature (``dtype``, ``shape``, ``names``[, ``info``]).
    pooled:
        What import needs to restore each source: its pooled storage, dtype, element count
        and ``info.features`` declaration.
    """

    name: str
    sources: tuple[str, ...]
    kind: str
    feature: dict[str, Any]
    pooled: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamMap:
    """One RGB stream (or, for lerobot >= 0.6, depth stream: ``depth``) exported as a LeRobot video feature."""

    name: str
    key: str
    width: int
    height: int
    depth: bool = False


@dataclass(frozen=True)
class EpisodeJob:
    """The work of one episode: a function of (task, N) plus where its rows go in the dataset.

    ``episode_index`` (0-based) and ``from_index`` (its first global frame) are fixed before any
    episode is written, so episodes can be exported independently and merged afterwards.
    """

    task_dir: Path | ObjectPath
    index: int
    episode_index: int
    from_index: int
    length: int


@dataclass
class LeRobotPlan:
    """The whole mapping of an export (JSON form: :meth:`mapping`)."""

    task_dir: Path | ObjectPath
    task_name: str
    task_text: str
    repo_id: str
    fps: int
    columns: list[ColumnMap]
    streams: list[StreamMap]
    dropped: list[dict[str, str]]
    renamed: list[dict[str, str]]
    jobs: list[EpisodeJob]
    created_at: dict[int, float | None]
    declarations: dict[str, Any]
    target: str = "0.6"
    gop: int | None = None
    #: Each episode's ``drop_stats`` (§6.2: frames repeated, values clipped or rejected...), carried in the mapping
    #: so that ``import lerobot`` gives them back (a frozen stream stays said after a round trip).
    drop_stats: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: LeRobot's tasks (``meta/tasks.parquet``, ``task_index`` = the position): the texts of the pooled
    #: :data:`~.lerobot_language.TASK_COLUMN` in order of first appearance when the task has it (a frame without
    #: one: ``task_text``), else ``[task_text]`` (decisions I24).
    task_texts: list[str] = field(default_factory=list)
    #: The pooled column holding each frame's task text, or None (every frame ``task_text``).
    task_column: str | None = None

    def __post_init__(self) -> None:
        if not self.task_texts:
            self.task_texts = [self.task_text]

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        """LeRobot ``info.features`` in file order: data features, videos, then the frame keys."""
        from .lerobot_format import DEFAULT_FEATURES

        out: dict[str, dict[str, Any]] = {c.name: dict(c.feature) for c in self.columns}
        for s in self.streams:
            out[s.name] = {"dtype": "video", "shape": [s.height, s.width, 1 if s.depth else 3],
                           "names": ["height", "width", "channels"]}
        out.update({k: dict(v) for k, v in DEFAULT_FEATURES.items()})
        return out

    def mapping(self) -> dict[str, Any]:
        """The JSON document written as ``egopool_mapping.json`` (and printed by ``--dry-run``)."""
        return {
            "egopool_version": __version__, "source_task": str(self.task_dir), "task_name": self.task_name,
            "repo_id": self.repo_id, "fps": self.fps, "lerobot": self.target,
            "videos": "stream copy where possible" if self.gop is None else f"re-encoded, key frame every {self.gop}",
            "episodes": [{"pooled_episode_index": j.index, "episode_index": j.episode_index, "length": j.length,
                          "dataset_from_index": j.from_index, "created_at": self.created_at.get(j.index),
                          "drop_stats": self.drop_stats.get(j.index, {})}
                         for j in self.jobs],
            "features": {c.name: {"from": list(c.sources), "how": c.kind, "pooled": c.pooled}
                         | ({"note": WALL_TIME_NOTE} if c.name == "wall_time" else {}) for c in self.columns}
                        | {s.name: {"from": [f"videos/{s.key}"], "how": "depth_video" if s.depth else "video",
                                    "pooled": {s.key: {"storage": "depth"}} if s.depth else {}} for s in self.streams}
                        | {"timestamp": {"from": [], "how": "frame_index / fps", "pooled": {}}},
            "renamed": list(self.renamed), "dropped": list(self.dropped),
            "declarations": self.declarations,
        }


def _arrow_dtype(typ: pa.DataType) -> str | None:
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return "string"
    if pa.types.is_boolean(typ):
        return "bool"
    try:
        return str(numpy_dtype(typ))  # not to_pandas_dtype(): it imports pandas under pyarrow < 26
    except TypeError:
        return None


def _value_type(typ: pa.DataType) -> pa.DataType | None:
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        return typ.value_type
    return None


def _column_map(name: str, typ: pa.DataType, feat: Any) -> tuple[ColumnMap | None, str | None]:
    """The export of one common column, or the reason it is dropped."""
    kind = signal_kind(name) or ("imu_ts" if name == "imu_ts_ns" else None)
    if name == "observation.imu":
        kind = "imu"
    if kind in _VARIABLE_KINDS:
        return None, "a variable number of items per row (LeRobot features have one fixed shape)"
    if kind == "force_matrix":
        return None, "a (250, 250, 3) force matrix per row (750 KB as float32); not exported"
    inner = _value_type(typ)
    if inner is None:
        dtype = _arrow_dtype(typ)
        if dtype is None:
            return None, f"arrow type {typ} has no LeRobot dtype"
        pooled: dict[str, Any] = {"storage": "string" if dtype == "string" else "scalar", "dtype": dtype,
                                  "length": None, "feature": dict(feat) if isinstance(feat, Mapping) else None}
        return ColumnMap(name, (name,), "column", {"dtype": dtype, "shape": [1], "names": None},
                         {name: pooled}), None
    if _value_type(inner) is not None:
        return None, "a list of lists per row (variable length)"
    dtype = _arrow_dtype(inner)
    shape = feat.get("shape") if isinstance(feat, Mapping) else None
    if dtype is None or dtype == "string":
        return None, f"arrow type {typ} has no LeRobot dtype"
    if not (isinstance(shape, list) and shape and all(isinstance(s, int) and s > 0 for s in shape)):
        return None, "no element shape declared in info.json features"
    pooled = {"storage": "list", "dtype": dtype, "length": int(math.prod(shape)), "feature": dict(feat)}
    return ColumnMap(name, (name,), "column", {"dtype": dtype, "shape": [int(s) for s in shape], "names": None},
                     {name: pooled}), None


def _is_default_action(cm: ColumnMap | None) -> bool:
    """True when ``cm`` (the task's :data:`IMPORTED_ACTION`, in every chosen episode) can be ``action``."""
    return cm is not None and cm.feature.get("dtype") in _STATE_DTYPES


def _concat(target: str, cols: Sequence[str], cmaps: Mapping[str, ColumnMap], chosen: Sequence[Episode],
            names: Sequence[Sequence[str]], task_dir: Path | ObjectPath) -> ColumnMap:
    flag = "--state" if target == "observation.state" else "--action"
    parts: list[str] = []
    pooled: dict[str, dict[str, Any]] = {}
    for col in cols:
        cm = cmaps.get(col)
        have = [ep.index for ep, n in zip(chosen, names, strict=True) if col in n]
        if cols.count(col) > 1:
            raise SchemaError(f"is named {cols.count(col)} times in {flag}", column=col, path=task_dir,
                              hint="name each column once")
        if not have:
            raise SchemaError(f"no exported episode has this column ({flag})", column=col, path=task_dir,
                              hint="`egopool show TASK N` lists an episode's columns")
        if len(have) < len(chosen):
            raise SchemaError(f"only episodes {have} have it, so it cannot be part of {target}", column=col,
                              path=task_dir,
                              hint=f"export only those episodes (--episodes N) or leave it out of {flag}")
        if col in _HANDLED_KEYS:
            raise SchemaError(f"is LeRobot's own {col if col != 'timestamp' else 'pooled_timestamp'} feature, "
                              f"not a signal for {target}", column=col, path=task_dir, hint=f"leave it out of {flag}")
        if cm is None:
            raise SchemaError(f"cannot be part of {target}: not a fixed-length numeric column", column=col,
                              path=task_dir, hint=f"leave it out of {flag}; `egopool export lerobot --dry-run` "
                                                  "says what becomes of it")
        feat = cm.feature
        if feat["dtype"] == "string":
            raise SchemaError(f"holds text, not numbers: it cannot be part of {target}", column=col, path=task_dir,
                              hint=f"leave it out of {flag} (it is exported as its own string feature)")
        if feat["dtype"] not in _STATE_DTYPES:
            raise SchemaError(f"is {feat['dtype']}; {target} is float32, which cannot hold it exactly", column=col,
                              path=task_dir, hint=f"leave it out of {flag} (it is exported as its own feature)")
        n = int(math.prod(feat["shape"]))
        decl = cm.pooled[col].get("feature")  # the pooled declaration: its element names (a LeRobot import's)
        own = decl.get("names") if isinstance(decl, Mapping) else None
        if len(cols) == 1 and isinstance(own, list) and len(own) == n and all(isinstance(x, str) for x in own):
            parts += own
        else:
            parts += [col] if n == 1 else [f"{col}[{i}]" for i in range(n)]
        pooled[col] = cm.pooled[col]
    return ColumnMap(target, tuple(cols), "concat", {"dtype": "float32", "shape": [len(parts)], "names": parts},
                     pooled)


def _integer_fps(task: Task) -> int:
    fps = task.info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
        raise EgopoolError(f"info.json fps is {fps!r}", path=task.path / "meta" / "info.json")
    if abs(fps - round(fps)) > 1e-9 or round(fps) < 1:  # 1e-300 fps was exported as a 0-fps dataset (qa12)
        raise EgopoolError(f"LeRobot v3 needs an integer fps; the task records at {fps} fps",
                           path=task.path / "meta" / "info.json",
                           hint="LeRobot looks frames up by frame_index / fps; a task at a fractional rate "
                                "cannot be exported without retiming every frame")
    return int(round(fps))


def _select(task: Task, episodes: Sequence[int] | None) -> list[Episode]:
    if episodes:
        if len(set(episodes)) != len(episodes):
            raise EgopoolError(f"episode numbers repeat in {list(episodes)}", hint="name each N once")
        chosen = [task.episode(n) for n in sorted(episodes)]
    else:
        chosen = task.episodes()
    if not chosen:
        raise EgopoolError("the task has no episode to export", path=task.path)
    for ep in chosen:
        if ep.files.data is None or ep.files.meta is None:
            raise EgopoolError(f"episode {ep.index} is incomplete (data parquet or meta/episodes row missing)",
                               path=task.path, hint="run `egopool validate TASK`; export complete episodes only")
    return chosen


def plan_export(task: Task, *, episodes: Sequence[int] | None = None, state: Sequence[str] = (),
                action: Sequence[str] = (), depth: bool = True, repo_id: str | None = None,
                target: str = "0.6", gop: int | None = None) -> LeRobotPlan:
    """Compute the mapping of a LeRobot export (nothing is written).

    Parameters
    ----------
    task:
        The source task.
    episodes:
        Global N to export (default: every episode), exported in ascending N.
    state, action:
        Pooled columns concatenated (flattened, in this order) into ``observation.state`` /
        ``action`` (float32).
    depth:
        Export depth streams as ``observation.depth.<key>`` (uint16 mm ``[H, W]``); False drops them.
    repo_id:
        LeRobot ``repo_id`` recorded in the mapping (default ``local/<task name>``).
    target:
        The LeRobot release written for (:data:`TARGETS`): "0.6" (depth videos, 0.6's key placement) or "0.4".
    gop:
        Re-encode every RGB video with a key frame every ``gop`` frames (None: stream copy where possible).

    Raises
    ------
    EgopoolError
        No episode, an incomplete episode, repeated N, a fractional fps.
    EpisodeNotFoundError
        An N that is not in the task.
    SchemaError
        A ``--state`` / ``--action`` column that is missing in an episode, not fixed-length
        numeric, or of a dtype float32 cannot hold exactly; a column named in both, or twice.
    FormatError
        A stream an episode's meta row describes has no file (:func:`._checks.episode_streams`).
    """
    if target not in TARGETS:
        raise EgopoolError(f"--lerobot {target!r} is not a target", hint=f"use one of {', '.join(TARGETS)}")
    if gop is not None and (isinstance(gop, bool) or not isinstance(gop, int) or gop < 1):
        raise EgopoolError(f"key frame interval {gop!r} is not a whole number >= 1", hint="e.g. --gop 10")
    fps = _integer_fps(task)
    chosen = _select(task, episodes)
    both = set(state) & set(action)
    if both:
        raise SchemaError("is named in both --state and --action", column=sorted(both)[0], path=task.path)
    schemas = [ep.schema for ep in chosen]
    names = [list(s.names) for s in schemas]
    common = set(names[0]).intersection(*map(set, names[1:]))
    raw_features = task.info.get("features")
    features: Mapping[str, Any] = raw_features if isinstance(raw_features, Mapping) else {}
    dropped: list[dict[str, str]] = []
    renamed: list[dict[str, str]] = [
        {"from": "timestamp", "to": "pooled_timestamp",
         "why": "LeRobot's timestamp is frame_index / fps, the clock of the video frames"},
        {"from": "episode_index", "to": "episode_index (0-based)",
         "why": "LeRobot numbers episodes 0.. contiguously; N is in egopool_mapping.json and meta/episodes"}]
    language = _language_columns(chosen, features, target, dropped)
    renamed += [{"from": c.sources[0], "to": c.name, "why": "LeRobot 0.6's language column: each row's JSON text as "
                                                            "its rows (episodes without it: none)"} for c in language]
    seen_somewhere = sorted(set().union(*map(set, names)) - common - {s for c in language for s in c.sources}
                            - {TASK_COLUMN})
    for col in seen_somewhere:
        have = [ep.index for ep, n in zip(chosen, names, strict=True) if col in n]
        dropped.append({"source": col, "reason": f"only in episodes {have}; LeRobot features are the same for "
                                                 "every episode"})
    cmaps: dict[str, ColumnMap] = {}
    for col in names[0]:
        if col not in common or col in _HANDLED_KEYS or col == TASK_COLUMN or any(col in c.sources for c in language):
            continue
        cm, why = _column_map(col, schemas[0].field(col).type, features.get(col))
        if cm is not None:
            cmaps[col] = cm
        elif why is not None:
            dropped.append({"source": col, "reason": why})
    columns: list[ColumnMap] = []
    default_action = not action and _is_default_action(cmaps.get(IMPORTED_ACTION)) and IMPORTED_ACTION not in state
    if default_action:  # a LeRobot import's real action (import renames it; the pooled action is the placeholder)
        action = [IMPORTED_ACTION]
    if state:
        columns.append(_concat("observation.state", list(state), cmaps, chosen, names, task.path))
    if action:
        columns.append(_concat("action", list(action), cmaps, chosen, names, task.path))
        dropped.append({"source": "action", "reason": "the pooled placeholder [0.0]; " +
                        (f"{IMPORTED_ACTION} replaces it (no --action given)" if default_action
                         else "--action columns replace it")})
    for col in state:
        renamed.append({"from": col, "to": "observation.state", "why": "--state"})
    for col in action:
        renamed.append({"from": col, "to": "action", "why": "default --action: the task's own action (a LeRobot "
                                                                "import's action; --action COL chooses another)"
                        if default_action else "--action"})
    taken = set(state) | set(action) | ({"action"} if action else set())
    columns.append(ColumnMap("pooled_timestamp", ("timestamp",), "column",
                             {"dtype": "float32", "shape": [1], "names": None},
                             {"timestamp": {"storage": "scalar", "dtype": "float32", "length": None, "feature": None}}))
    columns += [cm for col, cm in cmaps.items() if col not in taken]
    columns += language
    streams, depth_cols = _plan_streams(chosen, depth, dropped, target)
    columns += depth_cols
    if repo_id is None:
        repo_id = f"local/{task.path.name}"
    jobs, start = [], 0
    for e, ep in enumerate(chosen):
        n_rows = ep.length
        jobs.append(EpisodeJob(task.path, ep.index, e, start, n_rows))
        start += n_rows
    created = {ep.index: _created_at(ep) for ep in chosen}
    tasks = task.tasks
    text = str(tasks[0].get("task")) if tasks and isinstance(tasks[0], Mapping) else task.name
    decl: dict[str, Any] = {k: task.info[k] for k in ("calibration", "devices", "device_names", "sensors", "sensor_dim")
            if k in task.info}
    drops = {ep.index: _drop_stats(ep) for ep in chosen}
    texts = _task_texts(chosen, text)
    if texts is not None:
        renamed.append({"from": TASK_COLUMN, "to": "task", "why": "each frame's LeRobot task (meta/tasks.parquet, "
                                                                  f"task_index); a frame without one: {text!r}"})
    return LeRobotPlan(task.path, task.name, text, repo_id, fps, columns, streams, dropped, renamed, jobs,
                       created, decl, target, gop, drops, texts or [text], TASK_COLUMN if texts is not None else None)


def _task_texts(chosen: Sequence[Episode], default: str) -> list[str] | None:
    """The distinct texts of :data:`~.lerobot_language.TASK_COLUMN` over the chosen episodes in order of first
    appearance (a null or missing one: ``default``), or None when no episode has the column (decisions I24)."""
    if not any(TASK_COLUMN in ep.schema.names for ep in chosen):
        return None
    seen: dict[str, None] = {}
    for ep in chosen:
        if TASK_COLUMN not in ep.schema.names:
            seen.setdefault(default)
            continue
        for t in ep.columns([TASK_COLUMN]).column(TASK_COLUMN).to_pylist():
            seen.setdefault(default if t is None else str(t))
    return list(seen)


def _language_columns(chosen: Sequence[Episode], features: Mapping[str, Any], target: str,
                      dropped: list[dict[str, str]]) -> list[ColumnMap]:
    """The pooled language columns (:mod:`.lerobot_language`) any chosen episode has, as LeRobot 0.6's columns
    (none for ``--lerobot 0.4``, which exports them as string features, I22)."""
    if target == "0.4":
        return []
    found: dict[str, ColumnMap] = {}
    for ep in chosen:
        for f in ep.schema:
            feat = features.get(f.name)
            lr = lerobot_name(f.name, feat)
            if lr is None or not (pa.types.is_string(f.type) or pa.types.is_large_string(f.type)):
                continue
            have = found.get(lr)
            if have is not None and have.sources != (f.name,):
                if not any(d["source"] == f.name for d in dropped):
                    dropped.append({"source": f.name, "reason": f"{have.sources[0]} is LeRobot's {lr} already"})
                continue
            found[lr] = ColumnMap(lr, (f.name,), "language", dict(LANGUAGE_FEATURE),
                                  {f.name: {"storage": "string", "dtype": "string", "length": None,
                                            "feature": dict(feat) if isinstance(feat, Mapping) else None}})
    return [found[k] for k in LANGUAGE_COLUMNS if k in found]


def preset_state(task: Task, preset: str, episodes: Sequence[int] | None = None) -> list[str]:
    """The ``--state`` columns of a :data:`PRESETS` rig kind that every chosen episode of ``task`` has.

    Raises
    ------
    EgopoolError
        An unknown preset, or a task without any of its columns (naming what was looked for).
    """
    import fnmatch

    if preset not in PRESETS:
        raise EgopoolError(f"unknown --preset {preset!r}", hint=f"use one of {', '.join(PRESETS)}")
    chosen = _select(task, episodes)
    common = set(chosen[0].schema.names).intersection(*(set(ep.schema.names) for ep in chosen[1:]))
    cols: list[str] = []
    for pattern in PRESETS[preset]:
        cols += [c for c in sorted(common) if fnmatch.fnmatchcase(c, pattern) and c not in cols]
    if not cols:
        raise EgopoolError(f"the task has none of the {preset} preset's columns ({', '.join(PRESETS[preset])})",
                           path=task.path, hint="name the columns with --state (`egopool show TASK N` lists them)")
    return cols


def _drop_stats(ep: Episode) -> dict[str, int | float]:
    """The row's ``drop_stats`` counters (§6.2) that are numbers ({} when the row has none)."""
    raw = ep.meta.get("drop_stats")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): v for k, v in raw.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def _created_at(ep: Episode) -> float | None:
    """The row's ``created_at`` (Unix s, §6.2), None when the row has none.

    Raises
    ------
    FormatError
        It is not a finite number (a damaged row).
    """
    v = ep.meta.get("created_at")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise FormatError(f"episode {ep.index}: created_at is {v!r}, not Unix seconds", path=ep.files.meta,
                          hint="run `egopool validate` on the task, or leave the episode out with --episodes")
    return float(v)


def _plan_streams(chosen: Sequence[Episode], depth: bool, dropped: list[dict[str, str]],
                  target: str = "0.6") -> tuple[list[StreamMap], list[ColumnMap]]:
    found = [episode_streams(ep) for ep in chosen]
    keys = [set(f) for f in found]
    common = set(keys[0]).intersection(*keys[1:])
    for key in sorted(set().union(*keys) - common):
        have = [ep.index for ep, k in zip(chosen, keys, strict=True) if key in k]
        dropped.append({"source": f"videos/{key}", "reason": f"only in episodes {have}"})
    streams: list[StreamMap] = []
    depth_cols: list[ColumnMap] = []
    for key in sorted(common):
        kinds = {f[key] for f in found}
        if len(kinds) != 1:
            dropped.append({"source": f"videos/{key}", "reason": f"kind or size differs between episodes: "
                                                                 f"{sorted(kinds)}"})
            continue
        kind, w, h = kinds.pop()
        if kind == "rgb":
            streams.append(StreamMap(f"observation.images.{key}", key, w, h))
        elif depth and target != "0.4":
            streams.append(StreamMap(f"observation.images.{key}", key, w, h, depth=True))
        elif depth:
            feat = {"dtype": "uint16", "shape": [h, w], "names": ["height", "width"],
                    "info": {"unit": "mm", "no_depth": 0, "egopool_stream": key}}
            depth_cols.append(ColumnMap(f"observation.depth.{key}", (f"videos/{key}",), "depth", feat,
                                        {key: {"storage": "depth", "dtype": "uint16", "length": None,
                                               "feature": None}}))
        else:
            dropped.append({"source": f"videos/{key}", "reason": "depth stream; --no-depth"})
    return streams, depth_cols

