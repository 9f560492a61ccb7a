"""egopool migrate --split-episodes (file_format.md §2, §6.1, §11): legacy task -> v1.1.2 layout."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ops_helpers import clone_episode, parquet_bytes, snapshot, write_task

from egopool import list_task_episodes, open_task
from egopool.meta.info import read_info, write_info
from egopool.ops import migrate as migrate_mod
from egopool.ops import migrate_task
from egopool.registry import Registry, record_episode, sha256_file
from egopool.validate import validate_task

LEGACY_RENAMED = (2, 4, 1002)  # data + video under pre-v1.1.2 "file-" names
ALL_N = [1, 2, 3, 4, 5, 1001, 1002]


def make_legacy_task(root: Path) -> Path:
    """A v1.1.0-era task: multi-row meta shards, file- names, .stats_state.json, _trash/.

    Shard rows lack the later ``force_matrix_specs`` / ``slam_specs`` columns (§6.2);
    chunk-000's shard holds 5 rows, chunk-001's holds 2 (N=1001, 1002).
    """
    task = write_task(root, "legacy", episodes=5, registry=False)
    clone_episode(task, 1, 1001)
    clone_episode(task, 2, 1002)
    for chunk, ns in ((0, [1, 2, 3, 4, 5]), (1, [1001, 1002])):
        d = task / f"meta/episodes/chunk-{chunk:03d}"
        rows = []
        for n in ns:
            p = d / f"episode-{(n - 1) % 1000:03d}.parquet"
            rows.append(pq.read_table(p).drop_columns(["force_matrix_specs", "slam_specs", "file_digests"]))
            p.unlink()
        (d / f"file-{chunk:03d}.parquet").write_bytes(parquet_bytes(pa.concat_tables(rows)))
    for n in LEGACY_RENAMED:
        c, f = (n - 1) // 1000, (n - 1) % 1000
        for p in (task / f"data/chunk-{c:03d}/episode-{f:03d}.parquet", task / f"videos/chunk-{c:03d}/cam/episode-{f:03d}.mp4"):
            p.rename(p.with_name(p.name.replace("episode-", "file-")))
    (task / "meta/.stats_state.json").write_text('{"observation.right_glove": {"n": 15}}')
    (task / "_trash/chunk-000").mkdir(parents=True)
    (task / "_trash/chunk-000/episode-009.parquet").write_bytes(b"deleted long ago")
    for g in list_task_episodes(task):  # a registry that knows the legacy names
        if g.index <= 5:
            record_episode(task, g.index, g.paths())
    return task


def meta_rows(task: Path) -> dict[int, dict]:
    t = open_task(task)
    return {ep.index: ep.meta for ep in t.episodes()}


def content_by_n(task: Path) -> dict[tuple[int, str], str]:
    """sha256 of every data/video file keyed by (N, what): names may change, bytes must not."""
    out = {}
    for g in list_task_episodes(task):
        out[(g.index, "data")] = sha256_file(g.data)
        for k, p in g.videos.items():
            out[(g.index, k)] = sha256_file(p)
    return out


def normalized(task: Path) -> dict[str, str]:
    """Snapshot with the backup directory's timestamp removed and its journal left out."""
    out = {}
    for k, v in snapshot(task).items():
        if k.endswith("migrate.json"):
            continue
        out[re.sub(r"^_migrate_backup_[^/]+", "_migrate_backup_T", k)] = v
    return out


def registry_view(task: Path) -> list[tuple]:
    return [(r.episode_index, r.status, r.files) for r in Registry.for_task(task).recordings(task.name)]


def assert_migrated(task: Path) -> None:
    """The v1.1.2 invariants, checked directly on the files."""
    groups = list_task_episodes(task)
    assert [g.index for g in groups] == ALL_N
    for g in groups:
        assert g.complete and not g.meta_is_shard
        for p in g.paths():
            assert p.name.startswith("episode-"), p
        assert pq.read_table(g.meta).column("episode_index").to_pylist() == [g.index]
    names = [p.name for sub in ("data", "videos", "meta") for p in (task / sub).rglob("*")]
    assert not [n for n in names if n.startswith("file-") or n == ".stats_state.json"]
    assert not (task / "_trash").exists()
    report = validate_task(task)
    assert report.ok, report.to_dict()
    assert report.findings == [], report.to_dict()


