"""Renumbering before the task guard (issue 15 H, docs/decisions.md U17), on the real Importer and disk.

* a renumbered upload's parquet files are rewritten before the task guard is taken, with the N it
  is then published as (data column, ``meta/episodes`` row and answer hashes agree);
* a guess another upload took meanwhile costs only the rewrite: the episode gets the next free N
  and its files carry that N;
* uploads into one task from several threads get distinct Ns, each file carrying its own;
* a refused upload's guess is given back (the next upload takes the N without a gap).
"""

from __future__ import annotations

import contextlib
import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from transfer_helpers import write_task

from egopool import StreamSpec, TaskWriter, vector_column
from egopool.errors import UploadRejectedError
from egopool.layout import list_task_episodes
from egopool.registry import sha256_file
from egopool.server import importer as importer_mod
from egopool.server import renumber
from egopool.server.importer import Importer
from egopool.server.store import Store
from egopool.transfer import pack_episodes
from egopool.validate import validate_task


def _zip(root: Path, name: str, first_value: float, n: int = 1) -> Path:
    task = write_task(root / name, "pick", n, rows=4, registry=False, first_value=first_value)
    return pack_episodes(task, [n], root / f"{name}-zips", registry=False)[0].path


def _zip_at_fps(root: Path, name: str, fps: float) -> Path:
    tw = TaskWriter(root / name, "pick", fps=fps, registry=False)
    ep = tw.begin_episode(columns=[vector_column("observation.right_glove", [4])],
                          streams=[StreamSpec("cam", "rgb", 32, 24)], sensors=["right_glove"], sensor_dim=4,
                          created_at=1_700_000_000.0)
    for i in range(4):
        ep.add_frame({"observation.right_glove": np.arange(4, dtype=np.float32) + 7 + i},
                     images={"cam": np.full((24, 32, 3), 10 * i, np.uint8)})
    ep.finish()
    return pack_episodes(root / name / "pick", [1], root / f"{name}-zips", registry=False)[0].path


def _import(importer: Importer, zip_path: Path):
    sha = hashlib.sha256(zip_path.read_bytes()).hexdigest()
    upload_id = importer.store.db.start_upload(None, "127.0.0.1")
    return importer.import_zip(zip_path, task="pick", form_index=None, zip_sha256=sha, upload_id=upload_id)


def _indices(task: Path, result) -> set[int]:
    """Every episode_index value in the published data parquet and meta/episodes row of ``result``."""
    out: set[int] = set()
    for rel in result.files:
        if rel.endswith(".parquet"):
            out |= set(pq.read_table(task / rel, columns=["episode_index"]).column(0).to_pylist())
    return out


def test_a_renumbered_upload_is_rewritten_before_the_guard(tmp_path: Path, monkeypatch) -> None:
    store = Store(tmp_path / "store")
    imp = Importer(store)
    _import(imp, _zip(tmp_path, "pc_a", 0.0))
    inside: list[bool] = []  # per rewrite: was the task guard held
    held = [False]
    real_guard, real_rewrite = store.task_guard, renumber.rewrite_episode_index

    @contextlib.contextmanager
    def guard(name: str):  # type: ignore[no-untyped-def]
        with real_guard(name):
            held[0] = True
            try:
                yield
            finally:
                held[0] = False

    def rewrite(*a, **k) -> None:  # type: ignore[no-untyped-def]
        inside.append(held[0])
        real_rewrite(*a, **k)

    monkeypatch.setattr(store, "task_guard", guard)
    monkeypatch.setattr(renumber, "rewrite_episode_index", rewrite)
    monkeypatch.setattr(importer_mod, "rewrite_episode_index", rewrite)
    result = _import(imp, _zip(tmp_path, "pc_b", 100.0))
    assert result.status == "imported" and result.renumbered and result.episode_index == 2
    assert inside == [False, False]  # data parquet and row, both outside the guard
    task = store.root / "pick"
    assert _indices(task, result) == {2}
    assert result.files == {rel: sha256_file(task / rel) for rel in result.files}
    assert validate_task(task).ok


def test_a_guess_taken_meanwhile_gets_the_next_free_n(tmp_path: Path, monkeypatch) -> None:
    store = Store(tmp_path / "store")
    imp = Importer(store)
    _import(imp, _zip(tmp_path, "pc_a", 0.0))
    other = _zip(tmp_path, "pc_c", 50.0, n=2)  # another PC's own N=2: free, published as 2
    real_ahead = imp._renumber_ahead
    interleaved = []

    def ahead(*a, **k) -> None:  # type: ignore[no-untyped-def]
        real_ahead(*a, **k)  # guesses N=2 and rewrites for it ...
        interleaved.append(_import(Importer(store), other))  # ... which another server thread publishes first

    monkeypatch.setattr(imp, "_renumber_ahead", ahead)
    result = _import(imp, _zip(tmp_path, "pc_b", 100.0))
    assert interleaved[0].episode_index == 2 and not interleaved[0].renumbered
    assert result.status == "imported" and result.renumbered and result.episode_index == 3
    task = store.root / "pick"
    assert _indices(task, result) == {3} and _indices(task, interleaved[0]) == {2}
    assert result.files == {rel: sha256_file(task / rel) for rel in result.files}
    assert [g.index for g in list_task_episodes(task)] == [1, 2, 3]
    assert validate_task(task).ok


def test_concurrent_renumbered_uploads_get_distinct_ns(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    imp = Importer(store)
    zips = [_zip(tmp_path, f"pc_{k}", 100.0 * k) for k in range(6)]  # six PCs' N=1
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda z: _import(imp, z), zips))
    assert sorted(r.episode_index for r in results) == [1, 2, 3, 4, 5, 6]
    task = store.root / "pick"
    for r in results:
        assert _indices(task, r) == {r.episode_index}
        assert r.files == {rel: sha256_file(task / rel) for rel in r.files}
    assert validate_task(task).ok


def test_a_refused_uploads_guess_is_given_back(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    imp = Importer(store)
    _import(imp, _zip(tmp_path, "pc_a", 0.0))
    with pytest.raises(UploadRejectedError) as exc:  # guessed N=2, then refused under the guard
        _import(imp, _zip_at_fps(tmp_path, "pc_f", 15.0))
    assert exc.value.status == 409
    result = _import(imp, _zip(tmp_path, "pc_b", 100.0))
    assert result.episode_index == 2 and _indices(store.root / "pick", result) == {2}
    assert not list(store.staging_dir.iterdir())
