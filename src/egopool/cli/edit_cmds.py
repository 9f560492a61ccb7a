"""``egopool edit merge|split|resume|...``: reorganise tasks, on a directory or an ``s3://`` task alike (issue 30).

Thin wrappers: one library call each (:mod:`egopool.edit`), ``--dry-run`` printing exactly what would change,
``--json`` for scripts.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

import typer
from rich.markup import escape

from ..errors import EgopoolError, LayoutError, OperationError
from .app import app
from .args import episode_argument, parse_episode_n
from .output import console, print_json

edit_app = typer.Typer(help="Reorganise tasks: merge, split, rename, task strings, columns and streams; "
                            "journaled, resumable, on a directory or s3:// alike.", no_args_is_help=True)
app.add_typer(edit_app, name="edit")

_JSON = typer.Option(False, "--json", help="Print the report as JSON on stdout.")
_DRY = typer.Option(False, "--dry-run", help="Show exactly what would change; change nothing.")
_INTO = typer.Option(..., "--into", metavar="TARGET",
                     help="The new task to build: a directory or s3://BUCKET/PREFIX/TASK (must not be a task yet).")
_INTO_MERGE = typer.Option(..., "--into", metavar="TARGET",
                           help="The task to build (a new location) or to append to (an existing task): a directory "
                                "or s3://BUCKET/PREFIX/TASK.")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def json_refusal(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """An edit command whose refusal, under ``--json``, is also a JSON object on stdout: ``{"ok": false, "error":
    "<the one line>"}`` (as ``validate --json`` says ``"ok": false``; docs/decisions.md E66); the one line on stderr
    and exit code 1 stay."""

    @functools.wraps(command)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except EgopoolError as exc:
            if kwargs.get("json_out"):
                print_json({"ok": False, "error": exc.one_line()})
            raise

    return run


#: The most N one ``--episodes`` list may name (a range wider than any task: refused, not expanded).
MAX_LISTED = 1_000_000


def parse_episode_list(text: str) -> list[int]:
    """``"1,3,5-7"`` -> ``[1, 3, 5, 6, 7]``; each N parsed as ``egopool delete`` does
    (:func:`~egopool.cli.args.parse_episode_n`: plain ASCII digits, no sign, no leading zero).

    Raises
    ------
    OperationError
        Not a comma list of N or N-M ranges with 1 <= N <= M (an empty item too), or more than
        :data:`MAX_LISTED` N in all.
    """
    out: list[int] = []
    parts = [p.strip() for p in text.split(",")]
    if text.strip() and not all(parts):  # "1,,2", "1,", ",1": a missing item is refused, not skipped (E96)
        raise OperationError(f"--episodes {text!r}: an empty item between commas", hint="e.g. --episodes 1,3,5-7")
    for part in (p for p in parts if p):
        lo, sep, hi = part.partition("-")
        try:
            a = parse_episode_n(lo.strip())
            b = parse_episode_n(hi.strip()) if sep else a
        except LayoutError:
            raise OperationError(f"--episodes {text!r}: {part!r} is not N or N-M (N a plain positive decimal "
                                 "integer: 1, 2, 3...)", hint="e.g. --episodes 1,3,5-7") from None
        if b < a:
            raise OperationError(f"--episodes {text!r}: {part!r} is not a range of N >= 1",
                                 hint="e.g. --episodes 1,3,5-7")
        if len(out) + (b - a + 1) > MAX_LISTED:
            raise OperationError(f"--episodes {text!r}: names more than {MAX_LISTED} N, more than a task holds",
                                 hint="name the task's N (`egopool ls TASK`)")
        out += range(a, b + 1)
    return out


def _locations(*where: str) -> None:
    """Refuse a mistyped S3 URI among the location arguments (``s3:/b/p``, ``S3://b/p``) before anything else."""
    from ..storage._path import refuse_near_uri

    for w in where:
        refuse_near_uri(w)


def _show(report: object, json_out: bool) -> None:
    from ..edit import EditReport, InplaceReport

    assert isinstance(report, (EditReport, InplaceReport))
    if json_out:
        print_json(report.to_dict())
        return
    if report.resumed:
        console.print("[yellow]finished an interrupted edit of this target[/yellow]")
    for line in report.lines():
        console.print(escape(line))


@contextlib.contextmanager
def _resume_hint(target: str) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) of a merge or split that left its journal in ``target``: one line on stderr saying how
    to finish it, besides the CLI's "egopool: interrupted" (docs/decisions.md E67)."""
    try:
        yield
    except KeyboardInterrupt:
        from ..edit.copy import open_target
        from ..edit.journal import JOURNAL

        try:
            unfinished = open_target(target, new=False).store.exists(JOURNAL)
        except Exception:  # a look only: the interrupt is what is reported
            unfinished = False
        if unfinished:
            print(f"egopool: the edit of {target} is unfinished and its sources stay held; "
                  f"`egopool edit resume {target}` finishes it", file=sys.stderr)
        raise


