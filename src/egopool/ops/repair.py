"""``egopool repair force-scale``: restore a missing force-matrix ``scale`` from the data (file_format.md §7.2.1).

The ``scale`` of a ``row_diff_quantized`` column cannot be read off the int16 values
(×10, ×100 and ×1000 all store int16), and ``info.json`` is latest-wins, so an
episode whose row lacks ``force_matrix_specs`` may be silently read 10–1000× off.
The §7.2.1 self-check recovers it: for the same row, ``Σ(fz plane of the matrix)``
equals the fz component of the paired ``observation.*_force`` column (float32 data
measured 1.000). With stored integers ``q``, ``Σq_z / (scale · fz)`` is ≈ 1 only for
the right scale; the candidates differ by 10×, so at most one fits. Historical
uncalibrated int16 data truncated toward zero gives 0.04–0.55 for every candidate:
such an episode is reported as inconclusive, never guessed. A row holding cells at
the int16 limits (32767 / −32768: saturated at its scale, e.g. beyond ±32.767 mN at
×1000) has a Σfz that is only a bound, which would look like truncation: such rows are
left out of the comparison and counted (``saturated_frames``), and an episode where
every row is saturated says so instead of blaming truncation.

Only the episode's ``meta/episodes`` file is rewritten (its ``force_matrix_specs``
column, every other column kept as stored); data bytes are never touched. The old
row file is copied to ``.egopool_backup/repair-force-scale-<time>/`` first.

A task in a bucket (``s3://bucket/prefix/task``) runs the same inspection; each row is rewritten
under N's claim (:mod:`egopool.ops.task_store`: no publish or delete of N meanwhile), the old row
PUT to the backup prefix first, then the new row PUT with ``PutMode.UPDATE`` on the version read (a
row deleted or rewritten meanwhile is not brought back: the episode is reported skipped), with its
sha256 recorded; the claim is released last. A run killed anywhere leaves the old or the new row
(one PUT) and at most its claim, which the next run (or ``repair clean``) releases.

The Σfz computation is done here with :class:`~egopool.codecs.force_matrix.ForceMatrixCodec`
on the stored integers (scale-free), one parquet row group at a time.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._parquet_memory import read_parquet_bytes
from .._safe_read import open_parquet, read_parquet, read_parquet_schema
from ..codecs.force_matrix import FRAME_VALUES, ForceMatrixCodec, saturated_cells, usable_scale
from ..errors import EgopoolError, FormatError
from ..layout import EpisodeFiles, list_task_episodes
from ..meta.episodes import EPISODE_COLUMNS, keep_digests, read_episode_row
from ..registry import Registry
from ..storage import ObjectPath, TaskPath
from ._common import Progress, rel
from .row_rewrite import open_row_task, rewrite_local_row, rewrite_row_under_claim
from .task_store import BucketTask

__all__ = ["CANDIDATE_SCALES", "ColumnEvidence", "EpisodeRepair", "ForceScaleReport", "column_evidence",
           "repair_force_scale"]

#: The claim's ``op`` in a bucket (ops/task_store.py).
OP = "force-scale"

#: Scales recorded data has used (file_format.md §7.2.1: ×10/×100/×1000, 1 = uncalibrated).
CANDIDATE_SCALES: tuple[int, ...] = (1, 10, 100, 1000)


@dataclass
class ColumnEvidence:
    """The §7.2.1 evidence for one force-matrix column of one episode.

    Attributes
    ----------
    column:
        ``observation.*_force_matrix``.
    force_column:
        The paired ``observation.*_force`` (``[fx, fy, fz]`` mN), or None when absent.
    encoding:
        ``row_diff_quantized`` (int16) or ``row_flat_raw`` (float32), from the stored dtype.
    frames:
        Rows compared (both samples present, ``|fz|`` above the floor).
    ratios:
        Candidate scale -> median over frames of ``Σ(fz plane) / (scale · fz)``.
    within:
        Candidate scale -> fraction of frames whose ratio is within the tolerance of 1.
    saturated_frames:
        Rows left out because their matrix holds cells at the int16 limits (saturated).
    scale:
        The scale decided, or None (inconclusive).
    verdict:
        One line: why this scale, or why none.
    """

    column: str
    force_column: str | None
    encoding: str
    frames: int = 0
    ratios: dict[int, float] = field(default_factory=dict)
    within: dict[int, float] = field(default_factory=dict)
    saturated_frames: int = 0
    scale: float | None = None
    verdict: str = ""

    def spec(self) -> dict[str, Any]:
        """The ``force_matrix_specs`` entry to write (requires ``scale``)."""
        assert self.scale is not None
        return ForceMatrixCodec(self.encoding, self.scale).to_dict()

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"column": self.column, "force_column": self.force_column, "encoding": self.encoding,
                "frames": self.frames, "ratios": {str(k): v for k, v in self.ratios.items()},
                "within_tolerance": {str(k): v for k, v in self.within.items()},
                "saturated_frames": self.saturated_frames, "scale": self.scale,
                "verdict": self.verdict}


def _values(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if len(arr) == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    offs = np.asarray(arr.offsets, dtype=np.int64)
    flat = arr.values.slice(int(offs[0]), int(offs[-1] - offs[0])).to_numpy(zero_copy_only=False)
    return np.diff(offs), flat


def _scalar(col: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(col.to_numpy(zero_copy_only=False))


def column_evidence(data_path: str | Path, column: str, *, tolerance: float = 0.1, min_frames: int = 3,
                    min_force_mn: float = 1.0, max_frames: int = 200) -> ColumnEvidence:
    """Compute the Σfz / force-fz ratios of one column for every candidate scale (file_format.md §7.2.1).

    Parameters
    ----------
    data_path:
        The episode's data parquet.
    column:
        ``observation.*_force_matrix`` (``list<int16>`` or ``list<float32>``, 187500 values per sampled row).
    tolerance:
        A scale fits a frame when ``|ratio − 1| <= tolerance``; it is chosen when its
        median ratio fits and at least 80 % of frames fit.
    min_frames:
        Fewer comparable frames than this is inconclusive.
    min_force_mn:
        Rows whose force ``|fz|`` (mN) is below this are not compared (ratio undefined).
    max_frames:
        At most this many rows are decoded (evenly spread over the episode).

    Returns
    -------
    ColumnEvidence

    Raises
    ------
    FormatError
        The parquet cannot be read.
    """
    path = data_path
    pf = open_parquet(path, what="data parquet")
    try:
        names = pf.schema_arrow.names
        typ = pf.schema_arrow.field(column).type
    except Exception as exc:
        raise FormatError(f"cannot read parquet: {exc}", path=path) from exc
    value_type = typ.value_type
    encoding = "row_flat_raw" if pa.types.is_float32(value_type) else "row_diff_quantized"
    force = column[: -len("_matrix")]
    ev = ColumnEvidence(column, force if force in names else None, encoding)
    if ev.force_column is None:
        ev.verdict = f"inconclusive: no {force} column to compare with"
        return ev if encoding == "row_diff_quantized" else _raw(ev)
    ns_cols = [c for c in (column + "_ns", force + "_ns") if c in names]
    try:
        side = pf.read(columns=[force, *ns_cols])
    except Exception as exc:
        raise FormatError(f"cannot read parquet: {exc}", path=path) from exc
    lens, flat = _values(side.column(force))
    fz = np.full(len(lens), np.nan)
    ok3 = lens == 3
    if ok3.all():
        fz = flat.reshape(-1, 3)[:, 2].astype(np.float64)
    else:
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        fz[ok3] = flat[starts[ok3] + 2]
    usable = np.isfinite(fz) & (np.abs(fz) >= min_force_mn)
    for c in ns_cols:
        usable &= _scalar(side.column(c)) != 0
    rows = np.flatnonzero(usable)
    if rows.size > max_frames:
        rows = rows[np.linspace(0, rows.size - 1, max_frames).round().astype(int)]
    sums, saturated = _fz_sums(pf, column, encoding, rows)
    fzs = fz[rows]
    ev.saturated_frames = int(np.count_nonzero((sums != 0) & saturated))
    keep = (sums != 0) & ~saturated  # a saturated row's Σfz is a bound, not evidence (§7.2.1)
    sums, fzs = sums[keep], fzs[keep]
    ev.frames = int(sums.size)
    if ev.frames < min_frames:
        sat = (f"; {ev.saturated_frames} more row(s) left out because cells are saturated at the int16 limits "
               "(a bound, not the historical truncation)") if ev.saturated_frames else ""
        ev.verdict = (f"inconclusive: only {ev.frames} row(s) with both a matrix and |fz| >= {min_force_mn} mN "
                      f"(need {min_frames}){sat}")
        return ev if encoding == "row_diff_quantized" else _raw(ev)
    raw = sums / fzs  # Σ(stored fz) / fz: the scale itself when calibrated
    if ev.saturated_frames:
        note = f" ({ev.saturated_frames} saturated row(s) left out)"
    else:
        note = ""
    for s in CANDIDATE_SCALES:
        r = raw / s
        ev.ratios[s] = float(np.median(r))
        ev.within[s] = float(np.mean(np.abs(r - 1.0) <= tolerance))
    if encoding == "row_flat_raw":
        return _raw(ev)
    fits = [s for s in CANDIDATE_SCALES if abs(ev.ratios[s] - 1.0) <= tolerance and ev.within[s] >= 0.8]
    if len(fits) == 1:
        ev.scale = float(fits[0])
        ev.verdict = (f"scale {fits[0]}: median Σfz/force fz = {ev.ratios[fits[0]]:.3f} over {ev.frames} frames "
                      f"({ev.within[fits[0]]:.0%} within ±{tolerance:g}){note}")
    else:
        best = min(CANDIDATE_SCALES, key=lambda s: abs(np.log(max(ev.ratios[s], 1e-12))))
        ev.verdict = (f"inconclusive: no candidate scale gives Σfz/force fz ≈ 1 (closest ×{best}: "
                      f"{ev.ratios[best]:.3f}){note}; uncalibrated int16 truncated toward zero gives 0.04–0.55 "
                      "(§7.2.1)")
    return ev


def _raw(ev: ColumnEvidence) -> ColumnEvidence:
    ev.scale = 1.0
    r = ev.ratios.get(1)
    ev.verdict = "row_flat_raw (float32): scale is 1 by definition (§7.2.1)" + (
        f"; median Σfz/force fz = {r:.3f}" if r is not None else "")
    return ev


def _fz_sums(pf: pq.ParquetFile, column: str, encoding: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Σ of the stored fz plane (q for int16, mN for float32) of the given rows, row group by row group,
    and whether each row holds cells at the int16 limits (saturated; always False for float32)."""
    out = np.zeros(rows.size, dtype=np.float64)
    sat = np.zeros(rows.size, dtype=bool)
    if rows.size == 0:
        return out, sat
    codec = ForceMatrixCodec("row_diff_quantized", 1.0)
    bounds = np.concatenate([[0], np.cumsum([pf.metadata.row_group(i).num_rows
                                             for i in range(pf.metadata.num_row_groups)])])
    for g in range(pf.metadata.num_row_groups):
        sel = np.flatnonzero((rows >= bounds[g]) & (rows < bounds[g + 1]))
        if sel.size == 0:
            continue
        col = pf.read_row_group(g, columns=[column]).column(column)
        lens, flat = _values(col)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        for i in sel:
            r = int(rows[i] - bounds[g])
            if lens[r] != FRAME_VALUES:
                continue  # no sample stored in this row
            vals = flat[starts[r]: starts[r] + FRAME_VALUES]
            if encoding == "row_diff_quantized":
                q = codec.decode_quantized(vals)[0]
                out[i] = float(q[:, :, 2].sum(dtype=np.int64))
                sat[i] = bool(saturated_cells(q)[0])
            else:
                out[i] = float(np.asarray(vals, np.float64).reshape(250, 250, 3)[:, :, 2].sum())
    return out, sat


