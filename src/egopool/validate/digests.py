"""Recorded checksums of an episode's files (docs/decisions.md X1-X7): each file's sha256 against the
``file_digests`` column of its ``meta/episodes`` row, and the row's own content digest.

A mismatch is one error naming the file, the expected and the actual digest. ``--fast`` skips the file hashes
(the row's content digest, which costs nothing, is still checked). A row without digests (a task written before
X1, or by a writer that knows only the spec) is counted: the run adds one note for the task.
"""

from __future__ import annotations

from typing import Any

from ..errors import ObjectStoreError
from ..layout import EpisodeFiles
from ..meta.digests import (DIGEST_COLUMN, Mismatch, episode_digests, mismatch_line, parse_digests, row_digest,
                            same_file)
from ..meta.episodes import raw_episode_row
from ..storage import TaskPath
from .context import Context

__all__ = ["R_DIGESTS", "check_digests", "undigested_note"]

R_DIGESTS = "docs/decisions.md X2 (file_digests)"


def check_digests(ctx: Context, g: EpisodeFiles[TaskPath]) -> None:
    """Check episode N's recorded digests; counts ``ctx.undigested`` when its row has none.

    Raises
    ------
    ObjectStoreError
        The store failed while reading (no verdict on what could not be read, O3).
    """
    if g.meta is None:
        return
    kept = ctx.raw_rows.pop(g.index, None)  # the row check's read (one GET per episode in a bucket, O33)
    try:
        raw: dict[str, Any] = kept if kept is not None else raw_episode_row(g.meta, g.index)
    except ObjectStoreError:
        raise
    except Exception:  # an unreadable row is reported by the row checks
        return
    try:
        rec = parse_digests(raw.get(DIGEST_COLUMN))
    except ValueError as exc:
        ctx.report.error(R_DIGESTS, g.meta, f"episode {g.index}'s row: {exc}; the row is damaged, restore it from "
                                            "another copy of the task or re-record its digests with `egopool "
                                            "repair checksums TASK`")
        return
    if rec is None:
        ctx.undigested += 1
        return
    if rec.row is not None and row_digest(raw) != rec.row:
        ctx.report.error(R_DIGESTS, g.meta, f"episode {g.index}'s row content hashes to sha256 {row_digest(raw)}, "
                                            f"the row records {rec.row}: the row was altered after it was written; "
                                            "restore it from another copy of the task")
    if not ctx.decode:
        return
    stored = episode_digests(ctx.root, [p for p in g.paths() if p != g.meta], skip_unreadable=True,
                             known=ctx.known_digests)
    where = {same_file(rel): rel for rel in stored}
    have = {same_file(rel): h for rel, h in stored.items()}
    recorded = {same_file(rel): h for rel, h in rec.files.items()}
    previous = {same_file(rel): h for rel, h in rec.previous.items()}
    switched = {r for r in recorded if r not in have and _stem(r) in {_stem(h) for h in have if h not in recorded}}
    broken = {f.path for f in ctx.report.findings if f.severity == "error"}
    for rel, want in sorted(recorded.items()):
        got = have.get(rel)
        if rel in switched or str(ctx.root.joinpath(*where.get(rel, rel).split("/"))) in broken:  # a codec switch (compress, §8 mkv -> mp4) still rolling forward: X4
            continue
        if got != want and (got is None or got != previous.get(rel)):  # previous: a rewrite rolling forward
            m = Mismatch(where.get(rel, rel), want, got)
            ctx.report.error(R_DIGESTS, ctx.root.joinpath(*m.rel.split("/")), mismatch_line(m))
    extra = sorted(where[r] for r in set(have) - set(recorded) if _stem(r) not in {_stem(x) for x in switched})
    if extra:
        ctx.report.error(R_DIGESTS, ctx.root.joinpath(*extra[0].split("/")),
                         f"episode {g.index} has file(s) {extra[:3]} its row records no digest for: they were added "
                         "after the episode was committed; remove them or restore the task from another copy")


def _stem(rel: str) -> str:
    """A video's path without its extension: the same stream across a codec switch (``.mkv`` -> ``.mp4``)."""
    head, _, name = rel.rpartition("/")
    return f"{head}/{name.split('.')[0]}" if rel.startswith("videos/") else rel


def undigested_note(count: int, total: int) -> str:
    """The one note of a task whose rows (some or all) record no digests."""
    return (f"{count} of {total} episode(s) record no checksums (written before checksums were recorded): their "
            "bytes are checked by decoding only; `egopool repair checksums TASK` records them")
