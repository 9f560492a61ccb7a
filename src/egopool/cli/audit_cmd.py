"""``egopool audit-gaps``: report stamp gaps beyond the nominal frame interval, per episode and slot."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import Progress
from rich.table import Table

from ..errors import FormatError
from ..gaps import audit_episode_gaps, check_rate
from ..read.reader import open_task
from .app import app
from .output import console, err_console, print_json


@app.command("audit-gaps")
def audit_gaps_cmd(
    task: Path = typer.Argument(..., metavar="TASK", help="Task directory (holds data/, videos/, meta/)."),
    episode: Optional[list[int]] = typer.Option(None, "--episode", "-e",
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

    A gap says where to look; it does not prove a frame was lost (file_format.md §7.3). Read-only.
    """
    if fps is not None:
        check_rate(fps, "--fps")
    t = open_task(task)
    episodes = [t.episode(n) for n in episode] if episode else t.episodes()
    if episode:
        for ep in episodes:
            if ep.files.data is None:
                raise FormatError(f"episode {ep.index} has no data parquet, nothing to audit",
                                  path=t.layout.data_file(ep.index), hint="run `egopool validate TASK`")
    skipped = [ep.index for ep in episodes if ep.files.data is None]
    episodes = [ep for ep in episodes if ep.files.data is not None]
    reports = []
    quiet = json_out or len(episodes) < 2 or not err_console.is_terminal
    with Progress(console=err_console, transient=True, disable=quiet) as progress:
        bar = progress.add_task("auditing", total=len(episodes))
        for ep in episodes:
            reports.append(audit_episode_gaps(ep, tolerance=tolerance, fps=fps))
            progress.advance(bar)
    if json_out:
        print_json({"task": str(t.path), "episodes": [r.to_dict() for r in reports],
                    "skipped": [{"episode_index": n, "reason": "no data parquet"} for n in skipped]})
        return
    table = Table("N", "column", "interval ms", "stamps", "gaps", "est. missing", "max gap ms", "first gap row")
    for r in reports:
        for s in r.series:
            table.add_row(str(r.episode_index), s.column + (" (unwrapped)" if s.unwrapped else ""),
                          f"{s.interval_ns / 1e6:.1f}", str(s.stamps), str(s.count), str(s.missing_total),
                          f"{s.max_gap_ms:.1f}", str(int(s.rows[0])) if s.count else "-")
    if reports:
        console.print(table)
    for n in skipped:
        console.print(f"episode {n} skipped: no data parquet")
    total = sum(r.gaps for r in reports)
    console.print(f"{len(reports)} episode(s), {total} gap(s) beyond {1 + tolerance:g} nominal intervals")