@dataclass
class EpisodeRepair:
    """One episode the repair looked at.

    Attributes
    ----------
    index:
        Global N.
    status:
        ``repaired`` (or ``would repair`` on a dry run), ``partial`` (some columns
        inconclusive), ``inconclusive``, or ``skipped`` (with ``reason``).
    columns:
        Evidence per column that lacked a scale.
    meta:
        The ``meta/episodes`` file (rewritten when repaired).
    error:
        Why a ``skipped`` episode could not be read (its error's one line), else ``""``.
    """

    index: int
    status: str
    columns: list[ColumnEvidence] = field(default_factory=list)
    meta: TaskPath | None = None
    reason: str = ""
    error: str = ""

    def to_dict(self, task_dir: Path | ObjectPath) -> dict[str, Any]:
        """JSON form."""
        return {"episode_index": self.index, "status": self.status, "reason": self.reason, "error": self.error,
                "meta": rel(task_dir, self.meta) if self.meta else None,
                "columns": [c.to_dict() for c in self.columns]}


@dataclass
class ForceScaleReport:
    """Result of :func:`repair_force_scale`.

    Attributes
    ----------
    episodes:
        Every episode with a force-matrix column lacking a scale (episodes whose rows
        already declare it are counted in ``already_ok``).
    backup:
        Where the old row files were copied (None when nothing was written).
    """

    task_dir: Path | ObjectPath
    dry_run: bool
    episodes: list[EpisodeRepair] = field(default_factory=list)
    already_ok: int = 0
    backup: Path | ObjectPath | None = None

    @property
    def unreadable(self) -> list[int]:
        """N of episodes skipped because their data parquet or row could not be read."""
        return [e.index for e in self.episodes if e.error]

    @property
    def inconclusive(self) -> list[int]:
        """N of episodes with at least one column left without a scale."""
        return [e.index for e in self.episodes if e.status in ("inconclusive", "partial")]

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool repair force-scale --json``)."""
        return {"task": str(self.task_dir), "dry_run": self.dry_run, "already_ok": self.already_ok,
                "backup": rel(self.task_dir, self.backup) if self.backup else None,
                "inconclusive": self.inconclusive, "unreadable": self.unreadable, "episodes": [e.to_dict(self.task_dir) for e in self.episodes]}


def _lacks_scale(spec: Any, value_type: pa.DataType) -> bool:
    """True when the row gives no usable scale for an int16 column (missing, or unusable like 0 / "abc")."""
    if not isinstance(spec, dict) or not spec:
        return True
    return not pa.types.is_float32(value_type) and not usable_scale(spec.get("scale"))


def _row_with_specs(meta: Path, specs: dict[str, Any]) -> bytes:
    """The episode's row file with only ``force_matrix_specs`` replaced (added when missing)."""
    return _table_with_specs(read_parquet(meta, what="episodes parquet"), specs)


