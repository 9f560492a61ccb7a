"""``egopool info``, ``egopool ls``, ``egopool show``: look at a task without changing it.

``ls`` and ``show`` are for looking at broken tasks too: a problem of one episode (an
unreadable data parquet or meta row, a malformed row value, a missing stream file) is
listed with that episode and never stops the listing. ``egopool validate`` is the check.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import EgopoolError
from ..meta import server_imports
from ..meta.info import edit_midway
from ..read.reader import Episode, open_task
from ..storage import ObjectPath
from .app import app
from .args import episode_argument, task_argument
from .output import console, human_bytes, print_json


def _int_field(row: dict[str, Any], key: str, problems: list[str]) -> int | None:
    v = row.get(key)
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return int(v)
    problems.append(f"meta row {key!r} is {'missing' if v is None else repr(v)}, not an integer")
    return None


def _number_field(row: dict[str, Any], key: str, problems: list[str]) -> None:
    v = row.get(key)
    if not (isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))):
        problems.append(f"meta row {key!r} is {'missing' if v is None else repr(v)}, not a number")


#: the problem of an episode still being written (or cut off): shown as incomplete, not a failure of `show`
UNFINISHED = "no meta/episodes row (the episode was never finished)"


def _damaged(problems: list[str], finished: bool) -> bool:
    """True when a problem other than the episode being unfinished was found (its one UNFINISHED line)."""
    return len(problems) > (0 if finished else 1)


def _read_meta(ep: Episode, problems: list[str]) -> dict[str, Any] | None:
    if ep.files.meta is None:
        problems.append(UNFINISHED)
        return None
    try:
        return ep.meta
    except EgopoolError as exc:
        problems.append(f"meta row unreadable: {exc.message}")
        return None


def _data_rows(ep: Episode, problems: list[str]) -> int | None:
    if ep.files.data is None:
        problems.append("no data parquet")
        return None
    try:
        return ep.length
    except EgopoolError as exc:
        problems.append(f"data parquet unreadable: {exc.message.splitlines()[0]}")
        return None


def _size(ep: Episode) -> int:
    total = 0
    for p in ep.files.paths():
        try:
            total += p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.iterdir())
        except OSError:
            continue
    return total


def _summary(ep: Episode) -> tuple[dict[str, Any], dict[str, Any] | None]:
    problems: list[str] = []
    row = _read_meta(ep, problems)
    finished = ep.files.meta is not None
    rows = _data_rows(ep, problems)
    length = rows
    if row is not None:
        meta_length = _int_field(row, "length", problems)
        if meta_length is not None:
            if rows is not None and meta_length != rows:
                problems.append(f"meta row length {meta_length} != {rows} data rows")
            length = meta_length
        for key in ("created_at", "duration_sec"):
            _number_field(row, key, problems)
        vc = row.get("video_codec")
        if isinstance(vc, dict):
            missing = sorted(k for k in vc if k not in ep.files.videos)
            if missing:
                problems.append(f"video_codec lists stream(s) {missing} but their video file is missing")
        else:
            problems.append(f"meta row video_codec is {vc!r}, not an object")
    summary = {
        "episode_index": ep.index, "chunk": ep.chunk, "file": ep.file, "length": length,
        "streams": sorted(ep.files.videos), "bytes": _size(ep), "complete": not problems, "problems": problems,
        "finished": finished, "damaged": _damaged(problems, finished),
    }
    return summary, row


def episode_summary(ep: Episode) -> dict[str, Any]:
    """One ``ls`` row: episode_index, chunk, file, length, streams, bytes, complete, problems, finished, damaged.

    ``finished`` is False for an episode still being written or cut off (no meta row);
    ``damaged`` is True when a part that exists cannot be read or is malformed (any problem
    other than being unfinished). ``complete`` is True when the data parquet footer and the
    meta row read, the row's
    values are well-formed and every stream its ``video_codec`` lists has its file
    (multi_device_storage.md §1.2); ``problems`` says what is not so, one line each.
    Never raises for a broken episode.
    """
    return _summary(ep)[0]


#: Episodes of a bucket task summarised at once by ``ls`` (each summary is two GETs: decisions O33).
_BUCKET_THREADS = 16


def _summaries(episodes: list[Episode], *, in_bucket: bool) -> list[dict[str, Any]]:
    """:func:`episode_summary` of each episode, in order; in a bucket :data:`_BUCKET_THREADS` at a time, so the
    requests' latency overlaps (their number does not change)."""
    if not in_bucket or len(episodes) < 2:
        return [episode_summary(ep) for ep in episodes]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(_BUCKET_THREADS, len(episodes))) as pool:
        return list(pool.map(episode_summary, episodes))


