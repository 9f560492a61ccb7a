"""Leftovers of writers that died (file_format.md §11; issue 16 E): dot-temps and reservations of dead pids.

Readers ignore dotfiles, so they never break a task, but they hold disk space (a ``simulate`` ended
by SIGTERM left 115 MB) and say that a recording did not finish. They are warnings naming what is
left and the command that clears it, ``egopool repair clean TASK`` (every writer also clears them
when it opens the task). The check looks only while no writer holds the task lock (taken shared,
without waiting): a writer at work has temps of its own.
"""

from __future__ import annotations

from .._atomic import task_read_lock
from ..meta import markers
from ..meta.leftovers import find_leftovers
from ..storage import ObjectPath
from ..write.recovery import pending_indices
from .context import Context

__all__ = ["check_stale_leftovers"]

R_IGNORED = "file_format.md §11"
R_RECYCLED = "file_format.md §7.5"
R_PENDING = "file_format.md §3"
R_DEPTH = "file_format.md §8"
_FIX = "run `egopool repair clean TASK` to remove them"


def check_stale_leftovers(ctx: Context) -> None:
    """Warn about stale dot-temps, reservations of dead processes, unfinished meta merges and an interrupted
    ``egopool compress`` (one finding each). Nothing in a bucket: dot-temps, locks and pids belong to
    local writers (docs/decisions.md O7)."""
    root = ctx.root
    if ctx.layout is None or isinstance(root, ObjectPath):
        return
    with task_read_lock(root, wait=False) as held:
        if not held:  # a writer is at work: its temps are not stale
            return
        found = find_leftovers(root, ctx.layout, meta_temps=True)
        live = markers.live_reservations(root, prune=False)
        pending = [n for n in pending_indices(root) if n not in live and ctx.layout.episodes_file(n).exists()]
        compressing = (root / "meta" / ".compress.json").is_file()
    if compressing:
        ctx.report.warning(R_DEPTH, ctx.rel("meta", ".compress.json"),
                           "an `egopool compress` of this task was interrupted; readers see the task as "
                           "info.json's video_extensions declares it (its .mp4 / .mkv siblings are the other "
                           "half); run `egopool compress TASK` to finish it")
    if pending:
        ns = ", ".join(map(str, pending))
        ctx.report.warning(R_PENDING, ctx.rel("meta", f".pending-{pending[0]}.json"),
                           f"episode(s) {ns} are saved, but their info.json/stats.json merge did not finish (it "
                           "failed when they were written, e.g. on a full disk); run `egopool repair clean TASK` to "
                           "finish it (the next recording into the task does too)")
    if found.temps:
        size = f"{found.bytes / 1e6:.1f} MB" if found.bytes >= 1e6 else f"{found.bytes / 1e3:.1f} kB"
        first = found.temps[0].relative_to(root).as_posix()
        ctx.report.warning(R_IGNORED, found.temps[0], f"{len(found.temps)} temp file(s) of writers that are no longer "
                                                      f"running ({size}; first: {first}); readers ignore them, "
                                                      f"they only hold disk space; {_FIX}")
    if found.reservations:
        ns = ", ".join(map(str, found.reservations))
        ctx.report.warning(R_RECYCLED, ctx.rel("meta"), f"reservation(s) of episode(s) {ns} by processes that are no "
                                                        "longer running (meta/.reserved-N: a recording was killed); "
                                                        "an N without its meta/episodes row is free again; "
                                                        f"{_FIX}")
