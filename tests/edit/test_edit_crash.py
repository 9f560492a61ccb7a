"""An edit killed (SIGKILL) at each journal step leaves valid tasks, and a re-run finishes it; two edits of one
target at once: the second is refused while the first runs (issue 30), on a directory and on SeaweedFS."""

from __future__ import annotations

import pytest
from backends import TaskAt, kill_at, paused, run_cli
from edit_support import assert_stats_recount, at, digests, record, target_of

from egopool.meta.info import read_info


def _target_valid_or_absent(t: TaskAt) -> None:
    """Before its commit the target is no task (no meta/info.json); after it, a valid task."""
    if t.store.exists("meta/info.json"):
        assert t.errors() == []


@pytest.mark.parametrize("stage", ["journal", "episode", "meta", "committed"])
def test_merge_killed_at_each_step_is_finished_by_a_rerun(tmp_path, backend, request, stage):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=2, first_value=50.0), request)
    before = digests(a), digests(b)
    into = target_of(backend, tmp_path, a, "m")
    args = ("edit", "merge", a.location, b.location, "--into", into)
    kill_at(tmp_path / "state", "edit", stage, *args)
    t = TaskAt(backend, into, tmp_path)
    _target_valid_or_absent(t)
    assert t.store.exists("meta/.edit.json")
    r = run_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    assert (digests(a), digests(b)) == before
    assert t.errors() == [] and read_info(into)["total_episodes"] == 4
    assert not t.store.exists("meta/.edit.json")
    assert_stats_recount(into)


@pytest.mark.parametrize("stage", ["episode", "committed", "moved"])
def test_split_move_killed_at_each_step_is_finished_by_a_rerun(tmp_path, backend, request, stage):
    s = at(backend, record(tmp_path / "s", episodes=3), request)
    into = target_of(backend, tmp_path, s, "part")
    args = ("edit", "split", s.location, "--into", into, "--episodes", "1,3", "--move")
    kill_at(tmp_path / "state", "edit", stage, *args)
    t = TaskAt(backend, into, tmp_path)
    _target_valid_or_absent(t)
    assert s.errors() == []
    r = run_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    assert t.errors() == [] and s.errors() == []
    assert read_info(into)["total_episodes"] == 2
    assert {k for k in s.keys() if k.startswith("data/")} == {"data/chunk-000/episode-001.parquet"}
    assert_stats_recount(into)


def test_resume_finishes_whatever_edit_was_interrupted(tmp_path, backend, request):
    s = at(backend, record(tmp_path / "s", episodes=2), request)
    into = target_of(backend, tmp_path, s, "r")
    kill_at(tmp_path / "state", "edit", "meta", "edit", "split", s.location, "--into", into, "--episodes", "2")
    r = run_cli("edit", "resume", into)
    assert r.returncode == 0, r.stderr
    assert TaskAt(backend, into, tmp_path).errors() == []
    r = run_cli("edit", "resume", into)
    assert r.returncode == 1 and "no unfinished edit" in r.stderr


def test_a_second_edit_of_a_target_is_refused_while_the_first_runs(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=1, first_value=70.0), request)
    into = target_of(backend, tmp_path, a, "busy")
    args = ("edit", "merge", a.location, b.location, "--into", into)
    with paused(tmp_path / "state", "edit", "episode", *args) as first:
        second = run_cli(*args)
        assert second.returncode == 1, second.stderr
        assert ("in progress" in second.stderr or "another" in second.stderr), second.stderr
        assert second.stderr.count("\n") <= 2 and "resume" not in second.stderr, second.stderr
        done = first.release()  # let the first finish
        assert done.returncode == 0, done.stderr
    t = TaskAt(backend, into, tmp_path)
    assert t.errors() == [] and read_info(into)["total_episodes"] == 3
