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

A task in a bucket (``s3://bucket/prefix/task``; the mirror is local: ``--mirror-root`` or
``$EGOPOOL_KEYPOINTS_ROOT``) runs the same steps under N's claim instead of the task lock
(:mod:`egopool.ops.task_store`: no publish or delete of N meanwhile): the declaration is a
read-modify-write of ``info.json`` with ``PutMode.UPDATE``, the new data parquet is written to a
local temp file and PUT over the old object (one atomic PUT or multipart completion) with its
sha256; the claim is released last. There is no registry; a killed run leaves the old or the new
object and at most its claim, which the next run (or ``repair clean``) releases.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import atomic_write_bytes, publish, task_lock, temp_path_for
from .._parquet_memory import read_parquet_bytes
from .._safe_read import open_parquet
from ..errors import EgopoolError, FormatError
from ..layout import EpisodeFiles
from ..meta.digests import DIGEST_COLUMN, Digests, parse_digests, sha256_bytes, sha256_of_key, sha256_path
from ..meta.episodes import restamp_table, row_bytes
from ..meta.info import merge_info, read_info, write_info
from ..meta.stats import stats_columns
from ..ops._common import rel
from ..ops.task_store import BucketTask, open_task_store, pause, take_claim, task_claims
from ..publish import update_json
from ..registry import Registry, file_record, sha256_file, task_key
from ..schema import hand_pose_column
from ..storage import PutMode, is_object_uri
from .mirror import JOINTS, SIDES, HandPose3D, episode_mirror_dir, read_episode_keypoints

#: The claim's ``op`` in a bucket (ops/task_store.py), and the crash tests' pause name.
OP = "backfill"

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


def _rewrite(data: Path, new: dict[str, np.ndarray], tmp: Path) -> None:
    """Write ``data`` again into ``tmp`` with the hand columns replaced (or appended), row group by row group."""
    pf = open_parquet(data, what="data parquet")
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


def _place(data: Path, new: dict[str, np.ndarray], bt: BucketTask | None,
           g: EpisodeFiles | None = None) -> None:
    """Rewrite the data parquet and put it in place: a directory's temp + rename, a bucket's PUT with its sha256.
    Before the put, the row (``g``'s) records the new digest with the old one as ``previous`` (X3), so a kill
    between the two leaves a task that validates; :func:`_restamp_data` drops ``previous`` after."""
    if bt is None:
        tmp = temp_path_for(data)
        try:
            _rewrite(data, new, tmp)
            if g is not None:
                _restamp_data(g, bt, sha256_path(tmp), sha256_path(data))
            publish(tmp, data)
        finally:
            if tmp.exists():
                tmp.unlink()
        return
    with tempfile.TemporaryDirectory(prefix="egopool-backfill-") as d:
        tmp = Path(d) / "data.parquet"
        _rewrite(data, new, tmp)
        if g is not None:
            _restamp_data(g, bt, sha256_path(tmp), sha256_of_key(bt.store, rel(bt.path, data)))
        bt.store.put_file(rel(bt.path, data), tmp, sha256=sha256_file(tmp), move=True)


def _restamp_data(g: EpisodeFiles, bt: BucketTask | None, sha: str | None = None, old: str | None = None) -> None:
    """The row's recorded sha256 of the data parquet (docs/decisions.md X3): ``sha`` (default: the file's now) with
    ``old`` as ``previous`` (a rewrite about to be put), or alone (the roll-forward). A row that records no
    digests, or exactly these, is left as it is. A bucket's row is put on the version read."""
    if g.meta is None or g.data is None or g.meta_is_shard:
        return
    version = ""
    if bt is None:
        key = g.data.relative_to(g.data.parents[2]).as_posix()
        table = pq.read_table(g.meta)
    else:
        key = rel(bt.path, g.data)
        got = bt.store.get(rel(bt.path, g.meta))
        if got is None:
            return
        table, version = read_parquet_bytes(got[0]), got[1]
    rec = _recorded_in(table)
    if rec is None:
        return
    if sha is None:
        sha = sha256_path(g.data) if bt is None else sha256_of_key(bt.store, key)
    previous = {key: old} if old is not None and old != sha else {}
    if rec.files.get(key) == sha and rec.previous == previous:
        return
    body = row_bytes(restamp_table(table, {**rec.files, key: sha}, previous))
    if bt is None:
        atomic_write_bytes(g.meta, body)
    else:
        bt.store.put(rel(bt.path, g.meta), body, mode=PutMode.UPDATE, version=version, sha256=sha256_bytes(body))


def _recorded_in(table: pa.Table) -> Digests | None:
    if DIGEST_COLUMN not in table.column_names or table.num_rows != 1:
        return None
    try:
        return parse_digests(table.column(DIGEST_COLUMN)[0].as_py())
    except ValueError:
        return None


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


