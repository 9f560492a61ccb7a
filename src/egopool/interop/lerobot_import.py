"""``egopool import lerobot DIR --task NAME``: a local LeRobot v3.0 dataset -> a pooled task.

One pooled episode per LeRobot episode (N from the task's next free number, 1 for a new
task), in ``episode_index`` order. Per episode:

* video features -> RGB streams; H.264/HEVC segments are stream-copied out of LeRobot's
  multi-episode MP4 (each episode starts on a key frame: lerobot encodes episodes separately),
  other codecs (lerobot's default AV1) are decoded and re-encoded as H.264;
* image features (PNG in the parquet) -> RGB streams;
* numeric features -> columns of the same element shape (declared in ``info.features``);
* egopool's ``observation.depth.<key>`` (uint16 mm) -> depth streams, stored as lossless FFV1
  (file_format.md §8 fallback) so the millimetres come back exactly;
* LeRobot 0.6 depth videos (``is_depth_map``) -> depth streams: decoded with the feature's own
  ``video.depth_*`` quantisation to the millimetres LeRobot's reader gives (code 0, LeRobot's
  ``depth_min``, a hole), stored as lossless FFV1; a depth encoding egopool does not know is refused
  in one line (:mod:`.lerobot_depth`, decisions I15);
* LeRobot 0.6's ``language_persistent`` / ``language_events`` -> string columns
  ``observation.language_persistent`` / ``observation.language_events`` holding each frame's rows as JSON
  (the dataset's ``tools`` in their declaration; :mod:`.lerobot_language`, decisions I22);
* ``timestamp`` -> the pooled ``timestamp``; ``index``/``episode_index``/``task_index``/``frame_index``
  are LeRobot bookkeeping and are not stored (N and ``frame_index`` are the writer's).

A dataset exported by egopool carries ``egopool_mapping.json``: its columns, streams, depth
and ``observation.state``/``action`` parts then return under their pooled names and
declarations, with their hardware stamps and ``created_at`` (so ``wall_time`` is recomputed
exactly, decision 6), which makes export + import lossless for the exported columns.
Other datasets get the generic names of :func:`pooled_name` and the renames are reported.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._safe_read import read_json, read_parquet, read_parquet_schema
from ..codecs.video_copy import COPYABLE_CODECS, VideoSource, packet_times
from ..errors import CodecError, EgopoolError, FormatError, SchemaError
from ..schema import KEY_COLUMNS, ColumnSpec, check_column_name, key_column, signal_kind, status_column, vector_column
from ..write.checks import check_declaration_types
from ..write.task_writer import StreamSpec
from ..importers._common import (ImportResult, ImportSource, Progress, check_not_imported, refuse_other_fps,
                                 remember_import, task_writer)
from . import lerobot_format as fmt
from .lerobot_depth import depth_map_of_feature, is_depth_feature, read_lerobot_depth
from .lerobot_language import LANGUAGE_COLUMNS, TASK_COLUMN, TASK_FEATURE, is_language_feature, language_spec
from .lerobot_episode import (FIX, FeatureColumns, LeRobotDatasetInfo, check_episodes, data_path, decode_window,
                              feature_values,
                              episode_rows, plain_int, png_frame, row_values, values, video_path, window_frames)

__all__ = ["LeRobotDatasetInfo", "import_lerobot", "pooled_name", "scan_lerobot"]

_BOOKKEEPING = ("index", "episode_index", "task_index", "frame_index")
#: Pooled sources passed to ``add_frame`` itself.
_PASSED = ("timestamp", "hardware_ns")
#: Pooled sources not stored: the writer writes them (``wall_time = created_at + timestamp``, the
#: ``action`` placeholder, N and frame numbers).
_WRITTEN_BY_WRITER = ("action", "wall_time", "episode_index", "frame_index", "task_index")
_MAPPING_FILE = "egopool_mapping.json"
#: LeRobot names that cannot be pooled column names as they are (multi_device_storage.md §2.4).
_AVOID_KINDS = {"slam_trajectory", "slam_trajectory_ns", "force_matrix", "force_matrix_ns", "hand_pose"}


def pooled_name(feature: str) -> str:
    """The pooled column name of a LeRobot feature of a dataset not exported by egopool.

    Lowercase ASCII segments of ``[a-z0-9_]`` under ``observation.`` (§2.4): ``observation.state``
    stays; ``action`` -> ``observation.action`` (the pooled ``action`` column is the spec's
    ``[0.0]`` placeholder, file_format.md §7.2); ``next.reward`` -> ``observation.next_reward``.
    A name ending in a reserved suffix of another kind gets ``_lerobot`` appended.
    """
    name = feature.lower()
    if not name.startswith("observation."):
        name = "observation." + name.replace(".", "_")
    head, _, rest = name.partition(".")
    segs = [re.sub(r"[^a-z0-9_]", "_", s) or "x" for s in rest.split(".")]
    name = ".".join([head, *segs])
    if name.startswith("observation.images."):
        name = "observation.image_" + name.removeprefix("observation.images.")
    if signal_kind(name) in _AVOID_KINDS:
        name += "_lerobot"
    return name


def _stream_key(feature: str) -> str:
    key = feature.removeprefix("observation.images.").removeprefix("observation.image.")
    key = re.sub(r"\W", "_", key).strip("_") or "camera"  # a slot name (check_slot_name, §2.4)
    return key


def scan_lerobot(root: str | Path) -> LeRobotDatasetInfo:
    """Read a LeRobot v3.x dataset's metadata (``info.json``, tasks, ``meta/episodes``, an egopool mapping).

    Raises
    ------
    FormatError
        Not a LeRobot v3 dataset, or its metadata cannot be read (the message names the file).
    """
    root = Path(root)
    info = fmt.read_info(root)
    paths = sorted((root / "meta" / "episodes").glob("*/*.parquet"))
    if not paths:
        raise FormatError("no meta/episodes/chunk-*/file-*.parquet", path=root,
                          hint="a LeRobot v3.0 dataset lists its episodes there")
    rows: list[dict[str, Any]] = []
    what = "LeRobot episodes parquet"
    for p in paths:
        names = read_parquet_schema(p, what=what).names
        for row in read_parquet(p, [c for c in names if not c.startswith("stats/")], what=what).to_pylist():
            bad = next((k for k in _EPISODE_KEYS if not plain_int(row.get(k))), None)
            if bad is not None:
                raise FormatError(f"a row has {bad} = {row.get(bad)!r}, not an integer >= 0", path=p,
                                  hint="a LeRobot v3.0 episodes row has episode_index, length, data/chunk_index "
                                       "and data/file_index")
            rows.append(row)
    rows.sort(key=lambda r: int(r["episode_index"]))
    repeated = sorted({r["episode_index"] for r, nxt in itertools.pairwise(rows)
                       if r["episode_index"] == nxt["episode_index"]})
    if repeated:
        raise FormatError(f"episode_index {', '.join(map(str, repeated[:5]))} has more than one row",
                          path=root / "meta" / "episodes", hint="each LeRobot episode has one meta/episodes row")
    mapping = None
    mpath = root / _MAPPING_FILE
    if mpath.exists() or mpath.is_symlink():
        hint = "delete it to import the dataset with generic names"
        mapping = read_json(mpath, what="the egopool mapping", hint=hint)
        kinds = {"features": dict, "episodes": list, "declarations": dict}
        mistyped = [k for k, t in kinds.items()
                    if not isinstance(mapping, dict) or not isinstance(mapping.get(k, t()), t)]
        if mistyped:
            raise FormatError("not an egopool mapping (" + ("not a JSON object" if not isinstance(mapping, dict)
                                                            else f"{mistyped[0]!r} is not a "
                                                                 f"{kinds[mistyped[0]].__name__}")
                              + ")", path=mpath, hint=hint)
        _check_mapping(mapping, mpath)
    return LeRobotDatasetInfo(root, info, rows, fmt.read_tasks(root), mapping)


#: Keys of a ``meta/episodes`` row the importer reads, each an integer >= 0.
_EPISODE_KEYS = ("episode_index", "length", "data/chunk_index", "data/file_index")


def _check_mapping(mapping: Any, path: Path) -> None:
    """``egopool_mapping.json`` has the shape :meth:`LeRobotPlan.mapping` writes (else one FormatError)."""
    hint = "it is not the file `egopool export lerobot` wrote: delete it to import with generic names"
    feats = mapping.get("features", {}) if isinstance(mapping, dict) else None
    if not isinstance(feats, dict):
        raise FormatError("the egopool mapping has no \"features\" object", path=path, hint=hint)
    for name, m in feats.items():
        ok = (isinstance(m, dict) and isinstance(m.get("how"), str) and isinstance(m.get("pooled"), dict)
              and isinstance(m.get("from"), list) and all(isinstance(x, str) for x in m["from"]))
        if ok and m["how"] in ("column", "concat"):
            ok = bool(m["from"]) and all(isinstance(m["pooled"].get(x), dict) for x in m["from"])
        if ok and m["how"] == "depth":
            ok = len(m["pooled"]) == 1 and all(isinstance(k, str) and k for k in m["pooled"])
        if not ok:
            raise FormatError(f"the egopool mapping's entry for feature {name!r} is not "
                              "{\"from\": [pooled columns], \"how\": ..., \"pooled\": {column: {...}}}", path=path,
                              hint=hint)
    eps = mapping.get("episodes", [])
    if not isinstance(eps, list) or not all(isinstance(e, dict) and isinstance(e.get("episode_index"), int)
                                            for e in eps):
        raise FormatError("the egopool mapping's \"episodes\" is not a list of {\"episode_index\": int, ...}",
                          path=path, hint=hint)


# -- columns ------------------------------------------------------------------------------------------
def _spec_from_pooled(name: str, pooled: Mapping[str, Any]) -> ColumnSpec | None:
    storage, dtype = pooled.get("storage"), pooled.get("dtype")
    feature = pooled.get("feature")
    if name in KEY_COLUMNS:
        return key_column(name)
    if name.startswith("status."):
        return status_column(name.removeprefix("status."))
    if storage == "scalar":
        return ColumnSpec(name, "scalar", str(dtype), None, feature or {"dtype": dtype, "shape": [1]},
                          kind=signal_kind(name) or "vector", sparse=True)
    if storage == "string":
        return ColumnSpec(name, "string", "str", None, feature or {"dtype": "string", "shape": [1]},
                          kind="vector", sparse=True)
    if storage == "list":
        shape = list((feature or {}).get("shape") or [pooled["length"]])
        extra = {k: v for k, v in (feature or {}).items() if k not in ("dtype", "shape")}
        return vector_column(name, shape, str(dtype), sparse=name != "observation.left_hand_pose"
                             and name != "observation.right_hand_pose", **extra)
    return None


def _generic_spec(name: str, feat: Mapping[str, Any]) -> ColumnSpec:
    dtype = str(feat["dtype"])
    shape = [int(s) for s in feat["shape"]]
    check_column_name(name)
    if dtype == "string":
        return ColumnSpec(name, "string", "str", None, {"dtype": "string", "shape": [1]}, sparse=True)
    if shape == [1]:
        return ColumnSpec(name, "scalar", dtype, None, {"dtype": dtype, "shape": [1]},
                          kind=signal_kind(name) or "vector", sparse=True)
    names = feat.get("names")  # LeRobot's element names (e.g. of action's joints), kept for the export (I25)
    if isinstance(names, list) and len(names) == math.prod(shape) and all(isinstance(x, str) for x in names):
        return vector_column(name, shape, dtype, names=list(names))
    return vector_column(name, shape, dtype)


def _plan_columns(ds: LeRobotDatasetInfo, notes: list[str]) -> tuple[list[FeatureColumns], dict[str, tuple[str, str]]]:
    """Data features -> pooled columns; and video/image/depth features -> (stream key, kind)."""
    mapped = (ds.mapping or {}).get("features", {})
    cols: list[FeatureColumns] = []
    streams: dict[str, tuple[str, str]] = {}
    for name, feat in ds.features.items():
        dtype = feat.get("dtype")
        m = mapped.get(name)
        if dtype in ("video", "image"):
            src = (m or {}).get("from") or []
            key = src[0].removeprefix("videos/") if src and src[0].startswith("videos/") else _stream_key(name)
            if is_depth_feature(feat):  # lerobot 0.6: decoded with its own quantisation, or refused (I15)
                depth_map_of_feature(name, feat, ds.root / "meta" / "info.json")
                streams[name] = (key, "depth_video")
                continue
            streams[name] = (key, dtype)
            continue
        if is_language_feature(name, feat):  # lerobot 0.6's language rows -> a JSON string column (I22)
            lang = _language_column(name, m, ds.info.get("tools"))
            notes.append(f"{name} -> {lang.parts[0][0]}" if lang is not None
                         else f"{name} (a language column lerobot 0.6.1 does not name) not imported")
            cols += [lang] if lang is not None else []
            continue
        if name in _BOOKKEEPING:
            continue
        if m is not None and m.get("how") == "depth":
            streams[name] = (next(iter(m["pooled"])), "depth")
            continue
        if m is not None and m.get("how") in ("column", "concat"):
            parts: list[tuple[str, int, ColumnSpec | None]] = []
            for src in m["from"]:
                pooled = m["pooled"][src]
                own = src in _PASSED or src in _WRITTEN_BY_WRITER
                spec = None if own else _spec_from_pooled(src, pooled)
                if spec is None and not own:
                    raise FormatError(f"mapping entry for {src!r} has unknown storage {pooled.get('storage')!r}",
                                      path=ds.root / _MAPPING_FILE)
                parts.append((src, int(pooled.get("length") or 1), spec))
            cols.append(FeatureColumns(name, parts))
            continue
        if name == "timestamp":
            if not any(src == "timestamp" for c in cols for src, _, _ in c.parts) and not any(
                    (mapped.get(n) or {}).get("from") == ["timestamp"] for n in ds.features):
                cols.append(FeatureColumns(name, [("timestamp", 1, None)]))
            continue
        target = pooled_name(name)
        if target != name:
            notes.append(f"{name} -> {target}")
        spec = _generic_spec(target, feat)
        cols.append(FeatureColumns(name, [(target, int(math.prod(feat["shape"])), spec)]))
    if "task_index" in ds.features and ds.tasks and TASK_COLUMN not in {p for c in cols for p, _, _ in c.parts}:
        spec = ColumnSpec(TASK_COLUMN, "string", "str", None, dict(TASK_FEATURE), sparse=True)
        cols.append(FeatureColumns("task_index", [(TASK_COLUMN, 1, spec)]))  # each frame's task text (I24)
        notes.append(f"task -> {TASK_COLUMN}")
    return cols, streams


def _language_column(name: str, mapped: Mapping[str, Any] | None, tools: Any) -> FeatureColumns | None:
    """LeRobot language column ``name`` as a pooled JSON string column (I22): under the name and declaration the
    egopool mapping gives it, else :data:`~.lerobot_language.POOLED`'s (None for a name lerobot does not use)."""
    if name not in LANGUAGE_COLUMNS:
        return None
    pooled = (mapped or {}).get("pooled") if (mapped or {}).get("how") == "language" else None
    target: str | None = None
    decl: Any = None
    if isinstance(pooled, dict) and len(pooled) == 1:
        target, entry = next(iter(pooled.items()))
        decl = entry.get("feature") if isinstance(entry, dict) else None
    spec = language_spec(name, target, tools, decl if isinstance(decl, dict) else None)
    return FeatureColumns(name, [(spec.name, 1, spec)])