@pytest.fixture()
def legacy(tmp_path):
    return make_legacy_task(tmp_path / "root")


def test_migration_splits_renames_cleans_and_keeps_every_value(legacy):
    task = legacy
    before_rows = meta_rows(task)
    assert sorted(before_rows) == ALL_N
    assert all(pq.read_table(g.meta).num_rows > 1 for g in list_task_episodes(task))  # all in shards
    before_bytes = content_by_n(task)
    shard0 = (task / "meta/episodes/chunk-000/file-000.parquet").read_bytes()

    report = migrate_task(task)

    assert report.backup is not None and report.backup.name.startswith("_migrate_backup_")
    kinds = [s.kind for s in report.steps]
    assert kinds.count("split_row") == 7 and kinds.count("rename") == 6 and kinds.count("stash") == 2
    assert_migrated(task)
    after_rows = meta_rows(task)
    assert after_rows == before_rows
    assert all(r["force_matrix_specs"] == {} and r["slam_specs"] == {} for r in after_rows.values())
    assert content_by_n(task) == before_bytes
    # originals are in the backup
    assert (report.backup / "meta/episodes/chunk-000/file-000.parquet").read_bytes() == shard0
    assert (report.backup / "meta/.stats_state.json").exists()
    assert (report.backup / "_trash/chunk-000/episode-009.parquet").read_bytes() == b"deleted long ago"
    assert json.loads((report.backup / "migrate.json").read_text())["state"] == "done"
    # the registry follows the renames and its hashes match the files
    recs = Registry.for_task(task).recordings("legacy")
    assert [r.episode_index for r in recs] == [1, 2, 3, 4, 5]
    for r in recs:
        assert {f.path for f in r.files} == {f"data/chunk-000/episode-{r.episode_index - 1:03d}.parquet",
                                             f"videos/chunk-000/cam/episode-{r.episode_index - 1:03d}.mp4",
                                             f"meta/episodes/chunk-000/episode-{r.episode_index - 1:03d}.parquet"}
        assert all(f.sha256 == sha256_file(task / f.path) for f in r.files)


def test_second_run_is_a_no_op(legacy):
    migrate_task(legacy)
    before = snapshot(legacy)
    reg = registry_view(legacy)
    report = migrate_task(legacy)
    assert report.steps == [] and report.backup is None and report.done == 0
    assert snapshot(legacy) == before
    assert registry_view(legacy) == reg


