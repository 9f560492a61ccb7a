"""The write path's files are local: a directory task's layout names them as ``Path``.

:class:`~egopool.layout.TaskLayout` names the files of a task directory or of a bucket
(``Path | ObjectPath``). The writer (:class:`~egopool.write.task_writer.TaskWriter`, its
episodes, crash recovery) builds its layout from a local ``task_dir`` and writes with
``os``/``open``: :func:`local_file` states that at each use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StorageError

if TYPE_CHECKING:
    from ..storage import ObjectPath

__all__ = ["local_file"]


def local_file(path: Path | ObjectPath) -> Path:
    """``path`` of a layout built from a local task directory, as the ``Path`` it is.

    Raises
    ------
    StorageError
        ``path`` is an object in a bucket: the write path writes a local directory only
        (copy the task to a bucket with ``egopool sync``).
    """
    if not isinstance(path, Path):
        raise StorageError("the writer writes a local task directory, not a bucket object", path=str(path),
                           hint="record into a local directory, then copy it with `egopool sync`")
    return path
