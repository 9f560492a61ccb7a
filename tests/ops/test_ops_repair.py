"""egopool repair force-scale (file_format.md §7.2.1): the scale comes back from the Σfz / force-fz criterion."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import TaskWriter, list_task_episodes, open_task, scalar_ns_column, vector_column
from egopool.meta.episodes import keep_digests, read_episode_row
from egopool.meta.info import read_info
from egopool.ops import repair_force_scale
from egopool.registry import Registry, sha256_file
from egopool.schema import force_matrix_column
from egopool.validate import validate_task

FM = "observation.gripper_left_force_matrix"
FORCE = "observation.gripper_left_force"


def contact_frame(rng: np.random.Generator) -> np.ndarray:
    """(250, 250, 3) mN: a random contact patch, fz 0.5–30 mN per taxel (fits int16 at ×1000), small shear."""
    v = np.zeros((250, 250, 3), np.float32)
    r0, c0 = rng.integers(20, 180, size=2)
    patch = rng.uniform(0.5, 30.0, size=(40, 50)).astype(np.float32)
    v[r0:r0 + 40, c0:c0 + 50, 2] = patch
    v[r0:r0 + 40, c0:c0 + 50, 0] = rng.uniform(-2, 2, size=(40, 50))
    v[r0:r0 + 40, c0:c0 + 50, 1] = rng.uniform(-2, 2, size=(40, 50))
    return v


def write_force_episode(tw: TaskWriter, scale: float, *, encoding: str = "row_diff_quantized", frames: int = 5,
                        force_gain: float = 1.0, seed: int = 0, with_force: bool = True) -> int:
    """One episode whose force column holds [Σfx, Σfy, Σfz] · force_gain of the true matrix (mN)."""
    rng = np.random.default_rng(seed)
    cols = [force_matrix_column(FM, encoding, scale), scalar_ns_column(FM + "_ns")]
    if with_force:
        cols += [vector_column(FORCE, [3]), scalar_ns_column(FORCE + "_ns")]
    ep = tw.begin_episode(columns=cols)
    for i in range(frames):
        v = contact_frame(rng)
        values = {FM: v, FM + "_ns": 1_000 + i}
        if with_force:
            values[FORCE] = v.reshape(-1, 3).sum(axis=0, dtype=np.float64).astype(np.float32) * force_gain
            values[FORCE + "_ns"] = 1_000 + i
        ep.add_frame(values)
    ep.add_frame({})  # a row without new samples (all-zero matrix, ns 0) is skipped by the check
    return ep.finish().index


def strip_specs(task, n: int, *, drop_column: bool = False) -> None:
    g = next(g for g in list_task_episodes(task) if g.index == n)
    t = pq.read_table(g.meta)
    if drop_column:
        t = t.drop_columns(["force_matrix_specs"])
    else:
        t = t.set_column(t.column_names.index("force_matrix_specs"), "force_matrix_specs", pa.array(["{}"]))
    pq.write_table(keep_digests(t), g.meta, compression="zstd")  # as an older writer's row: consistent


@pytest.fixture()
def scaled_task(tmp_path):
    tw = TaskWriter(tmp_path, "umi")
    ns = {s: write_force_episode(tw, s, seed=s) for s in (10, 100, 1000)}
    task = tmp_path / "umi"
    assert read_info(task)["features"][FM]["scale"] == 1000  # info.json is latest-wins: useless for 10 and 100
    strip_specs(task, ns[10])
    strip_specs(task, ns[100], drop_column=True)
    strip_specs(task, ns[1000])
    return task, ns


def test_each_scale_comes_back_and_only_the_meta_row_changes(scaled_task):
    task, ns = scaled_task
    groups = {g.index: g for g in list_task_episodes(task)}
    data_before = {n: sha256_file(g.data) for n, g in groups.items()}
    rows_before = {n: read_episode_row(g.meta, n) for n, g in groups.items()}
    warned = {Path(f.path).name for f in validate_task(task).findings
              if f.rule == "file_format.md §7.2.1" and "force_matrix_specs" in f.message}
    assert warned == {"episode-000.parquet", "episode-001.parquet", "episode-002.parquet"}

    report = repair_force_scale(task)

    assert [e.status for e in report.episodes] == ["repaired"] * 3
    for scale, n in ns.items():
        ev = next(e for e in report.episodes if e.index == n).columns[0]
        assert ev.scale == scale
        assert ev.frames == 5
        assert ev.ratios[scale] == pytest.approx(1.0, abs=0.01)
        for other in (1, 10, 100, 1000):
            if other != scale:
                assert ev.ratios[other] == pytest.approx(scale / other, rel=0.01)
        row = read_episode_row(groups[n].meta, n)
        assert row["force_matrix_specs"] == {FM: {"dtype": "int16", "shape": [250, 250, 3],
                                                  "encoding": "row_diff_quantized", "scale": scale}}
        changed = ("force_matrix_specs", "file_digests")  # file_digests: the same files, the row's new content digest
        assert {k: v for k, v in row.items() if k not in changed} == \
            {k: v for k, v in rows_before[n].items() if k not in changed}
        assert json.loads(row["file_digests"])["files"] == json.loads(rows_before[n]["file_digests"])["files"]
        assert sha256_file(groups[n].data) == data_before[n]
    # the reader now decodes each episode with its own scale (authority 1 of §7.2.1)
    t = open_task(task)
    for scale, n in ns.items():
        assert t.episode(n).meta["force_matrix_specs"][FM]["scale"] == scale
    # the registry's hash of each rewritten row file follows
    reg = Registry.for_task(task)
    for n, g in groups.items():
        rec = {f.path: f.sha256 for f in reg.get("umi", n).files}
        assert rec[g.meta.relative_to(task).as_posix()] == sha256_file(g.meta)
    assert report.backup is not None and len(list(report.backup.rglob("*.parquet"))) == 3
    assert validate_task(task).findings == []
    # second run: nothing left to repair
    again = repair_force_scale(task)
    assert again.episodes == [] and again.already_ok == 3


def test_dry_run_reports_evidence_and_writes_nothing(scaled_task):
    task, ns = scaled_task
    metas = {g.index: g.meta.read_bytes() for g in list_task_episodes(task)}
    report = repair_force_scale(task, dry_run=True)
    assert [e.status for e in report.episodes] == ["would repair"] * 3
    assert {g.index: g.meta.read_bytes() for g in list_task_episodes(task)} == metas
    d = report.to_dict()
    assert d["episodes"][0]["columns"][0]["scale"] == 10.0
    assert set(d["episodes"][0]["columns"][0]["ratios"]) == {"1", "10", "100", "1000"}
    assert not (task / ".egopool_backup").exists()


def test_truncation_like_ratio_is_inconclusive_and_not_written(tmp_path):
    tw = TaskWriter(tmp_path, "umi")
    good = write_force_episode(tw, 100, seed=1)
    # historical uncalibrated int16: Σfz / force fz around 0.3 at every candidate scale
    bad = write_force_episode(tw, 1, force_gain=1 / 0.3, seed=2)
    no_force = write_force_episode(tw, 10, seed=3, with_force=False)
    task = tmp_path / "umi"
    for n in (good, bad, no_force):
        strip_specs(task, n)
    before = {g.index: g.meta.read_bytes() for g in list_task_episodes(task)}

    report = repair_force_scale(task)

    by_n = {e.index: e for e in report.episodes}
    assert by_n[good].status == "repaired" and by_n[good].columns[0].scale == 100
    ev = by_n[bad].columns[0]
    assert by_n[bad].status == "inconclusive" and ev.scale is None
    assert ev.ratios[1] == pytest.approx(0.3, rel=0.02)
    assert "0.04–0.55" in ev.verdict
    assert by_n[no_force].status == "inconclusive"
    assert by_n[no_force].columns[0].verdict == f"inconclusive: no {FORCE} column to compare with"
    assert report.inconclusive == [bad, no_force]
    after = {g.index: g.meta.read_bytes() for g in list_task_episodes(task)}
    assert after[bad] == before[bad] and after[no_force] == before[no_force]
    assert after[good] != before[good]


def test_float32_raw_column_gets_scale_one(tmp_path):
    tw = TaskWriter(tmp_path, "umi")
    n = write_force_episode(tw, 1, encoding="row_flat_raw", seed=4)
    task = tmp_path / "umi"
    strip_specs(task, n)
    report = repair_force_scale(task)
    ev = report.episodes[0].columns[0]
    assert ev.encoding == "row_flat_raw" and ev.scale == 1.0
    assert ev.ratios[1] == pytest.approx(1.0, abs=1e-4)
    g = list_task_episodes(task)[0]
    assert json.loads(pq.read_table(g.meta).column("force_matrix_specs")[0].as_py()) == \
        {FM: {"dtype": "float32", "shape": [250, 250, 3], "encoding": "row_flat_raw", "scale": 1}}


def test_cli_table_says_each_verdict_once(tmp_path, capsys):
    from egopool.cli.app import main

    tw = TaskWriter(tmp_path, "umi")
    n = write_force_episode(tw, 10, frames=3, seed=3, with_force=False)
    strip_specs(tmp_path / "umi", n)
    assert main(["repair", "force-scale", str(tmp_path / "umi"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"inconclusive: no {FORCE} column" in out and "inconclusive: inconclusive" not in out

