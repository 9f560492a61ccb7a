"""Inputs of ``egopool edit`` found by the issue-30 follow-up review (docs/decisions.md E31-E33): one slot-name
check shared by the writer and rename-slot, a .npy that is none named as such, a merge with nothing new that
writes (and lists) nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from backends import run_cli
from edit_support import at, digests, record

from egopool import StreamSpec
from egopool.errors import SchemaError
from egopool.meta.info import read_info


BAD_SLOTS = {"head cam": "'head_cam'", "_hidden": "'hidden'", "cam-1": "'cam_1'", "a.b": "'a_b'", "a/b": "'a_b'",
             "": "head_rgb", "x" * 256: "'" + "x" * 64 + "'"}


@pytest.mark.parametrize("name", sorted(BAD_SLOTS))
def test_the_writer_and_rename_slot_refuse_the_same_slot_names(name):
    with pytest.raises(SchemaError) as got:
        StreamSpec(name, "rgb", 32, 24)
    assert "multi_device_storage.md §2.4" in got.value.message and BAD_SLOTS[name] in (got.value.hint or "")


def test_rename_slot_refuses_a_name_the_writer_refuses_and_takes_a_chinese_one(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "s", episodes=1), request)
    before = digests(t)
    for name in ("head cam", "_head", "cam-1", "头 部"):
        r = run_cli("edit", "rename-slot", t.location, "cam", name)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert f"invalid slot name {name!r}" in r.stderr and "use '" in r.stderr, r.stderr
    assert digests(t) == before
    StreamSpec("头部_rgb", "rgb", 32, 24)  # the spec keeps Chinese in a slot name (§2.4): so do both
    r = run_cli("edit", "rename-slot", t.location, "cam", "头部_rgb")
    assert r.returncode == 0, r.stderr
    assert set(read_info(t.location)["video_extensions"]) == {"头部_rgb"} and t.errors() == []


def test_add_column_names_a_file_that_is_no_npy_and_says_what_is_expected(tmp_path):
    t = at("dir", record(tmp_path / "s", episodes=1, rows=4), None)
    before = digests(t)
    (tmp_path / "garbage.npy").write_bytes(b"this is not numpy at all\n" * 4)
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}, None, 3, 4], dtype=object), allow_pickle=True)
    np.save(tmp_path / "text.npy", np.array(["a", "b", "c", "d"]))
    np.save(tmp_path / "cut.npy", np.arange(4, dtype=np.float32))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "cut.npy").read_bytes()[:-5])
    cases = {"garbage.npy": "is not a valid .npy file", "objects.npy": "is a .npy of Python objects",
             "text.npy": "is a .npy of text", "cut.npy": "is not a valid .npy file"}
    for name, want in cases.items():
        r = run_cli("edit", "add-column", t.location, "1", "observation.x", "--from", str(tmp_path / name))
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert want in r.stderr and str(tmp_path / name) in r.stderr and "pickled" not in r.stderr, r.stderr
        assert "one number per data row" in r.stderr and "float32" in r.stderr, r.stderr
    assert digests(t) == before


def test_a_merge_into_of_only_duplicates_writes_nothing_and_says_so(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=2), request)
    src = at(backend, record(tmp_path / "s", episodes=2), request)  # the same two episodes
    before = digests(t)
    for dry in (["--dry-run"], []):
        r = run_cli("edit", "merge", src.location, "--into", t.location, "--json", *dry)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["writes"] == [] and doc["episodes"] == [] and len(doc["skipped"]) == 2
        assert doc["changes"] == [f"nothing to do: every episode of {src.location} is in {t.location} already"]
        assert digests(t) == before
    r = run_cli("edit", "merge", src.location, "--into", t.location, "--dry-run")
    assert "nothing to do" in r.stdout and "would write" not in r.stdout


def test_a_merge_into_lists_tasks_jsonl_only_when_it_changes(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=1), request)
    src = at(backend, record(tmp_path / "s", episodes=2), request)  # episode 2 is new, its task string is "pick"
    before = digests(t)
    r = run_cli("edit", "merge", src.location, "--into", t.location, "--json", "--dry-run")
    assert "meta/tasks.jsonl" not in json.loads(r.stdout)["writes"]
    r = run_cli("edit", "merge", src.location, "--into", t.location, "--json")
    assert r.returncode == 0, r.stderr
    assert "meta/tasks.jsonl" not in json.loads(r.stdout)["writes"]
    after = digests(t)
    assert after["meta/tasks.jsonl"] == before["meta/tasks.jsonl"] and t.errors() == []
