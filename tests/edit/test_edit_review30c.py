"""Issue 30's fresh review (/work/wt/review30c.md, findings 3-7; docs/decisions.md E90-E97): a new task inside
another task, a rename through a symlink, a merge killed while it planned, a resumed bucket rename's report, help
texts and `--episodes` items. Directory and real SeaweedFS bucket where it applies."""

from __future__ import annotations

import json
import os
import re

import pytest
from backends import TaskAt, kill_at, paused, run_cli
from edit_support import at, digests, record, target_of

from egopool.meta.tasks import read_tasks


def _one_line(r, *says: str) -> None:
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    for s in says:
        assert s in r.stderr, r.stderr


def _tree(root) -> dict[str, tuple[int, bytes]]:
    """Every file and directory under ``root`` (dot files too) -> (mode kind, bytes): a directory snapshot."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = (0, b"")
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = (1, fh.read())
    return out


# -- finding 3: a new task inside another task (E90) -------------------------------------------------------------

@pytest.mark.parametrize("inner", ["data/chunk-000/zz", "meta/episodes/zz", "sub"])
def test_a_split_or_merge_into_a_location_inside_another_task_is_refused(tmp_path, backend, request, inner):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=2, first_value=50.0), request)
    c = at(backend, record(tmp_path / "c", episodes=1, first_value=90.0), request)
    before = {t.location: digests(t) for t in (a, b, c)}
    tree = _tree(tmp_path)
    into = f"{a.location}/{inner}"
    _one_line(run_cli("edit", "split", b.location, "--into", into, "--episodes", "1"),
              f"{into} is inside the task {a.location}", "a task never holds another", "nothing was written")
    _one_line(run_cli("edit", "merge", b.location, c.location, "--into", into),
              f"{into} is inside the task {a.location}", "nothing was written")
    assert {t.location: digests(t) for t in (a, b, c)} == before  # no pipeline.db, no object anywhere
    assert _tree(tmp_path) == tree
    assert not any(k.startswith(inner) for k in a.all_keys())


def test_a_bucket_target_above_a_task_is_refused(tmp_path, request):
    request.getfixturevalue("s3_server")
    a = at("bucket", record(tmp_path / "a", episodes=2), request)
    b = at("bucket", record(tmp_path / "b", episodes=1, first_value=50.0), request)
    parent = a.location.rsplit("/", 1)[0]  # the prefix that holds the task a
    before = digests(a), digests(b)
    _one_line(run_cli("edit", "split", b.location, "--into", parent, "--episodes", "1"),
              f"{parent} is not empty (it holds pick)", "a task never holds another")
    assert (digests(a), digests(b)) == before


def test_a_directory_target_inside_a_task_through_a_symlink_is_refused(tmp_path):
    a = record(tmp_path / "a", episodes=1)
    b = record(tmp_path / "b", episodes=1, first_value=50.0)
    os.symlink(a / "meta", tmp_path / "alink")  # alink/x is a/meta/x
    tree = _tree(tmp_path)
    _one_line(run_cli("edit", "split", str(b), "--into", str(tmp_path / "alink" / "x"), "--episodes", "1"),
              f"is inside the task {a}")
    assert _tree(tmp_path) == tree


# -- finding 4: rename through a symlink (E91) -------------------------------------------------------------------

def test_a_rename_of_a_symlink_to_a_task_is_refused_naming_the_task(tmp_path):
    task = record(tmp_path, "bb")
    os.symlink("bb", tmp_path / "bblink")
    tree = _tree(tmp_path)
    r = run_cli("edit", "rename", str(tmp_path / "bblink"), "bbr")
    _one_line(r, f"{tmp_path / 'bblink'} is a symbolic link to {task}; rename the task itself",
              f"egopool edit rename {task} bbr", "nothing was changed")
    assert _tree(tmp_path) == tree and os.readlink(tmp_path / "bblink") == "bb"
    assert json.loads((task / "meta" / "info.json").read_text())["task_name"] == "bb"
    r = run_cli("edit", "rename", str(task), "bbr")  # the fix the line names works
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "bbr" / "meta" / "info.json").read_text())["task_name"] == "bbr"


# -- finding 5: a merge killed while it planned (E92) ------------------------------------------------------------

def _killed_planning(tmp_path, backend, request):
    """Sources a (2 episodes) and b (1) and a merge of both into m (beside a) SIGKILLed at ``edit:held``: the
    sources held, no target journal. ``(a, b, m)``."""
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=1, first_value=50.0), request)
    m = a.location.rsplit("/", 1)[0] + "/m"  # a sibling of a (a bucket's b is under another prefix)
    kill_at(tmp_path / "state", "edit", "held", "edit", "merge", a.location, b.location, "--into", m)
    for src in (a, b):
        doc = json.loads(src.read("meta/.edit.json"))
        assert doc["hold"] is True and doc["target"] == m and doc["sources"] == [a.location, b.location]
    assert TaskAt(backend, m, tmp_path).all_keys() == set()
    return a, b, m


@pytest.mark.parametrize("how", ["resume", "abandon"])
def test_resume_or_abandon_of_the_target_releases_every_hold(tmp_path, backend, request, how):
    a, b, m = _killed_planning(tmp_path, backend, request)
    before = {k: v for k, v in digests(a).items() if k != "meta/.edit.json"}
    r = run_cli("edit", how, m)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == (f"the `edit merge` into {m} never started copying (its run is gone); released its "
                                f"holds on {a.location}, {b.location}").split(), r.stdout
    assert not a.store.exists("meta/.edit.json") and not b.store.exists("meta/.edit.json")
    assert digests(a) == before and TaskAt(backend, m, tmp_path).all_keys() == set()
    assert run_cli("edit", "set-task", b.location, "changed").returncode == 0  # no longer held
    r = run_cli("edit", how, m)  # nothing left: refused as before
    assert r.returncode == 1, r.stdout


def test_resume_of_one_source_releases_every_source_of_that_merge(tmp_path, backend, request):
    a, b, m = _killed_planning(tmp_path, backend, request)
    r = run_cli("edit", "resume", b.location)
    assert r.returncode == 0, r.stderr
    assert "never started copying" in r.stdout and "finished" not in r.stdout, r.stdout
    assert f"released its holds on {a.location}, {b.location}" in " ".join(r.stdout.split()), r.stdout
    assert not a.store.exists("meta/.edit.json") and not b.store.exists("meta/.edit.json")


def test_the_same_merge_run_again_takes_over_its_dead_holds(tmp_path, backend, request):
    a, b, m = _killed_planning(tmp_path, backend, request)
    r = run_cli("edit", "merge", a.location, b.location, "--into", m)
    assert r.returncode == 0, r.stderr
    mt = TaskAt(backend, m, tmp_path)
    assert mt.errors() == [] and len([k for k in mt.keys() if k.startswith("data/")]) == 3
    assert not a.store.exists("meta/.edit.json") and not b.store.exists("meta/.edit.json")
    assert [r["task"] for r in read_tasks(m)] == ["pick"]


def test_another_merge_does_not_take_over_a_dead_hold(tmp_path, backend, request):
    a, b, m = _killed_planning(tmp_path, backend, request)
    other = a.location.rsplit("/", 1)[0] + "/other"
    _one_line(run_cli("edit", "merge", a.location, b.location, "--into", other),
              "an interrupted `egopool edit merge` holds this task")
    assert json.loads(a.read("meta/.edit.json"))["target"] == m


def test_a_live_planning_merge_is_not_released(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=1, first_value=50.0), request)
    m = a.location.rsplit("/", 1)[0] + "/m"
    with paused(tmp_path / "state", "edit", "held", "edit", "merge", a.location, b.location, "--into", m) as merge:
        for args in (("resume", m), ("abandon", m), ("resume", a.location), ("merge", a.location, b.location,
                                                                               "--into", m)):
            r = run_cli("edit", *args)
            assert r.returncode == 1 and "`egopool edit merge` is in progress" in r.stderr, (args, r.stderr)
            assert a.store.exists("meta/.edit.json") and b.store.exists("meta/.edit.json")
        done = merge.release()
    assert done.returncode == 0, done.stderr
    assert TaskAt(backend, m, tmp_path).errors() == []


def test_the_hold_note_finds_sources_that_are_not_beside_the_target(tmp_path):
    a = record(tmp_path / "a", episodes=1)
    b = record(tmp_path / "b", episodes=1, first_value=50.0)
    (tmp_path / "out").mkdir()
    m = str(tmp_path / "out" / "m")
    state = tmp_path / "state"
    kill_at(state, "edit", "held", "edit", "merge", str(a), str(b), "--into", m)
    r = run_cli("edit", "resume", m)  # another state dir: no note, and no source beside out/m
    assert r.returncode == 1 and "does not exist" in r.stderr, r.stderr
    r = run_cli("edit", "resume", m, env={"XDG_STATE_HOME": str(state)})
    assert r.returncode == 0, r.stderr
    assert f"released its holds on {a}, {b}" in " ".join(r.stdout.split()), r.stdout
    assert not (a / "meta" / ".edit.json").exists() and not (b / "meta" / ".edit.json").exists()
    assert not list((state / "egopool" / "edit-holds").iterdir())


def test_a_split_killed_while_it_planned_is_run_again(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    p = target_of(backend, tmp_path, a, "p")
    kill_at(tmp_path / "state", "edit", "held", "edit", "split", a.location, "--into", p, "--episodes", "2")
    assert json.loads(a.read("meta/.edit.json"))["sources"] == [a.location]
    r = run_cli("edit", "split", a.location, "--into", p, "--episodes", "2")
    assert r.returncode == 0, r.stderr
    assert TaskAt(backend, p, tmp_path).errors() == [] and not a.store.exists("meta/.edit.json")


# -- finding 6: a resumed bucket rename (E94) --------------------------------------------------------------------

def test_a_resumed_bucket_rename_says_it_renamed(tmp_path, request):
    request.getfixturevalue("s3_server")
    old = at("bucket", record(tmp_path / "s", "rn7", episodes=2), request)
    new = old.location.rsplit("/", 1)[0] + "/rn8"
    kill_at(tmp_path / "state", "edit", "journal", "edit", "rename", old.location, "rn8")
    _one_line(run_cli("edit", "set-task", old.location, "zzz"), f"`egopool edit resume {old.location}` finishes it",
              f"then run again on {new} (the task's new name)")
    r = run_cli("edit", "resume", old.location)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == f"renamed {old.location} -> {new} (old prefix deleted)", r.stdout
    assert "retired there" not in r.stdout
    assert all(m.size == 0 for m in old.store.list())  # only the upload's empty "folder" markers are left (E11)
    assert not old.store.exists("meta/info.json") and TaskAt("bucket", new, tmp_path).errors() == []
    r = run_cli("edit", "set-task", new, "zzz")  # the hint's command works
    assert r.returncode == 0, r.stderr


def test_a_bucket_rename_reports_the_rename(tmp_path, request):
    request.getfixturevalue("s3_server")
    old = at("bucket", record(tmp_path / "s", "rn1", episodes=1), request)
    new = old.location.rsplit("/", 1)[0] + "/rn2"
    dry = run_cli("edit", "rename", old.location, "rn2", "--dry-run")
    assert dry.stdout.splitlines()[-1] == f"would rename {old.location} -> {new} (the old prefix would be deleted)"
    r = run_cli("edit", "rename", old.location, "rn2")
    assert r.stdout.splitlines()[-1] == f"renamed {old.location} -> {new} (old prefix deleted)", r.stdout


# -- finding 7: help and small inputs (E95-E97) ------------------------------------------------------------------

def test_help_texts_name_every_argument():
    env = {"COLUMNS": "200"}
    merge = run_cli("edit", "merge", "--help", env=env).stdout
    assert "TASK..." in merge and "TASK...." not in merge
    for cmd, names in (("remove-column", ["COLUMN"]), ("rename-column", ["OLD", "NEW"]), ("remove-slot", ["SLOT"]),
                       ("rename-slot", ["OLD", "NEW"]), ("add-column", ["COLUMN"])):
        out = run_cli("edit", cmd, "--help", env=env).stdout
        for name in names:
            line = next(x for x in out.splitlines() if re.search(rf"\*\s+{name}\s", x))
            assert re.search(rf"{name}\s+\S.*\[required\]", line) and not re.search(rf"{name}\s+\[required\]", line), \
                line
    split = " ".join(run_cli("edit", "split", "--help", env=env).stdout.split())
    assert "narrow each other" in split and "intersection" in split and "(= is ==)" in split
    add = " ".join(run_cli("edit", "add-column", "--help", env=env).stdout.split())
    assert "ONE episode" in add and "once per episode" in add


@pytest.mark.parametrize("bad", ["1,,2", "1,", ",1", "1, ,2"])
def test_an_empty_episodes_item_is_refused(tmp_path, bad):
    a = record(tmp_path / "a", episodes=2)
    (tmp_path / "out").mkdir()
    tree = _tree(tmp_path)
    _one_line(run_cli("edit", "split", str(a), "--into", str(tmp_path / "out" / "p"), "--episodes", bad),
              f"--episodes {bad!r}: an empty item between commas")
    assert _tree(tmp_path) == tree


def test_episodes_and_episodes_from_intersect(tmp_path):
    a = record(tmp_path / "a", episodes=3)
    (tmp_path / "out").mkdir()
    sel = tmp_path / "sel.txt"
    sel.write_text("2\n3\n")
    p = tmp_path / "out" / "p"
    r = run_cli("edit", "split", str(a), "--into", str(p), "--episodes", "1,3", "--episodes-from", str(sel), "--json")
    assert r.returncode == 0, r.stderr
    assert [e["index"] for e in json.loads(r.stdout)["episodes"]] == [3]
    tree = _tree(tmp_path)
    _one_line(run_cli("edit", "split", str(a), "--into", str(tmp_path / "out" / "q"), "--episodes", "1",
                      "--episodes-from", str(sel)), "no N of --episodes '1' is in the selection")
    assert _tree(tmp_path) == tree


def test_merge_into_an_existing_task_reports_in_source_order(tmp_path):
    a = record(tmp_path / "a", episodes=3)
    t = record(tmp_path / "t", episodes=1)  # holds a's episode 1 (same values): a duplicate
    r = run_cli("edit", "merge", str(a), "--into", str(t))
    assert r.returncode == 0, r.stderr
    told = [x for x in r.stdout.splitlines() if x.startswith(("copied", "skipped"))]
    assert [re.search(r"episode (\d+)", x).group(1) for x in told] == ["1", "2", "3"], told
    assert told[0].startswith("skipped duplicate") and told[1].startswith("copied"), told
