"""Read an ``.rrd`` back with the installed rerun-sdk's own dataframe API (test-only).

rerun-sdk changed how a recording is queried three times within the releases egopool drives
(``egopool.interop.rerun.RERUN_VERSIONS``):

* 0.26: ``rerun.dataframe.load_recording(path).view(index=, contents=).select().read_all()``;
* later releases: a dataset of a local ``rerun.server.Server`` (bound to loopback here),
  ``dataset.filter_contents([entity]).reader(index=)``, a DataFusion frame;
* 0.41: ``rerun.chunk.RrdReader(path).stream().collect().reader(index, contents=)``, a DataFusion
  frame without a server.

:func:`open_rrd` picks what the installed release has; every read returns a ``pyarrow.Table``
whose component columns are named ``<entity>:<Archetype>:<field>`` in all of them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


class Rrd:
    """One recording of an ``.rrd`` file, queried per entity."""

    def __init__(self, source: Any, kind: str) -> None:
        self._source, self._kind = source, kind

    def entity_paths(self) -> set[str]:
        """Entity paths that hold at least one component column."""
        return {c.entity_path for c in self._source.schema().component_columns()}

    def read(self, index: str | None, entity: str) -> Any:
        """Rows of ``entity`` on timeline ``index`` (None: its static data) as a ``pyarrow.Table``."""
        if self._kind == "dataframe":
            view = self._source.view(index=index or "frame_index", contents=entity)
            return (view.select() if index else view.select_static()).read_all()
        if self._kind == "chunk":
            return self._source.reader(index, contents=entity).to_arrow_table()
        return self._source.filter_contents([entity]).reader(index=index).to_arrow_table()


@contextlib.contextmanager
def open_rrd(path: Path) -> Iterator[Rrd]:
    """The recording in ``path`` through the installed rerun-sdk (a skip without rerun-sdk)."""
    pytest.importorskip("rerun")
    if importlib.util.find_spec("rerun.dataframe") is not None:
        import rerun.dataframe as rd

        yield Rrd(rd.load_recording(str(path)), "dataframe")
        return
    if importlib.util.find_spec("rerun.chunk") is not None:
        from rerun.chunk import RrdReader

        yield Rrd(RrdReader(path).stream().collect(), "chunk")
        return
    import rerun as rr

    with rr.server.Server(host="127.0.0.1", datasets={"egopool": [str(path)]}) as server:
        yield Rrd(server.client().get_dataset("egopool"), "server")


def rrd_verify(path: Path) -> subprocess.CompletedProcess[str]:
    """``rerun rrd verify PATH`` with the ``rerun`` executable installed beside this Python."""
    exe = shutil.which("rerun", path=str(Path(sys.executable).parent))
    assert exe is not None, "rerun-sdk installs the `rerun` executable beside its Python"
    return subprocess.run([exe, "rrd", "verify", str(path)], capture_output=True, text=True, timeout=300,
                          env={"PATH": str(Path(sys.executable).parent), "HOME": str(path.parent)})
