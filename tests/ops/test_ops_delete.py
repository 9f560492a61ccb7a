"""egopool delete (file_format.md §2, §9): by global N, verified, all-or-nothing, N never reused."""

from __future__ import annotations

import multiprocessing
import re
from pathlib import Path
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ops_helpers import clone_episode, files_of, parquet_bytes, snapshot, write_task

from egopool import EpisodeNotFoundError, LayoutError, TaskWriter, list_task_episodes
from egopool.errors import OperationError
from egopool.meta.episodes import read_episode_row
from egopool.meta.info import read_info
from egopool.ops import delete as delete_mod
from egopool.ops import delete_episodes, pooled_episode_leftovers, recover_interrupted_deletes
from egopool.registry import Registry, sha256_file
from egopool.validate import validate_task

META = {"meta/info.json", "meta/stats.json", "meta/tasks.jsonl", "meta/episodes/.lock"}


def group_files(chunk: int, f: int) -> set[str]:
    return {f"data/chunk-{chunk:03d}/episode-{f:03d}.parquet",
            f"meta/episodes/chunk-{chunk:03d}/episode-{f:03d}.parquet",
            f"videos/chunk-{chunk:03d}/cam/episode-{f:03d}.mp4"}


#: the folders of the tombstones a directory's delete leaves (meta/retired.py)
TOMBSTONE_DIRS = {".egopool", ".egopool/retired"}


def tombstones(*ns: int) -> set[str]:
    """The tombstone files of deleted N (task-relative)."""
    return {f".egopool/retired/{n:09d}" for n in ns}


def test_delete_n1_in_a_one_episode_task(tmp_path):
    task = write_task(tmp_path, episodes=1)
    before = snapshot(task)
    assert files_of(task) == META | group_files(0, 0)
    reg = Registry.for_task(task)
    rec = reg.get("pick", 1)
    assert rec is not None and rec.status == "recorded"
    assert {f.path for f in rec.files} == group_files(0, 0)
    assert all(f.sha256 == sha256_file(task / f.path) for f in rec.files)

    report = delete_episodes(task, [1])

    assert report.ok
    assert files_of(task) == META | tombstones(1)  # N=1 retired for good (O34)
    assert pooled_episode_leftovers(task, 1) == []
    assert list_task_episodes(task) == []
    # stats.json and info.json (total_episodes) are not rolled back: byte-identical
    after = snapshot(task)
    for name in ("meta/info.json", "meta/stats.json", "meta/tasks.jsonl"):
        assert after[name] == before[name]
    assert read_info(task)["total_episodes"] == 1
    assert reg.get("pick", 1) is None
    assert reg.watermark("pick") == 1
    assert [sorted(o.to_dict(task)["removed"]) for o in report.outcomes] == [sorted(group_files(0, 0))]
    # N=1 is never reused
    assert validate_task(task).findings == []
    assert TaskWriter(tmp_path, "pick").next_episode_index() == 2


def test_delete_n1001_after_chunk_rollover_never_touches_n1(tmp_path):
    task = write_task(tmp_path, episodes=2)
    clone_episode(task, 1, 1001)
    assert [g.index for g in list_task_episodes(task)] == [1, 2, 1001]
    before = snapshot(task)
    assert group_files(1, 0) <= set(before)

    report = delete_episodes(task, [1001])

    after = snapshot(task)
    assert set(before) - set(after) == group_files(1, 0) | {"data/chunk-001", "meta/episodes/chunk-001",
                                                           "videos/chunk-001", "videos/chunk-001/cam"}
    assert set(after) - set(before) == TOMBSTONE_DIRS | tombstones(1001)
    for name in group_files(0, 0) | group_files(0, 1) | META:
        assert after[name] == before[name], name
    assert [g.index for g in list_task_episodes(task)] == [1, 2]
    assert report.plans[0].files == sorted(task / p for p in group_files(1, 0))
    assert validate_task(task).findings == []
    assert TaskWriter(tmp_path, "pick").next_episode_index() == 1002