def _table_with_specs(table: pa.Table, specs: dict[str, Any]) -> bytes:
    """A row table's parquet bytes with only ``force_matrix_specs`` replaced (added when missing)."""
    value = pa.array([json.dumps(specs, ensure_ascii=False, allow_nan=False)],
                     type=EPISODE_COLUMNS["force_matrix_specs"])
    if "force_matrix_specs" in table.column_names:
        table = table.set_column(table.column_names.index("force_matrix_specs"), "force_matrix_specs", value)
    else:
        table = table.append_column("force_matrix_specs", value)
    table = keep_digests(table)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _inspect(g: EpisodeFiles, tolerance: float) -> EpisodeRepair | None:
    assert g.data is not None and g.meta is not None
    schema = read_parquet_schema(g.data, what="data parquet")
    cols = [f for f in schema if f.name.startswith("observation.") and f.name.endswith("_force_matrix")]
    if not cols:
        return None
    specs = read_episode_row(g.meta, g.index).get("force_matrix_specs") or {}
    need = [f.name for f in cols if _lacks_scale(specs.get(f.name) if isinstance(specs, dict) else None,
                                                  f.type.value_type)]
    if not need:
        return EpisodeRepair(g.index, "ok", meta=g.meta)
    if g.meta_is_shard:
        return EpisodeRepair(g.index, "skipped", meta=g.meta,
                             reason="row is in a legacy multi-row shard: run `egopool migrate --split-episodes` first")
    evidence = [column_evidence(g.data, c, tolerance=tolerance) for c in need]
    decided = [e for e in evidence if e.scale is not None]
    status = "inconclusive" if not decided else "repaired" if len(decided) == len(evidence) else "partial"
    return EpisodeRepair(g.index, status, evidence, g.meta)


