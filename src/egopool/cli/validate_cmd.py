"""``egopool validate TASK... [--json]``: check tasks against the spec, read-only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..validate import Report, validate_task
from .app import app
from .args import parse_task_location
from .output import err_console, print_json
from .ray_option import RAY_OPTION, executor_for


def _validate_all(tasks: list[Path], show_progress: bool, fast: bool, ray: str | None = None) -> list[Report]:
    reports: list[Report] = []
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True,
                  disable=not (show_progress and err_console.is_terminal)) as bar, executor_for(ray) as executor:
        for task in tasks:
            job = bar.add_task(f"validating {task.name or task}", total=None)

            def tick(done: int, total: int, job: Any = job) -> None:
                bar.update(job, completed=done, total=total)

            reports.append(validate_task(task, progress=tick, fast=fast, executor=executor))
            bar.remove_task(job)
    return reports


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@app.command("validate")
def validate_cmd(
    tasks: list[Path] = typer.Argument(
        ..., metavar="TASK", parser=parse_task_location,
        help="One or more task directories (each holds data/, videos/, meta/), or s3://BUCKET/PREFIX/TASK."),
    json_out: bool = typer.Option(False, "--json",
                                  help='Print {"ok", "findings": [{"rule", "severity", "path", "message"}], '
                                       '"tasks"} for scripts.'),
    fast: bool = typer.Option(False, "--fast",
                              help="Count video frames without decoding them and skip the files' checksums (much "
                                   "faster; a damaged frame payload goes unnoticed)."),
    ray: str | None = RAY_OPTION,
) -> None:
    """Check tasks against the pooled_episodes_v1 spec (file_format.md §12, multi_device_storage.md §8).

    Each finding cites the spec section it breaks, names the file and column, and says what to do.
    Every frame of every stream is decoded, as a reader would, and every file is checked against the sha256
    its episode's row records (--fast only counts frames and skips the hashing).

    Read-only: nothing is written. Exit code 0 when no finding is an error, else 1.
    With --ray, every episode is checked by its own Ray task; the report is the same.
    Warnings (legacy layouts that readers tolerate) do not fail a task.
    """
    reports = _validate_all(tasks, show_progress=not json_out, fast=fast, ray=ray)
    ok = all(r.ok for r in reports)
    if json_out:
        print_json({
            "ok": ok,
            "findings": [f.to_dict() for r in reports for f in r.findings],
            "tasks": [{"task": r.task, "ok": r.ok, "episodes": r.episodes, "errors": len(r.errors),
                       "warnings": len(r.warnings), "notes": list(r.notes)} for r in reports],
        })
    else:
        for r in reports:
            for f in r.findings:
                style = "red" if f.severity == "error" else "yellow"
                typer.echo(typer.style(f"{f.severity.upper():<7}", fg=style) + f" {f.rule}  {f.path}: {f.message}")
            for note in r.notes:
                typer.echo(typer.style("NOTE   ", fg="cyan") + f" {r.task}: {note}")
            verdict = "ok" if r.ok else "FAILED"
            typer.echo(f"{r.task}: {verdict} ({_plural(r.episodes, 'episode')}, {_plural(len(r.errors), 'error')}, "
                       f"{_plural(len(r.warnings), 'warning')})")
        n_err = sum(len(r.errors) for r in reports)
        if ok:
            typer.echo(f"OK: {_plural(len(reports), 'task')} valid")
        else:
            bad = sum(not r.ok for r in reports)
            typer.echo(f"FAILED: {_plural(n_err, 'error')} in {bad} of {_plural(len(reports), 'task')}")
    if not ok:
        raise typer.Exit(code=1)
