"""``validate_task``: run every check on one task directory and return a :class:`Report`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EgopoolError, ObjectStoreError, OperationError
from ..storage import ObjectPath, TaskPath, as_path
from ..jobs.executor import Executor, LocalExecutor
from ..layout import EpisodeFiles, TaskLayout, list_task_episodes, static_prefix, walk_task_files
from .._safe_read import read_json
from ..meta import server_imports
from ..meta.info import info_path
from .context import Context
from .data import first_line
from .declarations import check_declarations, check_stream_declarations
from .episode import check_episode
from .metafiles import (check_info_file, check_info_keys, check_leftovers, check_stats, check_tasks_jsonl,
                        check_templates)
from .digests import undigested_note
from .report import Finding, Report
from .stale import check_interrupted_compress, check_stale_leftovers

__all__ = ["ProgressCallback", "check_episode_unit", "episode_units", "validate_task"]

#: ``progress(done, total)`` is called after each episode is checked.
ProgressCallback = Callable[[int, int], None]

R_LAYOUT = "file_format.md §1"
R_NUMBERING = "file_format.md §2"
R_CHECKLIST = "file_format.md §12"


def validate_task(path: str | Path, *, progress: ProgressCallback | None = None, fast: bool = False,
                  executor: Executor[Any, Any, Any] | None = None, media: dict[Path, Any] | None = None,
                  digests: Mapping[Path, str] | None = None) -> Report:
    """Check a task directory against file_format.md §12 and multi_device_storage.md §8.1/§8.2.

    Read-only: nothing is written anywhere (no lock is taken, no file is created).
    Never raises for a broken task: every problem is a :class:`Finding`.

    Checks, with the ``rule`` each finding cites:

    * ``file_format.md §1``: the path is a task, ``format == "pooled_episodes_v1"``
      (a missing directory, an empty one, a missing or unknown ``format`` and the
      legacy v1.0 per-session layout stop the run with one error), v1.0 leftovers,
      stray files that belong to no episode file group (warning);
    * ``§2``: ``episode_index`` column and meta row = N implied by the path;
      ``total_episodes`` below the highest N (warning); legacy ``file-`` names (warning);
    * ``§3``: every MUST key of ``info.json`` with its JSON type, usable path
      templates, ``action`` declared, ``fps`` and ``created_at`` in a plausible range
      (warnings); ``§3.1``: SLAM ``frame`` / ``frame_axes``
      (missing ``frame`` = legacy frame, a warning);
    * ``§4``: stats blocks; a block without ``count`` is a warning ("run
      ``egopool stats recalc``", as checklist §12.4 allows); ``§5``: tasks.jsonl;
    * ``§6.1`` / ``§6.2``: one meta row per episode with the 11 columns, their dtypes,
      JSON columns that parse, ``length`` / ``start_frame_index`` / ``end_frame_index``,
      ``created_at`` a 2000–2100 Unix time in seconds (warning naming ms / ns; an error,
      ``§7.3``, when float64 ``wall_time = created_at + timestamp`` cannot increase row by row);
    * ``§7`` (unreadable parquet), ``§7.1`` (key columns, dtypes, ``frame_index``
      0..n-1), ``§7.2`` (``action``, IMU samples of 6 with one ``imu_ts_ns`` each),
      ``§7.2.1`` (force matrix rows, ``force_matrix_specs``), ``§7.3`` (one video frame
      per row; ``wall_time − timestamp`` constant and ``wall_time`` strictly
      increasing), ``§8`` (``video_extensions``, unreadable videos, and every frame of every
      stream decoded: the first frame a reader cannot decode is named with its data row), ``§11``
      (``.stats_state.json``, warning);
    * ``multi_device_storage.md``: ``§1.2`` incomplete file groups, ``§2.2`` / ``§2.4``
      column grammar (charset, reserved suffixes matched against the stored type,
      forbidden names), ``§3`` status columns are strings, ``§4.6`` trajectory rows of 8
      values, ``§4.8`` depth slots not in ``cameras``, ``§5.5`` no null rows, ``§6.2``
      declared dtype/element count = stored, ``§6.3`` RGB streams in ``cameras``,
      ``§6.4`` devices, ``§6.6`` ``slam_frames`` / ``gripper_slam_frame``, ``§7.2``
      ``slam_specs``, and the numbered items ``§6.8.2`` (every ``observation.*``
      column declared, no ``status.*``/key columns in features), ``§8.1.3`` (``_ns``
      lockstep), ``§8.1.4`` (force matrix ``encoding`` + ``scale``), ``§8.1.5``
      (``dtype``/``shape``/``encoding``), ``§8.1.6`` (``frame_axes`` per column).

    The ``wall_time`` rule applies from collector v1.3.17 on and to every
    ``app_version`` not of the collector's ``1.x`` form (egopool's own ``0.x``
    included); see :func:`egopool.validate.context.wall_time_rule_applies`. The
    tolerance of the constant offset is 1e-5 s plus one float32 step of the largest
    ``timestamp`` plus float64 rounding of ``wall_time``. ``timestamp`` itself must be
    strictly increasing in every app version (``§7.1``; the first bad row is named).

    Ignored as the spec says (§11, multi_device_storage.md §8.2.8): dotfiles, ``.lock``,
    ``recycled_episode.json``, temp files, ``_trash/``, ``_migrate_backup_*``,
    ``_episodes_*`` upload slices.

    Parameters
    ----------
    path:
        The task directory (the one holding ``data/``, ``videos/``, ``meta/``).
    progress:
        Called as ``progress(done, total)`` after each episode.
    fast:
        Count the frames of every stream without decoding them (the demuxer alone): much
        faster, but a frame whose payload is damaged goes unnoticed; the files' recorded sha256 are not
        checked either (docs/decisions.md X5).
    executor:
        Where the per-episode checks run (:mod:`egopool.jobs`): in-process by default, or one
        Ray task per episode (the episodes of one legacy ``meta/episodes`` shard form one
        unit). Task-level checks run here; the findings come out in the same order either way.
    media:
        Video containers the caller already opened (:func:`egopool.codecs.video.open_media`, nothing
        demuxed from them), by absolute file path: each file's check takes its container (removed from
        the dict, and closed) instead of opening the file again; the caller closes the ones left. Only with
        the in-process executor (a Ray task opens its files itself). The pooling server hands over the
        containers its frame-size bound opened (docs/decisions.md U20).
    digests:
        sha256 hex of files the caller hashed as it wrote them, by absolute file path: the recorded-checksum
        check (X5) takes those instead of reading the files again. Only with the in-process executor. The
        pooling server hands over what its extraction hashed (docs/decisions.md U33); nothing else may have
        written those files since.

    Returns
    -------
    Report
        ``report.ok`` is True when no finding has severity ``"error"``.

    Raises
    ------
    OperationError
        Only from a Ray ``executor`` that could not finish (the cluster was lost): then
        there is no verdict on the task at all.
    ObjectStoreError
        ``s3://``: the bucket does not exist, access is denied or the store does not answer
        (no verdict on the task either).
    """
    root = as_path(path)
    report = Report(task=str(root) if isinstance(root, ObjectPath) else str(path))
    try:
        _run(root, report, progress, fast, executor or LocalExecutor(), media, digests)
    except (OperationError, ObjectStoreError):  # a Ray cluster lost, a bucket unreachable: no verdict at all
        raise
    except Exception as exc:  # last resort: a check itself failed; still no traceback for the user
        report.error(R_CHECKLIST, root, f"the validator stopped early on an unexpected problem "
                                        f"({type(exc).__name__}: {first_line(exc)}); fix the findings above and "
                                        "run it again")
    return report


def _guarded(ctx: Context, check: Callable[[Context], Any]) -> Any:
    """Run one task-level check; a failure inside it is one finding and the other checks still run."""
    try:
        return check(ctx)
    except ObjectStoreError:
        raise  # the store failed, not the task: no verdict on what could not be read (O3)
    except Exception as exc:  # noqa: BLE001 - a check must never stop the run (issue 12 D)
        ctx.report.error(R_CHECKLIST, info_path(ctx.root), f"check {check.__name__} could not finish "
                                                          f"({type(exc).__name__}: {first_line(exc)}); the other "
                                                          "checks ran, fix the findings they report and run it again")
        return None


def _run(root: TaskPath, report: Report, progress: ProgressCallback | None, fast: bool,
         executor: Executor[Any, Any, Any], media: dict[Path, Any] | None = None,
         digests: Mapping[Path, str] | None = None) -> None:
    info = check_info_file(root, report)
    if info is None:
        return
    ctx = Context(root, report, info, decode=not fast)
    for check in (check_info_keys, check_tasks_jsonl, check_leftovers, check_declarations):
        _guarded(ctx, check)
    ctx.layout = check_templates(ctx)
    if ctx.layout is None:
        check_stats(ctx, has_episodes=False)
        return
    try:
        found = list_task_episodes(root, ctx.layout)
        # a publish or a bucket delete under its journal (in progress, or interrupted and finished by a re-run):
        # neither a damaged group nor strays (issue 24 review: a killed delete's videos were 5 stray warnings)
        publishing = server_imports.publishing(root)
        groups = [g for g in found if g.committed or g.index not in publishing]
        journaled = [g for g in found if not g.committed and g.index in publishing]
    except ObjectStoreError:
        raise  # the store failed, not the task: no verdict on what could not be read (O3)
    except EgopoolError as exc:
        report.error("file_format.md §6.1", exc.path or root, f"cannot enumerate episodes: {exc.message}; restore "
                                                             "or remove that file")
        check_stats(ctx, has_episodes=False)
        return
    check_stats(ctx, has_episodes=bool(groups))
    report.episodes = len(groups)
    local = isinstance(executor, LocalExecutor)
    _check_episodes(ctx, groups, progress, executor, media if local else None, digests if local else None)
    check_stream_declarations(ctx)
    _check_watermark(ctx, groups)
    _check_strays(ctx, groups + journaled)
    _guarded(ctx, check_stale_leftovers)  # a local task only: no dot-temps or pids in a bucket (O7)
    if isinstance(root, ObjectPath):  # a bucket's compress journal (O40); a directory's is a stale leftover above
        _guarded(ctx, check_interrupted_compress)


@dataclass(frozen=True)
class _EpisodeInput:
    """What every per-episode unit shares (sent once to a Ray cluster)."""

    root: TaskPath
    info: dict[str, Any]
    layout: TaskLayout
    decode: bool
    media: dict[Path, Any] | None = field(default=None, compare=False)  # in-process only (validate_task)
    digests: Mapping[Path, str] | None = field(default=None, compare=False)  # likewise


@dataclass
class _UnitResult:
    """Findings of one unit and the stream kinds its videos probed as (for the task-level checks)."""

    findings: list[Finding]
    depth_keys: set[str]
    rgb_keys: set[str]
    episodes: int
    undigested: int = 0


def check_episode_unit(shared: _EpisodeInput, unit: list[EpisodeFiles[TaskPath]]) -> _UnitResult:
    """One unit of a validation job: every per-episode check of the groups in ``unit``.

    A unit is one episode, or every episode whose row sits in the same legacy multi-row
    shard (so the shard is read and reported once). Runs in-process or as a Ray task;
    never raises for a broken episode (each problem is a finding).
    """
    ctx = Context(shared.root, Report(task=str(shared.root)), shared.info, shared.layout, decode=shared.decode,
                  media=shared.media if shared.media is not None else {}, known_digests=shared.digests or {})
    for g in unit:
        try:
            check_episode(ctx, g)
        except ObjectStoreError:
            raise  # the store failed, not the task: no verdict on what could not be read (O3)
        except Exception as exc:  # keep checking the other episodes
            ctx.report.error(R_CHECKLIST, g.data or g.meta or shared.root,
                             f"episode {g.index} could not be fully checked ({type(exc).__name__}: "
                             f"{first_line(exc)})")
    return _UnitResult(ctx.report.findings, ctx.depth_keys, ctx.rgb_keys, len(unit), ctx.undigested)


def episode_units(groups: list[EpisodeFiles[TaskPath]]) -> list[list[EpisodeFiles[TaskPath]]]:
    """Groups in ascending N, one unit each, except that the episodes of one legacy shard share a unit."""
    units: list[list[EpisodeFiles[TaskPath]]] = []
    by_shard: dict[TaskPath, list[EpisodeFiles[TaskPath]]] = {}
    for g in groups:
        if g.meta_is_shard and g.meta is not None:
            if g.meta in by_shard:
                by_shard[g.meta].append(g)
                continue
            by_shard[g.meta] = [g]
            units.append(by_shard[g.meta])
        else:
            units.append([g])
    return units


def _check_episodes(ctx: Context, groups: list[EpisodeFiles[TaskPath]], progress: ProgressCallback | None,
                    executor: Executor[Any, Any, Any], media: dict[Path, Any] | None = None,
                    digests: Mapping[Path, str] | None = None) -> None:
    assert ctx.layout is not None
    units = episode_units(groups)
    sizes = [0]
    for u in units:
        sizes.append(sizes[-1] + len(u))

    def tick(done: int, total: int) -> None:
        if progress is not None:  # units finish in any order on Ray: report episodes of the first `done` units
            progress(sizes[done], len(groups))

    # units see absolute paths (a Ray worker does not share the caller's working directory);
    # findings name files under the task path as the caller gave it
    if isinstance(ctx.root, ObjectPath):  # already absolute: every worker reaches the bucket by its URI
        absolute: TaskPath = ctx.root
        layout = ctx.layout
    else:
        absolute = Path(os.path.abspath(ctx.root))
        layout = dataclasses.replace(ctx.layout, root=absolute)
        units = [[_absolute(g) for g in u] for u in units]
    results = executor.map(check_episode_unit, _EpisodeInput(absolute, ctx.info, layout, ctx.decode, media, digests),
                           units,
                           progress=tick if progress is not None else None)
    for r in results:
        ctx.report.extend(_as_given(f, absolute, ctx.root) for f in r.findings)
        ctx.depth_keys |= r.depth_keys
        ctx.rgb_keys |= r.rgb_keys
        ctx.undigested += r.undigested
    if ctx.undigested:
        ctx.report.notes.append(undigested_note(ctx.undigested, len(groups)))


def _absolute(g: EpisodeFiles[TaskPath]) -> EpisodeFiles[TaskPath]:
    def ab(p: TaskPath) -> TaskPath:
        return p if isinstance(p, ObjectPath) else Path(os.path.abspath(p))

    return dataclasses.replace(g, data=None if g.data is None else ab(g.data), meta=None if g.meta is None else ab(g.meta),
                               videos={k: ab(v) for k, v in g.videos.items()})


def _as_given(f: Finding, absolute: TaskPath, given: TaskPath) -> Finding:
    if isinstance(absolute, ObjectPath):
        return f
    head = str(absolute)
    if f.path == head or f.path.startswith(head + os.sep):
        return dataclasses.replace(f, path=str(given / os.path.relpath(f.path, head)) if f.path != head else str(given))
    return f


def _check_watermark(ctx: Context, groups: list[EpisodeFiles[TaskPath]]) -> None:
    te = ctx.info.get("total_episodes")
    if groups and isinstance(te, int) and not isinstance(te, bool) and te < groups[-1].index:
        ctx.report.warning(R_NUMBERING, info_path(ctx.root),
                           f"total_episodes = {te} is below the highest episode N = {groups[-1].index}; the "
                           "watermark never goes back, set it to at least that N")


def _compress_halves(root: TaskPath) -> set[TaskPath]:
    """The ``.mkv`` / ``.mp4`` pairs an interrupted ``egopool compress`` names (docs/decisions.md R30): the
    half a reader does not take is the other side of the switch, not a stray (its own warning says so)."""
    journal = root / "meta" / ".compress.json"
    if not journal.is_file():
        return set()
    try:
        doc = read_json(journal, what="compress journal")
        return {root / str(s[k]) for s in doc["streams"] for k in ("src", "dst")}
    except ObjectStoreError:
        raise  # the store failed, not the task: no verdict on what could not be read (O3)
    except Exception:  # noqa: BLE001 - an unreadable journal only means no exemption
        return set()


def _check_strays(ctx: Context, groups: list[EpisodeFiles[TaskPath]]) -> None:
    """Files under data/, videos/, meta/episodes/ that belong to no episode file group."""
    assert ctx.layout is not None
    known: set[TaskPath] = _compress_halves(ctx.root)
    for g in groups:
        known.update(p for p in (g.data, g.meta) if p is not None)
        known.update(g.videos.values())
    tops = {static_prefix(t) for t in (ctx.layout.data_path, ctx.layout.video_path, ctx.layout.episodes_path)}
    seen: set[TaskPath] = set()
    for top in sorted(tops):
        if not top:
            continue  # a template at the task root: the root holds meta/ etc., nothing to scan
        for p in (ctx.root / rel for rel in sorted(walk_task_files(ctx.root, top))):
            if p in known or p.parent in known or p in seen:  # p.parent: a PNG16 frame directory
                continue
            seen.add(p)
            ctx.report.warning(R_LAYOUT, p, "not part of any episode file group (the name does not follow the "
                                            "path template, or another file of the same episode and stream "
                                            "took its place); egopool ignores it: move or delete it")
