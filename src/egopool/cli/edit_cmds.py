"""``egopool edit merge|split|resume|...``: reorganise tasks, on a directory or an ``s3://`` task alike (issue 30).

Thin wrappers: one library call each (:mod:`egopool.edit`), ``--dry-run`` printing exactly what would change,
``--json`` for scripts.
"""

from __future__ import annotations

import typer
from rich.markup import escape

from ..errors import OperationError
from .app import app
from .output import console, print_json

edit_app = typer.Typer(help="Reorganise tasks: merge, split, rename, task strings, columns and streams; "
                            "journaled, resumable, on a directory or s3:// alike.", no_args_is_help=True)
app.add_typer(edit_app, name="edit")

_JSON = typer.Option(False, "--json", help="Print the report as JSON on stdout.")
_DRY = typer.Option(False, "--dry-run", help="Show exactly what would change; change nothing.")
_INTO = typer.Option(..., "--into", metavar="TARGET",
                     help="The new task to build: a directory or s3://BUCKET/PREFIX/TASK (must not be a task yet).")


def parse_episode_list(text: str) -> list[int]:
    """``"1,3,5-7"`` -> ``[1, 3, 5, 6, 7]``.

    Raises
    ------
    OperationError
        Not a comma list of N or N-M ranges with N >= 1.
    """
    out: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        lo, sep, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise OperationError(f"--episodes {text!r}: {part!r} is not N or N-M",
                                 hint="e.g. --episodes 1,3,5-7") from None
        if a < 1 or b < a:
            raise OperationError(f"--episodes {text!r}: {part!r} is not a range of N >= 1",
                                 hint="e.g. --episodes 1,3,5-7")
        out += range(a, b + 1)
    return out


def _show(report: object, json_out: bool) -> None:
    from ..edit import EditReport

    assert isinstance(report, EditReport)
    if json_out:
        print_json(report.to_dict())
        return
    if report.resumed:
        console.print("[yellow]finished an interrupted edit of this target[/yellow]")
    for line in report.lines():
        console.print(escape(line))


@edit_app.command("merge")
def merge_cmd(sources: list[str] = typer.Argument(..., metavar="TASK...", help="Tasks to merge, in this order."),
              into: str = _INTO, dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Merge tasks with the same declarations into a new task, numbered 1.. in the order given (each by ascending N).

    Duplicates (same content digest) are skipped and reported; stats.json is the sources' accumulators merged; tasks.jsonl is united; each new N's source task and N are kept in meta/edit_origins.jsonl. A different declaration (fps, features, streams...) is refused in one line naming it.
    """
    from ..edit import merge_tasks

    _show(merge_tasks(sources, into, dry_run=dry_run), json_out)


@edit_app.command("split")
def split_cmd(source: str = typer.Argument(..., metavar="TASK", help="The task to take episodes from."),
              into: str = _INTO,
              episodes: str = typer.Option("", "--episodes", metavar="LIST", help="Global N: 1,3,5-7."),
              where: list[str] = typer.Option([], "--where", metavar="COND",
                                              help='A condition on the episode row, e.g. "length>=300" '
                                                   "(repeatable; all must hold)."),
              move: bool = typer.Option(False, "--move", help="Delete them from TASK once the new task is complete "
                                                              "(their N stay retired there)."),
              dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Copy (or move) chosen episodes of a task into a new task, numbered 1.. in ascending N.

    Every value is kept (data, rows, calibration, videos byte for byte); stats.json is rebuilt from the chosen episodes by the accumulator merge. An N that is not in TASK is refused before anything is written.
    """
    from ..edit import split_task

    _show(split_task(source, into, parse_episode_list(episodes), where, move=move, dry_run=dry_run), json_out)


@edit_app.command("resume")
def resume_cmd(target: str = typer.Argument(..., metavar="TASK", help="The task holding meta/.edit.json."),
               json_out: bool = _JSON) -> None:
    """Finish an interrupted edit from its journal (meta/.edit.json), whatever it was."""
    from ..edit import resume_edit

    _show(resume_edit(target), json_out)
