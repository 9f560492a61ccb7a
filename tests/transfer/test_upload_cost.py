"""What one `egopool upload` run costs on the client (issue 15 H, docs/decisions.md U22), against a real
`egopool serve` on loopback: the task read once per run, each zip hashed once and never fsynced (a spool
file), one pipeline.db connection and one TLS context, while every confirmed episode is in pipeline.db
before the run reports it."""

from __future__ import annotations

import os
import sqlite3
import ssl
from pathlib import Path

import pytest
from transfer_helpers import ServerProc, write_task

import egopool.registry as registry_mod
import egopool.transfer.client as client_mod
import egopool.transfer.pack as pack_mod
from egopool.transfer import UploadOutcome, upload_episodes

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


class _Count:
    """Wraps a real function and counts its calls (the arguments kept)."""

    def __init__(self, fn):  # type: ignore[no-untyped-def]
        self.fn, self.calls = fn, []

    def __call__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls.append(args)
        return self.fn(*args, **kwargs)


def test_a_run_reads_the_task_once_and_records_each_episode_before_reporting_it(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "pc"
    tasks = [write_task(root, "pick", episodes=3, rows=5), write_task(root, "place", episodes=2, rows=5)]
    client_reads, pack_reads = _Count(client_mod.read_info), _Count(pack_mod.read_info)
    monkeypatch.setattr(client_mod, "read_info", client_reads)
    monkeypatch.setattr(pack_mod, "read_info", pack_reads)
    spies = {name: _Count(getattr(pack_mod, name)) for name in ("sha256_file", "publish")}
    for name, spy in spies.items():
        monkeypatch.setattr(pack_mod, name, spy)
    fsyncs = _Count(os.fsync)
    monkeypatch.setattr(os, "fsync", fsyncs)
    opened = _Count(sqlite3.connect)
    monkeypatch.setattr(registry_mod.sqlite3, "connect", opened)
    contexts = _Count(ssl.create_default_context)
    monkeypatch.setattr(ssl, "create_default_context", contexts)
    client_mod._tls_context.cache_clear()  # a fresh process
    recorded_first: list[tuple[int, tuple[object, ...] | None]] = []

    def on_outcome(o: UploadOutcome) -> None:  # another process's view of pipeline.db when the run reports N
        con = opened.fn(root / "pipeline.db")  # the real connect, not counted
        try:
            recorded_first.append((o.index, con.execute(
                "SELECT zip_sha256, server_episode_index FROM uploads WHERE task = ? AND episode_index = ?",
                (task.name, o.index)).fetchone()))
        finally:
            con.close()

    with ServerProc(tmp_path / "store") as srv:
        srv.wait_workers()
        reports, tls_made = [], []
        for task in tasks:
            before, made = len(spies["sha256_file"].calls), len(contexts.calls)
            reports.append(upload_episodes(task, server=srv.url, temp_dir=tmp_path / "spool", on_outcome=on_outcome))
            tls_made.append(len(contexts.calls) - made)  # (the test's own httpx.get to /healthz make theirs)
            rep = reports[-1]
            assert rep.ok and [o.status for o in rep.outcomes] == ["uploaded"] * len(rep.outcomes), rep.to_dict()
            hashed = [Path(a[0]).name for a in spies["sha256_file"].calls[before:]]
            zips = [f"{task.name}_chunk-000_ep{f:06d}.zip" for f in range(len(rep.outcomes))]
            assert sorted(hashed) == zips  # once each
            assert sorted(recorded_first[-len(rep.outcomes):]) == [  # reported as they finish (U26), recorded first
                (o.index, (o.answer["zip_sha256"], o.server_episode_index)) for o in rep.outcomes]
    assert len(client_reads.calls) == 2 and pack_reads.calls == []  # once per run, by the client
    assert spies["publish"].calls == [] and fsyncs.calls == []  # spool zips: not fsynced (SQLite syncs on its own)
    db_opens = [a for a in opened.calls if a and str(a[0]).endswith("pipeline.db")]
    assert len(db_opens) == 2  # one connection per run (the 5 records, 2 identities, 2 resume reads on it)
    assert tls_made == [1, 0]  # one TLS context for the process
    assert list((tmp_path / "spool").iterdir()) == []  # each run's spool removed
