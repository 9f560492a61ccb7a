"""``egopool edit merge SRC... --into EXISTING`` (issue 30; docs/decisions.md E14-E18), on a directory and on a real
SeaweedFS bucket: appended after the highest N ever used (a deleted N stays retired), duplicates of the target's
episodes skipped, stats merged from the accumulators equal a recount, tasks.jsonl united, the target's own objects
byte-identical; SIGKILL at each step then a re-run completes; a second edit, or a server publishing into the task,
meanwhile: refused in one line with nothing written."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import httpx
import pytest
from backends import TaskAt, kill_at, paused, run_cli
from edit_support import assert_stats_recount, at, digests, record

from egopool.meta.info import read_info
from egopool.meta.retired import retired
from egopool.meta.tasks import read_tasks

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "transfer"))


def _new_n(r) -> list[tuple[int, int]]:
    assert r.returncode == 0, r.stderr
    return [(e["index"], e["new_index"]) for e in json.loads(r.stdout)["episodes"]]


def test_merge_into_appends_skips_duplicates_and_keeps_the_target(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=2), request)
    same = at(backend, record(tmp_path / "s", episodes=3), request)  # 1, 2: copies of the target's; 3: new
    other = at(backend, record(tmp_path / "o", name="place", episodes=1, first_value=100.0), request)
    before = digests(t)
    r = run_cli("edit", "merge", same.location, other.location, "--into", t.location, "--json")
    assert _new_n(r) == [(3, 3), (1, 4)]
    doc = json.loads(r.stdout)
    assert [(s["index"], s["same_as"]) for s in doc["skipped"]] == [(1, 1), (2, 2)]
    assert t.errors() == [] and not t.store.exists("meta/.edit.json")
    after = digests(t)
    changed = {k for k in before if after.get(k) != before[k]}
    assert changed == {"meta/info.json", "meta/stats.json", "meta/tasks.jsonl"}  # every episode object untouched
    assert read_info(t.location)["total_episodes"] == 4 and read_info(t.location)["task_name"] == "pick"
    assert read_tasks(t.location) == [{"task_index": 0, "task": "pick"}, {"task_index": 1, "task": "place"}]
    assert_stats_recount(t.location)
    origins = [json.loads(x) for x in t.read("meta/edit_origins.jsonl").decode().splitlines()]
    assert [(o["episode_index"], o["location"], o["source_episode_index"]) for o in origins] == \
        [(3, same.location, 3), (4, other.location, 1)]
    assert not [k for k in TaskAt(backend, t.location.rsplit("/", 1)[0], tmp_path).all_keys()
                if ".egopool-server/journals/" in k]  # the claims are released


def test_merge_into_never_reuses_a_deleted_n(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=3), request)
    r = run_cli("delete", t.location, "3")
    assert r.returncode == 0, r.stderr
    src = at(backend, record(tmp_path / "s", episodes=1, first_value=300.0), request)
    r = run_cli("edit", "merge", src.location, "--into", t.location, "--json")
    assert _new_n(r) == [(1, 4)]
    assert retired(t.store, 3) and not t.store.exists("data/chunk-000/episode-002.parquet")
    assert t.errors() == []
    r = run_cli("edit", "merge", src.location, "--into", t.location, "--json")  # again: all duplicates
    assert _new_n(r) == [] and [s["same_as"] for s in json.loads(r.stdout)["skipped"]] == [4]


def test_merge_into_a_task_with_other_declarations_is_one_line(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=1), request)
    src = at(backend, record(tmp_path / "s", episodes=1, fps=29.97), request)
    before = digests(t)
    r = run_cli("edit", "merge", src.location, "--into", t.location)
    assert r.returncode == 1 and r.stderr.count("\n") <= 2, r.stderr
    assert "fps is 30.0 in" in r.stderr and "29.97" in r.stderr
    assert digests(t) == before


@pytest.mark.parametrize("stage", ["journal", "declared", "episode", "meta", "committed"])
def test_merge_into_killed_at_each_step_is_finished_by_a_rerun(tmp_path, backend, request, stage):
    t = at(backend, record(tmp_path / "t", episodes=1), request)
    src = at(backend, record(tmp_path / "s", episodes=2, first_value=50.0), request)
    before, before_src = digests(t), digests(src)
    args = ("edit", "merge", src.location, "--into", t.location)
    kill_at(tmp_path / "state", "edit", stage, *args)
    assert t.errors() == []  # the episodes being copied are under their claims: work in progress, not damage
    r = run_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed"] is True
    assert t.errors() == [] and read_info(t.location)["total_episodes"] == 3
    assert not t.store.exists("meta/.edit.json") and digests(src) == before_src
    assert all(digests(t)[k] == v for k, v in before.items() if k.startswith(("data/", "videos/", "meta/episodes/")))
    assert_stats_recount(t.location)


def test_a_second_edit_of_the_target_is_refused_while_a_merge_into_runs(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=1), request)
    src = at(backend, record(tmp_path / "s", episodes=1, first_value=50.0), request)
    with paused(tmp_path / "state", "edit", "episode", "edit", "merge", src.location, "--into", t.location) as first:
        mid = digests(t)
        second = run_cli("edit", "merge", src.location, "--into", t.location)
        assert second.returncode == 1 and second.stderr.count("\n") <= 2, second.stderr
        assert ("in progress" in second.stderr) if backend == "dir" else ("another `egopool edit`" in second.stderr)
        assert "resume" not in second.stderr  # the first is alive: wait, not resume (E30)
        assert digests(t) == mid
        assert first.release().returncode == 0
    assert t.errors() == [] and read_info(t.location)["total_episodes"] == 2
    assert_stats_recount(t.location)


def test_a_server_publishing_into_the_task_refuses_the_merge(tmp_path, backend, request):
    """A server paused mid-publish into the task (its N claimed, its objects placed): the merge is refused in one
    line and writes nothing; once the publish is done, the merge appends after it."""
    pytest.importorskip("fastapi")
    from ops_helpers import write_task
    from transfer_helpers import ServerProc, wait_for

    from egopool.transfer import pack_episode, upload_episodes

    pc = write_task(tmp_path / "pc", episodes=2, registry=False)
    src = write_task(tmp_path / "src", episodes=1, registry=False, first_value=500.0)
    if backend == "dir":
        store_arg, state = str(tmp_path / "store"), tmp_path / "store"
        task = str(tmp_path / "store" / "pick")
        src_at = TaskAt("dir", str(src), src)
    else:
        s3 = request.getfixturevalue("s3_server")
        s3.create_bucket("ops-tasks")
        import uuid

        store_arg, state = f"s3://ops-tasks/{uuid.uuid4().hex[:10]}", tmp_path / "state"
        task = store_arg + "/pick"
        src_at = at("bucket", src, request)
    extra = () if backend == "dir" else ("--state", str(state))
    with ServerProc(state, *extra, store_arg=store_arg) as srv:
        assert upload_episodes(pc, [1], server=srv.url, registry=False).ok
    packed = pack_episode(pc, 2, tmp_path / "zips")
    marker = state / ("paused-placed" if backend == "bucket" else ".egopool-server/paused-placed")
    with ServerProc(state, *extra, store_arg=store_arg, env={"EGOPOOL_SERVER_PAUSE": "placed"}) as srv:
        out: list[object] = []
        thread = threading.Thread(target=lambda: out.append(httpx.post(
            srv.url + "/api/v1/session/upload", data={"name": "pick", "episode_index": str(packed.file)},
            files={"file": ("e.zip", packed.path.read_bytes(), "application/zip")}, timeout=300)), daemon=True)
        thread.start()
        wait_for(marker)
        t = TaskAt(backend, task, tmp_path)
        mid = digests(t)
        r = run_cli("edit", "merge", src_at.location, "--into", task)
        assert r.returncode == 1 and r.stderr.count("\n") <= 2, r.stderr
        assert "being published" in r.stderr, r.stderr
        assert digests(t) == mid
        marker.unlink()
        thread.join(300)
        assert isinstance(out[0], httpx.Response) and out[0].status_code == 200
    r = run_cli("edit", "merge", src_at.location, "--into", task, "--json")
    assert _new_n(r) == [(1, 3)]
    assert t.errors() == []
    assert_stats_recount(task)


def test_s3_uri_typos_are_one_line_and_write_nothing(tmp_path, request):
    t = at("bucket", record(tmp_path / "t", episodes=1), request)
    src = at("bucket", record(tmp_path / "s", episodes=1, first_value=5.0), request)
    bucket_root = TaskAt("bucket", t.location.split("/", 3)[0] + "//" + t.location.split("/", 3)[2], tmp_path)
    before = digests(bucket_root)
    good, prefix = t.location, t.location.rsplit("/", 1)[0]
    cases = [("merge", "s3:/" + good[5:], "--into", good),  # one slash
             ("merge", good.replace("ops-tasks", "no-such-bucket"), "--into", good),
             ("merge", prefix + "/no_such_task", "--into", good),
             ("merge", src.location, "--into", good.replace("ops-tasks", "no-such-bucket")),
             ("merge", src.location, "--into", "s3://"),
             ("split", src.location, "--into", "s3://ops-tasks", "--episodes", "1"),
             ("remove-column", "s3://ops-tasks/", "observation.right_glove"),
             ("rename", prefix + "/no_such_task", "x"),
             ("resume", "s3://no-such-bucket/x/y")]
    for args in cases:
        r = run_cli("edit", *args)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (args, r.stderr)
    assert digests(bucket_root) == before