def repair_force_scale(task_dir: str | Path, *, dry_run: bool = False, tolerance: float = 0.1,
                       registry: bool | str | Path | Registry | None = True,
                       progress: Progress | None = None) -> ForceScaleReport:
    """Write the inferred ``force_matrix_specs`` into episodes that lack it (file_format.md §7.2.1).

    For every episode whose row has no usable ``force_matrix_specs`` entry for a
    force-matrix column of its data, compute :func:`column_evidence`; when exactly one
    candidate scale fits, add ``{dtype, shape, encoding, scale}`` for that column to the
    row (other columns of the row, and every data byte, untouched). Inconclusive
    columns are reported and left alone.

    Parameters
    ----------
    task_dir:
        The task directory, or ``s3://bucket/prefix/task`` (rows rewritten under N's claim, module docstring).
    dry_run:
        Report the evidence and what would be written; write nothing.
    tolerance:
        See :func:`column_evidence`.
    registry:
        ``pipeline.db`` whose hash of the rewritten row file is updated (True = beside the task).
    progress:
        ``progress(done, total, what)`` after each episode inspected.

    Returns
    -------
    ForceScaleReport

    An episode whose data parquet or row cannot be read is reported ``skipped`` with the
    error, and the others are repaired.

    Raises
    ------
    FormatError
        ``info.json`` cannot be read.
    """
    rt = open_row_task(task_dir, "repair force-scale", OP, dry_run=dry_run, registry=registry)
    bt, root = rt.bt, rt.root
    report = ForceScaleReport(root, dry_run)
    with rt.hold():
        groups = [g for g in list_task_episodes(rt.where, rt.layout) if g.data is not None and g.meta is not None]
        for i, g in enumerate(groups):
            try:
                rep = _inspect(g, tolerance)
            except EgopoolError as exc:  # one unreadable episode never stops the others
                rep = EpisodeRepair(g.index, "skipped", meta=g.meta, reason="cannot be read", error=exc.one_line())
            if rep is not None and rep.status == "ok":
                report.already_ok += 1
            elif rep is not None:
                report.episodes.append(rep)
                if rep.status in ("repaired", "partial"):
                    if dry_run:
                        rep.status = "would repair" if rep.status == "repaired" else "would repair partially"
                    elif bt is not None:
                        _write_bucket(bt, rep, report)
                    elif rt.local is not None:
                        _write(rt.local, rep, report, rt.reg)
            if progress is not None:
                progress(i + 1, len(groups), f"episode {g.index}")
    return report