def test_delete_n1_in_a_rolled_over_task_keeps_n1001(tmp_path):
    task = write_task(tmp_path, episodes=1)
    clone_episode(task, 1, 1001)
    before = snapshot(task)
    delete_episodes(task, [1])
    after = snapshot(task)
    assert set(before) - set(after) == group_files(0, 0) | {"data/chunk-000", "meta/episodes/chunk-000",
                                                           "videos/chunk-000", "videos/chunk-000/cam"}
    for name in group_files(1, 0):
        assert after[name] == before[name]
    assert read_episode_row(task / "meta/episodes/chunk-001/episode-000.parquet", 1001)["episode_index"] == 1001


@pytest.mark.parametrize("n", [0, -3])
def test_n_below_one_is_refused_and_nothing_changes(tmp_path, n):
    task = write_task(tmp_path, episodes=1)
    before = snapshot(task)
    with pytest.raises(LayoutError, match=f"episode {n} refused: global N is 1-based"):
        delete_episodes(task, [n])
    assert snapshot(task) == before


@pytest.mark.parametrize("n", [2, 1000, 1002])
def test_missing_n_is_an_error_not_a_silent_success(tmp_path, n):
    task = write_task(tmp_path, episodes=1)
    clone_episode(task, 1, 1001)
    before = snapshot(task)
    with pytest.raises(EpisodeNotFoundError, match=f"no episode {n} in task"):
        delete_episodes(task, [1, n])  # checked before anything is touched: N=1 survives too
    assert snapshot(task) == before


def test_already_deleted_n_is_the_same_error(tmp_path):
    task = write_task(tmp_path, episodes=2)
    delete_episodes(task, [2])
    before = snapshot(task)
    with pytest.raises(EpisodeNotFoundError, match="no episode 2 in task"):
        delete_episodes(task, [2])
    assert snapshot(task) == before


def test_dry_run_lists_exactly_what_would_be_removed(tmp_path):
    task = write_task(tmp_path, episodes=2)
    before = snapshot(task)
    report = delete_episodes(task, [2], dry_run=True)
    assert snapshot(task) == before
    d = report.to_dict()
    assert d["dry_run"] is True and d["outcomes"] == []
    assert set(d["plans"][0]["files"]) == group_files(0, 1)
    assert d["plans"][0]["bytes"] == sum((task / p).stat().st_size for p in group_files(0, 1))
    assert Registry.for_task(task).get("pick", 2).status == "recorded"


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_failed_delete_leaves_the_tree_byte_identical(tmp_path, monkeypatch, fail_at):
    task = write_task(tmp_path, episodes=2)
    before = snapshot(task)
    calls = []
    real = delete_mod._stage_rename

    def flaky(src, dst):
        calls.append(src)
        if len(calls) == fail_at:
            raise PermissionError(13, "Permission denied", str(src))
        real(src, dst)

    monkeypatch.setattr(delete_mod, "_stage_rename", flaky)
    with pytest.raises(OperationError, match="delete of episode 2 failed .*Permission denied.*nothing was removed"):
        delete_episodes(task, [2])
    assert snapshot(task) == before
    assert Registry.for_task(task).get("pick", 2).status == "recorded"


def test_failed_delete_in_a_batch_reports_what_was_done(tmp_path, monkeypatch):
    task = write_task(tmp_path, episodes=3)

    def deny(src, dst):
        if "episode-001" in src.name:
            raise PermissionError(13, "Permission denied", str(src))
        os.rename(src, dst)

    monkeypatch.setattr(delete_mod, "_stage_rename", deny)
    with pytest.raises(OperationError, match="already deleted: 1; not attempted: 3"):
        delete_episodes(task, [1, 2, 3])
    assert [g.index for g in list_task_episodes(task)] == [2, 3]


def test_unlink_failure_after_commit_is_reported_and_finished_later(tmp_path, monkeypatch):
    task = write_task(tmp_path, episodes=1)
    real_finish = delete_mod._finish
    monkeypatch.setattr(delete_mod, "_finish", lambda root, journal: [root / journal["moves"][0]["staged"]])
    report = delete_episodes(task, [1])
    assert not report.ok
    staged = report.outcomes[0].not_removed
    assert len(staged) == 1 and staged[0].name.startswith(".") and ".deleting-" in staged[0].name
    assert pooled_episode_leftovers(task, 1) == []
    monkeypatch.setattr(delete_mod, "_finish", real_finish)
    from egopool._atomic import task_lock
    with task_lock(task):
        assert recover_interrupted_deletes(task) == ["finished interrupted delete of episode 1"]
    assert files_of(task) == META | tombstones(1)


