"""Which source each episode of a bucket task was imported from: ``--allow-duplicate``'s check for ``s3://``.

A directory task remembers its imported sources in the registry beside it (``pipeline.db``,
:func:`egopool.importers._common.remember_import`); a bucket has no registry, so ``egopool import
... --out s3://BUCKET/PREFIX`` keeps the same memory as small objects in the task (a dot prefix:
every reader skips it, file_format.md §11)::

    <task>/.egopool/imports/<sha256(source digest)>.json   {"digest": ..., "what": ..., "episodes": [N, ...]}

Before anything is read for writing, a source whose record names an N that still has its
``meta/episodes`` row is refused (``--allow-duplicate`` imports it anyway; a deleted N frees it).
After the import's episodes were published, each record is merged by compare-and-swap (two imports
at once both keep their N). A record is written only for a published episode: a crash between the
publish and the record leaves an episode the next import of the same source does not see (it is
imported again, as before this memory existed), never a record of an episode that is not there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from ..errors import EgopoolError, FormatError
from ..layout import TaskLayout
from ..meta.info import read_info
from ..storage import ObjectPath, PreconditionFailed, PutMode, open_store
from ._common import ImportSource

__all__ = ["IMPORTS_PREFIX", "BucketSources"]

#: Where the records live, relative to the task's root.
IMPORTS_PREFIX = ".egopool/imports/"

#: Compare-and-swap attempts for one record before giving up (each loser re-reads the record).
_CAS_TRIES = 8


def _key(digest: str) -> str:
    return IMPORTS_PREFIX + hashlib.sha256(digest.encode("utf-8")).hexdigest() + ".json"


class BucketSources:
    """The import memory of the tasks under one bucket root (``s3://BUCKET/PREFIX``).

    :meth:`held` answers the check before an import; :meth:`remember` notes an episode the import
    committed in its local scratch task; :meth:`flush` writes the notes of the episodes that reached
    the bucket. One instance serves one ``import_into`` call.
    """

    def __init__(self, root: ObjectPath) -> None:
        self.root = root
        self.pending: list[tuple[str, ImportSource, int]] = []

    def _recorded(self, task: str, digest: str) -> tuple[list[int], str | None]:
        """The Ns recorded for ``digest`` in ``task`` and the record's version (``[], None``: no record)."""
        got = open_store(str(self.root / task)).get(_key(digest))
        if got is None:
            return [], None
        body, version = got
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        episodes = doc.get("episodes") if isinstance(doc, dict) else None
        if not isinstance(episodes, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                                                     for n in episodes):
            raise FormatError("an import record is not the JSON object egopool writes",
                              path=str(self.root / task / _key(digest)),
                              hint="delete that object (it only remembers which source an episode came from)")
        return episodes, version

    def held(self, task: str, sources: Sequence[ImportSource]) -> list[tuple[ImportSource, int]]:
        """``(source, N)`` for every source whose recorded N still has its ``meta/episodes`` row in the bucket.

        One LIST of the records; when there are any, one GET per source (its digest read from the source) and
        one HEAD per recorded N. A task that does not exist yet holds nothing.

        Raises
        ------
        ObjectStoreError
            The bucket cannot be read.
        FormatError
            A record under ``.egopool/imports/`` is not egopool's JSON (named, with the fix).
        """
        remote = self.root / task
        info_obj = remote / "meta" / "info.json"
        if not info_obj.exists():
            return []
        if next(iter(open_store(str(remote)).list(IMPORTS_PREFIX)), None) is None:
            return []  # nothing was ever imported into this task: the source is not even read for a digest
        layout = TaskLayout.from_info(remote, read_info(remote))
        held: list[tuple[ImportSource, int]] = []
        for src in sources:
            try:
                digest = src.digest
            except EgopoolError:  # a source file that cannot be read: the importer's own check names it
                return []
            held += [(src, n) for n in self._recorded(task, digest)[0] if layout.episodes_file(n).exists()]
        return held

    def location(self, task: str) -> str:
        """``s3://BUCKET/PREFIX/TASK``."""
        return str(self.root / task)

    def remember(self, task: str, source: ImportSource, index: int) -> None:
        """Note that the scratch task's episode ``index`` came from ``source`` (written by :meth:`flush`)."""
        self.pending.append((task, source, index))

    def flush(self, task: str, published: set[int]) -> None:
        """Write the records of the noted episodes of ``task`` whose N is in ``published`` (compare-and-swap).

        Raises
        ------
        ObjectStoreError
            The bucket cannot be written.
        OSError
            A record kept changing under ``_CAS_TRIES`` attempts (another import of the same source at once).
        """
        store = open_store(str(self.root / task))
        for t, src, n in self.pending:
            if t != task or n not in published:
                continue
            for _ in range(_CAS_TRIES):
                recorded, version = self._recorded(task, src.digest)
                episodes = sorted({*recorded, n})
                body = json.dumps({"digest": src.digest, "what": src.what, "episodes": episodes}).encode() + b"\n"
                try:
                    if version is None:
                        store.put(_key(src.digest), body, mode=PutMode.CREATE)
                    else:
                        store.put(_key(src.digest), body, mode=PutMode.UPDATE, version=version)
                    break
                except PreconditionFailed:
                    continue
            else:
                raise OSError(f"the import record of {src.what} kept changing: N={n} is imported but not remembered")
