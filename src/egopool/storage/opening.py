"""``open_store``: the :class:`~egopool.storage.store.Store` of a location (a directory or ``s3://bucket/prefix``)."""

from __future__ import annotations

import os

from .directory_store import DirectoryStore
from .store import Store

__all__ = ["open_store"]


def open_store(location: str | os.PathLike[str]) -> Store:
    """The store of ``location``: :class:`~egopool.storage.s3_store.S3Store` for ``s3://bucket/prefix``, else a
    :class:`~egopool.storage.directory_store.DirectoryStore` on that directory.

    Raises
    ------
    FormatError
        A malformed ``s3://`` URI; EgopoolError: obstore missing for ``s3://`` (the s3 extra).
    """
    text = os.fspath(location)
    if text.startswith("s3://"):
        from .s3_store import S3Store

        return S3Store(text)
    return DirectoryStore(text)
