"""``egopool audit-gaps``: report stamp gaps beyond the nominal frame interval, per episode and slot."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import Progress
from rich.table import Table

from ..gaps import audit_episode_gaps
from ..reader import open_task
from .app import app
from .output import console, err_console, print_json


@app.command("audit-gaps")
def audit_gaps_cmd(
    task: Path = typer.Argument(..., metavar="TASK", help="Task directory (holds data/, videos/, meta/)."),
    episode: Optional[list[int]] = typer.Option(None, "--episode", "-e",
                                                help="Only these global N (repeatable). Default: every episode."),
    tolerance: float = typer.Option(0.5, "--tolerance", min=0.0,
                                    help="A step longer than (1 + TOLERANCE) / fps is a gap."),
    fps: Optional[float] = typer.Option(None, "--fps", help="Nominal rate (default: info.json fps)."),
    json_out: bool = typer.Option(False, "--json", help="Print the full report (every gap) as JSON."),
) -> None:
    """Find holes in hardware_ns (unwrapped when 32-bit truncated) and every *_ns column.

    Zero stamps (no sample) and repeated stamps are skipped.

    A gap says where to look; it does not prove a frame was lost (file_format.md §7.3). Read-only.
    """
    t = open_task(task)
    episodes = [t.episode(n) for n in episode] if episode else t.episodes()
    episodes = [ep for ep in episodes if ep.files.data is not None]
    reports = []
    quiet = json_out or len(episodes) < 2 or not err_console.is_terminal
    with Progress(console=err_console, transient=True, disable=quiet) as progress:
        bar = progress.add_task("auditing", total=len(episodes))
        for ep in episodes:
            reports.append(audit_episode_gaps(ep, tolerance=tolerance, fps=fps))
            progress.advance(bar)
    if json_out:
        print_json({"task": str(t.path), "episodes": [r.to_dict() for r in reports]})
        return
    table = Table("N", "column", "stamps", "gaps", "est. missing", "max gap ms", "first gap row")
    for r in reports:
        for s in r.series:
            table.add_row(str(r.episode_index), s.column + (" (unwrapped)" if s.unwrapped else ""), str(s.stamps),
                          str(s.count), str(s.missing_total), f"{s.max_gap_ms:.1f}",
                          str(int(s.rows[0])) if s.count else "-")
    console.print(table)
    total = sum(r.gaps for r in reports)
    interval = reports[0].interval_ms if reports else 0.0
    console.print(f"{len(reports)} episode(s), {total} gap(s) beyond {interval * (1 + tolerance):.1f} ms")