def test_dry_run_changes_nothing_and_lists_the_plan(legacy):
    before = snapshot(legacy)
    report = migrate_task(legacy, dry_run=True)
    assert snapshot(legacy) == before
    d = report.to_dict()
    assert {"kind": "rename", "src": "data/chunk-000/file-001.parquet", "dst": "data/chunk-000/episode-001.parquet"} \
        in d["steps"]
    assert {"kind": "split_row", "src": "_migrate_backup_@/meta/episodes/chunk-001/file-001.parquet",
            "dst": "meta/episodes/chunk-001/episode-001.parquet", "index": 1002} in d["steps"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted migration of the legacy fixture, and a pristine copy to crash from."""
    base = tmp_path_factory.mktemp("ref")
    pristine = base / "pristine"
    make_legacy_task(pristine)
    done = base / "done"
    shutil.copytree(pristine, done)
    report = migrate_task(done / "legacy")
    return pristine, normalized(done / "legacy"), registry_view(done / "legacy"), len(report.steps)


class Crash(Exception):
    pass


def test_killed_at_each_step_then_rerun_reaches_the_same_result(reference, tmp_path):
    # checkpoint every 3 steps: a crash resumes at the checkpoint and re-runs up to 2 steps
    # that were already done, so both resuming and idempotent re-running are exercised
    checkpoint_every = 3
    pristine, expected, expected_registry, n_steps = reference
    assert n_steps == 2 + 7 + 2 + 6 + 2 + 1  # backups, split rows, shard removals, renames, stashes, registry
    for k in range(1, n_steps + 1):
        root = tmp_path / f"k{k}"
        shutil.copytree(pristine, root)
        task = root / "legacy"

        def crash_after(done, total, what, k=k):
            if done == k:
                raise Crash(what)

        with pytest.raises(Crash):
            migrate_task(task, progress=crash_after, checkpoint_every=checkpoint_every)
        report = migrate_task(task, checkpoint_every=checkpoint_every)
        assert report.resumed
        assert normalized(task) == expected, f"crash after step {k}"
        assert registry_view(task) == expected_registry
        assert migrate_task(task).steps == []
        shutil.rmtree(root)


def test_crash_while_preparing_the_backup_leaves_nothing_and_rerun_works(reference, tmp_path, monkeypatch):
    pristine, expected, _, _ = reference
    shutil.copytree(pristine, tmp_path / "r")
    task = tmp_path / "r" / "legacy"
    before = snapshot(task)
    real_rename = os.rename

    def die_on_backup_publish(src, dst):
        if Path(src).name.startswith("._migrate_backup_"):
            raise Crash("power loss")
        real_rename(src, dst)

    monkeypatch.setattr(migrate_mod.os, "rename", die_on_backup_publish)
    with pytest.raises(Crash):
        migrate_task(task)
    monkeypatch.setattr(migrate_mod.os, "rename", real_rename)
    leftover = set(snapshot(task)) - set(before)
    assert leftover and all(x.startswith("._migrate_backup_") for x in leftover)
    report = migrate_task(task)
    assert not report.resumed
    assert normalized(task) == expected


def test_without_split_episodes_shards_stay_and_are_named(legacy):
    report = migrate_task(legacy, split_episodes=False)
    assert (legacy / "meta/episodes/chunk-000/file-000.parquet").exists()
    assert any("--split-episodes" in n for n in report.notes)
    assert not list((legacy / "data").rglob("file-*"))
    assert [g.index for g in list_task_episodes(legacy)] == ALL_N
    report = migrate_task(legacy, split_episodes=True)
    assert_migrated(legacy)


def test_per_episode_file_wins_over_a_shard_row_and_file_templates_are_updated(tmp_path):
    task = write_task(tmp_path, "t", episodes=2, video=False, registry=False)
    d = task / "meta/episodes/chunk-000"
    rows = [pq.read_table(d / f"episode-{f:03d}.parquet") for f in range(2)]
    stale = rows[1].set_column(rows[1].column_names.index("length"), "length", pa.array([99], pa.int64()))
    (d / "file-000.parquet").write_bytes(parquet_bytes(pa.concat_tables([rows[0], stale])))
    (d / "episode-000.parquet").unlink()  # N=1 only in the shard; N=2 in both (its own file wins)
    for f in range(2):
        p = task / f"data/chunk-000/episode-{f:03d}.parquet"
        p.rename(p.with_name(f"file-{f:03d}.parquet"))
    info = read_info(task)
    info["data_path"] = "data/chunk-{c:03d}/file-{f:03d}.parquet"  # a pre-v1.1.2 template
    write_info(task, info)
    assert [g.index for g in list_task_episodes(task)] == [1, 2]

    report = migrate_task(task)

    assert read_info(task)["data_path"] == "data/chunk-{c:03d}/episode-{f:03d}.parquet"
    assert json.loads((report.backup / "meta/info.json").read_text())["data_path"] == "data/chunk-{c:03d}/file-{f:03d}.parquet"
    assert any(n.startswith("episode 2: kept meta/episodes/chunk-000/episode-001.parquet") for n in report.notes)
    rows_after = meta_rows(task)
    assert rows_after[2]["length"] == 3 and rows_after[1]["length"] == 3
    assert sorted(p.name for p in (task / "data/chunk-000").iterdir()) == ["episode-000.parquet", "episode-001.parquet"]
    assert migrate_task(task).steps == []


def _die_publishing(task, pattern, nth):
    """Child process: migrate and die (os._exit: no cleanup, like SIGKILL) when the nth temp matching
    ``pattern`` is about to be renamed onto its final name, leaving that dot-temp behind."""
    import multiprocessing  # noqa: F401  (fork context is set by the caller)

    real = os.replace
    seen = [0]

    def replace(src, dst, *a, **kw):
        if re.match(pattern, Path(src).name):
            seen[0] += 1
            if seen[0] == nth:
                os._exit(17)
        return real(src, dst, *a, **kw)

    os.replace = replace
    migrate_task(task, checkpoint_every=3)
    os._exit(0)


@pytest.mark.parametrize("pattern,nth", [(r"^\.episode-002\.parquet\.[0-9a-f]{8}\.tmp$", 1),  # a split row
                                         (r"^\.file-001\.parquet\.[0-9a-f]{8}\.tmp$", 1),  # a shard backup copy
                                         (r"^\.migrate\.json\.[0-9a-f]{8}\.tmp$", 3)])  # a journal checkpoint
def test_killed_mid_write_leaves_no_temp_after_the_rerun(reference, tmp_path, pattern, nth):
    import multiprocessing

    pristine, expected, expected_registry, _ = reference
    shutil.copytree(pristine, tmp_path / "r")
    task = tmp_path / "r" / "legacy"
    p = multiprocessing.get_context("fork").Process(target=_die_publishing, args=(task, pattern, nth))
    p.start()
    p.join(60)
    assert p.exitcode == 17
    assert [x for x in snapshot(task) if x.endswith(".tmp")]  # the kill left a dot-temp
    report = migrate_task(task)
    assert report.resumed
    assert normalized(task) == expected
    assert registry_view(task) == expected_registry


def test_delete_and_repair_wait_for_an_interrupted_migration(reference, tmp_path):
    """A resumed migration re-writes rows from its shard copies: a delete in between would come back."""
    from egopool.errors import OperationError
    from egopool.ops import delete_episodes, repair_force_scale

    pristine, expected, _, _ = reference
    shutil.copytree(pristine, tmp_path / "r")
    task = tmp_path / "r" / "legacy"

    def crash_after(done, total, what):
        if done == 4:  # shard backups and the first split rows are done
            raise Crash(what)

    with pytest.raises(Crash):
        migrate_task(task, progress=crash_after, checkpoint_every=1)
    before = snapshot(task)
    for op in (lambda: delete_episodes(task, [3]), lambda: delete_episodes(task, [3], dry_run=True),
               lambda: repair_force_scale(task)):
        with pytest.raises(OperationError, match="interrupted migration .*_migrate_backup_.*egopool migrate TASK"):
            op()
    assert snapshot(task) == before
    assert migrate_task(task).resumed
    assert normalized(task) == expected
    assert delete_episodes(task, [3]).ok
    assert 3 not in [g.index for g in list_task_episodes(task)]


def test_migrate_describes_the_registry_step_by_its_episodes():
    from egopool.ops import Step

    assert Step("registry", value=[1, 2, 1001]).describe() == "refresh registry files of episodes 1, 2, 1001"
    assert Step("registry", value=list(range(1, 11))).describe() == "refresh registry files of 10 episodes (1 … 10)"


@pytest.mark.parametrize("dirname", ["file-{f:03d}", "file-{f:03d}.png"])
def test_png16_depth_directories_with_file_names_are_renamed(legacy, dirname):
    """A legacy PNG16 depth sequence (docs/decisions.md C4) under a pre-v1.1.2 name is one rename."""
    import numpy as np

    from egopool.codecs.depth_png import encode_png16

    info = read_info(legacy)
    info.setdefault("video_extensions", {})["depth"] = "png"
    write_info(legacy, info)
    frames = {}
    for n in ALL_N:
        c, f = (n - 1) // 1000, (n - 1) % 1000
        seq = legacy / f"videos/chunk-{c:03d}/depth" / dirname.format(f=f)
        seq.mkdir(parents=True)
        for i in range(2):
            seq.joinpath(f"{i:06d}.png").write_bytes(encode_png16(np.full((4, 6), n + i, np.uint16)))
        frames[n] = {p.name: sha256_file(p) for p in seq.iterdir()}

    report = migrate_task(legacy)

    assert_migrated_layout = [p for p in (legacy / "videos").rglob("file-*")]
    assert assert_migrated_layout == []
    for g in list_task_episodes(legacy):
        seq = g.videos["depth"]
        assert seq.is_dir() and seq.name == dirname.format(f=g.file).replace("file-", "episode-")
        assert {p.name: sha256_file(p) for p in seq.iterdir()} == frames[g.index]
    assert sum(s.kind == "rename" and "/depth/" in s.src for s in report.steps) == len(ALL_N)
    assert migrate_task(legacy).steps == []
