"""Where a task lives: a local directory or an object store (``s3://bucket/prefix/task``), behind one interface.

::

    from egopool.storage import as_path

    root = as_path("s3://lab-data/pooled/pick_cup")   # ObjectPath; a local path stays a pathlib.Path
    info = (root / "meta" / "info.json").read_bytes()  # one GET
    root.walk_files()                                  # [(relative key, size)], one LIST per 1000 keys

:class:`ObjectPath` offers the part of ``pathlib.Path`` the readers use (``/``, ``name``,
``parent``, ``exists``, ``is_dir``, ``stat``, ``iterdir``, ``open``, ``read_bytes``) plus
``walk_files``, ``open_input`` (a random-access ``pyarrow.NativeFile``: parquet footers and
column chunks are ranged GETs) and the writes the pooling server's store needs
(``write_bytes``, ``unlink``). The connection (endpoint, credentials, region, timeouts, retries)
comes from the usual AWS environment variables (:class:`S3Settings`); every error of a request
becomes an :class:`~egopool.errors.ObjectStoreError` naming the URI and the fix
(docs/decisions.md O1–O3).

Types: a function of the read path that takes either kind declares :data:`TaskPath`
(``pathlib.Path | ObjectPath``), or :data:`TaskPathLike` (also ``str`` / ``os.PathLike``, what
:func:`as_path` accepts) when it calls ``as_path`` itself.
"""

from ._path import (READ_BUFFER, ObjectEntry, ObjectPath, ObjectStat, TaskPath, TaskPathLike, as_local_path,
                    as_path, is_object_uri, require_bucket, seekable_reader, store_failure)
from ._s3 import S3Settings, s3_filesystem, translate_s3_error
from .opening import open_store
from .store import ObjectMeta, PreconditionFailed, PutMode, Store, require_conditional_writes

__all__ = [
    "require_conditional_writes",
    "READ_BUFFER",
    "ObjectMeta",
    "PreconditionFailed",
    "PutMode",
    "Store",
    "open_store",
    "ObjectEntry",
    "ObjectPath",
    "ObjectStat",
    "S3Settings",
    "TaskPath",
    "TaskPathLike",
    "as_local_path",
    "as_path",
    "is_object_uri",
    "require_bucket",
    "s3_filesystem",
    "seekable_reader",
    "store_failure",
    "translate_s3_error",
]
