"""``egopool edit merge`` / ``split`` on a directory and on a real SeaweedFS bucket (issue 30): validate clean,
stats equal to a recount, sources byte-identical, N from 1 and never reused, LeRobot's known bugs as tests,
bad input refused in one line with nothing written."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
from backends import run_cli
from edit_support import assert_stats_recount, at, digests, record, target_of

from egopool.meta.info import read_info
from egopool.meta.tasks import read_tasks


def _table(t, n):
    return pq.read_table(io.BytesIO(t.read(f"data/chunk-000/episode-{n - 1:03d}.parquet")))


def test_merge_renumbers_keeps_everything_and_stats_equal_a_recount(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=3, first_value=100.0, created=1_800_000_000.0), request)
    before_a, before_b = digests(a), digests(b)
    into = target_of(backend, tmp_path, a, "merged")
    dry = run_cli("edit", "merge", a.location, b.location, "--into", into, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert [(e["index"], e["new_index"]) for e in plan["episodes"]] == [(1, 1), (2, 2), (1, 3), (2, 4), (3, 5)]
    assert "meta/info.json" in plan["writes"] and plan["writes"][-1] == "meta/info.json"
    r = run_cli("edit", "merge", a.location, b.location, "--into", into, "--json")
    assert r.returncode == 0, r.stderr
    t = type(a)(backend, into, tmp_path)
    assert t.errors() == []
    assert digests(a) == before_a and digests(b) == before_b  # sources untouched, byte for byte
    info = read_info(into)
    assert info["fps"] == 30.0 and info["total_episodes"] == 5 and info["task_name"] == "merged"  # LeRobot #2679
    assert info["features"] == read_info(a.location)["features"]
    assert_stats_recount(into)  # LeRobot #4276: no offset, the blocks are a recount
    for new, (src, n) in enumerate([(a, 1), (a, 2), (b, 1), (b, 2), (b, 3)], start=1):
        got, want = _table(t, new), _table(src, n)
        assert got.column("episode_index").to_pylist() == [new] * want.num_rows  # LeRobot #2264: rows aligned
        assert got.drop_columns(["episode_index"]).equals(want.drop_columns(["episode_index"]))
        # LeRobot #3883: one video per episode, copied byte for byte (no concatenation, no boundary to shift)
        assert t.read(f"videos/chunk-000/cam/episode-{new - 1:03d}.mp4") == \
            src.read(f"videos/chunk-000/cam/episode-{n - 1:03d}.mp4")
        row = pq.read_table(io.BytesIO(t.read(f"meta/episodes/chunk-000/episode-{new - 1:03d}.parquet"))).to_pylist()[0]
        old = pq.read_table(io.BytesIO(src.read(f"meta/episodes/chunk-000/episode-{n - 1:03d}.parquet"))).to_pylist()[0]
        assert row["episode_index"] == new
        moved = ("episode_index", "file_digests")  # the checksums name the files' new paths (X1, E13)
        assert {k: v for k, v in row.items() if k not in moved} == \
            {k: v for k, v in old.items() if k not in moved}  # calibration per episode, lengths, drop_stats
        if old.get("file_digests"):
            assert sorted(json.loads(row["file_digests"])["files"]) == [
                f"data/chunk-000/episode-{new - 1:03d}.parquet", f"videos/chunk-000/cam/episode-{new - 1:03d}.mp4"]
    origins = [json.loads(line) for line in t.read("meta/edit_origins.jsonl").decode().splitlines()]
    assert [(o["location"], o["source_episode_index"]) for o in origins] == \
        [(a.location, 1), (a.location, 2), (b.location, 1), (b.location, 2), (b.location, 3)]
    assert read_tasks(into) == [{"task_index": 0, "task": "pick"}]
    assert not any(k.endswith(".edit.json") for k in t.all_keys())


def test_merge_skips_duplicates_and_subtracts_them_from_the_stats(tmp_path, backend, request):
    a_local = record(tmp_path / "a", episodes=2)
    b_local = record(tmp_path / "b", episodes=2)  # the same two recordings (a second server's copy) ...
    a, b = at(backend, a_local, request), at(backend, b_local, request)
    into = target_of(backend, tmp_path, a, "joined")
    r = run_cli("edit", "merge", a.location, b.location, "--into", into, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(s["index"], s["same_as"]) for s in doc["skipped"]] == [(1, 1), (2, 2)]
    assert read_info(into)["total_episodes"] == 2
    assert type(a)(backend, into, tmp_path).errors() == []
    assert_stats_recount(into)


def test_merge_unites_task_strings(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", "pick", episodes=1), request)
    b_local = record(tmp_path / "b", "place", episodes=1, first_value=50.0)
    info = read_info(b_local)
    info["task_name"] = "pick"  # same declarations, another task string
    from egopool.meta.info import write_info

    write_info(b_local, info)
    b = at(backend, b_local, request)
    into = target_of(backend, tmp_path, a, "both")
    r = run_cli("edit", "merge", a.location, b.location, "--into", into)
    assert r.returncode == 0, r.stderr
    assert read_tasks(into) == [{"task_index": 0, "task": "pick"}, {"task_index": 1, "task": "place"}]
    t = type(a)(backend, into, tmp_path)
    assert _table(t, 2).column("task_index").to_pylist() == [1] * 4
    assert t.errors() == []


def test_merge_refuses_another_fps_in_one_line_and_writes_nothing(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=1), request)
    b = at(backend, record(tmp_path / "b", episodes=1, fps=29.97), request)
    into = target_of(backend, tmp_path, a, "never")
    r = run_cli("edit", "merge", a.location, b.location, "--into", into)
    assert r.returncode == 1
    assert r.stderr.count("\n") <= 2 and "fps is 30.0 in" in r.stderr and "29.97" in r.stderr, r.stderr
    t = type(a)(backend, into, tmp_path)
    assert (not (tmp_path / "out" / "never").exists()) if backend == "dir" else t.all_keys() == set()


def test_split_refuses_a_target_that_is_a_task(tmp_path, backend, request):
    """A split builds a new task (a merge into an existing one appends: tests/edit/test_edit_merge_into.py)."""
    a = at(backend, record(tmp_path / "a", episodes=1), request)
    b = at(backend, record(tmp_path / "b", episodes=1, first_value=9.0), request)
    before = digests(b)
    r = run_cli("edit", "split", a.location, "--into", b.location, "--episodes", "1")
    assert r.returncode == 1 and "is a task already" in r.stderr, r.stderr
    assert digests(b) == before


def test_split_at_29_97_fps_keeps_every_frame(tmp_path, backend, request):
    s = at(backend, record(tmp_path / "s", episodes=4, fps=29.97, rows=7), request)
    before = digests(s)
    into = target_of(backend, tmp_path, s, "part")
    r = run_cli("edit", "split", s.location, "--into", into, "--episodes", "2,4", "--json")
    assert r.returncode == 0, r.stderr
    t = type(s)(backend, into, tmp_path)
    assert t.errors() == [] and digests(s) == before
    assert read_info(into)["fps"] == 29.97 and read_info(into)["total_episodes"] == 2
    for new, n in ((1, 2), (2, 4)):  # LeRobot #2547: the frames stay where they were, none lost or moved
        got, want = _table(t, new), _table(s, n)
        assert got.num_rows == want.num_rows == 7
        for col in ("timestamp", "frame_index", "wall_time", "observation.right_glove"):
            assert got.column(col).equals(want.column(col)), col
        assert t.read(f"videos/chunk-000/cam/episode-{new - 1:03d}.mp4") == \
            s.read(f"videos/chunk-000/cam/episode-{n - 1:03d}.mp4")
    assert_stats_recount(into)


def test_split_by_filter_and_move_retires_n_in_the_source(tmp_path, backend, request):
    local = record(tmp_path / "s", episodes=3, rows=4)
    s = at(backend, local, request)
    into = target_of(backend, tmp_path, s, "long")
    r = run_cli("edit", "split", s.location, "--into", into, "--where", "created_at>=1700000001", "--move", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(e["index"], e["new_index"]) for e in doc["episodes"]] == [(2, 1), (3, 2)]
    assert doc["deleted"] == {s.location: [2, 3]}
    assert s.errors() == [] and type(s)(backend, into, tmp_path).errors() == []
    assert {k for k in s.keys() if k.startswith("data/")} == {"data/chunk-000/episode-000.parquet"}
    assert read_info(s.location)["total_episodes"] == 3  # N 2 and 3 are never handed out again there
    assert_stats_recount(into)


def test_split_of_a_missing_episode_is_one_line_and_writes_nothing(tmp_path, backend, request):
    s = at(backend, record(tmp_path / "s", episodes=2), request)
    before = digests(s)
    into = target_of(backend, tmp_path, s, "none")
    r = run_cli("edit", "split", s.location, "--into", into, "--episodes", "2,9")
    assert r.returncode == 1 and "no episode 9" in r.stderr and r.stderr.count("\n") <= 2, r.stderr
    assert digests(s) == before
    t = type(s)(backend, into, tmp_path)
    assert (not (tmp_path / "out" / "none").exists()) if backend == "dir" else t.all_keys() == set()


def test_split_by_a_review_selection(tmp_path, backend, request):
    s = at(backend, record(tmp_path / "s", episodes=3), request)
    sel = tmp_path / "accepted.json"
    sel.write_text(json.dumps({"episodes": [{"task": "pick", "index": 3, "verdict": "accept"},
                                            {"task": "other", "index": 1}], "next_cursor": None}))
    into = target_of(backend, tmp_path, s, "accepted")
    r = run_cli("edit", "split", s.location, "--into", into, "--episodes-from", str(sel), "--json")
    assert r.returncode == 0, r.stderr
    assert [(e["index"], e["new_index"]) for e in json.loads(r.stdout)["episodes"]] == [(3, 1)]
    assert type(s)(backend, into, tmp_path).errors() == []
