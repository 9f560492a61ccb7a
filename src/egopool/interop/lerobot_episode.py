"""A scanned LeRobot v3 dataset, one episode's rows and frames, and the check of every chosen episode
before ``egopool import lerobot`` writes.

``egopool import lerobot`` imports all chosen episodes or none (docs/decisions.md I8): before
the first episode is written, :func:`check_episodes` reads each episode the way the import
will, without writing: its data rows (types against ``info.json``, every value through the
column's own normalisation, timestamps strictly increasing), every PNG of an image feature,
every depth frame, and every video frame it will take, really decoded (a stream-copied
H.264/HEVC segment is also walked the way the copy walks it). A damaged input is then one
line naming its file before anything is written; what can still fail afterwards is the
output side (disk full, a read-only task, Ctrl-C), never the dataset.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._safe_read import read_parquet, read_parquet_schema
from ..codecs.video import open_media
from ..codecs.video_copy import COPYABLE_CODECS, VideoSource, check_segment, packet_times
from ..errors import CodecError, EgopoolError, FormatError
from ..schema import ColumnSpec
from ..write.checks import check_finite_values
from . import lerobot_format as fmt
from .lerobot_language import LANGUAGE_COLUMNS, dumps_rows, is_language_feature, language_type_problem, rows_of

__all__ = ["FIX", "FeatureColumns", "LeRobotDatasetInfo", "check_episodes", "data_path", "decode_window",
           "episode_rows", "feature_values", "plain_int", "png_frame", "row_values", "type_problem", "values",
           "video_path", "window_frames"]

#: What to do about a damaged episode (every check's hint).
FIX = "restore it, or import the other episodes (--episode E)"


@dataclass(frozen=True)
class LeRobotDatasetInfo:
    """What :func:`~egopool.interop.lerobot_import.scan_lerobot` found in a LeRobot v3 dataset directory."""

    root: Path
    info: dict[str, Any]
    episodes: list[dict[str, Any]]
    tasks: dict[int, str]
    mapping: dict[str, Any] | None

    @property
    def fps(self) -> float:
        """Frames per second (LeRobot's integer fps)."""
        return float(self.info["fps"])

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        """``info.features``."""
        return dict(self.info["features"])


@dataclass
class FeatureColumns:
    """One LeRobot data feature and the pooled column(s) it becomes.

    ``parts`` splits the feature's flattened values, in order: ``(pooled name, element count,
    ColumnSpec)``; the spec is None for values passed to ``add_frame`` itself (``timestamp``,
    ``hardware_ns``) or not stored (the pooled ``action`` placeholder, written by the writer).
    """

    feature: str
    parts: list[tuple[str, int, ColumnSpec | None]]

    @property
    def specs(self) -> list[ColumnSpec]:
        """The ColumnSpecs to declare for this feature."""
        return [spec for _, _, spec in self.parts if spec is not None]


def plain_int(v: Any) -> bool:
    """True for an int >= 0 that is not a bool."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def data_path(ds: LeRobotDatasetInfo, ep: Mapping[str, Any]) -> Path:
    """The data parquet holding episode ``ep`` (``info.data_path``)."""
    tmpl = str(ds.info.get("data_path") or fmt.DATA_PATH)
    return ds.root / tmpl.format(chunk_index=int(ep["data/chunk_index"]), file_index=int(ep["data/file_index"]))


def episode_rows(ds: LeRobotDatasetInfo, ep: Mapping[str, Any], names: Sequence[str]) -> pa.Table:
    """Columns ``names`` (+ ``episode_index``, ``frame_index``) of episode ``ep``'s rows, in frame order.

    Raises
    ------
    FormatError
        The file cannot be read, lacks a column, or holds another number of rows than
        ``meta/episodes`` says (naming the file).
    """
    path = data_path(ds, ep)
    e = int(ep["episode_index"])
    what = f"LeRobot data parquet of episode {e}"
    have = read_parquet_schema(path, what=what).names  # a FIFO, loop or lying footer: one line
    missing = [n for n in [*names, "episode_index", "frame_index"] if n not in have]
    if missing:
        raise FormatError(f"{what} lacks column(s) {missing[:5]} that info.json declares", path=path)
    try:
        table = pq.read_table(path, columns=list(names) + ["episode_index", "frame_index"],
                              filters=[("episode_index", "=", e)])
    except Exception as exc:  # noqa: BLE001 - pyarrow/OS errors at one boundary
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise FormatError(f"cannot read episode {e}: {first}", path=path) from exc
    table = table.sort_by("frame_index")
    if table.num_rows != int(ep["length"]):
        raise FormatError(f"episode {e} has {table.num_rows} rows, meta/episodes says {ep['length']}", path=path)
    return table


def type_problem(typ: pa.DataType, feature: Mapping[str, Any], name: str = "") -> str | None:
    """Why a parquet column ``name`` of type ``typ`` cannot hold LeRobot feature ``feature`` (a phrase), or None.

    The leaf type must be the declared ``dtype`` (``string`` an arrow string, ``image`` a
    struct with ``bytes``, a language column LeRobot's rows, :mod:`.lerobot_language`); nested fixed-size lists
    must hold ``prod(shape)`` values (a
    variable list's length is checked per row by :func:`values`). A ``dtype`` numpy does not
    know is a problem of its own (the import's column plan refuses it by name first).
    """
    dtype = feature.get("dtype")
    shape = list(feature.get("shape") or [1])
    if isinstance(typ, pa.BaseExtensionType):  # datasets' ArrayND, registered when `datasets` is imported
        typ = typ.storage_type
    if is_language_feature(name, feature):
        return language_type_problem(name or "language", typ)
    if dtype == "image":
        ok = pa.types.is_struct(typ) and typ.get_field_index("bytes") >= 0
        ok = ok or pa.types.is_binary(typ) or pa.types.is_large_binary(typ)
        return None if ok else f"holds {typ}, not the PNG image cells info.json declares"
    fixed: int | None = 1
    leaf = typ
    while _is_list(leaf):
        fixed = fixed * leaf.list_size if pa.types.is_fixed_size_list(leaf) and fixed is not None else None
        leaf = leaf.value_type
    if dtype == "string":
        ok = typ == leaf and (pa.types.is_string(leaf) or pa.types.is_large_string(leaf))
        return None if ok else f"holds {typ}, not the strings info.json declares"
    try:
        want = pa.from_numpy_dtype(np.dtype(str(dtype)))
    except (TypeError, ValueError, pa.ArrowNotImplementedError):
        return f"is declared as {dtype!r} in info.json, a dtype with no arrow type"
    if leaf != want:
        return f"holds {typ}, not the {dtype} info.json declares"
    count = math.prod(int(n) for n in shape)
    if fixed is not None and fixed != count:
        return f"holds {fixed} values per row, not the {count} of shape {shape} info.json declares"
    return None


def _is_list(typ: pa.DataType) -> bool:
    return pa.types.is_fixed_size_list(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ)


def values(table: pa.Table, name: str, rows: int, path: Path, feature: Mapping[str, Any] | None = None, *,
           episode: int | None = None) -> np.ndarray:
    """Column ``name`` of one episode's rows as ``(rows, k)`` (k = the flattened element count; object
    array for strings). ``path`` and ``episode`` are named in errors.

    Raises
    ------
    FormatError
        A null list, or a list column whose rows do not all hold ``prod(feature.shape)``
        values (all the same number without ``feature``), naming the file, column and row.
    """
    col = table.column(name)
    if name in LANGUAGE_COLUMNS and feature is not None and is_language_feature(name, feature):
        try:  # each frame's rows as the pooled column's JSON text (.lerobot_language)
            texts = [dumps_rows(r) for r in rows_of(col, name, where="" if episode is None else f"episode {episode} ")]
        except FormatError as exc:
            raise FormatError(exc.message, path=path, hint=FIX) from None
        return np.asarray(texts, dtype=object).reshape(rows, 1)
    if isinstance(col.type, pa.BaseExtensionType):  # datasets' ArrayND (lerobot's 2-D columns): its plain lists
        col = pa.chunked_array([c.storage for c in col.chunks], type=col.type.storage_type)
    if not _is_list(col.type):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            return np.asarray(col.to_pylist(), dtype=object).reshape(rows, 1)
        return np.asarray(col.to_numpy(zero_copy_only=False)).reshape(rows, 1)
    where = "" if episode is None else f"episode {episode} "
    arr: Any = col.combine_chunks()
    row_of = np.arange(len(arr))  # the row of each element of the current list level
    per_row = np.zeros(rows, np.int64)
    while _is_list(arr.type):
        if arr.null_count:
            i = int(row_of[np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0]])
            raise FormatError(f"{where}row {i}: column {name!r} holds a null list", path=path, hint=FIX)
        fixed = pa.types.is_fixed_size_list(arr.type)
        lengths = (np.full(len(arr), arr.type.list_size, np.int64) if fixed
                   else arr.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64))
        if not _is_list(arr.type.value_type):
            per_row = np.bincount(row_of, weights=lengths, minlength=rows).astype(np.int64)
        else:
            row_of = np.repeat(row_of, lengths)
        arr = arr.flatten()
    want = math.prod(int(s) for s in feature.get("shape") or [1]) if feature else (int(per_row[0]) if rows else 0)
    bad = np.flatnonzero(per_row != want)
    if bad.size:
        i = int(bad[0])
        raise FormatError(f"{where}row {i}: column {name!r} holds {int(per_row[i])} values, not {want}", path=path,
                          hint=FIX)
    return np.asarray(arr.to_numpy(zero_copy_only=False)).reshape(rows, want)


def feature_values(ds: LeRobotDatasetInfo, table: pa.Table, col: FeatureColumns, rows: int, path: Path,
                   episode: int) -> np.ndarray:
    """:func:`values` of ``col``'s feature; for ``task_index`` each row's LeRobot task text (looked up in
    ``meta/tasks.parquet``, decisions I24) as ``(rows, 1)`` objects.

    Raises
    ------
    FormatError
        A ``task_index`` that ``meta/tasks.parquet`` does not have, naming the file, episode and row.
    """
    if col.feature != "task_index":
        return values(table, col.feature, rows, path, ds.features.get(col.feature), episode=episode)
    idx = values(table, "task_index", rows, path, ds.features.get("task_index"), episode=episode).reshape(rows)
    out = np.empty((rows, 1), dtype=object)
    for i, t in enumerate(idx.tolist()):
        text = ds.tasks.get(int(t)) if isinstance(t, int) else None
        if text is None:
            raise FormatError(f"episode {episode} row {i}: task_index {t!r} is not in meta/tasks.parquet "
                              f"(it has {sorted(ds.tasks)})", path=path, hint=FIX)
        out[i, 0] = text
    return out


def row_values(cols: Sequence[FeatureColumns], vals: Mapping[str, np.ndarray],
               i: int) -> tuple[dict[str, Any], float | None, int]:
    """Row ``i`` as the writer takes it: ``(column values, timestamp s or None, hardware_ns)``."""
    row: dict[str, Any] = {}
    ts: float | None = None
    hw = 0
    for c in cols:
        v = vals[c.feature][i]
        off = 0
        for src, width, spec in c.parts:
            part = v[off:off + width]
            off += width
            if src == "timestamp":
                ts = float(part[0])
            elif src == "hardware_ns":
                hw = int(part[0])
            elif spec is not None:
                row[spec.name] = part[0] if spec.storage in ("scalar", "string") else part
    return row, ts, hw


def video_path(ds: LeRobotDatasetInfo, ep: Mapping[str, Any], feature: str) -> tuple[Path, float, float]:
    """The MP4 holding ``feature`` of episode ``ep`` and the episode's ``[from, to)`` window in it (s)."""
    tmpl = str(ds.info.get("video_path") or fmt.VIDEO_PATH)
    keys = [f"videos/{feature}/{k}" for k in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    c, f, t0, t1 = (ep.get(k) for k in keys)
    numbers = [_finite_number(v) for v in (c, f, t0, t1)]
    bad = next((k for k, x in zip(keys, numbers, strict=True) if x is None), None)
    start, end = numbers[2], numbers[3]
    if bad is not None or start is None or end is None or not (plain_int(c) and plain_int(f)):
        raise FormatError(f"episode {ep['episode_index']}: meta/episodes {bad or keys[0]} is "
                          f"{ep.get(bad or keys[0])!r}, not a number", path=ds.root / "meta" / "episodes")
    path = ds.root / tmpl.format(video_key=feature, chunk_index=c, file_index=f)
    return path, start, end


def _finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def window_frames(path: Path, start: float, end: float, fps: float) -> Iterator[Any]:
    """Decoded frames (``av.VideoFrame``) whose pts lie in ``[start, end)``, half a frame of tolerance.

    Packets are fed to the decoder from the key frame before ``start`` up to the first packet
    at or after ``end``; then the decoder is drained. The next episode's packets are never
    decoded (lerobot encodes each episode on its own), so damage there cannot stop this one.
    """
    half = 0.5 / fps
    with open_media(path) as c:
        s = c.streams.video[0]
        tb = float(s.time_base or 0.0) or 1.0 / 90_000
        if start > 0:
            c.seek(int(max(0.0, start - half) / tb), stream=s, backward=True, any_frame=False)
        ctx = s.codec_context
        for pkt in c.demux(s):
            if pkt.pts is not None and pkt.size and float(pkt.pts * tb) >= end - half:
                break
            for frame in ctx.decode(pkt if pkt.size else None):
                t = float(frame.pts * tb) if frame.pts is not None else float(frame.time or 0.0)
                if start - half <= t < end - half:
                    yield frame
            if not pkt.size:  # the demuxer's final flush packet: the decoder is drained
                return
        for frame in ctx.decode(None):
            t = float(frame.pts * tb) if frame.pts is not None else float(frame.time or 0.0)
            if start - half <= t < end - half:
                yield frame


def decode_window(path: Path, start: float, end: float, fps: float, *, episode: int,
                  feature: str) -> Iterator[np.ndarray]:
    """RGB uint8 ``(H, W, 3)`` frames of ``path`` in ``[start, end)`` s (see :func:`_window_frames`).

    Raises
    ------
    CodecError
        FFmpeg cannot decode a frame (naming the file, the episode and the feature).
    """
    try:
        for frame in window_frames(path, start, end, fps):
            yield frame.to_ndarray(format="rgb24")
    except av.error.FFmpegError as exc:
        raise _decode_error(exc, path, episode, feature) from exc


def _decode_error(exc: av.error.FFmpegError, path: Path, episode: int, feature: str) -> CodecError:
    why = getattr(exc, "strerror", None) or str(exc)
    return CodecError(f"episode {episode}'s video {feature!r} does not decode ({why})", path=path, hint=FIX)


def png_frame(cell: Any, *, path: Path | None = None, column: str = "", row: int = 0,
              episode: int | None = None) -> np.ndarray:
    """An image feature's cell (``{"bytes": PNG}``) as RGB uint8 ``(H, W, 3)``.

    Raises
    ------
    FormatError
        No bytes, or bytes PIL cannot decode (naming the data file, episode, row and column).
    """
    from PIL import Image, UnidentifiedImageError

    where = f"{'' if episode is None else f'episode {episode} '}row {row}: column {column!r}"
    data = cell.get("bytes") if isinstance(cell, Mapping) else cell
    if data is None:
        raise FormatError(f"{where}: an image cell holds no bytes (LeRobot images are embedded PNGs)", path=path,
                          hint=FIX)
    try:
        with Image.open(BytesIO(data)) as im:
            return np.asarray(im.convert("RGB"))
    except UnidentifiedImageError:
        why = "not an image PIL can read"
    except (OSError, ValueError, SyntaxError) as exc:  # a truncated or corrupt PNG
        why = str(exc)
    raise FormatError(f"{where}: the image does not decode ({why})", path=path, hint=FIX)


def _check_files(ds: LeRobotDatasetInfo, chosen: Sequence[Mapping[str, Any]], names: Sequence[str],
                 videos: Sequence[str]) -> None:
    """The quick pass: files there, columns of the declared types, row and packet counts (demux only)."""
    schemas: dict[Path, pa.Schema] = {}
    counts: dict[Path, dict[int, int]] = {}
    times: dict[Path, np.ndarray] = {}
    feats = ds.features
    for ep in chosen:
        e = int(ep["episode_index"])  # scan_lerobot checked the row's integers
        path = data_path(ds, ep)
        if path not in schemas:
            if not path.exists() and not path.is_symlink():
                raise FormatError(f"episode {e}'s data file is missing", path=path, hint=FIX)
            what = f"LeRobot data parquet of episode {e}"
            schemas[path] = read_parquet_schema(path, what=what, hint=FIX)
            have = set(schemas[path].names)
            missing = [n for n in [*names, "episode_index", "frame_index"] if n not in have]
            if missing:
                raise FormatError(f"{what} lacks column(s) {missing[:5]} that info.json declares", path=path,
                                  hint=FIX)
            for n in names:
                typ = schemas[path].field(n).type
                why = type_problem(typ, feats[n], n) if n in feats else None
                if why is not None:
                    raise FormatError(f"column {n!r} {why}", path=path,
                                      hint="restore the data file, or correct the feature in meta/info.json")
            idx = read_parquet(path, ["episode_index"], what=what, hint=FIX).column("episode_index").to_numpy()
            u, c = np.unique(idx, return_counts=True)
            counts[path] = dict(zip(u.tolist(), c.tolist(), strict=True))
        if counts[path].get(e, 0) != int(ep["length"]):
            raise FormatError(f"episode {e} has {counts[path].get(e, 0)} rows, meta/episodes says {ep['length']}",
                              path=path, hint=FIX)
        for name in videos:
            vpath, t0, t1 = video_path(ds, ep, name)
            if vpath not in times:
                if not vpath.exists() and not vpath.is_symlink():
                    raise FormatError(f"episode {e}'s video {name!r} is missing", path=vpath, hint=FIX)
                times[vpath] = packet_times(vpath)[0]
            half = 0.5 / ds.fps
            got = int(np.count_nonzero((times[vpath] >= t0 - half) & (times[vpath] < t1 - half)))
            if got != int(ep["length"]):
                held = f"holds {got} frames in [{t0:g}, {t1:g}) s for {ep['length']} rows"
                rate = _video_rate(times[vpath])
                if rate is not None and abs(rate / ds.fps - 1.0) > 0.01:  # not damage: another frame rate
                    raise FormatError(f"episode {e}'s video {name!r} is {rate:.4g} fps in a {ds.fps:g} fps dataset "
                                      f"(meta/info.json fps): it {held}", path=vpath,
                                      hint=f"re-encode the video at the dataset's rate (e.g. ffmpeg -i "
                                           f"{vpath.name} -r {ds.fps:g} OUT.mp4), or import the other episodes "
                                           "(--episode E)")
                raise FormatError(f"episode {e}'s video {name!r} {held} (truncated or damaged)", path=vpath, hint=FIX)


def _video_rate(times: np.ndarray) -> float | None:
    """Frames per second of a video from its frames' presentation times (``(F,)`` float64 s, ascending):
    1 / the median step, or None for fewer than 3 frames (too few to tell a rate)."""
    steps = np.diff(times)
    steps = steps[steps > 0]
    if len(steps) < 2:
        return None
    return float(1.0 / np.median(steps))


def _check_rows(ds: LeRobotDatasetInfo, ep: Mapping[str, Any], cols: Sequence[FeatureColumns],
                streams: Mapping[str, tuple[str, str]], names: Sequence[str], sensors: Sequence[str]) -> None:
    """Every row of ``ep`` through what the writer checks, every PNG and depth frame decoded."""
    e = int(ep["episode_index"])
    path = data_path(ds, ep)
    table = episode_rows(ds, ep, names)
    n = table.num_rows
    vals = {c.feature: feature_values(ds, table, c, n, path, e) for c in cols}
    specs = {s.name: s for c in cols for s in c.specs}
    stats_cols = {f"observation.{s}" for s in sensors} | {"observation.imu"}
    last: float | None = None
    for i in range(n):
        try:
            row, ts, hw = row_values(cols, vals, i)
            if ts is not None:
                ts32 = float(np.float32(ts))
                if not math.isfinite(ts32) or ts < 0 or (last is not None and ts32 <= last):
                    raise FormatError(f"episode {e} row {i}: timestamp {ts} is not finite, >= 0 and strictly "
                                      f"increasing in float32 (previous {last})", path=path, hint=FIX)
                last = ts32
            if not -(1 << 63) <= hw < (1 << 63):
                raise FormatError(f"episode {e} row {i}: hardware_ns {hw} is outside int64", path=path, hint=FIX)
            for name, v in row.items():
                stored = specs[name].normalise(v)
                if name in stats_cols:
                    check_finite_values(name, np.asarray(stored), i)
        except FormatError:
            raise
        except EgopoolError as exc:
            raise FormatError(f"episode {e} row {i}: {exc.message}", path=path, hint=FIX) from None
        except (TypeError, ValueError, OverflowError) as exc:  # e.g. int() of a NaN hardware_ns
            raise FormatError(f"episode {e} row {i}: {type(exc).__name__}: {exc}", path=path, hint=FIX) from None
    for name, (_, kind) in streams.items():
        feat = ds.features[name]
        if kind == "depth":
            h, w = (int(s) for s in feat["shape"])
            frames = values(table, name, n, path, feat, episode=e)
            if frames.shape[1] != h * w:
                raise FormatError(f"column {name!r} holds {frames.shape[1]} values per row, not {h}x{w} depth",
                                  path=path, hint=FIX)
            if frames.size and (frames.min() < 0 or frames.max() > 65535):
                raise FormatError(f"column {name!r} holds values outside uint16 millimetres", path=path, hint=FIX)
        elif kind == "image":
            size = None
            for i, cell in enumerate(table.column(name).to_pylist()):
                im = png_frame(cell, path=path, column=name, row=i, episode=e)
                if size is not None and im.shape != size:
                    raise FormatError(f"episode {e} row {i}: column {name!r}: a {im.shape[1]}x{im.shape[0]} image in a "
                                      f"{size[1]}x{size[0]} stream", path=path, hint=FIX)
                size = im.shape


def _check_video(ds: LeRobotDatasetInfo, ep: Mapping[str, Any], name: str, copy: bool = True) -> None:
    """Decode every frame episode ``ep`` takes from video feature ``name`` (and walk a copied segment)."""
    e = int(ep["episode_index"])
    path, t0, t1 = video_path(ds, ep, name)
    try:
        codec = packet_times(path)[1]["codec"]
        size = None
        got = 0
        for frame in window_frames(path, t0, t1, ds.fps):
            if size is not None and (frame.width, frame.height) != size:
                raise CodecError(f"episode {e}'s video {name!r} changes size from {size[0]}x{size[1]} to "
                                 f"{frame.width}x{frame.height}", path=path, hint=FIX)
            size = (frame.width, frame.height)
            got += 1
        if copy and codec in COPYABLE_CODECS:  # after the decode: damage is named as such, not as a cut GOP
            check_segment(VideoSource(path, t0, t1), ds.fps)
    except av.error.FFmpegError as exc:
        raise _decode_error(exc, path, e, name) from exc
    except CodecError as exc:
        if exc.hint == FIX:
            raise
        raise CodecError(f"episode {e}'s video {name!r}: {exc.message}", path=path, hint=FIX) from None
    if got != int(ep["length"]):
        raise CodecError(f"episode {e}'s video {name!r} decodes to {got} frames in [{t0:g}, {t1:g}) s for "
                         f"{ep['length']} rows (damaged)", path=path, hint=FIX)


def check_episodes(ds: LeRobotDatasetInfo, chosen: Sequence[Mapping[str, Any]], cols: Sequence[FeatureColumns],
                   streams: Mapping[str, tuple[str, str]], sensors: Sequence[str] = (),
                   progress: Callable[[int], None] | None = None) -> None:
    """Check every chosen episode the way the import reads it, before the first is written (decisions.md I8).

    First the quick pass over all episodes (files there, columns of the ``info.json`` types,
    row and packet counts, by demuxing), then per episode: every row through the writer's
    value checks, every PNG and depth frame, and every video frame it takes decoded.

    Parameters
    ----------
    ds:
        The scanned dataset.
    chosen:
        The ``meta/episodes`` rows to import.
    cols, streams:
        The column plan and ``feature -> (stream key, kind)``.
    sensors:
        Declared sensors (their ``observation.<sensor>`` values must be finite, as the writer says).
    progress:
        Called with the number of rows of each episode once it is checked.

    Raises
    ------
    FormatError
        A file missing or unreadable, a column of another type than ``info.json`` declares, a
        row a pooled episode cannot hold, an image that does not decode (naming the file).
    CodecError
        A video that does not demux or decode, or holds another number of frames in the
        episode's window than it has rows (naming the file and the episode).
    """
    video_names = [n for n, (_, kind) in streams.items() if kind in ("video", "depth_video")]
    names = [c.feature for c in cols] + [n for n, (_, kind) in streams.items() if kind in ("image", "depth")]
    _check_files(ds, chosen, names, video_names)
    for ep in chosen:
        _check_rows(ds, ep, cols, streams, names, sensors)
        for name in video_names:
            _check_video(ds, ep, name, copy=streams[name][1] == "video")
        if progress is not None:
            progress(int(ep["length"]))
