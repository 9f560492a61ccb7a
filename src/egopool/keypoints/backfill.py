"""``egopool keypoints backfill``: the mirror's world landmarks -> ``observation.<side>_hand_pose`` (§7.2, §10).

file_format.md §7.2: ``observation.left_hand_pose`` / ``right_hand_pose`` are always-written
``list<float32, 63>`` columns; for bare-hand recordings "裸手 63 维 world landmarks 由后处理
回填" — the post-processing fills them from ``hand_pose_3d/chunk-000.parquet`` of the mirror.

Per episode, under the task lock:

1. the mirror's ``frame_index`` must equal the data parquet's, row for row (else the
   episode is refused: nothing is written);
2. the new values are the mirror's 63 floats where the hand is present and 63 zeros
   where it is not (multi_device_storage.md §5.5);
3. when both columns already hold exactly those values nothing is rewritten (a second
   run changes nothing); otherwise a new data parquet is written to a dot-temp row group
   by row group (every other column is copied as stored: same type, values, row groups,
   compression, dictionary choice, key-value metadata) and ``os.replace``-d onto the old
   one. A column the episode lacked is appended and declared in ``info.json`` *before*
   the data file is replaced, so a kill at any point leaves a valid task;
4. ``pipeline.db``'s sha256 of the data file is updated (also on a later run that finds
   the values already written but the hash stale: a kill between 3 and 4).

``stats.json`` never counts ``*hand_pose`` (§4 "不入统计", DESIGN §4), so it is untouched; if a
task's ``sensors`` made one of these columns a stats column, ``stats.json`` is recomputed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import publish, task_lock, temp_path_for
from ..errors import EgopoolError, FormatError
from ..layout import EpisodeFiles
from ..meta.info import merge_info, read_info, write_info
from ..meta.stats import stats_columns
from ..registry import Registry, file_record, sha256_file, task_key
from ..schema import hand_pose_column
from .mirror import JOINTS, SIDES, HandPose3D, episode_mirror_dir, read_episode_keypoints

__all__ = ["BackfillReport", "EpisodeBackfill", "backfill_hand_pose", "hand_pose_values"]

_WIDTH = JOINTS * 3


@dataclass
class EpisodeBackfill:
    """What happened to one episode.

    Attributes
    ----------
    index:
        Global N.
    status:
        ``written`` / ``would write`` (dry run) / ``unchanged`` (values already there) /
        ``refused`` (rows differ, unreadable) / ``missing`` (no ``hand_pose_3d`` in the mirror).
    rows:
        Data rows.
    changed_rows:
        Rows whose hand values differ from the stored ones (either side).
    hand_rows:
        side -> rows where the mirror has that hand.
    added_columns:
        Columns the data parquet lacked and got.
    registry:
        ``updated`` / ``absent`` (no registry row) / ``disabled`` / ``unchanged`` / an error text.
    reason:
        Why an episode was refused or missing.
    """

    index: int
    status: str
    rows: int = 0
    changed_rows: int = 0
    hand_rows: dict[str, int] = field(default_factory=dict)
    added_columns: list[str] = field(default_factory=list)
    registry: str = "disabled"
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"episode_index": self.index, "status": self.status, "rows": self.rows,
                "changed_rows": self.changed_rows, "hand_rows": dict(self.hand_rows),
                "added_columns": list(self.added_columns), "registry": self.registry, "reason": self.reason}


@dataclass
class BackfillReport:
    """Result of :func:`backfill_hand_pose`."""

    task_dir: Path
    mirror_root: Path | None
    dry_run: bool
    episodes: list[EpisodeBackfill] = field(default_factory=list)
    stats_recomputed: bool = False

    @property
    def ok(self) -> bool:
        """True when no episode was refused or missing."""
        return not any(e.status in ("refused", "missing") for e in self.episodes)

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool keypoints backfill --json``)."""
        counts: dict[str, int] = {}
        for e in self.episodes:
            counts[e.status] = counts.get(e.status, 0) + 1
        return {"task": str(self.task_dir), "mirror_root": str(self.mirror_root) if self.mirror_root else None,
                "dry_run": self.dry_run, "ok": self.ok, "counts": counts, "stats_recomputed": self.stats_recomputed,
                "episodes": [e.to_dict() for e in self.episodes]}


def hand_pose_values(pose: HandPose3D, side: str) -> np.ndarray:
    """``(R, 63)`` float32 for ``observation.<side>_hand_pose``: landmarks where present, zeros elsewhere."""
    vals = pose.flat(side).copy()
    vals[~np.asarray(pose.present[side], bool)] = 0.0
    return vals


