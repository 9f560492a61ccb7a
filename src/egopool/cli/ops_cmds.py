"""``egopool delete`` / ``stats recalc|check`` / ``migrate`` / ``repair force-scale|checksums|clean`` / ``compress``: maintenance.

Thin wrappers: one library call each (:mod:`egopool.ops`), a Rich progress bar on
stderr when it is a terminal, ``--json`` for scripts, ``--dry-run`` on everything
that changes files.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from .. import ops
from ..errors import EgopoolError, RegistryError
from ..meta.drop_stats import clipped_key
from ..ops._common import Progress as ProgressFn
from .app import app
from ..ops._common import rel
from .args import episode_argument, parse_task_location, task_argument
from .output import console, err_console, human_bytes, print_json
from .ray_option import RAY_OPTION, executor_for

stats_app = typer.Typer(help="Rebuild or audit meta/stats.json (file_format.md §4).", no_args_is_help=True)
repair_app = typer.Typer(help="Repair episode metadata from the data itself; clean up after killed writers.",
                         no_args_is_help=True)
app.add_typer(stats_app, name="stats")
app.add_typer(repair_app, name="repair")

def _task_path(value: str) -> Path:
    """TASK as a path; an empty string is refused (an unset shell variable must not mean the current directory),
    and so is an ``s3://`` URI: these commands (``migrate``, ``compress``, ``pack``, ``upload``) change or pack a task
    in a local directory only."""
    if not value.strip():
        raise typer.BadParameter("TASK is empty; pass the task directory (`.` for the current one)")
    if value.startswith("s3://"):
        raise typer.BadParameter(f"{value}: this command works on a local directory only (copy the task with "
                                 "`egopool sync`); the commands that read, and delete, compress, migrate, "
                                 "repair force-scale|clean, keypoints backfill, stats recalc take s3:// tasks")
    return Path(value)


def _task_or_uri(value: str) -> Path | str:
    """TASK of a command that changes a task in a directory or a bucket (docs/decisions.md O34): a ``Path``, or the
    ``s3://bucket/prefix/task`` URI as text (checked as the readers check it: no empty, ``.`` or ``..`` part)."""
    if value.startswith("s3://"):
        return str(parse_task_location(value))
    return _task_path(value)


def _shown(report_task: Path, p: Path) -> str:
    """A report's path relative to its task (a bucket report's paths are task-relative keys already)."""
    return rel(report_task, p)


_TASK = typer.Argument(..., metavar="TASK", parser=_task_path, help="Task directory (holds data/, videos/, meta/).")
_CHANGE_TASK = typer.Argument(..., metavar="TASK", parser=_task_or_uri,
                              help="Task directory (holds data/, videos/, meta/), or s3://BUCKET/PREFIX/TASK.")
_READ_TASK = task_argument()
#: TASK of a command that changes a task on either backend (issue 24): a directory or s3://BUCKET/PREFIX/TASK
_ANY_TASK = task_argument("Task directory (holds data/, videos/, meta/), or s3://BUCKET/PREFIX/TASK.")
_JSON = typer.Option(False, "--json", help="Print the report as JSON on stdout.")
_DRY = typer.Option(False, "--dry-run", help="Show exactly what would change; change nothing.")
_REG = typer.Option(True, "--registry/--no-registry",
                    help="Keep the local registry pipeline.db (beside the task) in step.")


