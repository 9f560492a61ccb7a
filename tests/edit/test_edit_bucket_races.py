"""Two edits that race on one task (issue 30's fresh review, findings 5 and 3; docs/decisions.md E71-E75), on a
directory and on a real SeaweedFS bucket: two merges of overlapping sources into one existing task add each
episode once (the second re-plans once it owns the target's journal); a bucket rename holds its old task until it
is committed or resumed; ``edit abandon`` drops an unfinished target and frees its sources."""

from __future__ import annotations

import json

from backends import TaskAt, paused, run_cli
from edit_support import assert_stats_recount, at, record

from egopool.meta.info import read_info


def _origins(t: TaskAt) -> list[dict]:
    return [json.loads(line) for line in t.read("meta/edit_origins.jsonl").decode().splitlines() if line.strip()]


def test_two_merges_of_overlapping_sources_into_one_task_add_each_episode_once(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=2), request)
    first = at(backend, record(tmp_path / "first", episodes=3), request)  # 1, 2: the target's; 3: new
    second = at(backend, record(tmp_path / "second", episodes=4), request)  # 1-3: as `first`; 4: new
    with paused(tmp_path / "state", "edit", "planned", "edit", "merge", second.location, "--into", t.location,
                "--json") as late:  # planned N 3, 4 from the target as it was; its journal not created yet
        r = run_cli("edit", "merge", first.location, "--into", t.location, "--json")
        assert r.returncode == 0, r.stderr
        assert [(e["index"], e["new_index"]) for e in json.loads(r.stdout)["episodes"]] == [(3, 3)]
        done = late.release()
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [(e["index"], e["new_index"]) for e in doc["episodes"]] == [(4, 4)]  # re-planned on the target as it is
    assert [(s["index"], s["same_as"]) for s in doc["skipped"]] == [(1, 1), (2, 2), (3, 3)]
    assert t.errors() == [] and read_info(t.location)["total_episodes"] == 4
    digests = [o["digest"] for o in _origins(t)]
    assert [o["episode_index"] for o in _origins(t)] == [3, 4] and len(set(digests)) == 2
    assert_stats_recount(t.location)
    assert not t.store.exists("meta/.edit.json")


def test_a_merge_whose_episodes_all_arrived_meanwhile_does_nothing(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=2), request)
    first = at(backend, record(tmp_path / "first", episodes=3), request)
    second = at(backend, record(tmp_path / "second", episodes=3), request)  # the same episodes as `first`
    with paused(tmp_path / "state", "edit", "planned", "edit", "merge", second.location, "--into",
                t.location) as late:
        assert run_cli("edit", "merge", first.location, "--into", t.location).returncode == 0
        done = late.release()
    assert done.returncode == 0, done.stderr
    assert "nothing to do" in done.stdout, done.stdout
    assert t.errors() == [] and read_info(t.location)["total_episodes"] == 3
    assert [o["episode_index"] for o in _origins(t)] == [3]
    assert_stats_recount(t.location)
    assert not t.store.exists("meta/.edit.json") and not second.store.exists("meta/.edit.json")


DATA2 = "data/chunk-000/episode-001.parquet"  # N=2's data parquet (default template)


def test_a_bucket_rename_killed_mid_copy_holds_its_old_task_until_resume(tmp_path, request):
    from backends import kill_at

    t = at("bucket", record(tmp_path / "t", episodes=2), request)
    new = t.location.rsplit("/", 1)[0] + "/renamed"
    kill_at(tmp_path / "state", "edit", "episode", "edit", "rename", t.location, "renamed")
    for args in (("edit", "set-task", t.location, "zzz"), ("delete", t.location, "1")):
        r = run_cli(*args)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert "interrupted `egopool edit rename`" in r.stderr and f"egopool edit resume {t.location}" in r.stderr
    assert t.store.exists("data/chunk-000/episode-000.parquet") and t.read("meta/tasks.jsonl").count(b"zzz") == 0
    r = run_cli("edit", "resume", t.location)  # the old task's marker names the rename: it is finished
    assert r.returncode == 0, r.stderr
    nt = TaskAt("bucket", new, tmp_path)
    assert nt.errors() == [] and read_info(new)["total_episodes"] == 2 and read_info(new)["task_name"] == "renamed"
    gone = ("meta/info.json", "meta/.edit.json", "meta/tasks.jsonl", "data/chunk-000/episode-000.parquet", DATA2)
    assert not any(t.store.exists(k) for k in gone)  # the old task is gone, its marker too