def _stored(table: pa.Table, column: str) -> np.ndarray | None:
    """A stored hand-pose column as ``(R, 63)`` float32, or None when absent or not 63 per row."""
    if column not in table.column_names:
        return None
    col = table.column(column).combine_chunks()
    if col.null_count:
        return None
    try:
        flat = np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    except (pa.ArrowInvalid, TypeError, ValueError):
        return None
    if flat.size != len(col) * _WIDTH:
        return None
    return flat.reshape(len(col), _WIDTH)


def _as_type(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    flat = pa.array(np.ascontiguousarray(values, np.float32).reshape(-1), pa.float32())
    if pa.types.is_fixed_size_list(typ):
        arr: pa.Array = pa.FixedSizeListArray.from_arrays(flat, _WIDTH)
    else:
        arr = pa.ListArray.from_arrays(pa.array(np.arange(values.shape[0] + 1, dtype=np.int32) * _WIDTH), flat)
    return arr.cast(typ) if arr.type != typ else arr


def _leaves(t: pa.DataType) -> int:
    """Parquet leaf columns of one arrow type (column names hold dots, so paths cannot be split)."""
    if pa.types.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaves(t.value_type)
    return 1


def _dictionary_columns(schema: pa.Schema, rg: Any) -> list[str]:
    """Top-level columns stored with a dictionary page (kept as they were: decisions R8)."""
    if rg is None:
        return []
    out, j = [], 0
    for f in schema:
        k = _leaves(f.type)
        if any(rg.column(j + x).has_dictionary_page for x in range(k) if j + x < rg.num_columns):
            out.append(f.name)
        j += k
    return out


def _rewrite(data: Path, new: dict[str, np.ndarray]) -> None:
    """Write ``data`` again with the hand columns replaced (or appended), row group by row group."""
    pf = pq.ParquetFile(data)
    schema = pf.schema_arrow
    fields = list(schema)
    for col in new:
        if col not in schema.names:
            fields.append(pa.field(col, pa.list_(pa.float32()), nullable=True))
    out_schema = pa.schema(fields, metadata=schema.metadata)
    md = pf.metadata
    first = md.row_group(0) if md.num_row_groups else None
    compression = first.column(0).compression.lower() if first is not None and first.num_columns else "zstd"
    use_dictionary = _dictionary_columns(schema, first)
    tmp = temp_path_for(data)
    try:
        with pq.ParquetWriter(tmp, out_schema, compression=compression if compression != "uncompressed" else "none",
                              use_dictionary=use_dictionary or False) as w:
            row = 0
            for i in range(md.num_row_groups):
                t = pf.read_row_group(i)
                n = t.num_rows
                cols = []
                for f in out_schema:
                    if f.name in new:
                        cols.append(_as_type(new[f.name][row:row + n], f.type))
                    else:
                        cols.append(t.column(f.name))
                w.write_table(pa.Table.from_arrays(cols, schema=out_schema), row_group_size=max(n, 1))
                row += n
        publish(tmp, data)
    finally:
        if tmp.exists():
            tmp.unlink()


def _remove_stale_temps(final: Path) -> None:
    from ..ops._common import remove_stale_temps

    remove_stale_temps(final)


def _registry_update(root: Path, index: int, data: Path, reg: Registry | None) -> str:
    if reg is None:
        return "disabled"
    try:
        rec = reg.get(task_key(root), index)
        if rec is None:
            return "absent"
        rel = Path(os.path.abspath(data)).relative_to(os.path.abspath(root)).as_posix()
        old = next((f for f in rec.files if f.path == rel), None)
        if old is not None and old.size == data.stat().st_size and old.sha256 == sha256_file(data):
            return "unchanged"
        new = file_record(root, data)
        files = [f for f in rec.files if f.path != new.path] + [new]
        reg.replace_files(task_key(root), index, sorted(files, key=lambda f: f.path))
        return "updated"
    except (EgopoolError, OSError) as exc:
        return f"not updated: {exc}"


def _one(root: Path, g: EpisodeFiles, pose: HandPose3D, dry_run: bool, reg: Registry | None) -> EpisodeBackfill:
    """Back-fill one episode; caller holds the task lock."""
    assert g.data is not None
    out = EpisodeBackfill(g.index, "refused")
    try:
        _remove_stale_temps(g.data)  # a backfill killed mid-write left its temp (we hold the lock)
        table = pq.read_table(g.data, columns=[c for c in pq.read_schema(g.data).names
                                               if c == "frame_index" or c.endswith("_hand_pose")])
    except Exception as exc:
        out.reason = f"cannot read the data parquet: {exc}"
        return out
    out.rows = table.num_rows
    fi = table.column("frame_index").to_numpy() if "frame_index" in table.column_names else None
    if fi is None or len(fi) != len(pose.frame_index) or not np.array_equal(fi, pose.frame_index):
        n_m = len(pose.frame_index)
        out.reason = (f"the mirror has {n_m} rows, the data parquet {table.num_rows}" if n_m != table.num_rows else
                      "the mirror's frame_index differs from the data parquet's")
        out.reason += "; re-run `egopool keypoints extract` for this episode"
        return out
    new: dict[str, np.ndarray] = {}
    changed = np.zeros(table.num_rows, bool)
    for side in SIDES:
        col = f"observation.{side}_hand_pose"
        vals = hand_pose_values(pose, side)
        out.hand_rows[side] = int(np.asarray(pose.present[side]).sum())
        have = _stored(table, col)
        if col not in table.column_names:
            out.added_columns.append(col)
        elif have is None:
            out.reason = f"column {col!r} is not 63 float32 values per row; fix or remove it first"
            return out
        diff = np.ones(table.num_rows, bool) if have is None else np.any(
            have.view(np.uint32) != vals.view(np.uint32), axis=1)
        changed |= diff
        new[col] = vals
    out.changed_rows = int(changed.sum())
    if out.changed_rows == 0 and not out.added_columns:
        out.status = "unchanged"
        if not dry_run:
            out.registry = _registry_update(root, g.index, g.data, reg)
        return out
    if dry_run:
        out.status = "would write"
        return out
    if out.added_columns:  # declare first: a kill after it leaves a declared, not-yet-present column (valid)
        info = read_info(root)
        write_info(root, merge_info(info, {"features": {c: hand_pose_column(c.split(".")[1].split("_")[0]).feature
                                                         for c in out.added_columns}}))
    _rewrite(g.data, new)
    out.status = "written"
    out.registry = _registry_update(root, g.index, g.data, reg)
    return out


def backfill_hand_pose(task_dir: str | Path, indices: Sequence[int] | None = None, *,
                       mirror_root: str | Path | None = None, dry_run: bool = False,
                       registry: bool | str | Path | Registry | None = True,
                       progress: Callable[[int, int, str], None] | None = None) -> BackfillReport:
    """Write the mirror's world landmarks into ``observation.{left,right}_hand_pose`` (file_format.md §7.2, §10).

    Parameters
    ----------
    task_dir:
        The task directory.
    indices:
        Global N to back-fill (default: every committed episode that has a ``hand_pose_3d``
        in the mirror; a given N without one is reported ``missing``).
    mirror_root:
        The ``keypoints_output`` directory (default beside the recordings root).
    dry_run:
        Report what would change; write nothing.
    registry:
        ``pipeline.db`` whose sha256 of each rewritten data file is updated (True = beside the task).
    progress:
        ``progress(done, total, what)`` after each episode.

    Returns
    -------
    BackfillReport
        ``ok`` is False when an episode was refused (row counts / frame_index differ) or missing.

    Raises
    ------
    FormatError
        ``info.json`` unreadable (a broken mirror file refuses its episode only).
    EpisodeNotFoundError
        A given N does not exist.
    """
    from ..ops._common import open_registry
    from .extract import select_episodes
    from .mirror import default_mirror_root

    root = Path(task_dir)
    info = read_info(root)
    groups = select_episodes(root, info, indices)
    mroot = Path(mirror_root) if mirror_root is not None else default_mirror_root(root)
    reg = open_registry(root, registry) if not dry_run else None
    report = BackfillReport(root, mroot, dry_run)
    explicit = bool(indices)
    for i, g in enumerate(groups):
        try:
            kp = read_episode_keypoints(episode_mirror_dir(root, g.index, mroot))
            if kp.hand_pose_3d is None:
                if explicit:
                    report.episodes.append(EpisodeBackfill(g.index, "missing",
                                                           reason=f"no {kp.directory}/hand_pose_3d; "
                                                                  "run `egopool keypoints extract` first"))
            else:
                with task_lock(root):
                    kp = read_episode_keypoints(kp.directory)  # the extractor renames under the lock: read it again
                    if kp.hand_pose_3d is None:
                        raise FormatError("hand_pose_3d disappeared while back-filling", path=kp.directory)
                    report.episodes.append(_one(root, g, kp.hand_pose_3d, dry_run, reg))
        except FormatError as exc:  # this episode's mirror is broken: refuse it, go on with the others
            report.episodes.append(EpisodeBackfill(g.index, "refused", reason=exc.one_line()))
        if progress is not None:
            progress(i + 1, len(groups), f"episode {g.index}")
    touched = [e for e in report.episodes if e.status == "written"]
    if touched and not dry_run:
        names = {f"observation.{s}_hand_pose" for s in SIDES}
        if names & set(stats_columns(read_info(root), names)):
            from ..ops.stats_ops import recalc_task_stats

            recalc_task_stats(root)
            report.stats_recomputed = True
    return report