def _crash_during_delete(task, n, crash_after_renames, commit):
    """Child process: delete N and die (os._exit, no cleanup) after k staged renames or at the commit."""
    real = delete_mod._stage_rename
    count = [0]

    def rename_then_maybe_die(src, dst):
        real(src, dst)
        count[0] += 1
        if not commit and count[0] == crash_after_renames:
            os._exit(17)

    def die_after_commit(root, journal):
        os._exit(17)

    delete_mod._stage_rename = rename_then_maybe_die
    if commit:
        delete_mod._finish = die_after_commit
    delete_episodes(task, [n])
    os._exit(0)


@pytest.mark.parametrize("crash_after", [1, 2])
def test_crash_while_staging_is_rolled_back_by_the_next_delete(tmp_path, crash_after):
    task = write_task(tmp_path, episodes=2)
    before = snapshot(task)
    p = multiprocessing.get_context("fork").Process(target=_crash_during_delete, args=(task, 2, crash_after, False))
    p.start()
    p.join(60)
    assert p.exitcode == 17
    leftovers = set(snapshot(task)) - set(before)
    assert any(".deleting-" in x for x in leftovers) and any(x.startswith("meta/.delete-2-") for x in leftovers)
    assert Registry.for_task(task).get("pick", 2).status == "deleted"  # intent recorded before staging
    from egopool._atomic import task_lock
    with task_lock(task):
        assert recover_interrupted_deletes(task, Registry.for_task(task)) == ["rolled back interrupted delete of episode 2"]
    assert snapshot(task) == before
    assert Registry.for_task(task).get("pick", 2).status == "recorded"
    report = delete_episodes(task, [2])
    assert report.ok and [g.index for g in list_task_episodes(task)] == [1]


def test_crash_after_commit_is_finished_by_the_next_delete(tmp_path):
    task = write_task(tmp_path, episodes=2)
    p = multiprocessing.get_context("fork").Process(target=_crash_during_delete, args=(task, 1, 0, True))
    p.start()
    p.join(60)
    assert p.exitcode == 17
    assert pooled_episode_leftovers(task, 1) == []
    report = delete_episodes(task, [2])
    assert report.recovered == ["finished interrupted delete of episode 1"]
    assert files_of(task) == META | tombstones(1, 2)
    assert Registry.for_task(task).recordings("pick") == []


def test_legacy_shard_loses_only_that_row(tmp_path):
    task = write_task(tmp_path, episodes=3, video=False)
    ep_dir = task / "meta/episodes/chunk-000"
    rows = [pq.read_table(ep_dir / f"episode-{f:03d}.parquet") for f in range(3)]
    for f in range(3):
        (ep_dir / f"episode-{f:03d}.parquet").unlink()
    (ep_dir / "file-000.parquet").write_bytes(parquet_bytes(pa.concat_tables(rows)))
    kept = {n: read_episode_row(ep_dir / "file-000.parquet", n) for n in (1, 3)}

    report = delete_episodes(task, [2])

    assert report.plans[0].shards == [ep_dir / "file-000.parquet"]
    assert report.plans[0].files == [task / "data/chunk-000/episode-001.parquet"]
    assert pq.read_table(ep_dir / "file-000.parquet").column("episode_index").to_pylist() == [1, 3]
    for n, row in kept.items():
        assert read_episode_row(ep_dir / "file-000.parquet", n) == row
    assert [g.index for g in list_task_episodes(task)] == [1, 3]
    assert not any(".deleting-" in p.name for p in task.rglob("*"))


def test_deleting_the_highest_n_never_reuses_it_even_if_total_episodes_was_lowered(tmp_path):
    task = write_task(tmp_path, episodes=3)
    delete_episodes(task, [3])
    # another tool recomputes total_episodes from the files (file_format.md §9 wording): the
    # registry watermark still keeps N=3 retired
    info = read_info(task)
    info["total_episodes"] = 2
    from egopool.meta.info import write_info
    write_info(task, info)
    assert TaskWriter(tmp_path, "pick").next_episode_index() == 4
    assert TaskWriter(tmp_path, "pick", registry=False).next_episode_index() == 3  # what the registry prevents