def test_a_rename_whose_old_task_changed_after_a_kill_is_abandoned(tmp_path, request):
    from backends import kill_at

    t = at("bucket", record(tmp_path / "t", episodes=2), request)
    other = record(tmp_path / "other", episodes=2, first_value=70.0)
    new = t.location.rsplit("/", 1)[0] + "/renamed"
    kill_at(tmp_path / "state", "edit", "episode", "edit", "rename", t.location, "renamed")
    t.store.put(DATA2, (other / DATA2).read_bytes())  # a writer that honours no marker (a hand copy)
    r = run_cli("edit", "resume", new)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"the source task {t.location} changed since the rename was planned ({DATA2} was rewritten)" in r.stderr
    assert f"`egopool edit abandon {new}` gives it up" in r.stderr, r.stderr
    nt = TaskAt("bucket", new, tmp_path)
    assert nt.store.exists("meta/.edit.json") and nt.keys()  # the partial copy stays; the refused run let go of
    assert not t.store.exists("meta/.edit.json")  # the old task (it holds it only while it copies)
    r = run_cli("edit", "abandon", new)
    assert r.returncode == 0, r.stderr
    assert "removed" in r.stdout and "abandoned the `edit rename`" in r.stdout, r.stdout
    assert nt.all_keys() <= {""} and not t.store.exists("meta/.edit.json")  # nothing of the new task is left
    r = run_cli("edit", "abandon", new)  # nothing left to abandon
    assert r.returncode == 1 and "holds no unfinished edit" in r.stderr, r.stderr
    assert run_cli("edit", "rename", t.location, "renamed").returncode == 0  # the rename, now of the task as it is
    assert read_info(new)["total_episodes"] == 2 and nt.read(DATA2) == (other / DATA2).read_bytes()


def test_abandon_a_killed_split_frees_its_source_and_refuses_what_it_cannot_undo(tmp_path, backend, request):
    from backends import kill_at
    from edit_support import target_of

    a = at(backend, record(tmp_path / "a", episodes=2), request)
    p = target_of(backend, tmp_path, a, "p")
    kill_at(tmp_path / "state", "edit", "episode", "edit", "split", a.location, "--into", p, "--episodes", "1,2")
    assert run_cli("delete", a.location, "2").returncode == 1  # held
    r = run_cli("edit", "abandon", a.location)  # a source: names the target to abandon
    assert r.returncode == 1 and f"egopool edit abandon {p}" in r.stderr, r.stderr
    r = run_cli("edit", "abandon", p)
    assert r.returncode == 0, r.stderr
    assert f"released {a.location}" in r.stdout, r.stdout
    pt = TaskAt(backend, p, tmp_path)
    if backend == "dir":
        assert not (tmp_path / "out" / "p").exists()
    else:
        assert pt.all_keys() <= {""}
    assert not a.store.exists("meta/.edit.json") and a.errors() == []
    assert run_cli("delete", a.location, "2").returncode == 0  # free again
    with paused(tmp_path / "state2", "edit", "committed", "edit", "split", a.location, "--into", p,
                "--episodes", "1"):
        pass  # killed after its commit
    r = run_cli("edit", "abandon", p)
    assert r.returncode == 1 and "committed already" in r.stderr and "edit resume" in r.stderr, r.stderr
    assert run_cli("edit", "resume", p).returncode == 0 and pt.errors() == []
    kill_at(tmp_path / "state3", "edit", "episode", "edit", "remove-column", a.location, "observation.right_glove")
    r = run_cli("edit", "abandon", a.location)  # an in-place edit: only finished
    assert r.returncode == 1 and "cannot be abandoned" in r.stderr, r.stderr
