"""Another egopool command on a task while an edit holds it (issue 30 review; docs/decisions.md E30): a merge
``--into`` paused mid-copy, and in a SEPARATE session (``start_new_session``: no signal of the test's process group
reaches either) ``egopool delete`` on the target, or a recorder appending to it. The other command waits (a
directory's task lock) or is refused in one line (a bucket: the edit's journal); it never succeeds while the
merge holds the task, and the merge completes correctly afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from backends import TaskAt, paused, run_cli
from edit_support import SENSOR, assert_stats_recount, at, digests, record, recorder_script

from egopool.meta.info import read_info


def _session(*args: str) -> subprocess.Popen[str]:
    """``egopool ARGS`` in its own session (``setsid``), as a second terminal would run it."""
    env = {k: v for k, v in os.environ.items() if k != "EGOPOOL_OPS_PAUSE"}
    return subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _still_waiting(proc: subprocess.Popen[str], seconds: float = 3.0) -> bool:
    """True when ``proc`` has not ended within ``seconds`` (it waits on something)."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return True
    return False


def test_delete_of_the_target_waits_or_is_refused_while_a_merge_into_runs(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=2), request)
    src = at(backend, record(tmp_path / "s", episodes=2, first_value=50.0), request)
    row1 = "meta/episodes/chunk-000/episode-000.parquet"
    assert t.store.exists(row1)
    with paused(tmp_path / "state", "edit", "episode", "edit", "merge", src.location, "--into", t.location) as merge:
        delete = _session("-m", "egopool", "delete", t.location, "1")
        try:
            if backend == "dir":  # the task lock: the delete waits for the merge
                assert _still_waiting(delete)
                assert t.store.exists(row1)
            else:  # no lock in a bucket: the edit's journal refuses the delete in one line
                out, err = delete.communicate(timeout=300)
                assert delete.returncode == 1, (out, err)
                assert err.count("\n") <= 2 and "edit merge" in err and "in progress" in err, err
                assert t.store.exists(row1)
            assert merge.proc.poll() is None  # the merge is not disturbed
            done = merge.release()
            assert done.returncode == 0, done.stderr
        finally:
            if delete.poll() is None and backend != "dir":
                delete.kill()
        if backend == "dir":  # the lock is free: the waiting delete now runs
            out, err = delete.communicate(timeout=300)
            assert delete.returncode == 0, (out, err)
            assert not t.store.exists(row1)
    assert t.errors() == []
    assert read_info(t.location)["total_episodes"] == 4
    assert [n for n in range(1, 5) if t.store.exists(f"meta/episodes/chunk-000/episode-{n - 1:03d}.parquet")] == \
        ([2, 3, 4] if backend == "dir" else [1, 2, 3, 4])
    assert_stats_recount(t.location) if backend == "bucket" else None


def test_a_recorder_appending_to_the_target_waits_for_a_merge_into(tmp_path):
    t = TaskAt("dir", str(record(tmp_path / "t", episodes=1)), tmp_path / "t" / "pick")
    src = TaskAt("dir", str(record(tmp_path / "s", episodes=2, first_value=50.0)), tmp_path / "s" / "pick")
    script = recorder_script(tmp_path / "t")
    with paused(tmp_path / "state", "edit", "episode", "edit", "merge", src.location, "--into", t.location) as merge:
        rec = _session("-c", script)
        if not _still_waiting(rec):
            raise AssertionError(rec.communicate())
        assert not t.store.exists("meta/episodes/chunk-000/episode-003.parquet")
        assert merge.release().returncode == 0
        out, err = rec.communicate(timeout=300)
        assert rec.returncode == 0 and out.split() == ["recorded", "4"], (out, err)
    assert t.errors() == []
    assert [n for n in range(1, 6) if t.store.exists(f"meta/episodes/chunk-000/episode-{n - 1:03d}.parquet")] == \
        [1, 2, 3, 4]  # the merge's 2, 3 and the recorder's 4 after them