def _new_specs(rep: EpisodeRepair) -> dict[str, Any]:
    assert rep.meta is not None
    specs = read_episode_row(rep.meta, rep.index).get("force_matrix_specs") or {}
    specs = dict(specs) if isinstance(specs, dict) else {}
    for e in rep.columns:
        if e.scale is not None:
            specs[e.column] = e.spec()
    return specs


def _write_bucket(bt: BucketTask, rep: EpisodeRepair, report: ForceScaleReport) -> None:
    """Rewrite one row in a bucket (module docstring): claim, backup, conditional PUT, release."""
    assert report.backup is None or isinstance(report.backup, ObjectPath)
    reason, report.backup = rewrite_row_under_claim(
        bt, rep.index, OP, report.backup, "repair-force-scale",
        lambda old: _table_with_specs(read_parquet_bytes(old), _new_specs(rep)))
    if reason is not None:
        rep.status, rep.reason = "skipped", reason


def _write(root: Path, rep: EpisodeRepair, report: ForceScaleReport, reg: Registry | None) -> None:
    meta = rep.meta
    if not isinstance(meta, Path):  # a directory task's episodes are local files (a bucket's go through _write_bucket)
        raise TypeError(f"episode {rep.index} of the directory task {root} has no local row file: {meta!r}")
    assert report.backup is None or isinstance(report.backup, Path)  # a directory task's backup is a directory
    report.backup = rewrite_local_row(root, rep.index, meta, OP, report.backup, "repair-force-scale",
                                      lambda: _row_with_specs(meta, _new_specs(rep)), reg)
