"""``egopool export tum`` read back by evo's own file interface (evo is GPL: a test-only dependency)."""

from __future__ import annotations

import numpy as np
import pytest

from egopool import TaskWriter, open_task, slam_trajectory_columns
from egopool.cli.app import main
from egopool.interop import export_tum
from egopool.interop.tum import format_ns


def _evo():
    pytest.importorskip("evo")
    from evo.core import metrics, sync
    from evo.core.trajectory import PoseTrajectory3D
    from evo.tools import file_interface

    return metrics, sync, PoseTrajectory3D, file_interface


def _ate(reference, estimate) -> float:
    metrics, sync, _, _ = _evo()
    ref, est = sync.associate_trajectories(reference, estimate, max_diff=1e-6)
    ape = metrics.APE(metrics.PoseRelation.translation_part)
    ape.process_data((ref, est))
    return float(ape.get_statistic(metrics.StatisticsType.rmse))


def _source(traj, clock: str):
    _, _, PoseTrajectory3D, _ = _evo()
    keep = traj.host_ns != 0 if clock == "host" else np.ones(len(traj.points), bool)
    stamps = traj.host_ns[keep] / 1e9 if clock == "host" else traj.sensor_t[keep]
    order = np.argsort(stamps, kind="stable")
    q = traj.quaternions[keep][order]
    return PoseTrajectory3D(positions_xyz=traj.positions[keep][order],
                            orientations_quat_wxyz=q[:, [3, 0, 1, 2]], timestamps=stamps[order])


@pytest.mark.extra("interop")
@pytest.mark.parametrize("clock", ["host", "sensor"])
def test_every_sim_trajectory_reads_back_in_evo_with_zero_ate(sim_task, tmp_path, clock):
    ep = sim_task.episode(2)
    results = export_tum(sim_task.path, 2, out_dir=tmp_path, clock=clock)
    assert sorted(r.column for r in results) == ep.trajectories() == [
        "observation.ego_slam_trajectory", "observation.gripper_2_slam_trajectory", "observation.slam_trajectory"]
    _, _, _, file_interface = _evo()
    for r in results:
        traj = ep.trajectory(r.column)
        est = file_interface.read_tum_trajectory_file(str(r.path))
        assert est.num_poses == r.written == len(traj.points) > 0
        assert (r.unstamped, r.lost, r.duplicates) == (0, 0, 0)
        assert np.all(np.diff(est.timestamps) > 0)
        np.testing.assert_allclose(np.linalg.norm(est.orientations_quat_wxyz, axis=1), 1.0, atol=1e-12)
        np.testing.assert_array_equal(est.positions_xyz, _source(traj, clock).positions_xyz)
        assert _ate(_source(traj, clock), est) == 0.0
        header = r.path.read_text().splitlines()[:3]
        assert f"frame {traj.frame}" in header[1] and r.column in header[0]


@pytest.mark.extra("interop")
def test_demo_ego_trajectory_keeps_exact_host_stamps(demo_task, tmp_path):
    (r,) = export_tum(demo_task.path, 1, ["observation.ego_slam_trajectory"], out_dir=tmp_path)
    traj = demo_task.episode(1).trajectory("observation.ego_slam_trajectory")
    lines = [ln for ln in r.path.read_text().splitlines() if not ln.startswith("#")]
    assert [ln.split()[0] for ln in lines] == [format_ns(int(ns)) for ns in np.sort(traj.host_ns)]
    _, _, _, file_interface = _evo()
    assert _ate(_source(traj, "host"), file_interface.read_tum_trajectory_file(str(r.path))) == 0.0


def _task_with_bad_points(root):
    tw = TaskWriter(root, "bad_points", fps=10.0)
    cols = slam_trajectory_columns("ego_", frame="ego_cam_optical", owner={"role": "ego"})
    ep = tw.begin_episode(list(cols))
    good = [0.1, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 1.0]
    rows = [  # (points, host ns)
        ([good, [0.2, 1.5, 2.5, 3.5, 0.0, 0.0, 0.0, 2.0]], [2_000, 1_000]),   # unsorted; second not unit
        ([[0.3, np.nan, 0, 0, 0, 0, 0, 1], [0.4, 4, 4, 4, 0, 0, 0, 0]], [3_000, 4_000]),  # lost: NaN, zero q
        ([[0.5, 5, 5, 5, 0, 0, 0, 1], [0.6, 6, 6, 6, 0, 0, 0, 1]], [0, 1_000]),  # unstamped; repeated stamp
    ]
    for i, (pts, ns) in enumerate(rows):
        ep.add_frame({cols[0].name: pts, cols[1].name: ns}, hardware_ns=(i + 1) * 1_000)
    ep.finish()
    return open_task(root / "bad_points")


def test_skipped_points_are_counted_not_written(tmp_path):
    task = _task_with_bad_points(tmp_path)
    (r,) = export_tum(task.path, 1, out_dir=tmp_path / "out")
    assert (r.points, r.written, r.unstamped, r.lost, r.duplicates, r.renormalised) == (6, 2, 1, 2, 1, 1)
    body = [ln.split() for ln in r.path.read_text().splitlines() if not ln.startswith("#")]
    assert [b[0] for b in body] == ["0.000001000", "0.000002000"]
    assert body[0][1:4] == ["1.5", "2.5", "3.5"] and body[0][7] == "1"  # (0, 0, 0, 2) normalised
    assert body[1][1:] == ["1", "2", "3", "0", "0", "0", "1"]


def test_cli_reports_counts_and_refuses_bad_clock(tmp_path, capsys):
    task = _task_with_bad_points(tmp_path)
    assert main(["export", "tum", str(task.path), "1", "--out", str(tmp_path / "o"), "--json"]) == 0
    import json

    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["skipped"] == {"unstamped": 1, "lost": 2, "duplicate_stamp": 1} and doc["written"] == 2
    assert main(["export", "tum", str(task.path), "1", "--clock", "gps"]) == 2
    assert main(["export", "tum", str(task.path), "7", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "no episode 7" in err and "Traceback" not in err


def test_host_clock_without_ns_column_says_use_sensor(tmp_path, capsys):
    tw = TaskWriter(tmp_path, "no_ns", fps=10.0)
    cols = slam_trajectory_columns("ego_", frame="ego_cam_optical")
    ep = tw.begin_episode(list(cols))
    ep.add_frame({cols[0].name: [[0.1, 0, 0, 0, 0, 0, 0, 1]], cols[1].name: [0]}, hardware_ns=1)
    ep.finish()
    assert main(["export", "tum", str(tmp_path / "no_ns"), "1", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "--clock sensor" in err and err.count("\n") == 1
    (r,) = export_tum(tmp_path / "no_ns", 1, out_dir=tmp_path, clock="sensor")
    assert r.written == 1