def test_a_second_edit_says_wait_while_the_first_lives_and_resume_once_it_is_dead(tmp_path, backend, request):
    """The refusal names the live edit (pid, host) and says to wait; only once its run is gone does it (and a
    delete) say `egopool edit resume`, which then finishes the merge."""
    t = at(backend, record(tmp_path / "t", episodes=1), request)
    src = at(backend, record(tmp_path / "s", episodes=1, first_value=50.0), request)
    other = ("edit", "remove-column", t.location, SENSOR)
    with paused(tmp_path / "state", "edit", "episode", "edit", "merge", src.location, "--into", t.location) as merge:
        r = run_cli(*other)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert "`egopool edit merge --into` is in progress" in r.stderr and f"pid {merge.proc.pid}" in r.stderr
        assert "resume" not in r.stderr and "wait for it" in r.stderr
    # killed (the paused run is SIGKILLed on leaving): now an interrupted edit, to be resumed first
    before = digests(t)
    for args in (other, ("delete", t.location, "1")):
        r = run_cli(*args)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert "interrupted `egopool edit merge --into`" in r.stderr and f"egopool edit resume {t.location}" in r.stderr
    assert digests(t) == before
    r = run_cli("edit", "resume", t.location)
    assert r.returncode == 0, r.stderr
    assert t.errors() == [] and read_info(t.location)["total_episodes"] == 2
    assert_stats_recount(t.location)


def test_a_recorder_is_refused_by_an_interrupted_merge_into_and_records_after_its_resume(tmp_path):
    """A merge --into killed after claiming its N (before raising total_episodes): a recorder would have taken the
    merge's first N and the resume would have taken that episode for its own copy (a source episode lost without
    a word). The recorder is refused in one line naming `edit resume`; after it, the recorder numbers on."""
    from egopool.errors import LockError

    t = TaskAt("dir", str(record(tmp_path / "t", episodes=1)), tmp_path / "t" / "pick")
    src = TaskAt("dir", str(record(tmp_path / "s", episodes=2, first_value=50.0)), tmp_path / "s" / "pick")
    with paused(tmp_path / "state", "edit", "journal", "edit", "merge", src.location, "--into", t.location):
        pass  # SIGKILLed at its first step
    with pytest.raises(LockError) as got:
        record(tmp_path / "t", episodes=1, first_value=900.0)
    assert "interrupted `egopool edit merge --into`" in got.value.message
    assert f"egopool edit resume {t.location}" in (got.value.hint or "")
    r = run_cli("edit", "resume", t.location, "--json")
    assert r.returncode == 0, r.stderr
    assert [(e["index"], e["new_index"]) for e in json.loads(r.stdout)["episodes"]] == [(1, 2), (2, 3)]
    record(tmp_path / "t", episodes=1, first_value=900.0)
    assert t.errors() == [] and read_info(t.location)["total_episodes"] == 4
    assert_stats_recount(t.location)


def test_a_server_publishing_into_a_bucket_task_during_a_merge_into_numbers_past_it(tmp_path, request):
    """A bucket has no lock: a server's publish during a merge --into is allowed by design (E16, E30): it takes
    an N past the merge's claims, and both land with stats equal to a recount."""
    pytest.importorskip("fastapi")
    import threading
    import uuid

    import httpx
    from ops_helpers import write_task

    sys.path.insert(0, str(os.path.join(os.path.dirname(__file__), "..", "transfer")))
    from transfer_helpers import ServerProc

    from egopool.transfer import pack_episode, upload_episodes

    pc = write_task(tmp_path / "pc", episodes=2, registry=False)
    src = at("bucket", write_task(tmp_path / "src", episodes=2, registry=False, first_value=500.0), request)
    s3 = request.getfixturevalue("s3_server")
    s3.create_bucket("ops-tasks")
    store_arg, state = f"s3://ops-tasks/{uuid.uuid4().hex[:10]}", tmp_path / "state"
    task = store_arg + "/pick"
    with ServerProc(state, "--state", str(state), store_arg=store_arg) as srv:
        assert upload_episodes(pc, [1], server=srv.url, registry=False).ok
        packed = pack_episode(pc, 2, tmp_path / "zips")
        with paused(tmp_path / "pause", "edit", "episode", "edit", "merge", src.location, "--into", task) as merge:
            out: list[object] = []
            thread = threading.Thread(target=lambda: out.append(httpx.post(
                srv.url + "/api/v1/session/upload", data={"name": "pick", "episode_index": str(packed.file)},
                files={"file": ("e.zip", packed.path.read_bytes(), "application/zip")}, timeout=300)), daemon=True)
            thread.start()
            thread.join(300)
            assert isinstance(out[0], httpx.Response) and out[0].status_code == 200, out
            done = merge.release()
            assert done.returncode == 0, done.stderr
    t = TaskAt("bucket", task, tmp_path)
    assert t.errors() == [] and read_info(task)["total_episodes"] == 4
    assert all(t.store.exists(f"meta/episodes/chunk-000/episode-{n - 1:03d}.parquet") for n in range(1, 5))
    origins = [json.loads(x)["episode_index"] for x in t.read("meta/edit_origins.jsonl").decode().splitlines()]
    assert origins == [2, 3]  # the merge's N; the server's upload took 4, past them
    assert_stats_recount(task)
