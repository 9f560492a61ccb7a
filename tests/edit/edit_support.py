"""Builders and checks of the edit tests: tasks on a directory or a bucket, a recount of stats from the data."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import numpy as np
import pytest
from backends import TaskAt, make_task_at

from egopool import StreamSpec, TaskWriter, vector_column
from egopool.meta.stats import read_stats, recalc_stats

SENSOR = "observation.right_glove"


def record(root: Path, name: str = "pick", episodes: int = 2, *, fps: float = 30.0, rows: int = 4,
           first_value: float = 0.0, created: float = 1_700_000_000.0) -> Path:
    """``episodes`` real episodes (a 4-value glove sensor, a 32x24 RGB stream), values from ``first_value``."""
    tw = TaskWriter(root, name, fps=fps, registry=False)
    for k in range(episodes):
        ep = tw.begin_episode(columns=[vector_column(SENSOR, [4])], streams=[StreamSpec("cam", "rgb", 32, 24)],
                              sensors=["right_glove"], sensor_dim=4, created_at=created + k)
        for i in range(rows):
            ep.add_frame({SENSOR: np.arange(4, dtype=np.float32) + first_value + 10 * k + i},
                         images={"cam": np.full((24, 32, 3), (7 * k + 3 * i + int(first_value)) % 250, np.uint8)})
        ep.finish()
    return root / name


def at(kind: str, local: Path, request: pytest.FixtureRequest) -> TaskAt:
    return make_task_at(kind, local, request.getfixturevalue("s3_server") if kind == "bucket" else None)


def target_of(kind: str, tmp_path: Path, src: TaskAt, name: str) -> str:
    """A new location beside ``src`` (same backend); a directory's parent ``out/`` exists (an edit never creates
    a missing parent, E55)."""
    if kind == "dir":
        (tmp_path / "out").mkdir(exist_ok=True)
        return str(tmp_path / "out" / name)
    return src.location.rsplit("/", 1)[0] + f"/{name}"


def digests(t: TaskAt) -> dict[str, str]:
    """Every object of the task (dot files too) -> sha256 (a bucket copy's empty "directory" markers, which the
    upload of the test task leaves, are no objects of the task)."""
    out = {}
    for k in sorted(t.all_keys()):
        got = t.store.get(k) if k else None
        if got is not None:
            out[k] = hashlib.sha256(got[0]).hexdigest()
    return out


def assert_stats_recount(location: str) -> None:
    """``stats.json`` equals a recount from every data parquet (counts exactly, the rest to float64 rounding)."""
    stored, recount = read_stats(location), recalc_stats(location)
    assert set(stored) == set(recount)
    for col, block in recount.items():
        assert stored[col]["count"] == block["count"], col
        for k in ("mean", "std", "min", "max"):
            np.testing.assert_allclose(stored[col][k], block[k], rtol=1e-9, atol=1e-9, err_msg=f"{col} {k}")


def recorder_script(root: Path, name: str = "pick") -> str:
    """A ``python -c`` script that records one episode into ``root/name`` (as :func:`record` does, values from
    900) and prints ``recorded N``: a recorder in another process."""
    return textwrap.dedent(f"""
        import numpy as np
        from egopool import StreamSpec, TaskWriter, vector_column
        tw = TaskWriter({str(root)!r}, {name!r}, fps=30.0, registry=False)
        ep = tw.begin_episode(columns=[vector_column("{SENSOR}", [4])], streams=[StreamSpec("cam", "rgb", 32, 24)],
                              sensors=["right_glove"], sensor_dim=4)
        for i in range(4):
            ep.add_frame({{"{SENSOR}": np.full(4, 900.0 + i, np.float32)}},
                         images={{"cam": np.full((24, 32, 3), 90 + i, np.uint8)}})
        ep.finish()
        print("recorded", ep.index)
    """)


def mid_edit(t: TaskAt, op: str) -> bool:
    """Whether ``validate`` finds ``t`` exactly mid-edit: one error, naming the interrupted ``egopool edit OP`` and
    ``egopool edit resume`` (an in-place edit killed between its journal and its end, docs/decisions.md E63)."""
    errors = t.errors()
    return (len(errors) == 1 and "the task is mid-edit" in errors[0] and f"`egopool edit {op}`" in errors[0]
            and "egopool edit resume" in errors[0])
