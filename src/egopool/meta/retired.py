"""Retired episode numbers: an N that was deleted is never handed out again (file_format.md §2, §9; decision O34).

A directory keeps a deleted N retired with its registry watermark (``pipeline.db``, decision 12) and
``total_episodes``; a bucket has no registry, so ``egopool delete`` leaves a permanent tombstone object
``<task>/.egopool/retired/<N:09d>`` (a dot prefix: every reader skips it, §11) before the episode's row
goes, on either backend. Whoever hands out an N in a task (the pooling server's claim, ``egopool sync``
into a bucket, the recorder's allocation) asks :func:`retired` before taking it::

    from egopool.meta.retired import retired
    from egopool.storage import open_store

    if retired(open_store("s3://lab/pooled/pick_cup"), 7):   # one HEAD
        ...  # N=7 was deleted: take the next one
"""

from __future__ import annotations

from ..storage import PreconditionFailed, PutMode, Store

__all__ = ["RETIRED_PREFIX", "highest_retired", "retire", "retired", "retired_key"]

#: Where the tombstones live, relative to the task's root.
RETIRED_PREFIX = ".egopool/retired/"


def retired_key(index: int) -> str:
    """The tombstone key of global N (relative to the task): ``.egopool/retired/000000007``."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 1:
        raise ValueError(f"a global episode number N is an int >= 1, got {index!r}")
    return f"{RETIRED_PREFIX}{index:09d}"


def retired(store: Store, index: int) -> bool:
    """True when N of the task at ``store`` (the task's own root) was deleted and must not be reused.

    One HEAD (a ``stat`` on a directory). The claim of an N calls it after winning the claim object
    and before publishing (with the row-absent check).

    Raises
    ------
    StorageError
        The store cannot be reached (``ObjectStoreError`` for a bucket).
    """
    return store.exists(retired_key(index))


def retire(store: Store, index: int) -> None:
    """Leave N's tombstone (idempotent: an existing tombstone is kept). A small JSON body says what it is."""
    try:
        store.put(retired_key(index), b'{"deleted": true}\n', mode=PutMode.CREATE)
    except PreconditionFailed:
        pass


def highest_retired(store: Store) -> int:
    """The highest retired N of the task (0 when none): one LIST of the tombstones."""
    best = 0
    for m in store.list(RETIRED_PREFIX):
        tail = m.key[len(RETIRED_PREFIX):]
        if tail.isdigit():
            best = max(best, int(tail))
    return best
