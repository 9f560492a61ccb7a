"""An interrupted merge or split holds its sources exactly as a killed one (docs/decisions.md E67), and a merge
holds its sources before it plans (E68): review 30b findings 4 and 6, on a directory and a bucket."""

from __future__ import annotations

import signal

import pyarrow.parquet as pq
import pytest
from backends import TaskAt, paused, run_cli
from edit_support import SENSOR, at, record, target_of

from egopool.meta.tasks import read_tasks


def _episodes(t: TaskAt) -> list[tuple[list[list[float]], bytes]]:
    """Every episode of ``t`` in N order: its sensor values and its video's bytes (what a merge must keep)."""
    import io

    data = sorted(k for k in t.keys() if k.startswith("data/"))
    videos = sorted(k for k in t.keys() if k.startswith("videos/"))
    assert len(data) == len(videos)
    return [(pq.read_table(io.BytesIO(t.read(d))).column(SENSOR).to_pylist(), t.read(v))
            for d, v in zip(data, videos, strict=True)]


def _merge_interrupted_at(tmp_path, backend, request, point: str):
    """Sources a (2 episodes) and b (1), a merge of both into m paused at ``edit:POINT`` and sent SIGINT there:
    ``(a, b, m, the paused run, its stderr)``."""
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=1, first_value=50.0), request)
    m = target_of(backend, tmp_path, a, "m")
    with paused(tmp_path / "state", "edit", point, "edit", "merge", a.location, b.location, "--into", m) as merge:
        merge.proc.send_signal(signal.SIGINT)
        _, err = merge.proc.communicate(timeout=300)
    return a, b, m, merge, err


def test_ctrl_c_mid_merge_keeps_the_sources_held_until_resume(tmp_path, backend, request):
    a, b, m, merge, err = _merge_interrupted_at(tmp_path, backend, request, "episode")
    assert merge.proc.returncode == 130, err
    assert err.splitlines() == [f"egopool: the edit of {m} is unfinished and its sources stay held; "
                                f"`egopool edit resume {m}` finishes it", "egopool: interrupted"], err
    for src in (a, b):  # the marker stays with its (now dead) owner: as after kill -9
        assert src.store.exists("meta/.edit.json")
    for args in (("delete", a.location, "2"), ("edit", "set-task", b.location, "changed")):
        r = run_cli(*args)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert "interrupted `egopool edit merge`" in r.stderr and "egopool edit resume" in r.stderr, r.stderr
    r = run_cli("edit", "resume", m)
    assert r.returncode == 0, r.stderr
    mt = TaskAt(backend, m, tmp_path)
    assert mt.errors() == []
    assert _episodes(mt) == _episodes(a) + _episodes(b)  # the sources as they were, whole
    assert [r["task"] for r in read_tasks(m)] == ["pick"]
    assert not a.store.exists("meta/.edit.json") and not b.store.exists("meta/.edit.json")
    assert run_cli("delete", a.location, "2").returncode == 0


def test_ctrl_c_while_a_merge_plans_releases_its_sources(tmp_path, backend, request):
    """Interrupted before its journal exists (nothing to resume): the hold ends, no target is left."""
    a, b, m, merge, err = _merge_interrupted_at(tmp_path, backend, request, "held")
    assert merge.proc.returncode == 130 and err == "egopool: interrupted\n", err
    assert not a.store.exists("meta/.edit.json") and not b.store.exists("meta/.edit.json")
    assert TaskAt(backend, m, tmp_path).all_keys() == set()
    assert run_cli("edit", "set-task", a.location, "changed").returncode == 0


def test_a_source_is_held_while_the_merge_plans(tmp_path, backend, request):
    """An in-place edit of a source started while the merge plans is refused naming the merge; the merge then
    commits the task string it read."""
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=1, first_value=50.0), request)
    m = target_of(backend, tmp_path, a, "m")
    with paused(tmp_path / "state", "edit", "held", "edit", "merge", a.location, b.location, "--into", m) as merge:
        r = run_cli("edit", "set-task", a.location, "x2")
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert "`egopool edit merge` is in progress" in r.stderr and f"pid {merge.proc.pid}" in r.stderr, r.stderr
        done = merge.release()
    assert done.returncode == 0, done.stderr
    assert [r["task"] for r in read_tasks(a.location)] == ["pick"]
    assert [r["task"] for r in read_tasks(m)] == ["pick"]
    assert TaskAt(backend, m, tmp_path).errors() == []


def test_a_split_is_held_while_it_plans(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    p = target_of(backend, tmp_path, a, "p")
    with paused(tmp_path / "state", "edit", "held", "edit", "split", a.location, "--into", p,
                "--episodes", "2") as split:
        r = run_cli("edit", "remove-column", a.location, SENSOR)
        assert r.returncode == 1 and "`egopool edit split` is in progress" in r.stderr, r.stderr
        done = split.release()
    assert done.returncode == 0, done.stderr
    assert TaskAt(backend, p, tmp_path).errors() == [] and a.store.exists("data/chunk-000/episode-001.parquet")


def test_a_merge_refused_by_a_source_edit_names_it_and_leaves_no_target(tmp_path):
    """The source locked by an in-place edit: the merge names it and its pid, and no skeleton target is left
    (both where the plan's check meets it and where the hold does)."""
    from egopool.edit.hold import SourceHold
    from egopool.errors import LockError

    a = record(tmp_path / "a", episodes=2)
    b = record(tmp_path / "b", episodes=1, first_value=50.0)
    (tmp_path / "out").mkdir()
    m = tmp_path / "out" / "m5"
    with paused(tmp_path / "state", "edit", "episode", "edit", "set-task", str(b), "x2") as edit:
        r = run_cli("edit", "merge", str(a), str(b), "--into", str(m))
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert "`egopool edit set-task` is in progress" in r.stderr and f"pid {edit.proc.pid}" in r.stderr, r.stderr
        assert not m.exists()
        hold = SourceHold("merge", str(m), [str(a), str(b)], [])
        with pytest.raises(LockError) as got:
            hold.acquire()
        assert f"the source task is locked by `edit set-task` (pid {edit.proc.pid})" in str(got.value)
        assert not (a / "meta" / ".edit.json").exists()  # what it held is released
        assert edit.release().returncode == 0
    assert not m.exists()
