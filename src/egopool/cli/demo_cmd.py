"""``egopool demo [DIR]``: the bundled real recordings -> one validated multi-device task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..demo import DEMO_TASK, DemoSummary, plan_demo, run_demo
from .app import app
from ..codecs.depth import DEPTH_CODECS
from .output import changed_values_to_stderr, console, err_console, human_bytes, print_json


def _print_summary(s: DemoSummary) -> None:
    console.print(f"[bold]{DEMO_TASK}[/bold]: {len(s.episodes)} episodes, {s.frames} frames "
                  f"({s.frames / 30.0:.1f} s at 30 fps) written in {s.seconds:.1f} s -> {s.task_dir}")
    table = Table("stream / file", "bytes (all episodes)", "size")
    for key, n in s.stream_bytes.items():
        table.add_row(f"videos/{key}", str(n), human_bytes(n))
    table.add_row("data parquet", str(s.data_bytes), human_bytes(s.data_bytes))
    table.add_row("meta/", str(s.meta_bytes), human_bytes(s.meta_bytes))
    total = sum(s.stream_bytes.values()) + s.data_bytes + s.meta_bytes
    table.add_row("[bold]total[/bold]", str(total), human_bytes(total))
    console.print(table)
    console.print("episodes: " + ", ".join(f"N={e['episode_index']} ({e['length']} rows)" for e in s.episodes))
    c = s.counts
    console.print(f"trajectory points attached: {c['trajectory_points']}, IMU samples attached: {c['imu_samples']}")
    console.print("[bold]timestamps[/bold]")
    for line in s.synthesised:
        console.print(f"  - {line}")
    console.print("[bold]notes[/bold]")
    for line in s.notes:
        console.print(f"  - {line}")
    if s.validation is None:
        console.print("[yellow]validation skipped: egopool.validate is not available in this build[/yellow]")
        return
    findings: list[dict[str, Any]] = list(s.validation.get("findings", []))
    if s.ok:
        console.print(f"[green]validate: OK[/green] ({len(findings)} finding(s), none an error)")
    else:
        console.print("[red]validate: FAILED[/red]")
    for f in findings:
        console.print(f"  {f.get('severity')} {f.get('rule')} {f.get('path')}: {f.get('message')}")


@app.command("demo")
def demo_cmd(
    directory: Path = typer.Argument(Path("demo_out"), metavar="DIR",
                                     help=f"Where to put the task (it goes into DIR/{DEMO_TASK})."),
    overwrite: bool = typer.Option(False, "--overwrite",
                                   help="Replace an existing demo task in DIR (only that task directory)."),
    episodes: int = typer.Option(5, "--episodes", min=1, help="Number of episodes the 20.7 s are split into."),
    max_seconds: float | None = typer.Option(None, "--max-seconds",
                                             help="Use only the first S seconds of the recordings (quick runs)."),
    video_width: int = typer.Option(640, "--video-width",
                                    help="Stored width of the hand video (source 1280x720; 640 keeps it fast)."),
    depth_codec: str = typer.Option("hevc12", "--depth-codec", help=f"{' or '.join(DEPTH_CODECS)} for d435_depth: "
                                    "hevc12 = 12-bit log code (lossy); ffv1 = lossless uint16 mm MKV."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be written and exit."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Build a validated multi-device task from the bundled real recordings.

    Hand video + joints, TUM trajectory, x-io IMU and a TUM RGB-D frame become one uvc + d435 + imu rig.

    Prints episodes, frames, bytes per stream, time taken and which timestamps were synthesised.

    Exit code 1 when validation reports an error.
    """
    if dry_run:
        plan = plan_demo(directory, episodes=episodes, max_seconds=max_seconds, video_width=video_width,
                         overwrite=overwrite)
        if json_out:
            print_json({"dry_run": True, **plan.to_dict()})
            return
        action = "replace" if plan.replaces else "create"
        console.print(f"would {action} {plan.task_dir}: {len(plan.episode_sizes)} episodes "
                      f"{list(plan.episode_sizes)}, {plan.frames} frames, hand video "
                      f"{plan.source_size[0]}x{plan.source_size[1]} -> {plan.video_size[0]}x{plan.video_size[1]}")
        return
    with changed_values_to_stderr(), \
            Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                     TimeElapsedColumn(), console=err_console, transient=True,
                     disable=json_out or not err_console.is_terminal) as bar:
        job = bar.add_task("writing episodes", total=None)

        def tick(done: int, total: int) -> None:
            bar.update(job, completed=done, total=total)

        summary = run_demo(directory, episodes=episodes, max_seconds=max_seconds, video_width=video_width,
                           overwrite=overwrite, depth_codec=depth_codec, progress=tick)
    if json_out:
        print_json(summary.to_dict())
    else:
        _print_summary(summary)
    if not summary.ok:
        raise typer.Exit(1)