def _one(root: Path, g: EpisodeFiles, pose: HandPose3D, dry_run: bool, reg: Registry | None,
         bt: BucketTask | None = None) -> EpisodeBackfill:
    """Back-fill one episode; caller holds the task lock (a directory) or N's claim (a bucket)."""
    assert g.data is not None
    out = EpisodeBackfill(g.index, "refused")
    try:
        if bt is None:
            _remove_stale_temps(g.data)  # a backfill killed mid-write left its temp (we hold the lock)
        pf = open_parquet(g.data, what="data parquet")
        table = pf.read(columns=[c for c in pf.schema_arrow.names if c == "frame_index" or c.endswith("_hand_pose")])
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
        if not dry_run:  # the roll-forward of a run killed between the data and its row's digest (X3)
            _restamp_data(g, bt)
        if not dry_run and bt is None:
            out.registry = _registry_update(root, g.index, g.data, reg)
        return out
    if dry_run:
        out.status = "would write"
        return out
    if out.added_columns:  # declare first: a kill after it leaves a declared, not-yet-present column (valid)
        decl = {"features": {c: hand_pose_column(c.split(".")[1].split("_")[0]).feature for c in out.added_columns}}
        if bt is None:
            write_info(root, merge_info(read_info(root), decl))
        else:
            update_json(bt.store, "meta/info.json", lambda old: merge_info(old or {}, decl), indent=2)
        pause(OP, "declared")
    _place(g.data, new, bt, g)
    pause(OP, "data")
    _restamp_data(g, bt)
    out.status = "written"
    if bt is None:
        out.registry = _registry_update(root, g.index, g.data, reg)
    return out


@contextlib.contextmanager
def _held(root: Path, bt: BucketTask | None, index: int, dry_run: bool) -> Iterator[None]:
    """The task lock (a directory) or N's claim (a bucket; none for a dry run, which writes nothing)."""
    if bt is None:
        with task_lock(root):
            yield
        return
    if dry_run:
        yield
        return
    claim = take_claim(bt, index, OP, [rel(bt.path, bt.path / bt.data_key(index))])
    try:
        yield
    finally:
        bt.parent.delete([claim.key])


def backfill_hand_pose(task_dir: str | Path, indices: Sequence[int] | None = None, *,
                       mirror_root: str | Path | None = None, dry_run: bool = False,
                       registry: bool | str | Path | Registry | None = True,
                       progress: Callable[[int, int, str], None] | None = None) -> BackfillReport:
    """Write the mirror's world landmarks into ``observation.{left,right}_hand_pose`` (file_format.md §7.2, §10).

    Parameters
    ----------
    task_dir:
        The task directory, or ``s3://bucket/prefix/task`` (module docstring; needs ``mirror_root`` or
        ``$EGOPOOL_KEYPOINTS_ROOT``).
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

    bt = open_task_store(str(task_dir), "keypoints backfill") if is_object_uri(task_dir) else None
    if bt is not None:
        info = bt.info
        groups = select_episodes(bt.uri, info, indices)
        mroot = Path(mirror_root) if mirror_root is not None else default_mirror_root(bt.uri)
        root = Path(bt.name)  # only its name is used (the mirror's <task> directory)
        reg = None
        if not dry_run:  # a killed run's claims: its PUT was atomic, so releasing them is its roll-forward
            bt.parent.delete([c.key for c in task_claims(bt) if c.op == OP])
    else:
        root = Path(task_dir)
        info = read_info(root)
        groups = select_episodes(root, info, indices)
        mroot = Path(mirror_root) if mirror_root is not None else default_mirror_root(root)
        reg = open_registry(root, registry) if not dry_run else None
    report = BackfillReport(root, mroot, dry_run)
    explicit = bool(indices)
    for i, g in enumerate(groups):
        try:
            kp = read_episode_keypoints(episode_mirror_dir(bt.uri if bt else root, g.index, mroot))
            if kp.hand_pose_3d is None:
                if explicit:
                    report.episodes.append(EpisodeBackfill(g.index, "missing",
                                                           reason=f"no {kp.directory}/hand_pose_3d; "
                                                                  "run `egopool keypoints extract` first"))
            else:
                with _held(root, bt, g.index, dry_run):
                    kp = read_episode_keypoints(kp.directory)  # the extractor renames under the lock: read it again
                    if kp.hand_pose_3d is None:
                        raise FormatError("hand_pose_3d disappeared while back-filling", path=kp.directory)
                    report.episodes.append(_one(root, g, kp.hand_pose_3d, dry_run, reg, bt))
        except FormatError as exc:  # this episode's mirror is broken: refuse it, go on with the others
            report.episodes.append(EpisodeBackfill(g.index, "refused", reason=exc.one_line()))
        if progress is not None:
            progress(i + 1, len(groups), f"episode {g.index}")
    touched = [e for e in report.episodes if e.status == "written"]
    if touched and not dry_run:
        names = {f"observation.{s}_hand_pose" for s in SIDES}
        if names & set(stats_columns(read_info(bt.uri if bt else root), names)):
            if bt is not None:
                from ..ops.stats_bucket import recalc_bucket_stats

                recalc_bucket_stats(bt.path)
            else:
                from ..ops.stats_ops import recalc_task_stats

                recalc_task_stats(root)
            report.stats_recomputed = True
    return report