@contextlib.contextmanager
def _progress(label: str) -> Iterator[ProgressFn | None]:
    """A progress callback drawing a Rich bar on stderr (None when stderr is not a terminal)."""
    if not err_console.is_terminal:
        yield None
        return
    with Progress(TextColumn(f"{label} [dim]{{task.description}}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err_console, transient=True) as bar:
        tid = bar.add_task("", total=None)

        def update(done: int, total: int, what: str) -> None:
            bar.update(tid, completed=done, total=total, description=what)

        yield update


@contextlib.contextmanager
def _registry_hint() -> Iterator[None]:
    """A pipeline.db failure (corrupt, read-only) also says how to go on without the registry."""
    try:
        yield
    except EgopoolError as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, RegistryError):
            cause = cause.__cause__
        if cause is not None:
            extra = "or pass --no-registry to leave pipeline.db out"
            exc.hint = f"{exc.hint}; {extra}" if exc.hint else extra
        raise


@app.command("delete", context_settings={"ignore_unknown_options": True})  # N=-1: our error
def delete_cmd(task: Path = _CHANGE_TASK,
               indices: list[int] = episode_argument("Global 1-based episode numbers (as `egopool ls` shows)."),
               dry_run: bool = _DRY, json_out: bool = _JSON, registry: bool = _REG,
               yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation on a terminal.")) -> None:
    """Delete episodes by global N: videos, data and meta row, verified gone (file_format.md §2, §9).

    N=0 and an N that does not exist are errors. stats.json and total_episodes are not rolled back and N is never reused. In a directory a failed delete is undone (nothing removed) or reports exactly which files are where; in an s3:// task it holds N's claim, deletes the row first and is finished by the next run (a tombstone keeps N retired). Exit 1 when anything could not be removed.
    """
    if not dry_run and not yes and not json_out and sys.stdin.isatty():
        plans = ops.delete_episodes(task, indices, dry_run=True, registry=False).plans
        n_files = sum(len(p.files) for p in plans)
        typer.confirm(f"Delete episode(s) {', '.join(str(p.index) for p in plans)} of {task} "
                      f"({n_files} files, {human_bytes(sum(p.bytes for p in plans))})?", abort=True)
    with _registry_hint(), _progress("deleting") as cb:
        report = ops.delete_episodes(task, indices, dry_run=dry_run, registry=registry, progress=cb)
    if json_out:
        print_json(report.to_dict())
    else:
        for line in report.recovered:
            console.print(f"[yellow]{line}[/yellow]")
        for plan in report.plans:
            verb = "would remove" if dry_run else "removed"
            console.print(f"[bold]episode {plan.index}[/bold]: {verb} {len(plan.files)} file(s), "
                          f"{human_bytes(plan.bytes)}")
            for p in plan.files:
                console.print(f"  {_shown(report.task_dir, p)}")
            for p in plan.shards:
                console.print(f"  row {plan.index} of legacy shard {_shown(report.task_dir, p)}")
        for o in report.outcomes:
            for p in o.not_removed:
                console.print(f"[red]could not remove {_shown(report.task_dir, p)}[/red]")
            if o.registry not in ("removed", "absent", "disabled"):
                console.print(f"[red]episode {o.index}: registry not updated: {o.registry}[/red]")
    if not report.ok:
        raise typer.Exit(1)


@stats_app.command("recalc")
def stats_recalc_cmd(task: Path = _READ_TASK, dry_run: bool = _DRY, json_out: bool = _JSON,
                     ray: str | None = RAY_OPTION) -> None:
    """Rebuild meta/stats.json from every data parquet (legacy blocks without count, §4).

    The previous file is copied to .egopool_backup/ first; nothing is written when the recomputed document equals the stored one. With --ray each episode's blocks come from its own Ray task; they are merged here and written under the task lock. An s3:// task's stats.json is replaced with a conditional PUT once no publish into it is in progress (docs/decisions.md O17).
    """
    from ..storage import ObjectPath

    with _progress("recomputing") as cb, executor_for(ray) as executor:
        if isinstance(task, ObjectPath):  # task_argument() parses s3:// into one
            from ..ops.stats_bucket import recalc_bucket_stats

            report = recalc_bucket_stats(task, dry_run=dry_run, progress=cb, executor=executor)
        else:
            report = ops.recalc_task_stats(task, dry_run=dry_run, progress=cb, executor=executor)
    if json_out:
        print_json(report.to_dict())
        return
    blocks = sorted({d.column for d in report.changes})
    if not report.changes:
        console.print(f"stats.json already matches data/ ({report.episodes} episodes); nothing written")
    elif dry_run:
        console.print(f"would rewrite stats.json from {report.episodes} episodes; blocks changing: {', '.join(blocks)}")
    else:
        console.print(f"rewrote stats.json from {report.episodes} episodes; blocks changed: {', '.join(blocks)}")
        if report.backup:
            console.print(f"previous file: {report.backup.relative_to(task)}")


@stats_app.command("check")
def stats_check_cmd(task: Path = _READ_TASK, json_out: bool = _JSON, ray: str | None = RAY_OPTION) -> None:
    """Compare stats.json with a fresh recomputation from data/; exit 1 when a block differs.

    After deletes the two are expected to differ: stats.json is not rolled back (§4). An episode whose data
    cannot be read is reported as skipped with its error; the others are still compared (exit 1).
    """
    with _progress("checking") as cb, executor_for(ray) as executor:
        report = ops.check_stats(task, progress=cb, executor=executor)
    if json_out:
        print_json(report.to_dict())
    elif report.ok:
        console.print(f"stats.json matches data/ ({report.episodes} episodes, {len(report.blocks)} blocks)")
    else:
        if report.differences:
            table = Table("block", "field", "difference")
            for d in report.differences:
                table.add_row(d.column, d.field, d.detail)
            console.print(table)
        for sk in report.skipped:
            console.print(f"[red]episode {sk['episode_index']} skipped: {escape(sk['error'])}[/red]")
        console.print(f"{len(report.differing_blocks)} of {len(report.blocks)} block(s) differ: "
                      f"{', '.join(report.differing_blocks) or '-'}"
                      + (f" (recomputed without the {len(report.skipped)} skipped episode(s))" if report.skipped
                         else ""))
    if not report.ok:
        raise typer.Exit(1)


@app.command("migrate")
def migrate_cmd(task: Path = _ANY_TASK,
                split_episodes: bool = typer.Option(False, "--split-episodes",
                                                    help="Split legacy multi-row meta/episodes shards into "
                                                         "one episode-NNN.parquet per episode."),
                dry_run: bool = _DRY, json_out: bool = _JSON, registry: bool = _REG) -> None:
    """Bring a legacy task to the v1.1.2 layout (file_format.md §2, §6.1, §11).

    Renames pre-v1.1.2 file-NNN episode files to episode-NNN, moves meta/.stats_state.json and _trash/ into _migrate_backup_<time>/, and with --split-episodes splits legacy shards. Journaled: after a crash, run it again to resume; a second run is a no-op.
    """
    with _registry_hint(), _progress("migrating") as cb:
        report = ops.migrate_task(task, split_episodes=split_episodes, dry_run=dry_run, registry=registry,
                                  progress=cb)
    if json_out:
        print_json(report.to_dict())
        return
    if not report.steps:
        console.print("nothing to migrate: the task already has the v1.1.2 layout")
    else:
        head = "would run" if dry_run else "ran"
        if report.resumed:
            head += " (resuming an interrupted migration)"
        console.print(f"{head} {len(report.steps)} step(s):")
        for st in report.steps:
            console.print(f"  {st.describe()}")
        if report.backup is not None:
            console.print(f"backup: {report.to_dict()['backup']} (remove it once you have checked the task)")
    for note in report.notes:
        console.print(f"[yellow]note:[/yellow] {note}")


@repair_app.command("force-scale")
def repair_force_scale_cmd(task: Path = _CHANGE_TASK, dry_run: bool = _DRY, json_out: bool = _JSON, registry: bool = _REG,
                           tolerance: float = typer.Option(0.1, help="A scale fits when |Σfz/force fz − 1| ≤ this.")
                           ) -> None:
    """Write the missing force-matrix scale into episode rows, inferred from Σfz / force fz (§7.2.1).

    Prints the ratio for every candidate scale per episode; inconclusive episodes (e.g. historical truncated int16, ratio 0.04–0.55) are reported and left alone. Only meta/episodes rows are rewritten; data bytes are never touched. An episode that cannot be read is reported as skipped with its error and the others are repaired (exit 1). In an s3:// task each row is rewritten under N's claim with a conditional PUT on its version.
    """
    with _registry_hint(), _progress("checking force matrices") as cb:
        report = ops.repair_force_scale(task, dry_run=dry_run, tolerance=tolerance, registry=registry, progress=cb)
    if json_out:
        print_json(report.to_dict())
        if report.unreadable:
            raise typer.Exit(1)
        return
    table = Table("N", "column", "frames", *(f"×{s}" for s in ops.CANDIDATE_SCALES), "result")
    for e in report.episodes:
        if not e.columns:
            table.add_row(str(e.index), "", "", *("" for _ in ops.CANDIDATE_SCALES),
                          f"{e.status}: {e.reason}" + (f": {escape(e.error)}" if e.error else ""))
        for c in e.columns:
            result = c.verdict if c.verdict.startswith(e.status) else f"{e.status}: {c.verdict}"
            table.add_row(str(e.index), c.column, str(c.frames),
                          *(f"{c.ratios[s]:.3f}" if s in c.ratios else "-" for s in ops.CANDIDATE_SCALES), result)
    if report.episodes:
        console.print(table)
    console.print(f"{len(report.episodes)} episode(s) lacked a scale, {report.already_ok} already declared one; "
                  f"inconclusive: {', '.join(map(str, report.inconclusive)) or 'none'}"
                  + (f"; could not be read: {', '.join(map(str, report.unreadable))}" if report.unreadable else ""))
    if report.unreadable:
        raise typer.Exit(1)


@repair_app.command("checksums")
def repair_checksums_cmd(task: Path = _CHANGE_TASK, dry_run: bool = _DRY, json_out: bool = _JSON,
                         registry: bool = _REG) -> None:
    """Record the sha256 of every file of the episodes whose row records none (tasks written before checksums).

    Each file is hashed as it is now: run `egopool validate TASK` first, the digests vouch for those bytes. Rows that record digests are never rewritten (a mismatch is damage, reported by validate). Only meta/episodes rows are rewritten, each old row backed up first; data and videos are never touched. In an s3:// task each row is rewritten under N's claim with a conditional PUT on its version. Exit 1 when an episode could not be read.
    """
    from ..ops.checksums import repair_checksums

    with _registry_hint(), _progress("hashing episode files") as cb:
        report = repair_checksums(task, dry_run=dry_run, registry=registry, progress=cb)
    skipped = [e for e in report.episodes if e.status == "skipped"]
    if json_out:
        print_json(report.to_dict())
    else:
        for e in report.episodes:
            console.print(escape(f"episode {e.index}: {e.status} ({len(e.files)} file(s))"
                                 + (f": {e.reason}" if e.reason else "")), highlight=False)
        done = sum(e.status in ("recorded", "would record") for e in report.episodes)
        console.print(f"{'would record' if dry_run else 'recorded'} checksums of {done} episode(s); "
                      f"{report.already} already had them" + (f"; skipped: {len(skipped)}" if skipped else ""))
        if report.backup is not None:
            console.print(escape(f"backup: {report.backup} (remove it once you have checked the task)"),
                          highlight=False)
    if skipped:
        raise typer.Exit(1)


@repair_app.command("clean")
def repair_clean_cmd(task: Path = _CHANGE_TASK, dry_run: bool = _DRY, json_out: bool = _JSON, registry: bool = _REG,
                     stale_after: float = typer.Option(6.0, "--stale-after", metavar="HOURS", min=0.0,
                                                       help="s3:// only: a journal or multipart upload older "
                                                            "than this is a dead writer's.")) -> None:
    """Finish what killed or failed writers left: stale temp files and reservations, unmerged info/stats, registry.

    Removes the dot-temps of dead writers, rolls back the N a dead recorder reserved without committing it (the next recording takes it), replays a saved episode's info.json / stats.json merge that failed (a full disk) and records committed episodes missing from pipeline.db. `egopool validate` names each of them. In an s3:// task: finishes or rolls back the journals of dead writers (publishes, deletes) older than --stale-after, aborts their incomplete multipart uploads and deletes orphan objects of an N without row or journal. Exit 1 when something could still not be done.
    """
    with _registry_hint():
        report = ops.clean_task(task, dry_run=dry_run, registry=registry, stale_after=stale_after * 3600.0)
    if json_out:
        print_json(report.to_dict())
    elif isinstance(report, ops.BucketCleanReport):
        _print_bucket_clean(report)
    else:
        lines = []
        if report.temps:
            lines.append(f"{'would remove' if dry_run else 'removed'} {len(report.temps)} stale temp file(s), "
                         f"{human_bytes(report.temp_bytes)}")
            lines += [f"  {p}" for p in report.temps]
        if report.reservations:
            lines.append(f"{'would release' if dry_run else 'released'} reservation(s) of dead writers: "
                         f"{', '.join(map(str, report.reservations))}"
                         + (f" (not committed, free again: {', '.join(map(str, report.rolled_back))})"
                            if report.rolled_back else ""))
        if report.replayed:
            lines.append(f"{'would replay' if dry_run else 'replayed'} the info.json/stats.json merge of episode(s) "
                         f"{', '.join(map(str, report.replayed))}")
        if report.registered:
            lines.append(f"{'would record' if dry_run else 'recorded'} episode(s) "
                         f"{', '.join(map(str, report.registered))} in the registry")
        for line in lines or [f"nothing to clean in {task}"]:
            console.print(escape(line), highlight=False)
        for p in report.problems:
            err_console.print(f"[red]{escape(p)}[/red]")
    if not report.ok:
        raise typer.Exit(1)


def _print_bucket_clean(report: ops.BucketCleanReport) -> None:
    """The text report of ``repair clean s3://...``."""
    verb = "would" if report.dry_run else ""
    lines = list(report.journals)
    if report.uploads:
        lines.append(f"{verb + ' abort' if verb else 'aborted'} {len(report.uploads)} incomplete multipart upload(s)")
        lines += [f"  {k}" for k in report.uploads]
    if report.orphans:
        lines.append(f"{verb + ' delete' if verb else 'deleted'} {len(report.orphans)} orphan object(s) of "
                     "uncommitted episodes")
        lines += [f"  {k}" for k in report.orphans]
    if report.in_progress:
        lines.append(f"left alone (younger than the stale limit: a writer may be at work): episode(s) "
                     f"{', '.join(map(str, report.in_progress))}")
    for line in lines or [f"nothing to clean in {report.uri}"]:
        console.print(escape(line), highlight=False)
    for p in report.problems:
        err_console.print(f"[red]{escape(p)}[/red]")


@contextlib.contextmanager
def _stream_bars() -> Iterator[ProgressFn | None]:
    """One Rich bar per depth stream on stderr (None when stderr is not a terminal)."""
    if not err_console.is_terminal:
        yield None
        return
    with Progress(TextColumn("[dim]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err_console) as bar:
        current: dict[str, Any] = {}

        def update(done: int, total: int, what: str) -> None:
            if current.get("what") != what:
                current["what"], current["id"] = what, bar.add_task(what, total=total)
            bar.update(current["id"], completed=done, total=total)

        yield update


@app.command("compress")
def compress_cmd(task: Path = _ANY_TASK, dry_run: bool = _DRY, json_out: bool = _JSON, registry: bool = _REG,
                 nice: bool = typer.Option(False, "--nice/--no-nice",
                                           help="Work at the lowest CPU priority (nice 19; I/O follows it), "
                                                "e.g. beside a recorder.")) -> None:
    """Bring a task's FFV1 depth (.mkv) to the spec's 12-bit log HEVC (.mp4), every episode at once (§3, §8).

    Each stream is re-encoded, then checked against its original (frame count, holes exact, relative error p99 within DESIGN §3's bounds) before anything is switched; info.json's video_extensions is the commit, so readers and `egopool validate` see the task all-FFV1 or all-HEVC, never mixed. RGB streams are untouched. Journaled: after a crash or Ctrl-C, run it again to finish. A task already HEVC is a no-op (exit 0).
    """
    with _registry_hint(), _stream_bars() as cb:
        report = ops.compress_task(task, dry_run=dry_run, nice=nice, registry=registry, progress=cb)
    if json_out:
        print_json(report.to_dict())
        if report.committed and report.notes:
            raise typer.Exit(1)
        return
    if report.resumed:
        console.print(f"[yellow]{escape(report.resumed)}[/yellow]")
    if not report.streams:
        for note in report.notes:
            console.print(escape(note), highlight=False)
        return
    if dry_run:
        console.print(f"would compress {len(report.streams)} depth stream(s) of {', '.join(report.keys)}: "
                      f"{report.frames} frames, {human_bytes(report.bytes_before)} of FFV1")
        for s in report.streams:
            console.print(f"  {s.src} -> {s.dst}" + (" (already encoded)" if s.reused else ""), highlight=False)
        return
    ratio = report.bytes_before / report.bytes_after if report.bytes_after else float("nan")
    console.print(f"compressed {len(report.streams)} depth stream(s) of {', '.join(report.keys)}: {report.frames} "
                  f"frames, {human_bytes(report.bytes_before)} -> {human_bytes(report.bytes_after)} ({ratio:.1f}x); "
                  f"max error {report.max_error_mm:.0f} mm; {report.wall_seconds:.1f} s", highlight=False)
    clipped: dict[str, int] = {}
    for s in report.streams:
        if s.result is not None and s.result.clipped:
            clipped[s.key] = clipped.get(s.key, 0) + s.result.clipped
    for key, n in sorted(clipped.items()):  # a value the format cannot hold is never changed silently (R36)
        err_console.print(f"warning: {n} depth pixel(s) of {key} outside the log code's range were stored clipped "
                          f"(counted per episode in drop_stats {clipped_key(key)})", markup=False, highlight=False)
    for note in report.notes:
        err_console.print(f"[red]{escape(note)}[/red]")
    if report.notes:
        raise typer.Exit(1)