def _counters(raw: Any) -> dict[str, int]:
    """An exported episode's ``drop_stats`` from ``egopool_mapping.json`` (whole counts; anything else left out)."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): int(v) for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


# -- import ------------------------------------------------------------------------------------------
def import_lerobot(directory: str | Path, root: str | Path, *, task: str, progress: Progress | None = None,
                   episodes: Sequence[int] | None = None, allow_duplicate: bool = False) -> ImportResult:
    """Import a local LeRobot v3.0 dataset as pooled episodes of task ``root/task``.

    Parameters
    ----------
    directory:
        The dataset root (``meta/info.json``, ``data/``, ``videos/``).
    root:
        Recordings root; the task directory is ``root / task`` (created, or appended to).
    task:
        Task name.
    progress:
        Called with ``(rows done, rows total)``; total is twice the rows: each is checked, then written.
    episodes:
        LeRobot ``episode_index`` values to import (default all); one the dataset does not have is
        refused before anything is written (``EgopoolError`` listing the dataset's episodes).
    allow_duplicate:
        Import an episode even when the task already holds it from an earlier import of the same
        dataset content (otherwise refused before anything is read at length, naming that N;
        docs/decisions.md D6).

    Returns
    -------
    ImportResult
        The written episodes; ``synthesised`` says which times were made up; ``notes`` the
        renames, re-encoded videos and dropped features.

    All or nothing for the dataset: every chosen episode is read, checked and its video frames
    decoded before the first one is written (:func:`~egopool.interop.lerobot_episode.check_episodes`,
    decisions.md I8), so a damaged dataset leaves the task exactly as it was.

    Raises
    ------
    FormatError
        Not a LeRobot v3.x dataset, unreadable metadata or ``egopool_mapping.json``; a chosen
        episode whose data or video file is missing or unreadable, holds another number of rows
        or frames than ``meta/episodes`` says, a column of another type than ``info.json``
        declares, or a row a pooled episode cannot hold (the message names the file).
    CodecError
        A video that does not demux or decode (the message names the file and the episode).
    SchemaError
        A feature the pooled format cannot hold (e.g. an unknown dtype).
    """
    ds = scan_lerobot(directory)
    chosen = [e for e in ds.episodes if episodes is None or int(e["episode_index"]) in set(episodes)]
    missing = sorted(set(episodes or ()) - {int(e["episode_index"]) for e in chosen})
    if missing:
        raise EgopoolError(f"no episode_index {', '.join(map(str, missing))} in the dataset", path=ds.root,
                           hint=f"the dataset has episodes {[int(e['episode_index']) for e in ds.episodes]}")
    if not chosen:
        raise EgopoolError("no episode to import", path=ds.root,
                           hint=f"the dataset has episodes {[int(e['episode_index']) for e in ds.episodes]}")
    notes: list[str] = []
    try:
        cols, streams = _plan_columns(ds, notes)
        mapping = ds.mapping or {}
        created = {int(e["episode_index"]): e.get("created_at") for e in mapping.get("episodes", [])}
        carried = {int(e["episode_index"]): _counters(e.get("drop_stats")) for e in mapping.get("episodes", [])}
        for v in created.values():
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"created_at {v!r} is not a number")
        decl = dict(mapping.get("declarations") or {})
        check_declaration_types(decl.get("devices") or (), decl.get("device_names"), decl.get("calibration"),
                                decl.get("sensors"), decl.get("sensor_dim"), None)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, SchemaError) as exc:  # a hand-edited mapping
        src = ds.root / (_MAPPING_FILE if ds.mapping is not None else "meta/info.json")
        why = exc.one_line() if isinstance(exc, SchemaError) else f"{type(exc).__name__}: {exc}"
        raise FormatError(f"cannot use {'the egopool mapping' if ds.mapping is not None else 'the features'}: {why}",
                          path=src,
                          hint="delete egopool_mapping.json to import with generic names"
                          if ds.mapping is not None else None) from None
    if notes:
        notes = ["renamed " + ", ".join(notes)]
    fps = ds.fps
    synthesised: list[str] = []
    if not any(src == "hardware_ns" for c in cols for src, _, _ in c.parts):
        synthesised.append("hardware_ns = 0 (unknown): LeRobot stores no device clock")
    if not created:
        synthesised.append("created_at / wall_time: the import time (LeRobot stores no absolute time)")
    if len(set(ds.tasks.values())) > 1:
        notes.append(f"LeRobot tasks {sorted(set(ds.tasks.values()))} -> one pooled task {task!r}, each frame's "
                     f"in {TASK_COLUMN}")
    data_names = [c.feature for c in cols] + [n for n, (_, kind) in streams.items() if kind in ("image", "depth")]
    refuse_other_fps(root, task, fps)  # before the check: it reads every frame
    content = ImportSource(tuple(ds.root / d for d in ("meta", "data", "videos") if (ds.root / d).is_dir()),
                           str(ds.root), base=ds.root)  # one digest of the dataset, one source per episode
    sources = {}
    for e in (int(ep["episode_index"]) for ep in chosen):
        sources[e] = dataclasses.replace(content, what=f"{ds.root} episode {e}", part=f"episode={e}")
    check_not_imported(Path(root) / task, list(sources.values()), allow_duplicate)
    total = 2 * sum(int(e["length"]) for e in chosen)  # checked, then written
    done = 0

    def checked(rows: int) -> None:
        nonlocal done
        done += rows
        if progress is not None:
            progress(done, total)

    check_episodes(ds, chosen, cols, streams, decl.get("sensors") or (), checked)
    copied = reencoded = depth_videos = 0
    now = time.time()
    results = []
    with task_writer(root, task, fps) as tw:
        for ep in chosen:
            e = int(ep["episode_index"])
            table = episode_rows(ds, ep, data_names)
            dpath = data_path(ds, ep)
            n = table.num_rows
            stream_specs: list[StreamSpec] = []
            frame_iters: dict[str, Iterator[np.ndarray]] = {}
            for name, (key, kind) in streams.items():
                feat = ds.features[name]
                if kind == "depth":
                    h, w = (int(s) for s in feat["shape"])
                    stream_specs.append(StreamSpec(key, "depth", w, h, codec="ffv1"))  # lossless: exact mm
                    frames = values(table, name, n, dpath, feat).reshape(n, h, w).astype(np.uint16)
                    frame_iters[key] = iter(list(frames))
                elif kind == "depth_video":
                    path, t0, t1 = video_path(ds, ep, name)
                    _, vinfo = packet_times(path)
                    dmap = depth_map_of_feature(name, feat, ds.root / "meta" / "info.json")
                    stream_specs.append(StreamSpec(key, "depth", int(vinfo["width"]), int(vinfo["height"]),
                                                   codec="ffv1"))  # lossless: LeRobot's values exactly
                    frame_iters[key] = read_lerobot_depth(window_frames(path, t0, t1, fps), dmap)
                    depth_videos += 1
                elif kind == "image":
                    cells = table.column(name).to_pylist()
                    first = png_frame(cells[0], path=dpath, column=name, episode=e)
                    stream_specs.append(StreamSpec(key, "rgb", first.shape[1], first.shape[0]))
                    frame_iters[key] = (png_frame(c, path=dpath, column=name, row=i, episode=e)
                                        for i, c in enumerate(cells))
                else:
                    path, t0, t1 = video_path(ds, ep, name)
                    _, vinfo = packet_times(path)
                    w, h = int(vinfo["width"]), int(vinfo["height"])
                    if vinfo["codec"] in COPYABLE_CODECS:
                        stream_specs.append(StreamSpec(key, "rgb", w, h, source=VideoSource(path, t0, t1)))
                        copied += 1
                    else:
                        stream_specs.append(StreamSpec(key, "rgb", w, h))
                        frame_iters[key] = decode_window(path, t0, t1, fps, episode=e, feature=name)
                        reencoded += 1
            specs = [s for c in cols for s in c.specs]
            vals = {c.feature: feature_values(ds, table, c, n, dpath, e) for c in cols}
            with tw.begin_episode(specs, stream_specs, created_at=float(created.get(e) or now),
                                  calibration=decl.get("calibration"), devices=decl.get("devices") or (),
                                  device_names=decl.get("device_names"), sensors=decl.get("sensors"),
                                  sensor_dim=decl.get("sensor_dim")) as writer:
                for i in range(n):
                    row, ts, hw = row_values(cols, vals, i)
                    images = {}
                    for key, it in frame_iters.items():
                        try:
                            images[key] = next(it)
                        except StopIteration:
                            raise CodecError(f"stream {key!r} of episode {e} has fewer frames than its {n} rows",
                                             path=ds.root, hint=FIX) from None
                    writer.add_frame(row, timestamp=ts, hardware_ns=hw, images=images)
                    done += 1
                    if progress is not None:
                        progress(done, total)
                for key, k in carried.get(e, {}).items():  # the recording's counters (a frozen stream stays said)
                    if key not in writer.drop_stats:
                        writer.count(key, k)
                results.append(writer.finish())
            remember_import(tw, sources[e], results[-1].index)
    if reencoded:
        notes.append(f"{reencoded} episode videos decoded and re-encoded as H.264 (not H.264/HEVC in LeRobot)")
    if copied:
        notes.append(f"{copied} episode videos stream-copied (no re-encode)")
    if depth_videos:
        notes.append(f"{depth_videos} LeRobot depth videos decoded with their own quantisation (video.depth_min/max/"
                     "shift/use_log) into lossless FFV1: the millimetres LeRobot's reader gives (within half a code "
                     "step of what was recorded), code 0 (LeRobot's depth_min) a hole")
    written = tuple(results)
    return ImportResult(tw.task_dir, written, tuple(synthesised), tuple(notes),
                        {"episodes": len(written), "rows": sum(r.length for r in written), "videos_copied": copied,
                         "videos_reencoded": reencoded})