@edit_app.command("merge")
@json_refusal
def merge_cmd(sources: list[str] = typer.Argument(..., metavar="TASK", help="Tasks to merge, in this order (two or more; one with --into an existing task)."),
              into: str = _INTO_MERGE, dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Merge tasks with the same declarations into a new task, numbered 1.. in the order given (each by ascending N), or append them to an existing task (--into EXISTING), numbered after the highest N it ever used (deleted N are never reused).

    Duplicates (same content digest) are skipped and reported; stats.json is the sources' accumulators merged; tasks.jsonl is united; each new N's source task and N are kept in meta/edit_origins.jsonl. A different declaration (fps, features, streams...) is refused in one line naming it.
    """
    from ..edit import merge_tasks

    _locations(*sources, into)
    with _resume_hint(into):
        report = merge_tasks(sources, into, dry_run=dry_run)
    _show(report, json_out)


@edit_app.command("split")
@json_refusal
def split_cmd(source: str = typer.Argument(..., metavar="TASK", help="The task to take episodes from."),
              into: str = _INTO,
              episodes: str = typer.Option("", "--episodes", metavar="LIST", help="Global N: 1,3,5-7."),
              where: list[str] = typer.Option([], "--where", metavar="COND",
                                              help='A condition FIELD OP NUMBER on the episode row, e.g. '
                                                   '"length>=300"; FIELD: length, duration_sec, created_at, '
                                                   "task_index, episode_index; OP: >= <= > < == != (= is ==) "
                                                   "(repeatable; all must hold)."),
              episodes_from: str = typer.Option("", "--episodes-from", metavar="SELECTION",
                                                help="A review selection: a file of N, the server's JSON answer, "
                                                     "or its http(s):// search URL (token in $EGOPOOL_TOKEN)."),
              move: bool = typer.Option(False, "--move", help="Delete them from TASK once the new task is complete "
                                                              "(their N stay retired there)."),
              dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Copy (or move) chosen episodes of a task into a new task, numbered 1.. in ascending N.

    --episodes, --episodes-from and --where narrow each other: an episode is taken when every one given picks it (their intersection; --episodes 1,4 --where task_index==1 takes 4 alone when episode 1 has task_index 0).

    Every value is kept (data, rows, calibration, videos byte for byte); stats.json is rebuilt from the chosen episodes by the accumulator merge. An N that is not in TASK is refused before anything is written.
    """
    from ..edit import split_task

    _locations(source, into)
    indices = parse_episode_list(episodes)
    if episodes_from:
        from ..curation.selection import read_selection
        from ..meta.info import read_info

        name = source.rstrip("/").rsplit("/", 1)[-1]
        picked = read_selection(episodes_from).for_task(name, str(read_info(source).get("task_name") or name))
        if episodes:  # both given: they narrow each other, as --where does (E96)
            indices = [n for n in indices if n in set(picked)]
            if not indices:
                raise OperationError(f"no N of --episodes {episodes!r} is in the selection {episodes_from}; nothing "
                                     "was written", hint="--episodes and --episodes-from narrow each other "
                                                         "(intersection); give one of them")
        else:
            indices = list(picked)
    with _resume_hint(into):
        report = split_task(source, into, indices, where, move=move, dry_run=dry_run)
    _show(report, json_out)


@edit_app.command("resume")
@json_refusal
def resume_cmd(target: str = typer.Argument(..., metavar="TASK", help="The task holding meta/.edit.json."),
               json_out: bool = _JSON) -> None:
    """Finish an interrupted edit from its journal (meta/.edit.json), whatever it was."""
    from ..edit import resume_edit

    _locations(target)
    with _resume_hint(target):
        report = resume_edit(target)
    _show(report, json_out)


@edit_app.command("abandon")
def abandon_cmd(target: str = typer.Argument(..., metavar="TARGET",
                                             help="The new task an unfinished merge, split or bucket rename builds."),
                json_out: bool = _JSON) -> None:
    """Give up an unfinished merge, split or bucket rename into a new task: its partial objects and journal are removed and its sources released (their hold, meta/.edit.json, removed).

    For when `egopool edit resume TARGET` is refused because a source changed since the edit was planned. Refused when the target was committed already, for an in-place edit and for a merge into an existing task (`egopool edit resume` finishes those).
    """
    from ..edit.abandon import abandon_edit

    _locations(target)
    _show(abandon_edit(target), json_out)


@edit_app.command("rename")
@json_refusal
def rename_cmd(task: str = typer.Argument(..., metavar="TASK", help="The task to rename."),
               name: str = typer.Argument(..., metavar="NAME", help="Its new name (the new task is its sibling)."),
               dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Rename a task: its directory (rename(2)) or prefix (copied, then the old one deleted) and task_name.

    N, data, rows, videos and stats.json are unchanged; a bucket's tombstones of deleted N move with it.
    """
    from ..edit import rename_task

    _locations(task)
    _show(rename_task(task, name, dry_run=dry_run), json_out)


def _inplace(task: str, change: object, dry_run: bool, json_out: bool) -> None:
    from ..edit import Change, apply_change

    _locations(task)
    assert isinstance(change, Change)
    report = apply_change(task, change, dry_run=dry_run)
    if json_out:
        print_json(report.to_dict())
        return
    if report.resumed:
        console.print("[yellow]finished an interrupted edit of this task[/yellow]")
    for line in report.lines():
        console.print(escape(line))


_TASK = typer.Argument(..., metavar="TASK", help="Task directory, or s3://BUCKET/PREFIX/TASK.")


@edit_app.command("set-task")
@json_refusal
def set_task_cmd(task: str = _TASK, text: str = typer.Argument(..., metavar="TEXT", help="The new task string."),
                 task_index: int = typer.Option(0, "--task-index", help="Which line of tasks.jsonl."),
                 dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Set a task string (the language instruction) in meta/tasks.jsonl, one JSON object per line (§5).

    The report shows each line's old -> new string; a string another line holds already is refused (naming its task_index).
    """
    from ..edit import SetTask

    _inplace(task, SetTask(text, task_index), dry_run, json_out)


@edit_app.command("remove-column")
@json_refusal
def remove_column_cmd(task: str = _TASK, column: str = typer.Argument(
                          ..., metavar="COLUMN", help="The column's full name, e.g. observation.left_glove."),
                      dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Remove a column from every episode, info.json features and sensors, and stats.json."""
    from ..edit import RemoveColumn

    _inplace(task, RemoveColumn(column), dry_run, json_out)


@edit_app.command("rename-column")
@json_refusal
def rename_column_cmd(task: str = _TASK, old: str = typer.Argument(
                          ..., metavar="OLD", help="The column's full name now, e.g. observation.left_glove."),
                      new: str = typer.Argument(..., metavar="NEW", help="Its new full name, in the same namespace "
                                                "(observation., status.) and of the same reserved kind."),
                      dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Rename a column in every episode at once, info.json and stats.json (multi_device_storage.md §2.4 names)."""
    from ..edit import RenameColumn

    _inplace(task, RenameColumn(old, new), dry_run, json_out)


@edit_app.command("add-column", context_settings={"ignore_unknown_options": True})
@json_refusal
def add_column_cmd(task: str = _TASK, index: int = episode_argument("The episode (global N)."),
                   column: str = typer.Argument(..., metavar="COLUMN",
                                                help="The new column's full name, observation.<name>."),
                   values: str = typer.Option(..., "--from", metavar="FILE",
                                              help=".npy (rows,) or (rows, d), or text: one value (or a vector "
                                                   "separated by spaces or commas) per line."),
                   dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Add a float32 column to ONE episode (N) from a file holding one value (or vector) per data row; declare it.

    The other episodes stay without it (the spec's sparse column): run it once per episode to fill the task. A later merge with a sibling task that lacks the column is refused (its features differ).

    A value float32 does not hold (an integer beyond 2**24 it would round, a non-zero value it would make zero)
    is refused, naming its row; fractional values are rounded to float32's 7 significant digits.
    """
    from ..edit import AddColumn, load_values

    _locations(task)
    _inplace(task, AddColumn(column, index, load_values(values), values), dry_run, json_out)


@edit_app.command("remove-slot")
@json_refusal
def remove_slot_cmd(task: str = _TASK, slot: str = typer.Argument(
                        ..., metavar="SLOT", help="The stream slot (image_key), e.g. head_left_rgb."),
                    dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Remove a stream slot: every episode's video, video_extensions, cameras, device_names, devices' slots.

    The report lists the videos deleted apart from the files rewritten (the rows, whose checksums drop them).
    """
    from ..edit import RemoveSlot

    _inplace(task, RemoveSlot(slot), dry_run, json_out)


@edit_app.command("rename-slot")
@json_refusal
def rename_slot_cmd(task: str = _TASK, old: str = typer.Argument(
                        ..., metavar="OLD", help="The stream slot (image_key) now, e.g. head_left_rgb."),
                    new: str = typer.Argument(..., metavar="NEW", help="Its new name ([a-z0-9_]; a depth stream's "
                                              "ends in depth or depth_N)."),
                    dry_run: bool = _DRY, json_out: bool = _JSON) -> None:
    """Rename a stream slot in every episode and declaration; a slot name a device uses already is refused.

    The name says the stream's kind: a name ending in depth (or depth_N, e.g. head_depth_2) for a depth stream, and only for one.
    """
    from ..edit import RenameSlot

    _inplace(task, RenameSlot(old, new), dry_run, json_out)
