"""The local registry pipeline.db (DESIGN §1) and a stateful model of numbering across record/abort/delete."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from egopool import EpisodeNotFoundError, TaskWriter, list_task_episodes, vector_column
from egopool.errors import RegistryError
from egopool.meta.info import read_info
from egopool.meta.stats import read_stats
from egopool.ops import delete_episodes
from egopool.registry import FileRecord, Registry, UploadRecord, registry_path

F = FileRecord


def test_rows_files_status_and_watermark(tmp_path):
    reg = Registry(tmp_path / "pipeline.db")
    assert reg.watermark("t") == 0 and reg.recordings("t") == [] and reg.get("t", 1) is None
    assert not (tmp_path / "pipeline.db").exists()  # reading creates nothing
    reg.record("t", 3, [F("b", 4, "bb"), F("a", 3, "aa")], recorded_at=100.0)
    rec = reg.get("t", 3)
    assert (rec.status, rec.total_bytes, rec.recorded_at) == ("recorded", 7, 100.0)
    assert rec.files == (F("a", 3, "aa"), F("b", 4, "bb"))
    assert reg.watermark("t") == 3 and reg.watermark("other") == 0
    assert reg.bump_watermark("t", 2) == 3  # never lowered
    assert reg.set_status("t", 3, "uploaded") and reg.get("t", 3).status == "uploaded"
    assert not reg.set_status("t", 9, "uploaded")
    assert reg.replace_files("t", 3, [F("c", 10, "cc")])
    assert reg.get("t", 3).files == (F("c", 10, "cc"),) and reg.get("t", 3).total_bytes == 10
    assert reg.remove("t", 3) and not reg.remove("t", 3)
    assert reg.get("t", 3) is None and reg.watermark("t") == 3
    con = sqlite3.connect(tmp_path / "pipeline.db")
    assert con.execute("SELECT COUNT(*) FROM recording_files").fetchone() == (0,)  # cascaded
    assert reg.record_many("t", [(5, [F("x", 1, "xx")]), (4, [F("y", 2, "yy")])]) == 5
    assert [r.episode_index for r in reg.recordings("t")] == [4, 5]


def test_bad_status_and_unusable_database_are_registry_errors(tmp_path):
    reg = Registry(tmp_path / "pipeline.db")
    with pytest.raises(RegistryError, match="unknown recording status 'lost'"):
        reg.record("t", 1, [], status="lost")
    (tmp_path / "pipeline.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(RegistryError, match="pipeline.db: registry operation failed"):
        reg.watermark("t")
    newer = tmp_path / "newer.db"
    sqlite3.connect(newer).execute("PRAGMA user_version = 99")
    with pytest.raises(RegistryError, match="schema version 99 is newer"):
        Registry(newer).watermark("t")


def test_registry_lives_beside_the_task(tmp_path):
    assert registry_path(tmp_path / "recordings" / "pick") == tmp_path / "recordings" / "pipeline.db"


SENSOR = "observation.right_glove"


class NumberingMachine(RuleBasedStateMachine):
    """Record / abort / delete / restart the writer, checked against a model of N, watermark and stats.

    Model (file_format.md §2, §4, §7.5, DESIGN §1): an abort frees its N for the next
    recording; a deleted N is never handed out again; stats.json and total_episodes are
    not rolled back by a delete.
    """

    @initialize()
    def setup(self):
        self.root = Path(tempfile.mkdtemp(prefix="egopool-sm-"))
        self.tw = TaskWriter(self.root, "t")
        self.task = self.root / "t"
        self.existing: set[int] = set()
        self.deleted: set[int] = set()
        self.recycled: int | None = None
        self.finished_max = 0
        self.rows = 0

    def teardown(self):
        if hasattr(self, "root"):
            shutil.rmtree(self.root, ignore_errors=True)

    def expected_next(self) -> int:
        if self.recycled is not None and self.recycled not in self.existing:
            return self.recycled
        return max([self.finished_max, *self.existing]) + 1

    def begin(self):
        ep = self.tw.begin_episode(columns=[vector_column(SENSOR, [2])], sensors=["right_glove"], sensor_dim=2)
        assert ep.index == self.expected_next()
        assert ep.index not in self.deleted
        return ep

    @rule(rows=st.integers(1, 3))
    def record(self, rows):
        ep = self.begin()
        for i in range(rows):
            ep.add_frame({SENSOR: np.array([i, ep.index], np.float32)})
        n = ep.finish().index
        self.existing.add(n)
        self.finished_max = max(self.finished_max, n)
        self.rows += rows
        if self.recycled == n:
            self.recycled = None

    @rule()
    def abort(self):
        ep = self.begin()
        ep.add_frame({SENSOR: np.zeros(2, np.float32)})
        ep.abort()
        self.recycled = ep.index

    @rule(data=st.data())
    def delete(self, data):
        if not self.existing:
            return
        n = data.draw(st.sampled_from(sorted(self.existing)))
        assert delete_episodes(self.task, [n]).ok
        self.existing.remove(n)
        self.deleted.add(n)

    @rule(data=st.data())
    def delete_missing(self, data):
        n = data.draw(st.sampled_from(sorted(self.deleted | {self.finished_max + 1})))
        with pytest.raises(EpisodeNotFoundError):
            delete_episodes(self.task, [n])

    @rule()
    def restart_writer(self):
        self.tw = TaskWriter(self.root, "t")

    @invariant()
    def files_registry_and_watermarks_match_the_model(self):
        if not hasattr(self, "task"):
            return
        assert [g.index for g in list_task_episodes(self.task)] == sorted(self.existing)
        reg = Registry.for_task(self.task)
        assert [r.episode_index for r in reg.recordings("t")] == sorted(self.existing)
        assert reg.watermark("t") == self.finished_max
        assert int(read_info(self.task)["total_episodes"]) == self.finished_max
        stats = read_stats(self.task)
        assert stats.get(SENSOR, {}).get("count", 0) == self.rows  # deletes never roll stats back


TestNumbering = NumberingMachine.TestCase
TestNumbering.settings = settings(max_examples=12, stateful_step_count=10, deadline=None,
                                  suppress_health_check=[HealthCheck.too_slow])


def _upload_record(n: int) -> UploadRecord:
    return UploadRecord("t", n, "http://pool", f"d{n}", f"z{n}", "t", 10 + n, {"episode_index": 10 + n}, 1.0)


def test_a_session_keeps_one_connection_and_still_commits_every_call(tmp_path, monkeypatch):
    """Registry.session (docs/decisions.md U22): one sqlite3.connect for the calls of the block, each call
    committed before it returns (another connection sees it at once), a replaced or removed pipeline.db
    reopened, another thread's calls on their own connection."""
    import threading

    import egopool.registry as registry_mod

    path = tmp_path / "pipeline.db"
    opened: list[str] = []
    real_connect = sqlite3.connect

    def connect(target, *args, **kwargs):
        opened.append(str(target))
        return real_connect(target, *args, **kwargs)

    monkeypatch.setattr(registry_mod.sqlite3, "connect", connect)
    reg = Registry(path)
    with reg.session():
        assert opened == [] and reg.uploads("t") == []  # no file yet: nothing opened, nothing created
        for n in (1, 2, 3):
            reg.record_upload(_upload_record(n))
            other = real_connect(path)  # a second process's view: the row is committed when the call returns
            assert other.execute("SELECT server_episode_index FROM uploads WHERE episode_index = ?", (n,)).fetchone() \
                == (10 + n,)
            other.close()
        assert [u.episode_index for u in reg.uploads("t")] == [1, 2, 3]
        assert opened.count(str(path)) == 1
        seen: list[object] = []
        worker = threading.Thread(target=lambda: seen.append(reg.upload("t", 2, "http://pool")))
        worker.start()
        worker.join()
        assert seen[0].zip_sha256 == "z2" and opened.count(str(path)) == 2  # the other thread's own connection
        with reg.session():  # re-entered: the same connection
            reg.record_upload(_upload_record(4))
        assert opened.count(str(path)) == 2
        path.unlink()  # pipeline.db removed under the run: the next call writes a new file at the path
        reg.record_upload(_upload_record(5))
        assert opened.count(str(path)) == 3
        con = real_connect(path)
        assert con.execute("SELECT episode_index FROM uploads").fetchall() == [(5,)]
        con.close()
    assert reg._held is None
    reg.record_upload(_upload_record(6))  # after the block: a connection per call, as before
    assert opened.count(str(path)) == 4
    assert [u.episode_index for u in reg.uploads("t")] == [5, 6]
