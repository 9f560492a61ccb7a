"""``egopool sync``: copy a task between a directory and a bucket (docs/decisions.md O15, O16)."""

from __future__ import annotations

import typer

from .app import app
from .ops_cmds import _JSON
from .output import console, progress_bar, print_json


@app.command("sync")
def sync_cmd(src: str = typer.Argument(..., help="Source task: a directory or s3://bucket/prefix/task."),
             dst: str = typer.Argument(..., help="Destination task: a directory or s3://bucket/prefix/task "
                                                 "(created when missing)."),
             dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be copied, skipped or refused; "
                                                                   "write nothing."),
             json_out: bool = _JSON) -> None:
    """Copy a task's committed episodes between a directory and a bucket, both ways, resumably.

    Each episode keeps its N. One already in DST with the same files (sha256) is skipped; one whose N DST holds with other content, or whose data parquet does not read, is refused and named (never overwritten): exit 1. Files without their meta/episodes row (an episode being written) are named and not copied. A copied file is verified by sha256 after it is written, and the episode's meta/episodes row goes last (its commit); into a bucket N is first claimed as the pooling server claims it, so a sync and `egopool serve --store s3://...` never share an N. info.json and stats.json are merged as the writer merges them. Run it again after an interruption: it resumes. Endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE.
    """
    from ..transfer.sync import sync_task

    with progress_bar("syncing episodes", json_out) as tick:
        report = sync_task(src, dst, dry_run=dry_run, progress=tick)
    if json_out:
        print_json(report.to_dict())
    else:
        d = report.to_dict()
        verb = "would copy" if dry_run else "copied"
        console.print(f"{src} -> {dst}: {verb} {d['would_copy' if dry_run else 'copied']}, skipped {d['skipped']}, "
                      f"refused {d['refused']}"
                      + (f", not copied (uncommitted) {d['uncommitted']}" if d["uncommitted"] else ""))
        for o in report.outcomes:
            if o.status in ("refused", "uncommitted") or o.reason:
                console.print(f"  episode {o.index}: {o.status}: {o.reason}")
    if not report.ok:
        raise typer.Exit(1)