def test_registry_failure_never_loses_a_finished_episode(tmp_path):
    (tmp_path / "pipeline.db").mkdir()  # not a database: every registry call fails
    with pytest.warns(RuntimeWarning, match="published but not in the registry"), \
            pytest.warns(RuntimeWarning, match="registry watermark unavailable"):
        tw = TaskWriter(tmp_path, "pick")
        ep = tw.begin_episode()
        ep.add_frame()
        result = ep.finish()
    assert result.registry_error is not None and "pipeline.db" in result.registry_error
    assert [g.index for g in list_task_episodes(tmp_path / "pick")] == [1]
    assert all(p.exists() for p in result.paths)


def _png16_task(tmp_path, dirname: str):
    """Two episodes whose depth stream is a legacy PNG16 frame directory (docs/decisions.md C4)."""
    import numpy as np

    from egopool.codecs.depth_png import encode_png16
    from egopool.meta.info import write_info

    task = write_task(tmp_path, episodes=2)
    info = read_info(task)
    info.setdefault("video_extensions", {})["depth"] = "png"
    write_info(task, info)
    for f in range(2):
        seq = task / f"videos/chunk-000/depth/{dirname.format(f=f)}"
        seq.mkdir(parents=True)
        for i in range(3):
            seq.joinpath(f"{i:06d}.png").write_bytes(encode_png16(np.full((4, 6), 100 * (i + 1), np.uint16)))
    return task


@pytest.mark.parametrize("dirname", ["episode-{f:03d}", "episode-{f:03d}.png"])
def test_delete_removes_a_png16_depth_directory(tmp_path, dirname):
    task = _png16_task(tmp_path, dirname)
    seq = task / "videos/chunk-000/depth" / dirname.format(f=0)
    frames = {f"videos/chunk-000/depth/{dirname.format(f=0)}/{i:06d}.png" for i in range(3)}
    assert pooled_episode_leftovers(task, 1) == sorted([*(task / p for p in group_files(0, 0)), seq])
    before = snapshot(task)

    plan = delete_episodes(task, [1], dry_run=True).plans[0]
    assert seq in plan.files
    assert plan.bytes == sum((task / p).stat().st_size for p in group_files(0, 0) | frames)

    report = delete_episodes(task, [1])

    assert report.ok and report.outcomes[0].not_removed == []
    after = snapshot(task)
    assert set(before) - set(after) == group_files(0, 0) | frames | {f"videos/chunk-000/depth/{dirname.format(f=0)}"}
    assert set(after) - set(before) == TOMBSTONE_DIRS | tombstones(1)  # no staged directory, no journal left
    assert pooled_episode_leftovers(task, 1) == []
    assert [g.index for g in list_task_episodes(task)] == [2]
    assert delete_episodes(task, [2]).ok  # the next delete is not blocked by a leftover journal


def test_unfinishable_interrupted_delete_names_the_files_and_the_fix(tmp_path, monkeypatch):
    task = write_task(tmp_path, episodes=2)
    monkeypatch.setattr(delete_mod, "_finish", lambda root, journal: [root / journal["moves"][0]["staged"]])
    delete_episodes(task, [1])
    with pytest.raises(OperationError) as err:
        delete_episodes(task, [2])
    msg = err.value.one_line()
    assert "cannot finish interrupted delete of episode 1" in msg
    assert ".episode-000.parquet.deleting-" in msg and "egopool delete TASK" in msg


def test_failed_commit_restores_a_raised_total_episodes(tmp_path, monkeypatch):
    """total_episodes below N (a tool recounted it) is raised before the commit; a failed commit undoes that too."""
    from egopool.meta.info import write_info

    task = write_task(tmp_path, episodes=2)
    info = read_info(task)
    info["total_episodes"] = 1
    write_info(task, info)
    before = snapshot(task)
    real = delete_mod.atomic_write_json

    def fail_at_commit(path, doc, **kw):
        if doc.get("state") == "committed":
            raise OSError(28, "No space left on device", str(path))
        real(path, doc, **kw)

    monkeypatch.setattr(delete_mod, "atomic_write_json", fail_at_commit)
    with pytest.raises(OperationError, match="delete of episode 2 failed .*nothing was removed"):
        delete_episodes(task, [2])
    assert snapshot(task) == before
    assert read_info(task)["total_episodes"] == 1


def _die_after_raising_total(task, n):
    real = delete_mod.write_info

    def write_then_die(root, info):
        real(root, info)
        os._exit(17)

    delete_mod.write_info = write_then_die
    delete_episodes(task, [n])
    os._exit(0)


