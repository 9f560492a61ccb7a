"""A merge or split holds its SOURCE tasks for the whole copy (issue 30's third review; docs/decisions.md E45-E46):
an in-place edit or a delete of a source started mid-copy waits (a directory's lock) or is refused (the source's
marker), the target equals the sources as planned, a source changed by a writer that honours no marker is caught
before the commit; a killed merge's marker is finished by ``edit resume SOURCE``. And ``delete`` / a recorder that
wait for a directory task's lock say so once, naming the edit (E46)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from backends import TaskAt, kill_at, paused, run_cli
from edit_support import SENSOR, at, record, recorder_script, target_of

from egopool.meta.info import read_info

DATA2 = "data/chunk-000/episode-001.parquet"  # N=2's data parquet (default template)


def _session(err: Path, *args: str) -> subprocess.Popen[str]:
    """``python ARGS`` in its own session, stderr into ``err`` (readable while it runs)."""
    env = {k: v for k, v in os.environ.items() if k != "EGOPOOL_OPS_PAUSE"}
    return subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=err.open("w"),
                            text=True, start_new_session=True)


def _wait_for_text(path: Path, text: str, proc: subprocess.Popen[str]) -> str:
    """The text of ``path`` once it holds ``text`` (fails when ``proc`` ended first)."""
    for _ in range(3000):
        got = path.read_text()
        if text in got:
            return got
        assert proc.poll() is None, (proc.returncode, got)
        time.sleep(0.1)
    raise AssertionError(path.read_text())


def _sensor(t: TaskAt, key: str) -> list[list[float]]:
    import io

    return pq.read_table(io.BytesIO(t.read(key))).column(SENSOR).to_pylist()


def test_a_source_is_held_while_a_merge_copies_it(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=1, first_value=50.0), request)
    m = target_of(backend, tmp_path, a, "m")
    planned = _sensor(a, DATA2)
    with paused(tmp_path / "state", "edit", "episode", "edit", "merge", a.location, b.location, "--into", m) as merge:
        r = run_cli("edit", "remove-column", a.location, SENSOR)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert "`egopool edit merge` is in progress" in r.stderr and f"pid {merge.proc.pid}" in r.stderr, r.stderr
        delete = _session(tmp_path / "delete.err", "-m", "egopool", "delete", a.location, "2")
        if backend == "dir":  # the source's lock (shared by the merge): the delete waits, and says so once
            said = _wait_for_text(tmp_path / "delete.err", "waiting for", delete)
            assert said == f"egopool: waiting for `edit merge` (pid {merge.proc.pid}) reading it as a source on " \
                           f"{a.location} to finish; Ctrl-C to stop\n"
            rec = _session(tmp_path / "rec.err", "-c", recorder_script(tmp_path / "a"))  # a recorder waits too
            assert "waiting for `edit merge`" in _wait_for_text(tmp_path / "rec.err", "waiting for", rec)
            assert a.store.exists(DATA2) and not a.store.exists("meta/episodes/chunk-000/episode-002.parquet")
        else:  # a bucket: the source's marker refuses it in one line
            delete.wait(timeout=300)
            err = (tmp_path / "delete.err").read_text()
            assert delete.returncode == 1 and "`egopool edit merge` is in progress" in err, err
        assert merge.proc.poll() is None
        done = merge.release()
        assert done.returncode == 0, done.stderr
    mt = TaskAt(backend, m, tmp_path)
    assert mt.errors() == [] and read_info(m)["total_episodes"] == 3
    assert _sensor(mt, DATA2) == planned  # A's episode 2 as it was planned, whole
    assert not a.store.exists("meta/.edit.json") and not b.store.exists("meta/.edit.json")
    if backend == "dir":  # the hold is gone: the waiting delete ran
        delete.wait(timeout=300)
        assert delete.returncode == 0, (tmp_path / "delete.err").read_text()
        assert not a.store.exists(DATA2)
        out, err = rec.communicate(timeout=300)
        assert rec.returncode == 0 and out.split() == ["recorded", "3"], (out, (tmp_path / "rec.err").read_text())
    assert a.errors() == []


def test_a_split_killed_mid_copy_holds_its_source_until_resume(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    p = target_of(backend, tmp_path, a, "p")
    kill_at(tmp_path / "state", "edit", "episode", "edit", "split", a.location, "--into", p, "--episodes", "1,2")
    r = run_cli("delete", a.location, "2")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "interrupted `egopool edit split`" in r.stderr and f"egopool edit resume {a.location}" in r.stderr
    assert a.store.exists(DATA2)
    r = run_cli("edit", "resume", a.location)  # the source's marker names the split: it is finished
    assert r.returncode == 0, r.stderr
    pt = TaskAt(backend, p, tmp_path)
    assert pt.errors() == [] and read_info(p)["total_episodes"] == 2
    assert not a.store.exists("meta/.edit.json")
    assert run_cli("delete", a.location, "2").returncode == 0


def test_a_source_changed_by_a_foreign_writer_is_caught_before_the_commit(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    p = target_of(backend, tmp_path, a, "p")
    other = record(tmp_path / "other", episodes=2, first_value=70.0)
    with paused(tmp_path / "state", "edit", "episode", "edit", "split", a.location, "--into", p, "--episodes",
                "1,2") as split:
        a.store.put(DATA2, (other / DATA2).read_bytes())  # a writer that honours no marker (a hand copy)
        done = split.release()
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"the source task {a.location} changed since the split was planned ({DATA2} was rewritten)" in done.stderr
    assert not TaskAt(backend, p, tmp_path).store.exists("meta/info.json")  # nothing committed
    assert not a.store.exists("meta/.edit.json")  # the source is free again


def test_delete_and_a_recorder_say_once_that_they_wait_for_an_edit(tmp_path):
    a = TaskAt("dir", str(record(tmp_path / "a", episodes=2)), tmp_path / "a" / "pick")
    script = recorder_script(tmp_path / "a")
    with paused(tmp_path / "state", "edit", "episode", "edit", "set-task", a.location, "pick the cup") as edit:
        line = f"egopool: waiting for `edit set-task` (pid {edit.proc.pid}) on {a.location} to finish; " \
               "Ctrl-C to stop\n"
        delete = _session(tmp_path / "delete.err", "-m", "egopool", "delete", a.location, "1")
        rec = _session(tmp_path / "rec.err", "-c", script)
        assert _wait_for_text(tmp_path / "delete.err", "waiting", delete) == line
        assert _wait_for_text(tmp_path / "rec.err", "waiting", rec) == line
        assert edit.release().returncode == 0
    delete.wait(timeout=300)
    rec.wait(timeout=300)
    assert delete.returncode == 0 and (tmp_path / "delete.err").read_text() == line  # said once
    said = (tmp_path / "rec.err").read_text()  # then maybe the delete, which took the lock first, is named
    assert rec.returncode == 0 and said.startswith(line) and said.count("waiting for `edit") == 1, said
    assert all(x.startswith("egopool: waiting for ") for x in said.splitlines()), said


def test_a_split_move_leaves_an_episode_changed_after_its_copy(tmp_path, backend, request):
    """Killed once the copy is committed (the source no longer held), the source's episode 2 is changed; the
    resumed move deletes episode 1 only: episode 2's new content is not lost (E47)."""
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    p = target_of(backend, tmp_path, a, "p")
    kill_at(tmp_path / "state", "edit", "committed", "edit", "split", a.location, "--into", p, "--episodes", "1,2",
            "--move")
    (tmp_path / "labels.txt").write_text("1\n0\n1\n1\n")
    r = run_cli("edit", "add-column", a.location, "2", "observation.grip_label", "--from", str(tmp_path / "labels.txt"))
    assert r.returncode == 0, r.stderr
    r = run_cli("edit", "resume", p)
    assert r.returncode == 0, r.stderr
    assert "episode(s) 1, 2 of" not in r.stderr and f"episode(s) 2 of {a.location} changed after" in r.stderr
    assert not a.store.exists("data/chunk-000/episode-000.parquet") and a.store.exists(DATA2)
    assert TaskAt(backend, p, tmp_path).errors() == [] and a.errors() == []