@app.command("info")
def info_cmd(task: Path = task_argument(),
             json_out: bool = typer.Option(False, "--json", help="Print info.json as JSON.")) -> None:
    """Show a task's meta/info.json declarations."""
    t = open_task(task)
    midway = edit_midway(t.path)  # an in-place edit interrupted or running: its declarations are in flux (E63)
    if midway is not None:
        raise midway
    if json_out:
        print_json(t.info)
        return
    info = t.info
    console.print(f"[bold]{escape(t.name)}[/bold]  format={info.get('format')}  fps={info.get('fps')}  "
                  f"app_version={info.get('app_version')}  total_episodes={info.get('total_episodes')}")
    exts = info.get("video_extensions")
    exts = exts if isinstance(exts, dict) else {}
    console.print(f"streams: {', '.join(f'{k} ({v})' for k, v in exts.items()) or '-'}")
    devices = info.get("devices")
    devices = devices if isinstance(devices, list) else []
    console.print(f"devices: {', '.join(str(d.get('key', '?')) for d in devices if isinstance(d, dict)) or '-'}")
    table = Table("column", "dtype", "shape", "encoding / frame")
    feats = info.get("features")
    for name, feat in (feats if isinstance(feats, dict) else {}).items():
        feat = feat if isinstance(feat, dict) else {}
        extra = str(feat.get("encoding", ""))
        if "frame" in feat:
            extra = f"{extra} frame={feat['frame']}"
        table.add_row(name, str(feat.get("dtype")), str(feat.get("shape")), extra)
    console.print(table)


@app.command("ls")
def ls_cmd(task: Path = task_argument(),
           json_out: bool = typer.Option(False, "--json", help="Print a JSON list of episodes (with 'complete' "
                                                                "and 'problems').")) -> None:
    """List a task's episodes (global N, chunk, file, rows, streams, size, complete).

    An episode is complete when its data parquet and meta row read and every stream its row lists has a file;
    a broken episode is listed with its problems (run `egopool validate` for the full check).
    """
    t = open_task(task)
    publishing = server_imports.publishing(t.path)  # a pooling server's import in progress (U16): not listed
    rows = _summaries([ep for ep in t.episodes(uncommitted=True) if ep.files.committed
                       or ep.index not in publishing], in_bucket=isinstance(t.path, ObjectPath))
    if json_out:
        print_json(rows)
        return
    table = Table("N", "chunk", "file", "length", "streams", "size", "complete")
    for r in rows:
        table.add_row(str(r["episode_index"]), f"{r['chunk']:03d}", f"{r['file']:03d}", str(r["length"]),
                      ", ".join(r["streams"]), human_bytes(r["bytes"]),
                      "yes" if r["complete"] else "[red]NO: " + escape("; ".join(r["problems"])) + "[/red]")
    console.print(table)
    broken = sum(not r["complete"] for r in rows)
    console.print(f"{len(rows)} episode(s)" + (f", {broken} incomplete" if broken else "")
                  + (f"; publish or delete under way: {', '.join(map(str, sorted(publishing)))}" if publishing else ""))


def _number(v: Any) -> str:
    if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v)):
        return f"{float(v):.3f}"
    return f"{v!r} (not a number)"


@app.command("show", context_settings={"ignore_unknown_options": True})
def show_cmd(task: Path = task_argument(),
             n: int = episode_argument("Global 1-based episode index N."),
             json_out: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Show one episode: its meta row, columns with types, streams and trajectories.

    Parts that cannot be read are listed under problems (exit 1); the rest is shown. An episode never finished (no meta row) is shown as incomplete (exit 0).
    """
    t = open_task(task)
    ep = t.episode(n, uncommitted=True)
    summary, row = _summary(ep)
    problems: list[str] = summary["problems"]
    columns: dict[str, str] = {}
    trajectories: dict[str, Any] = {}
    if ep.files.data is not None:
        try:
            columns = {f.name: str(f.type) for f in ep.schema}
        except EgopoolError:
            pass  # already a problem: the footer did not read
        for c in ep.trajectories() if columns else []:
            try:
                tr = ep.trajectory(c)
            except EgopoolError as exc:
                if not any(exc.message in p for p in problems):  # not the meta row's problem again
                    problems.append(f"trajectory {c}: {exc.message}")
                continue
            trajectories[c] = {"points": int(tr.points.shape[0]), "frame": tr.frame}
    out: dict[str, Any] = {
        **summary,
        "paths": {"data": ep.files.data, "meta": ep.files.meta, "videos": ep.files.videos},
        "meta": row, "columns": columns, "trajectories": trajectories,
    }
    out["complete"] = not problems
    out["damaged"] = _damaged(problems, summary["finished"])
    if json_out:
        print_json(out)
        if out["damaged"]:  # a part that cannot be read fails, for scripts too (issue 28)
            raise typer.Exit(1)
        return
    console.print(f"[bold]episode {ep.index}[/bold] (chunk-{ep.chunk:03d}/episode-{ep.file:03d}) "
                  f"rows={out['length']} size={human_bytes(out['bytes'])}")
    if row is not None:
        console.print(f"created_at={_number(row.get('created_at'))} duration_sec={_number(row.get('duration_sec'))} "
                      f"drop_stats={escape(str(row.get('drop_stats')))}")
    if columns:
        table = Table("column", "arrow type")
        for name, typ in columns.items():
            table.add_row(name, escape(typ))
        console.print(table)
    for key, path in ep.files.videos.items():
        console.print(f"stream {key}: {escape(str(path))}")
    for col, tr in trajectories.items():
        console.print(f"trajectory {col}: {tr['points']} points, frame={tr['frame']}")
    for p in problems:
        console.print(f"[red]problem:[/red] {escape(p)}")
    if out["damaged"]:
        raise typer.Exit(1)