def test_crash_after_raising_total_episodes_is_rolled_back_to_the_old_value(tmp_path):
    from egopool._atomic import task_lock
    from egopool.meta.info import write_info

    task = write_task(tmp_path, episodes=2)
    info = read_info(task)
    info["total_episodes"] = 1
    write_info(task, info)
    p = multiprocessing.get_context("fork").Process(target=_die_after_raising_total, args=(task, 2))
    p.start()
    p.join(60)
    assert p.exitcode == 17 and read_info(task)["total_episodes"] == 2
    with task_lock(task):
        done = recover_interrupted_deletes(task, Registry.for_task(task))
    assert done == ["rolled back interrupted delete of episode 2"]
    assert read_info(task)["total_episodes"] == 1
    assert [g.index for g in list_task_episodes(task)] == [1, 2]
    assert TaskWriter(tmp_path, "pick").next_episode_index() == 3  # the registry watermark still says 2


def _die_replacing(task, n, pattern):
    real = os.replace

    def replace(src, dst, *a, **kw):
        if re.match(pattern, Path(src).name):
            os._exit(17)
        return real(src, dst, *a, **kw)

    os.replace = replace
    delete_episodes(task, [n])
    os._exit(0)


@pytest.mark.parametrize("pattern", [r"^\.\.delete-2-[0-9a-f]+\.json\.[0-9a-f]{8}\.tmp$",  # the first journal write
                                     r"^\.file-000\.parquet\.[0-9a-f]{8}\.tmp$"])  # the shard without N's row
def test_killed_mid_write_leaves_no_temp_after_recovery(tmp_path, pattern):
    task = write_task(tmp_path, episodes=3, video=False)
    ep_dir = task / "meta/episodes/chunk-000"
    rows = [pq.read_table(ep_dir / f"episode-{f:03d}.parquet") for f in range(3)]
    for f in range(3):
        (ep_dir / f"episode-{f:03d}.parquet").unlink()
    (ep_dir / "file-000.parquet").write_bytes(parquet_bytes(pa.concat_tables(rows)))
    before = snapshot(task)
    p = multiprocessing.get_context("fork").Process(target=_die_replacing, args=(task, 2, pattern))
    p.start()
    p.join(60)
    assert p.exitcode == 17
    assert [x for x in snapshot(task) if x.endswith(".tmp")]
    from egopool._atomic import task_lock
    with task_lock(task):
        recover_interrupted_deletes(task, Registry.for_task(task))
    assert snapshot(task) == before


@pytest.mark.parametrize("crash_after", [1, 2])
def test_dry_run_after_an_interrupted_delete_lists_what_the_real_run_removes(tmp_path, crash_after):
    """A real run first rolls the interrupted delete back, so its dry run must plan on the rolled-back task."""
    task = write_task(tmp_path, episodes=2)
    p = multiprocessing.get_context("fork").Process(target=_crash_during_delete, args=(task, 2, crash_after, False))
    p.start()
    p.join(60)
    assert p.exitcode == 17
    before = snapshot(task)

    dry = delete_episodes(task, [2], dry_run=True)

    assert snapshot(task) == before
    assert dry.recovered == ["would roll back interrupted delete of episode 2"]
    assert [sorted(rel.as_posix() for rel in (f.relative_to(task) for f in pl.files)) for pl in dry.plans] == \
        [sorted(group_files(0, 1))]
    real = delete_episodes(task, [2])
    assert real.recovered == ["rolled back interrupted delete of episode 2"]
    assert [o.removed for o in real.outcomes] == [pl.files for pl in dry.plans]
    assert [pl.bytes for pl in real.plans] == [pl.bytes for pl in dry.plans]


def test_dry_run_of_an_n_whose_delete_was_interrupted_before_its_commit_finds_it(tmp_path):
    task = write_task(tmp_path, episodes=1)
    p = multiprocessing.get_context("fork").Process(target=_crash_during_delete, args=(task, 1, 3, False))
    p.start()
    p.join(60)
    assert p.exitcode == 17
    assert list_task_episodes(task) == []  # every file of N=1 is staged under a dot name
    dry = delete_episodes(task, [1], dry_run=True)
    assert sorted(f.relative_to(task).as_posix() for f in dry.plans[0].files) == sorted(group_files(0, 0))
