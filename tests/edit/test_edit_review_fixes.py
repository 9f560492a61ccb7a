"""Defects a review found in ``egopool edit`` (docs/decisions.md E22-E30), each pinned on a directory task: a
repeated merge after ``task_index`` was renumbered, reserved-suffix names in ``add-column``, Unicode line breaks in
``set-task``, the ``--episodes`` parser, mistyped ``s3://`` URIs, companion columns and ``source_slot`` references."""

from __future__ import annotations

import json
from pathlib import Path

from backends import TaskAt, run_cli
from edit_support import digests, record

from egopool.meta.tasks import read_tasks


def _one_line_refusal(r, *words: str) -> None:
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def test_a_repeated_merge_into_skips_episodes_whose_task_index_was_renumbered(tmp_path):
    a = TaskAt("dir", str(record(tmp_path / "a", name="a", episodes=3)), tmp_path)
    b = record(tmp_path / "b", name="b", episodes=3)  # the same values as a's episodes, another instruction
    r = run_cli("edit", "merge", str(b), "--into", a.location, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # same data, another task string: other content, all copied (task "b" becomes task_index 1 in a)
    assert [(e["index"], e["new_index"]) for e in doc["episodes"]] == [(1, 4), (2, 5), (3, 6)]
    assert doc["skipped"] == []
    assert read_tasks(a.location) == [{"task_index": 0, "task": "a"}, {"task_index": 1, "task": "b"}]
    before = digests(a)
    r = run_cli("edit", "merge", str(b), "--into", a.location, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["episodes"] == []
    assert [(s["index"], s["same_as"]) for s in doc["skipped"]] == [(1, 4), (2, 5), (3, 6)]
    after = digests(a)
    assert {k for k in after if after[k] != before.get(k)} <= {"meta/info.json", "meta/stats.json"}
    assert a.errors() == []
    r = run_cli("edit", "merge", str(b), "--into", a.location)  # the human report names the target's N
    assert r.returncode == 0, r.stderr
    assert "same content as target episode 4" in r.stdout and "copied" not in r.stdout, r.stdout


def test_add_column_refuses_every_reserved_suffix_in_one_line(tmp_path):
    from egopool.schema import RESERVED_SUFFIXES

    t = TaskAt("dir", str(record(tmp_path, episodes=1)), tmp_path)
    values = tmp_path / "v.txt"
    values.write_text("1\n2\n3\n4\n")
    before = digests(t)
    names = ["observation.x_slam_trajectory", "observation.foo_force_matrix"] + \
        [f"observation.x{suffix if suffix.startswith('_') else '_' + suffix}" for suffix in RESERVED_SUFFIXES]
    for name in names:
        r = run_cli("edit", "add-column", t.location, "1", name, "--from", str(values))
        _one_line_refusal(r, "reserved suffix")
    assert digests(t) == before and t.errors() == []


def test_set_task_refuses_every_line_break_str_splitlines_knows(tmp_path):
    t = TaskAt("dir", str(record(tmp_path, episodes=1)), tmp_path)
    before = digests(t)
    for brk in ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]:
        r = run_cli("edit", "set-task", t.location, f"pick{brk}place")
        _one_line_refusal(r, "spans lines")
    assert digests(t) == before and t.errors() == []
    r = run_cli("edit", "set-task", t.location, "pick — à la main")  # other non-ASCII text: written readable
    assert r.returncode == 0, r.stderr
    assert read_tasks(t.location) == [{"task_index": 0, "task": "pick — à la main"}] and t.errors() == []


def test_tasks_jsonl_escapes_the_line_breaks_json_leaves_raw():
    from egopool.meta.tasks import tasks_jsonl

    body = tasks_jsonl([{"task_index": 0, "task": "a\u2028b\x85c\u2029d é"}])
    assert body.decode("utf-8").splitlines() == ['{"task_index": 0, "task": "a\\u2028b\\u0085c\\u2029d é"}']
    assert json.loads(body) == {"task_index": 0, "task": "a\u2028b\x85c\u2029d é"}


def test_episodes_list_parses_n_as_delete_does_and_bounds_a_range(tmp_path):
    from egopool.cli.edit_cmds import parse_episode_list

    assert parse_episode_list("1,3,5-7") == [1, 3, 5, 6, 7] and parse_episode_list(" 2 - 3 ") == [2, 3]
    src = TaskAt("dir", str(record(tmp_path, episodes=2)), tmp_path)
    before = digests(src)
    for bad in ["1-99999999999", "01", "+1", "\u0661", "1-02", "0", "3-1", "1.0", "1-", "-1", "1_0", "1-99999999999999999999999"]:
        r = run_cli("edit", "split", src.location, "--into", str(tmp_path / "out"), "--episodes", bad)
        _one_line_refusal(r, "--episodes")
        assert not (tmp_path / "out").exists()
    r = run_cli("edit", "add-column", src.location, "01", "observation.grip_label", "--from", str(tmp_path))
    _one_line_refusal(r, "plain positive decimal")
    assert digests(src) == before


def test_mistyped_s3_uris_are_refused_in_every_location_argument(tmp_path, monkeypatch):
    t = TaskAt("dir", str(record(tmp_path / "t", episodes=1)), tmp_path)
    monkeypatch.chdir(tmp_path)  # a mistyped URI taken as a local path would make ./s3: here
    before = digests(t)
    for bad in ["s3:/b/p", "S3://b/p", "s3:b/p", "S3:/b/p"]:
        for args in [("merge", t.location, "--into", bad), ("merge", bad, "--into", str(tmp_path / "new")),
                     ("split", bad, "--into", str(tmp_path / "new"), "--episodes", "1"),
                     ("split", t.location, "--into", bad, "--episodes", "1"),
                     ("rename", bad, "x"), ("resume", bad), ("set-task", bad, "x"),
                     ("remove-column", bad, "observation.right_glove"),
                     ("add-column", bad, "1", "observation.x", "--from", "nofile"),
                     ("rename-slot", bad, "cam", "cam2"), ("remove-slot", bad, "cam")]:
            r = run_cli("edit", *args)
            _one_line_refusal(r, "not an S3 URI")
    assert not any(p.name.lower().startswith("s3:") for p in tmp_path.iterdir())
    assert not (tmp_path / "new").exists() and digests(t) == before


def _slam_task(root, episodes: int = 2):
    """Episodes with a SLAM trajectory (and its ``_ns`` host times, ``source_slot`` "cam") and a glove sensor."""
    import numpy as np

    from egopool import StreamSpec, TaskWriter, slam_trajectory_columns, vector_column

    tw = TaskWriter(root, "slam", fps=30.0, registry=False)
    for k in range(episodes):
        ep = tw.begin_episode(columns=[*slam_trajectory_columns(frame="down_left_forward", source_slot="cam"),
                                       vector_column("observation.right_glove", [4])],
                              streams=[StreamSpec("cam", "rgb", 32, 24), StreamSpec("side", "rgb", 32, 24)],
                              sensors=["right_glove"], sensor_dim=4, created_at=1_700_000_000.0 + k)
        for i in range(4):
            pts = np.full((1, 8), i + 10 * k, np.float64)
            ep.add_frame({"observation.slam_trajectory": pts, "observation.slam_trajectory_ns": [1000 * i + 1],
                          "observation.right_glove": np.arange(4, dtype=np.float32) + i},
                         images={"cam": np.full((24, 32, 3), 9 * i, np.uint8),
                                 "side": np.full((24, 32, 3), 5 * i, np.uint8)})
        ep.finish()
    return TaskAt("dir", str(root / "slam"), root)


def _rows(t: TaskAt) -> list[dict]:
    import pyarrow.parquet as pq

    from egopool.meta.episodes import decode_row

    return [decode_row(pq.read_table(p).to_pylist()[0]) for p in sorted(Path(t.location, "meta", "episodes").rglob("*.parquet"))]


def _info(t: TaskAt) -> dict:
    return json.loads(Path(t.location, "meta", "info.json").read_text())


def _data_columns(t: TaskAt) -> list[list[str]]:
    import pyarrow.parquet as pq

    return [pq.read_schema(p).names for p in sorted(Path(t.location, "data").rglob("*.parquet"))]


def test_rename_column_of_a_slam_trajectory_carries_its_ns_and_declarations(tmp_path):
    t = _slam_task(tmp_path)
    r = run_cli("edit", "rename-column", t.location, "observation.slam_trajectory", "observation.left_slam_trajectory")
    assert r.returncode == 0, r.stderr
    assert t.errors() == []
    for names in _data_columns(t):
        assert "observation.left_slam_trajectory" in names and "observation.left_slam_trajectory_ns" in names
        assert not [n for n in names if n.startswith("observation.slam_trajectory")]
    info = _info(t)
    assert info["slam_frames"] == {"observation.left_slam_trajectory": "down_left_forward"}
    assert info["features"]["observation.left_slam_trajectory"]["source_slot"] == "cam"
    assert "observation.left_slam_trajectory_ns" in info["features"]
    assert not [k for k in info["features"] if k.startswith("observation.slam_trajectory")]
    assert [list(row["slam_specs"]) for row in _rows(t)] == [["observation.left_slam_trajectory"]] * 2
    r = run_cli("edit", "rename-column", t.location, "observation.left_slam_trajectory_ns", "observation.x_slam_trajectory_ns")
    _one_line_refusal(r, "companion")


def test_remove_column_of_a_slam_trajectory_takes_its_ns_and_declarations(tmp_path):
    t = _slam_task(tmp_path)
    r = run_cli("edit", "remove-column", t.location, "observation.slam_trajectory")
    assert r.returncode == 0, r.stderr
    assert t.errors() == []
    assert all(not [n for n in names if "slam" in n] for names in _data_columns(t))
    info = _info(t)
    assert "slam_frames" not in info and not [k for k in info["features"] if "slam" in k]
    assert [row["slam_specs"] for row in _rows(t)] == [{}, {}]


def test_remove_column_of_an_ns_companion_alone(tmp_path):
    t = _slam_task(tmp_path)
    r = run_cli("edit", "remove-column", t.location, "observation.slam_trajectory_ns")
    assert r.returncode == 0, r.stderr
    assert t.errors() == []
    assert all("observation.slam_trajectory" in n and "observation.slam_trajectory_ns" not in n
               for n in _data_columns(t))


def test_rename_slot_updates_source_slot_and_remove_slot_of_a_named_slot_is_refused(tmp_path):
    t = _slam_task(tmp_path)
    before = digests(t)
    r = run_cli("edit", "remove-slot", t.location, "cam")
    _one_line_refusal(r, "source_slot", "observation.slam_trajectory")
    assert digests(t) == before
    r = run_cli("edit", "remove-slot", t.location, "side")  # no column names it
    assert r.returncode == 0, r.stderr
    r = run_cli("edit", "rename-slot", t.location, "cam", "head_rgb")
    assert r.returncode == 0, r.stderr
    assert t.errors() == []
    info = _info(t)
    assert info["features"]["observation.slam_trajectory"]["source_slot"] == "head_rgb"
    assert [row["slam_specs"]["observation.slam_trajectory"]["source_slot"] for row in _rows(t)] == ["head_rgb"] * 2
    assert not [k for k in Path(t.location).rglob("*") if "side" in k.name or k.name == "cam"]


def test_removing_the_last_sensor_column_keeps_sensor_dim_a_must_key(tmp_path):
    t = TaskAt("dir", str(record(tmp_path, episodes=1)), tmp_path)
    assert _info(t)["sensors"] == ["right_glove"] and _info(t)["sensor_dim"] == 4
    r = run_cli("edit", "remove-column", t.location, "observation.right_glove")
    assert r.returncode == 0, r.stderr
    info = _info(t)
    assert info["sensors"] == [] and info["sensor_dim"] == 4  # file_format.md §3: sensor_dim is a MUST key (E29)
    assert t.errors() == []


def test_add_column_refuses_a_value_float32_cannot_hold_instead_of_storing_inf(tmp_path):
    """Review finding: 1e300 became float32 inf without a word (a value the format cannot hold changed silently)."""
    t = TaskAt("dir", str(record(tmp_path, episodes=1)), tmp_path)
    values = tmp_path / "v.txt"
    values.write_text("1\n1e300\n3\n4\n")
    before = digests(t)
    r = run_cli("edit", "add-column", t.location, "1", "observation.extra", "--from", str(values))
    _one_line_refusal(r, f"{values}: value 1e+300 (row 1, line 2) is beyond float32's range", "scale the values")
    assert digests(t) == before and t.errors() == []


def _force_task(root) -> TaskAt:
    """One simulated UMI gripper + D405 episode (force matrices with their rows' ``force_matrix_specs``)."""
    r = run_cli("simulate", "--rig", "gripper_d405", "-n", "1", "-s", "0.2", "--scale", "8", "--fast", "--out",
                str(root), "--task", "fm")
    assert r.returncode == 0, r.stderr
    return TaskAt("dir", str(root / "fm"), root)


def test_force_matrix_specs_follow_rename_and_remove_of_their_column(tmp_path):
    """A row's ``force_matrix_specs`` (file_format.md §7.2.1: the authority on the matrix's scale) is keyed by the
    column's name: rename-column renames its entry, remove-column drops it (docs/decisions.md E42)."""
    t = _force_task(tmp_path)
    old, new = "observation.gripper_right_force_matrix", "observation.gripper_b_force_matrix"
    before = _rows(t)[0]["force_matrix_specs"]
    assert old in before and t.warnings() == []
    r = run_cli("edit", "rename-column", t.location, old, new)
    assert r.returncode == 0, r.stderr
    after = _rows(t)[0]["force_matrix_specs"]
    assert old not in after and after[new] == before[old]
    assert {k: v for k, v in after.items() if k != new} == {k: v for k, v in before.items() if k != old}
    assert t.errors() == [] and t.warnings() == []
    r = run_cli("edit", "remove-column", t.location, new)
    assert r.returncode == 0, r.stderr
    assert set(_rows(t)[0]["force_matrix_specs"]) == set(before) - {old}
    assert t.errors() == [] and t.warnings() == []


def test_gripper_slam_frame_leaves_with_the_last_gripper_trajectory(tmp_path):
    """``gripper_slam_frame`` (file_format.md §6.6) exists only beside a gripper SLAM trajectory: removing the
    column takes it, renaming keeps it (docs/decisions.md E43)."""
    t = _slam_task(tmp_path)
    assert _info(t)["gripper_slam_frame"] == "down_left_forward"
    r = run_cli("edit", "rename-column", t.location, "observation.slam_trajectory", "observation.left_slam_trajectory")
    assert r.returncode == 0, r.stderr
    assert _info(t)["gripper_slam_frame"] == "down_left_forward" and t.warnings() == []
    r = run_cli("edit", "remove-column", t.location, "observation.left_slam_trajectory")
    assert r.returncode == 0, r.stderr
    assert "gripper_slam_frame" not in _info(t)
    assert t.errors() == [] and t.warnings() == []


def test_rename_column_refusals_say_what_the_names_are(tmp_path):
    t = _slam_task(tmp_path)
    before = digests(t)
    r = run_cli("edit", "rename-column", t.location, "observation.right_glove", "observation.right_glove")
    _one_line_refusal(r, "is named so already", "nothing to rename")
    r = run_cli("edit", "rename-column", t.location, "observation.slam_trajectory", "observation.path")
    _one_line_refusal(r, "'observation.path' has no reserved suffix", "is a slam_trajectory column")
    assert "None" not in r.stderr
    r = run_cli("edit", "rename-column", t.location, "observation.right_glove", "observation.right_force")
    _one_line_refusal(r, "is a force column", "has no reserved suffix", "without a reserved suffix")
    assert digests(t) == before
