"""Values an edit writes (docs/decisions.md E76-E80): ``add-column`` never stores a value float32 changes and reads
a text file line by line (a blank line, a ragged or non-numeric line: refused naming it; ``1,2,3`` a 3-vector);
``set-task`` refuses control characters and edge whitespace and never echoes a long string whole; the merge's
duplicate check compares instructions by their string; the last slot removed makes ``video`` false."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from backends import TaskAt, run_cli
from edit_support import digests, record

from egopool.meta.info import read_info
from egopool.meta.tasks import read_tasks

D1 = "data/chunk-000/episode-000.parquet"


def _refused(r, *words: str) -> None:
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


@pytest.fixture
def task(tmp_path) -> TaskAt:
    root = record(tmp_path, episodes=1)  # one episode of 4 rows
    return TaskAt("dir", str(root), root)


def _add(t: TaskAt, path, column: str = "observation.extra"):
    return run_cli("edit", "add-column", t.location, "1", column, "--from", str(path))


def test_add_column_refuses_an_integer_float32_would_round_naming_row_value_and_result(task, tmp_path):
    before = digests(task)
    np.save(tmp_path / "ns.npy", np.array([1, 2, 29_000_000_000_000, 4], np.int64))
    r = _add(task, tmp_path / "ns.npy")
    _refused(r, "ns.npy: row 2 holds 29000000000000, which float32", "stores as 29000000864256",
             "1 value(s) would change", "16777216")
    (tmp_path / "ns.txt").write_text("1\n2\n3\n9007199254740993\n")  # beyond float64's 2**53: the text is compared
    _refused(_add(task, tmp_path / "ns.txt"), "row 3, line 4 holds 9007199254740993", "stores as 9007199254740992")
    np.save(tmp_path / "tiny.npy", np.array([1.0, 1e-45, 0.0, 2.0]))  # a non-zero value float32 makes 0 or subnormal
    _refused(_add(task, tmp_path / "tiny.npy"), "row 1 holds 1e-45")
    assert digests(task) == before and task.errors() == []


def test_add_column_stores_integers_below_2_24_exactly_and_fractions_rounded(task, tmp_path):
    np.save(tmp_path / "v.npy", np.array([0, 16_777_216, -5, 7], np.int64))
    assert _add(task, tmp_path / "v.npy").returncode == 0
    (tmp_path / "f.txt").write_text("0.1\n2.5\n-3\n1e-3\n")
    assert _add(task, tmp_path / "f.txt", "observation.frac").returncode == 0
    table = pq.read_table(task.local / D1)
    assert [v[0] for v in table.column("observation.extra").to_pylist()] == [0.0, 16777216.0, -5.0, 7.0]
    got = np.array([v[0] for v in table.column("observation.frac").to_pylist()], np.float32)
    assert got.tolist() == np.array([0.1, 2.5, -3, 1e-3], np.float32).tolist()
    assert task.errors() == []


def test_add_column_text_lines_blank_ragged_and_commas(task, tmp_path):
    before = digests(task)
    (tmp_path / "blank.txt").write_text("1\n2\n\n3\n4\n")
    _refused(_add(task, tmp_path / "blank.txt"), "blank.txt: line 3 is blank")
    (tmp_path / "trail.txt").write_text("1\n2\n3\n4\n\n")
    _refused(_add(task, tmp_path / "trail.txt"), "trail.txt: line 5 is blank")
    (tmp_path / "ragged.csv").write_text("1,2,3\n4,5,6\n7,8\n9,10,11\n")
    _refused(_add(task, tmp_path / "ragged.csv"), "ragged.csv: line 3 holds 2 value(s), line 1 holds 3")
    (tmp_path / "word.csv").write_text("1,2,3\n4,x,6\n")
    _refused(_add(task, tmp_path / "word.csv"), "word.csv: line 2: 'x' is not a number (expected 3 number(s)")
    (tmp_path / "hole.csv").write_text("1,,3\n")
    _refused(_add(task, tmp_path / "hole.csv"), "hole.csv: line 1", "empty field")
    assert digests(task) == before
    (tmp_path / "v.csv").write_text("1,2,3\n4,5,6\r\n7, 8, 9\n10 11 12\n")  # a 3-vector per row
    r = _add(task, tmp_path / "v.csv")
    assert r.returncode == 0, r.stderr
    assert pq.read_table(task.local / D1).column("observation.extra").to_pylist() == \
        [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [10.0, 11.0, 12.0]]
    assert read_info(task.location)["features"]["observation.extra"] == {"dtype": "float32", "shape": [3]}
    assert task.errors() == []


@pytest.mark.parametrize("text,words", [
    ("tab\there", ["a tab (U+0009) at character 4"]),
    ("bell\x01", ["a control character (U+0001) at character 5"]),
    ("del\x7f", ["DEL (U+007F)"]),
    ("b ", ["ends with whitespace (U+0020)", "give 'b'"]),
    ("\u3000b", ["begins with whitespace (U+3000)"]),
    ("two\nlines", ["spans lines"]),
])
def test_set_task_refuses_control_characters_and_edge_whitespace(task, text, words):
    before = digests(task)
    _refused(run_cli("edit", "set-task", task.location, text), *words)
    assert digests(task) == before


def test_a_long_task_string_is_cut_in_messages_not_in_the_file(task):
    long = "x" * 100_000
    r = run_cli("edit", "set-task", task.location, long)
    assert r.returncode == 0, r.stderr
    assert "'pick' -> '" + "x" * 80 + "'... (100000 characters)" in r.stdout and len(r.stdout) < 1000, r.stdout[:300]
    assert read_tasks(task.location) == [{"task_index": 0, "task": long}]
    r = run_cli("edit", "set-task", task.location, long + "\t")  # a refusal cuts it too
    _refused(r, "(100001 characters) holds a tab")
    assert len(r.stderr) < 1000
    assert task.errors() == []


def test_removing_the_last_slot_makes_video_false(task):
    r = run_cli("edit", "remove-slot", task.location, "cam")
    assert r.returncode == 0, r.stderr
    info = read_info(task.location)
    assert info["video"] is False and info["video_extensions"] == {} and info["cameras"] == {}
    assert task.errors() == [] and task.warnings() == []


def test_duplicates_are_found_by_instruction_string_not_task_index(tmp_path):
    """E77: the instruction is part of the sample. The same recording under another string is another sample
    (copied); under the same string at another task_index it is a duplicate (skipped)."""
    (tmp_path / "x").mkdir()
    a = record(tmp_path / "x", name="a", episodes=2)
    b = record(tmp_path / "x", name="b", episodes=2)  # the same values as a's, under "b"
    c = record(tmp_path / "x", name="c", episodes=1, first_value=500.0)
    target = tmp_path / "x" / "t"
    r = run_cli("edit", "merge", str(c), str(b), "--into", str(target), "--json")  # "b" is task_index 1 in t
    assert r.returncode == 0, r.stderr
    assert read_tasks(str(target)) == [{"task_index": 0, "task": "c"}, {"task_index": 1, "task": "b"}]
    r = run_cli("edit", "merge", str(a), "--into", str(target), "--json")  # "a": another instruction, copied
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and [e["new_index"] for e in doc["episodes"]] == [4, 5] and doc["skipped"] == []
    d = record(tmp_path / "x", name="d", episodes=2)  # a's values again, renamed to "b" (task_index 0 in d)
    assert run_cli("edit", "set-task", str(d), "b").returncode == 0
    r = run_cli("edit", "merge", str(d), "--into", str(target), "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["episodes"] == [], r.stdout
    assert [(s["index"], s["same_as"]) for s in doc["skipped"]] == [(1, 2), (2, 3)]
    assert TaskAt("dir", str(target), target).errors() == []


def test_a_library_callers_values_are_checked_like_a_files():
    from egopool.edit import AddColumn
    from egopool.errors import OperationError

    assert AddColumn("observation.x", 1, np.array([1.5, 2.0])).values.tolist() == [[1.5], [2.0]]
    with pytest.raises(OperationError, match=r"the values: row 1 holds 1099511627777, which float32 .* stores as "
                                             r"1099511627776"):
        AddColumn("observation.x", 1, np.array([0, 2 ** 40 + 1], np.int64))
    with pytest.raises(OperationError, match="row 0 holds nan"):
        AddColumn("observation.x", 1, np.array([[np.nan]], np.float32))
