"""``egopool info``, ``egopool ls``, ``egopool show``: look at a task without changing it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from ..reader import Episode, open_task
from .app import app
from .output import console, human_bytes, print_json


def episode_summary(ep: Episode) -> dict[str, Any]:
    """One ``ls`` row: episode_index, chunk, file, length, streams, bytes, complete."""
    files = ep.files
    length = None
    if files.meta is not None:
        length = int(ep.meta["length"])
    elif files.data is not None:
        length = ep.length
    return {
        "episode_index": ep.index, "chunk": ep.chunk, "file": ep.file, "length": length,
        "streams": sorted(files.videos), "bytes": sum(p.stat().st_size for p in files.paths()),
        "complete": files.complete,
    }


@app.command("info")
def info_cmd(task: Path = typer.Argument(..., help="Task directory (holds data/, videos/, meta/)."),
             json_out: bool = typer.Option(False, "--json", help="Print info.json as JSON.")) -> None:
    """Show a task's meta/info.json declarations."""
    t = open_task(task)
    if json_out:
        print_json(t.info)
        return
    info = t.info
    console.print(f"[bold]{t.name}[/bold]  format={info.get('format')}  fps={info.get('fps')}  "
                  f"app_version={info.get('app_version')}  total_episodes={info.get('total_episodes')}")
    console.print(f"streams: {', '.join(f'{k} ({v})' for k, v in info.get('video_extensions', {}).items()) or '-'}")
    console.print(f"devices: {', '.join(d.get('key', '?') for d in info.get('devices', [])) or '-'}")
    table = Table("column", "dtype", "shape", "encoding / frame")
    for name, feat in info.get("features", {}).items():
        extra = feat.get("encoding", "")
        if "frame" in feat:
            extra = f"{extra} frame={feat['frame']}"
        table.add_row(name, str(feat.get("dtype")), str(feat.get("shape")), extra)
    console.print(table)


@app.command("ls")
def ls_cmd(task: Path = typer.Argument(..., help="Task directory."),
           json_out: bool = typer.Option(False, "--json", help="Print a JSON list of episodes.")) -> None:
    """List a task's episodes (global N, chunk, file, rows, streams)."""
    t = open_task(task)
    rows = [episode_summary(ep) for ep in t.episodes()]
    if json_out:
        print_json(rows)
        return
    table = Table("N", "chunk", "file", "length", "streams", "size", "complete")
    for r in rows:
        table.add_row(str(r["episode_index"]), f"{r['chunk']:03d}", f"{r['file']:03d}", str(r["length"]),
                      ", ".join(r["streams"]), human_bytes(r["bytes"]), "yes" if r["complete"] else "NO")
    console.print(table)
    console.print(f"{len(rows)} episode(s)")


@app.command("show")
def show_cmd(task: Path = typer.Argument(..., help="Task directory."),
             n: int = typer.Argument(..., help="Global 1-based episode index N."),
             json_out: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Show one episode: its meta row, columns with types, streams and trajectories."""
    t = open_task(task)
    ep = t.episode(n)
    schema = ep.schema
    out: dict[str, Any] = {
        **episode_summary(ep),
        "paths": {"data": ep.files.data, "meta": ep.files.meta, "videos": ep.files.videos},
        "meta": ep.meta if ep.files.meta is not None else None,
        "columns": {f.name: str(f.type) for f in schema},
        "trajectories": {c: {"points": int(tr.points.shape[0]), "frame": tr.frame}
                         for c in ep.trajectories() for tr in [ep.trajectory(c)]},
    }
    if json_out:
        print_json(out)
        return
    console.print(f"[bold]episode {ep.index}[/bold] (chunk-{ep.chunk:03d}/episode-{ep.file:03d}) "
                  f"rows={out['length']} size={human_bytes(out['bytes'])}")
    if out["meta"]:
        m = out["meta"]
        console.print(f"created_at={m['created_at']:.3f} duration_sec={m['duration_sec']:.3f} "
                      f"drop_stats={m['drop_stats']}")
    table = Table("column", "arrow type")
    for name, typ in out["columns"].items():
        table.add_row(name, typ)
    console.print(table)
    for key, path in ep.files.videos.items():
        console.print(f"stream {key}: {path}")
    for col, tr in out["trajectories"].items():
        console.print(f"trajectory {col}: {tr['points']} points, frame={tr['frame']}")
