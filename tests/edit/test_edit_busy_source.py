"""merge / split / merge --into refuse a SOURCE task holding an unfinished or running edit (its journal) in one
line, writing nothing (issue 30 review; docs/decisions.md E40), on a directory and on SeaweedFS."""

from __future__ import annotations

from backends import kill_at, paused, run_cli
from edit_support import at, digests, record, target_of


def _commands(backend, tmp_path, a, b):
    return {
        "merge": ("edit", "merge", a.location, b.location, "--into", target_of(backend, tmp_path, a, "m")),
        "split": ("edit", "split", a.location, "--into", target_of(backend, tmp_path, a, "p"), "--episodes", "1"),
        "merge-into": ("edit", "merge", a.location, "--into", b.location),
    }


def test_a_source_with_an_interrupted_edit_is_refused(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=1, first_value=50.0), request)
    kill_at(tmp_path / "state", "edit", "row", "edit", "remove-column", a.location, "observation.right_glove")
    before = digests(b)
    for name, args in _commands(backend, tmp_path, a, b).items():
        r = run_cli(*args)
        assert r.returncode == 1, (name, r.stderr)
        assert r.stderr.count("\n") == 1 and "interrupted `egopool edit remove-column`" in r.stderr, r.stderr
        assert f"egopool edit resume {a.location}" in r.stderr, r.stderr
        assert not (tmp_path / "m").exists() and not (tmp_path / "p").exists()
    assert digests(b) == before
    assert run_cli("edit", "resume", a.location).returncode == 0
    r = run_cli(*_commands(backend, tmp_path, a, b)["split"])
    assert r.returncode == 0, r.stderr


def test_a_source_being_edited_is_refused(tmp_path, request):
    a = at("dir", record(tmp_path / "a", episodes=2), request)
    b = at("dir", record(tmp_path / "b", episodes=1, first_value=50.0), request)
    with paused(tmp_path / "state", "edit", "row", "edit", "rename-slot", a.location, "cam", "head_rgb") as first:
        for name, args in _commands("dir", tmp_path, a, b).items():
            r = run_cli(*args)
            assert r.returncode == 1, (name, r.stderr)
            assert r.stderr.count("\n") == 1 and "`egopool edit rename-slot` is in progress" in r.stderr, r.stderr
        assert first.proc.poll() is None  # still running (killed on leaving: then resumed)
    assert run_cli("edit", "resume", a.location).returncode == 0
    assert a.errors() == []
