"""``egopool audit-gaps``: report stamp gaps beyond the nominal frame interval, per episode and slot."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from ..gaps import audit_task_gaps, check_rate
from ..read.reader import open_task
from .app import app
from .args import episode_option, task_argument
from .output import console, err_console, print_json


@app.command("audit-gaps")
def audit_gaps_cmd(
    task: Path = task_argument(),
    episode: Optional[list[int]] = episode_option("--episode", "-e",
                                                  help="Only these global N (repeatable). Default: every episode."),
    tolerance: float = typer.Option(0.5, "--tolerance", min=0.0,
                                    help="A step longer than (1 + TOLERANCE) / fps is a gap."),
    fps: Optional[float] = typer.Option(None, "--fps",
                                        help="Row rate for hardware_ns & co (default: info.json fps). Signal and "
                                             "trajectory stamps are measured against their own median step."),
    json_out: bool = typer.Option(False, "--json", help="Print the full report (every gap) as JSON."),
) -> None:
    """Find holes in hardware_ns (unwrapped when 32-bit truncated) and every *_ns column.

    Repeated stamps are not steps. A zero hardware_ns or trajectory stamp is a frame or point
    whose time is unknown (not a missing one); a zero signal stamp is a row without a sample.

    An episode that cannot be read is reported as skipped with its error and the others are
    audited; the exit code is then 1. A gap says where to look; it does not prove a frame was
    lost (file_format.md §7.3). Read-only.
    """
    if fps is not None:
        check_rate(fps, "--fps")
    t = open_task(task)
    quiet = json_out or not err_console.is_terminal
    with Progress(console=err_console, transient=True, disable=quiet) as progress:
        bar = progress.add_task("auditing", total=None)
        report = audit_task_gaps(t, episode or None, tolerance=tolerance, fps=fps,
                                 progress=lambda done, total: progress.update(bar, completed=done, total=total))
    if json_out:
        print_json({"task": str(t.path), "ok": report.ok, "episodes": [r.to_dict() for r in report.episodes],
                    "skipped": [s.to_dict() for s in report.skipped]})
    else:
        table = Table("N", "column", "interval ms", "stamps", "gaps", "est. missing", "max gap ms", "first gap row")
        for r in report.episodes:
            for s in r.series:
                table.add_row(str(r.episode_index), s.column + (" (unwrapped)" if s.unwrapped else ""),
                              f"{s.interval_ns / 1e6:.1f}", str(s.stamps), str(s.count), str(s.missing_total),
                              f"{s.max_gap_ms:.1f}", str(int(s.rows[0])) if s.count else "-")
        if report.episodes:
            console.print(table)
        for sk in report.skipped:
            if sk.error:
                console.print(f"[red]episode {sk.episode_index} skipped: {escape(sk.error)}[/red]")
            else:
                console.print(f"episode {sk.episode_index} skipped: {sk.reason}")
        total = sum(r.gaps for r in report.episodes)
        console.print(f"{len(report.episodes)} episode(s), {total} gap(s) beyond {1 + tolerance:g} nominal intervals"
                      + (f"; {sum(bool(s.error) for s in report.skipped)} episode(s) could not be read"
                         if not report.ok else ""))
    if not report.ok:
        raise typer.Exit(1)
