"""Importers on real recordings (tests/data): rgbd-frames (7-Scenes), tum (evo files), euroc (Kimera excerpt).

Expected values are computed here from the source files, independently of the importer.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from egopool import EgopoolError, FormatError, SchemaError, open_task
from egopool.cli.app import main
from egopool.importers import import_euroc, import_rgbd_frames, import_tum, rotation_to_quaternion
from egopool.importers.tum import read_tum
from egopool.validate import validate_task

DATA = Path(__file__).parent / "data"
SEVEN = DATA / "sevenscenes_tsdf_fusion"
EUROC = DATA / "euroc_v101_kimera"
TUM_FILES = ["freiburg1_xyz-groundtruth.txt", "freiburg1_xyz-rgbdslam.txt", "V102.txt"]


def quat_matrix(q: np.ndarray) -> np.ndarray:
    """Hamilton xyzw -> 3x3, written out here so the test does not reuse the code under test."""
    x, y, z, w = q / np.linalg.norm(q)
    return np.array([[w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z]])


def polar_rotation(m: np.ndarray) -> np.ndarray:
    """Nearest rotation R = M (MᵀM)^(-1/2), by eigen-decomposition (the importer uses an SVD)."""
    w, v = np.linalg.eigh(m.T @ m)
    return m @ (v @ np.diag(1.0 / np.sqrt(w)) @ v.T)


def exact_ns(token: str) -> int:
    return round(Fraction(token) * 10**9)


# -- rgbd-frames ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def seven(tmp_path_factory):
    out = tmp_path_factory.mktemp("rec")
    result = import_rgbd_frames(SEVEN, out, frame="ego_cam_optical")
    return result, open_task(result.task_dir).episode(1)


def test_rgbd_frames_rows_and_poses(seven):
    result, ep = seven
    assert result.counts["frames"] == 30 and ep.length == 30 and ep.meta["length"] == 30
    traj = ep.trajectory("observation.ego_slam_trajectory")
    assert traj.points.shape == (30, 8)
    assert not traj.has_host_ns and "observation.ego_slam_trajectory_ns" not in ep.column_names
    assert traj.frame == "ego_cam_optical"
    defects = []
    for i in range(30):
        pose = np.loadtxt(SEVEN / f"frame-{i:06d}.pose.txt")
        np.testing.assert_allclose(traj.points[i, 1:4], pose[:3, 3], rtol=0, atol=1e-12)
        r_file = pose[:3, :3]
        defects.append(np.abs(r_file.T @ r_file - np.eye(3)).max())
        r_q = quat_matrix(traj.points[i, 4:8])
        np.testing.assert_allclose(r_q, polar_rotation(r_file), rtol=0, atol=1e-9)
        assert np.abs(r_q - r_file).max() <= 2 * defects[-1]
        assert traj.points[i, 7] >= 0
        assert traj.points[i, 0] == pytest.approx(i / 30.0, abs=1e-12)
    print(f"\n7-Scenes pose rotations: max |RᵀR−I| = {max(defects):.2e} (quaternions = nearest rotations)")
    table = ep.table
    assert table.column("timestamp").to_numpy().tolist() == pytest.approx([i / 30 for i in range(30)], abs=1e-6)
    assert set(table.column("hardware_ns").to_numpy()) == {0}


def test_rgbd_frames_depth_holes_and_error(seven):
    _, ep = seven
    decoded = list(ep.depth("camera_depth"))
    assert len(decoded) == 30
    rel = []
    for i, d in enumerate(decoded):
        orig = np.asarray(Image.open(SEVEN / f"frame-{i:06d}.depth.png")).astype(np.int64)
        assert d.dtype == np.uint16 and d.shape == orig.shape
        assert np.array_equal(d == 0, orig == 0), f"frame {i}: holes changed"
        valid = orig > 0
        rel.append(np.abs(d[valid].astype(np.int64) - orig[valid]) / orig[valid])
    rel_all = np.concatenate(rel)
    med, p99 = float(np.median(rel_all)), float(np.percentile(rel_all, 99))
    print(f"\n7-Scenes depth through the codec: relative error median {med:.3%}, p99 {p99:.3%} "
          f"over {rel_all.size} valid pixels; holes kept exactly")
    assert med < 0.005 and p99 < 0.03


def test_rgbd_frames_rgb_and_calibration(seven):
    result, ep = seven
    frames = list(ep.video("camera_rgb"))
    assert len(frames) == 30
    orig = np.asarray(Image.open(SEVEN / "frame-000010.color.jpg").convert("RGB")).astype(np.float64)
    mse = float(np.mean((frames[10].astype(np.float64) - orig) ** 2))
    assert 10 * np.log10(255**2 / mse) > 28
    k = np.loadtxt(SEVEN / "camera-intrinsics.txt")
    expect = [k[0, 0], k[1, 1], k[0, 2], k[1, 2]]
    assert ep.meta["calibration"]["head_stereo"]["left_camera"]["intrinsic"] == expect
    info = open_task(result.task_dir).info
    assert info["calibration"]["head_stereo"]["resolution"] == [640, 480]
    assert info["video_extensions"]["camera_depth"] in ("mp4", "mkv")
    assert "camera_depth" not in info["cameras"] and info["cameras"]["camera_rgb"] == {"height": 480, "width": 640}
    assert any("synthesised" in s or "/ 30" in s for s in result.synthesised)


def test_rotation_to_quaternion_all_pivots():
    rng = np.random.default_rng(7)
    q = rng.normal(size=(500, 4))
    # add rotations whose pivot is each diagonal entry: 180° about x, y, z and near them
    q = np.concatenate([q, [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 1e-9, 0, 1e-9]]])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    mats = np.stack([quat_matrix(v) for v in q])
    back = rotation_to_quaternion(mats)
    assert np.all(back[:, 3] >= 0)
    for m, b in zip(mats, back):
        np.testing.assert_allclose(quat_matrix(b), m, rtol=0, atol=1e-12)


def _copy_seven(dst: Path) -> Path:
    shutil.copytree(SEVEN, dst)
    return dst


def test_rgbd_frames_missing_pose_names_file(tmp_path):
    src = _copy_seven(tmp_path / "frames")
    (src / "frame-000007.pose.txt").unlink()
    out = tmp_path / "out"
    with pytest.raises(FormatError, match=r"frame-000007\.pose\.txt is missing .*30 colour, 30 depth, 29 pose"):
        import_rgbd_frames(src, out, frame="ego_cam_optical")
    assert not out.exists()


def test_rgbd_frames_in_a_bucket_is_refused_in_one_line(tmp_path, s3_server):
    """Its images decode from local files: an s3:// folder is named, not a TypeError from Path(ObjectPath)."""
    uri = s3_server.upload_dir(SEVEN, "rgbd-import", "frames")
    out = tmp_path / "out"
    with pytest.raises(FormatError, match="read from a local directory, not a bucket") as e:
        import_rgbd_frames(uri, out, frame="ego_cam_optical")
    assert e.value.one_line().startswith(f"{uri}: ")
    assert not out.exists()


def test_rgbd_frames_bad_pose_line(tmp_path):
    src = _copy_seven(tmp_path / "frames")
    (src / "frame-000003.pose.txt").write_text("1 0 0 0\n0 1 0 0\n0 0 1 x\n0 0 0 1\n")
    with pytest.raises(FormatError, match=r"frame-000003\.pose\.txt: line 3: not a number"):
        import_rgbd_frames(src, tmp_path / "out", frame="ego_cam_optical")
    (src / "frame-000003.pose.txt").write_text("1 0 0 0\n0 1 0 0\n0 0 -1 0\n0 0 0 1\n")
    with pytest.raises(FormatError, match="determinant"):
        import_rgbd_frames(src, tmp_path / "out", frame="ego_cam_optical")
    assert not (tmp_path / "out").exists()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


def test_rgbd_frames_failure_mid_way_leaves_nothing(tmp_path):
    """A colour JPEG whose header is fine but whose data is cut off fails during writing: the
    episode is aborted, a fresh task is removed, and an existing task keeps exactly its files."""
    src = _copy_seven(tmp_path / "frames")
    jpg = src / "frame-000015.color.jpg"
    jpg.write_bytes(jpg.read_bytes()[:2000])
    out = tmp_path / "out"
    with pytest.raises(FormatError, match=r"frame-000015\.color\.jpg"):
        import_rgbd_frames(src, out, frame="ego_cam_optical")
    assert not out.exists()
    # existing task: a previous good import stays byte-identical, no file of a second episode appears
    import_tum(DATA / "evo_trajectories" / TUM_FILES[1], out, frame="ego_cam_optical", task="frames")
    before = _tree(out / "frames")
    with pytest.raises(FormatError):
        import_rgbd_frames(src, out, frame="ego_cam_optical")
    after = _tree(out / "frames")
    assert after.pop("meta/recycled_episode.json", None) is not None  # the aborted N is offered for reuse
    assert after == before
    assert [e.index for e in open_task(out / "frames").episodes()] == [1]


def test_unknown_frame_is_refused_before_writing(tmp_path):
    with pytest.raises(SchemaError, match="unknown SLAM frame"):
        import_rgbd_frames(SEVEN, tmp_path / "out", frame="world")
    assert not (tmp_path / "out").exists()


# -- tum -------------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:.*repeat the previous pose's timestamp")
@pytest.mark.parametrize("name", TUM_FILES)
def test_tum_points_equal_file(tmp_path, name):
    path = DATA / "evo_trajectories" / name
    lines = [ln.split() for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    expect = np.loadtxt(path)
    result = import_tum(path, tmp_path, frame="ego_cam_optical", fps=30.0)
    ep = open_task(result.task_dir).episode(1)
    traj = ep.trajectory("observation.ego_slam_trajectory")
    assert traj.points.shape[0] == len(lines) == result.counts["poses"]
    assert np.array_equal(traj.points, expect)  # float64-exact
    ns = [exact_ns(tok[0]) for tok in lines]
    assert traj.host_ns.tolist() == ns
    t0 = Fraction(lines[0][0])
    rows = int((Fraction(lines[-1][0]) - t0) * 30) + 1
    assert ep.length == rows == result.counts["rows"]
    # each pose sits in the row whose 1/30 s window holds its time
    for k in (0, len(lines) // 2, len(lines) - 1):
        r = int(traj.rows[k])
        dt = (Fraction(lines[k][0]) - t0) * 30
        assert r <= dt < r + 1 + Fraction(1, 10**6)
    assert traj.frame == "ego_cam_optical"
    feat = open_task(result.task_dir).info["features"]["observation.ego_slam_trajectory"]
    assert feat["frame_axes"] == {"+X": "right", "+Y": "down", "+Z": "forward"}


def test_tum_bad_lines(tmp_path):
    bad = tmp_path / "t.txt"
    bad.write_text("# c\n1.0 0 0 0 0 0 0 1\n1.1 0 0 0 0 0 0\n")
    with pytest.raises(FormatError, match=r"t\.txt: line 3: expected 8 values"):
        import_tum(bad, tmp_path / "out", frame="ego_cam_optical")
    bad.write_text("1.0 0 0 0 0 0 0 1\n0.5 0 0 0 0 0 0 1\n")
    with pytest.raises(FormatError, match="line 2: timestamp 0.5 is earlier"):
        import_tum(bad, tmp_path / "out", frame="ego_cam_optical")
    bad.write_text("timestamp tx ty tz qx qy qz qw\n1.0 0 0 0 0 0 0 0.1\n")
    with pytest.raises(FormatError, match="line 2: quaternion norm"):
        import_tum(bad, tmp_path / "out", frame="ego_cam_optical")
    with pytest.raises(FormatError, match="TUM trajectory file is missing"):
        import_tum(tmp_path / "missing.txt", tmp_path / "out", frame="ego_cam_optical")
    bad.write_text("1.0 0 0 0 0 0 0 1\n9e9 0 0 0 0 0 0 1\n")
    with pytest.raises(FormatError, match=r"t\.txt: poses span 9e\+09 s"):
        import_tum(bad, tmp_path / "out", frame="ego_cam_optical")
    for fps in (0, -30, float("nan")):
        with pytest.raises(EgopoolError, match="fps must be a finite number > 0"):
            import_tum(DATA / "evo_trajectories" / TUM_FILES[1], tmp_path / "out", frame="ego_cam_optical", fps=fps)
    assert not (tmp_path / "out").exists()


def test_tum_header_without_hash(tmp_path):
    f = tmp_path / "h.txt"
    f.write_text("timestamp tx ty tz qx qy qz qw\n1.000 1 2 3 0 0 0 1\n1.5e0 4 5 6 0 0 0 1\n")
    result = import_tum(f, tmp_path / "out", frame="ego_cam_optical", fps=10)
    traj = open_task(result.task_dir).episode(1).trajectory("observation.ego_slam_trajectory")
    assert traj.points[:, 1:4].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert traj.host_ns.tolist() == [1_000_000_000, 1_500_000_000] and traj.rows.tolist() == [0, 5]


# -- euroc -----------------------------------------------------------------------------------------------
def _csv(path: Path) -> list[list[str]]:
    return [ln.split(",") for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def test_euroc_rows_imu_and_calibration(tmp_path):
    result = import_euroc(EUROC, tmp_path)
    ep = open_task(result.task_dir).episode(1)
    cam = [int(r[0]) for r in _csv(EUROC / "mav0" / "cam0" / "data.csv")]
    imu = _csv(EUROC / "mav0" / "imu0" / "data.csv")
    assert ep.length == len(cam) == 20
    table = ep.table
    assert table.column("hardware_ns").to_pylist() == cam
    period = round(1e9 / 20)
    inside = [r for r in imu if cam[0] <= int(r[0]) < cam[-1] + period]
    ts, samples = ep.imu()
    assert len(ts) == len(inside) == result.counts["imu_samples"]
    assert ts.tolist() == [int(r[0]) for r in inside]
    gyro_csv = np.array([[float(v) for v in r[1:4]] for r in inside], dtype=np.float32)
    accel_csv = np.array([[float(v) for v in r[4:7]] for r in inside], dtype=np.float32)
    assert np.array_equal(samples[:, :3], gyro_csv) and np.array_equal(samples[:, 3:], accel_csv)
    # each sample sits in the row of the frame window that holds it
    per_row = [len(v) for v in table.column("imu_ts_ns").to_pylist()]
    for i, n in enumerate(per_row):
        hi = cam[i + 1] if i + 1 < len(cam) else cam[-1] + period
        assert n == sum(1 for r in inside if cam[i] <= int(r[0]) < hi)
    cal = ep.meta["calibration"]["head_stereo"]
    assert cal["left_camera"]["intrinsic"] == [458.654, 457.296, 367.215, 248.375]
    assert cal["left_camera"]["distortion"] == [-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05]
    assert cal["resolution"] == [752, 480] and cal["fps"] == 20.0 and len(cal["T_BS"]) == 16
    assert open_task(result.task_dir).info["fps"] == 20.0
    frames = list(ep.video("stereo_left"))
    assert len(frames) == 20 and frames[0].shape == (480, 752, 3)


def test_euroc_groundtruth_reordered_to_xyzw(tmp_path):
    """Real V1_02 ground-truth rows with their stamps shifted into the excerpt's cam0 span (values untouched)."""
    src = tmp_path / "euroc"
    shutil.copytree(EUROC, src)
    gt_src = (DATA / "evo_trajectories" / "V102_groundtruth.csv").read_text().splitlines()
    cam = [int(r[0]) for r in _csv(EUROC / "mav0" / "cam0" / "data.csv")]
    shift = cam[0] - int(gt_src[1].split(",")[0])
    rows = [gt_src[0]] + [",".join([str(int(ln.split(",")[0]) + shift)] + ln.split(",")[1:]) for ln in gt_src[1:400]]
    (src / "mav0" / "state_groundtruth_estimate0").mkdir()
    (src / "mav0" / "state_groundtruth_estimate0" / "data.csv").write_text("\n".join(rows) + "\n")
    plain = import_euroc(src, tmp_path / "a")
    assert any("--frame" in n for n in plain.notes)
    assert "observation.ego_slam_trajectory" not in open_task(plain.task_dir).episode(1).column_names
    result = import_euroc(src, tmp_path / "b", frame="ego_cam_optical")
    traj = open_task(result.task_dir).episode(1).trajectory("observation.ego_slam_trajectory")
    csv = [r.split(",") for r in rows[1:]]
    inside = [r for r in csv if cam[0] <= int(r[0]) < cam[-1] + 50_000_000]
    assert len(traj.points) == len(inside) == result.counts["gt_points"]
    assert traj.host_ns.tolist() == [int(r[0]) for r in inside]
    expect = np.array([[float(r[i]) for i in (1, 2, 3, 5, 6, 7, 4)] for r in inside])
    assert np.array_equal(traj.points[:, 1:8], expect)


def test_euroc_missing_image_and_bad_csv(tmp_path):
    src = tmp_path / "euroc"
    shutil.copytree(EUROC, src)
    first = _csv(src / "mav0" / "cam0" / "data.csv")[3][1].strip()
    (src / "mav0" / "cam0" / "data" / first).unlink()
    with pytest.raises(FormatError, match=f"{first}: image listed in cam0/data.csv is missing"):
        import_euroc(src, tmp_path / "out")
    shutil.rmtree(src)
    shutil.copytree(EUROC, src)
    imu = src / "mav0" / "imu0" / "data.csv"
    lines = imu.read_text().splitlines()
    lines[5] = lines[5].rsplit(",", 1)[0]
    imu.write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError, match="imu0/data.csv: line 6: expected 7 comma-separated fields, got 6"):
        import_euroc(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- CLI -------------------------------------------------------------------------------------------------
def test_cli_import_tum_json_and_missing_frame(tmp_path, capsys):
    path = DATA / "evo_trajectories" / TUM_FILES[1]
    assert main(["import", "tum", str(path), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pass --frame" in err
    assert not any(tmp_path.iterdir())
    assert main(["import", "tum", str(path), "--out", str(tmp_path), "--task", "t1", "--frame",
                 "ego_cam_optical", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task_dir"] == str(tmp_path / "t1") and out["episodes"][0]["episode_index"] == 1
    assert out["counts"]["poses"] == 788 and any("grid" in s for s in out["synthesised"])


def test_cli_import_euroc_human_output(tmp_path, capsys):
    assert main(["import", "euroc", str(EUROC), "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "episode N=1" in text and "20 rows" in text and "cam0 stamps" in text


# -- issue 12 C: stamp units, BOM, headers, duplicates -------------------------------------------------------
RGBDSLAM = DATA / "evo_trajectories" / TUM_FILES[1]


def _scaled_tum(src: Path, dst: Path, factor: int) -> Path:
    """The real file with its first column in another unit (exact decimal arithmetic)."""
    out = []
    for line in src.read_text().splitlines():
        if line.startswith("#"):
            out.append(line)
            continue
        tok = line.split()
        out.append(" ".join([str(int(Fraction(tok[0]) * factor)), *tok[1:]]))
    dst.write_text("\n".join(out) + "\n")
    return dst


@pytest.mark.parametrize("factor,unit", [(1000, "milliseconds"), (10**9, "nanoseconds")])
def test_tum_stamps_in_another_unit_name_the_line_and_unit(tmp_path, factor, unit):
    f = _scaled_tum(RGBDSLAM, tmp_path / "ms.txt", factor)
    first = int(Fraction("1305031102.160407") * factor)
    with pytest.raises(FormatError) as err:
        import_tum(f, tmp_path / "out", frame="ego_cam_optical")
    assert err.value.message == (f"line 2: timestamp {first} is not in seconds (as seconds it is after the year 2286); "
                                 f"it looks like {unit} since the Unix epoch; TUM timestamps are seconds")
    assert not (tmp_path / "out").exists()


def test_tum_with_a_byte_order_mark_keeps_every_pose(tmp_path):
    lines = [ln for ln in RGBDSLAM.read_text().splitlines() if not ln.startswith("#")][:5]
    f = tmp_path / "bom.txt"
    f.write_bytes(b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode())
    result = import_tum(f, tmp_path / "out", frame="ego_cam_optical")
    traj = open_task(result.task_dir).episode(1).trajectory("observation.ego_slam_trajectory")
    assert result.counts["poses"] == 5 and traj.host_ns.tolist() == [exact_ns(ln.split()[0]) for ln in lines]


@pytest.mark.parametrize("first,message", [
    ("1.0x 0 0 0 0 0 0 1", "line 1: not a number in '1.0x 0 0 0 0 0 0 1'"),
    ("t tx ty tz qx qy qz 1", "line 1: not a number in 't tx ty tz qx qy qz 1'"),
    ("\x00\x01 0 0 0 0 0 0 1", "line 1: not a number in '\\x00\\x01 0 0 0 0 0 0 1'"),
])
def test_tum_first_line_is_a_header_only_when_it_is_column_names(tmp_path, first, message):
    f = tmp_path / "h.txt"
    f.write_text(first + "\n2.0 0 0 0 0 0 0 1\n")
    with pytest.raises(FormatError) as err:
        import_tum(f, tmp_path / "out", frame="ego_cam_optical")
    assert err.value.message == message


def test_tum_invalid_utf8_names_the_line(tmp_path):
    f = tmp_path / "u.txt"
    f.write_bytes(b"1.0 0 0 0 0 0 0 1\n2.0 0 0 0 0 0 0 1 \xff\n")
    with pytest.raises(FormatError, match=r"u\.txt: line 2 is not UTF-8 text \(byte 0xff at offset 36\)"):
        import_tum(f, tmp_path / "out", frame="ego_cam_optical")


def test_tum_duplicate_stamps_are_reported(tmp_path, capsys):
    """V102.txt (evo's test data) repeats stamps: counted, named by line, warned, every pose kept."""
    path = DATA / "evo_trajectories" / "V102.txt"
    data = [(no, ln.split()[0]) for no, ln in enumerate(path.read_text().splitlines(), 1)
            if ln.strip() and not ln.startswith("#")]
    dups = [(no, prev) for (prev, a), (no, b) in zip(data, data[1:]) if exact_ns(a) == exact_ns(b)]
    assert len(dups) == 4 and dups[0] == (433, 432)
    with pytest.warns(UserWarning, match="4 pose\\(s\\) repeat the previous pose's timestamp \\(first: line 433 "
                                         "repeats line 432\\)"):
        result = import_tum(path, tmp_path / "a", frame="ego_cam_optical")
    assert result.counts["duplicate_stamps"] == 4 and result.counts["poses"] == len(data)
    assert main(["import", "tum", str(path), "--out", str(tmp_path / "b"), "--frame", "ego_cam_optical"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"egopool: warning: {path}: 4 pose(s) repeat the previous pose's timestamp (first: "
                                "line 433 repeats line 432); all were kept, in file order"]
    assert "line 433 repeats line 432" in out


def _euroc_with_stamps(tmp_path: Path, fn) -> Path:
    src = tmp_path / "euroc"
    shutil.copytree(EUROC, src)
    for csv in (src / "mav0" / "cam0" / "data.csv", src / "mav0" / "imu0" / "data.csv"):
        lines = csv.read_text().splitlines()
        csv.write_text("\n".join([lines[0]] + [",".join([fn(int(ln.split(",")[0])), *ln.split(",")[1:]])
                                               for ln in lines[1:]]) + "\n")
    return src


@pytest.mark.parametrize("fn,message", [
    (lambda ns: str(ns // 10**6), "line 2: timestamps advance by a median of 50 per line, which as nanoseconds is a "
                                  "rate above 50 kHz; they look like milliseconds since the Unix epoch; EuRoC "
                                  "timestamps are integer nanoseconds"),
    (lambda ns: str(ns // 10**3), "line 2: timestamp 1403715273262142 looks like microseconds since the Unix epoch; "
                                  "EuRoC timestamps are integer nanoseconds"),
    (lambda ns: str(ns * 1000), "line 2: timestamp 1403715273262142976000 does not fit int64 nanoseconds (0 to "
                                "9223372036854775807, year 2262); EuRoC timestamps are integer nanoseconds"),
    (lambda ns: f"{ns / 1e9:.6f}", "line 2: timestamp '1403715273.262143' is not an integer ns value"),
])
def test_euroc_stamps_in_another_unit_name_the_line(tmp_path, fn, message):
    src = _euroc_with_stamps(tmp_path, fn)
    with pytest.raises(FormatError) as err:
        import_euroc(src, tmp_path / "out")
    assert err.value.message == message and err.value.path == src / "mav0" / "cam0" / "data.csv"
    assert not (tmp_path / "out").exists()


def test_import_into_a_task_at_another_fps_says_to_import_into_a_new_task(tmp_path, capsys):
    """TaskWriter's one fps check (decisions.md R18) with the importers' way out: a new task, not --fps."""
    path = DATA / "evo_trajectories" / TUM_FILES[1]
    import_tum(path, tmp_path, frame="ego_cam_optical", task="t", fps=30)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["import", "tum", str(path), "--out", str(tmp_path), "--task", "t", "--fps", "10",
                 "--frame", "ego_cam_optical"]) == 1
    assert capsys.readouterr().err == (f"egopool: error: {tmp_path / 't'}: the task records at 30 fps, not 10 "
                                       "(a task has one fps, file_format.md §3) (import into a new task (--task "
                                       "NEW_NAME))\n")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert open_task(tmp_path / "t").info["fps"] == 30.0


def test_euroc_relative_stamps_get_the_import_time_as_created_at(tmp_path):
    """Stamps from 0 (a relative clock) used to become created_at = 0 s, which the writer refused;
    created_at is a 2000-2100 Unix time (decisions.md V5), so the import time stands in, and says so."""
    first = int(_csv(EUROC / "mav0" / "cam0" / "data.csv")[0][0])
    src = _euroc_with_stamps(tmp_path, lambda ns: str(ns - first))
    before = time.time()
    result = import_euroc(src, tmp_path / "out")
    ep = open_task(result.task_dir).episode(1)
    assert before <= ep.meta["created_at"] <= time.time()
    assert result.synthesised == ("created_at/wall_time: import time (the cam0 stamps are not Unix time)",)
    assert ep.table.column("hardware_ns").to_pylist()[0] == 0
    assert validate_task(result.task_dir).findings == []


def test_euroc_bom_and_header_without_hash(tmp_path):
    src = tmp_path / "euroc"
    shutil.copytree(EUROC, src)
    cam = src / "mav0" / "cam0" / "data.csv"
    lines = cam.read_text().splitlines()
    cam.write_bytes(b"\xef\xbb\xbf" + ("\n".join(["timestamp [ns],filename", *lines[1:]]) + "\n").encode())
    result = import_euroc(src, tmp_path / "out")
    assert result.counts["frames"] == 20


@pytest.mark.parametrize("stamp", ["-1e10", "9.5e9", "-9300000000.5"])
def test_tum_stamps_beyond_int64_ns_are_one_line(tmp_path, stamp):
    """Found by qa12: |t| <= 1e10 s passed the unit check, then int64 ns overflowed (OverflowError)."""
    f = tmp_path / "big.txt"
    f.write_text(f"{stamp} 1 2 3 0 0 0 1\n")
    with pytest.raises(FormatError) as err:
        import_tum(f, tmp_path / "out", frame="ego_cam_optical")
    assert err.value.message == (f"line 1: timestamp {stamp} s is beyond what int64 nanoseconds hold "
                                 "(|t| < 9.22e9 s, the year 2262)")
    assert not (tmp_path / "out").exists()


def _make_special(path: Path, kind: str, monkeypatch) -> None:
    """Put a FIFO, a directory or a listening-less Unix socket at ``path`` (which must not exist)."""
    import os
    import socket

    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:  # bound relative to its folder: AF_UNIX paths are limited to 108 bytes
        monkeypatch.chdir(path.parent)
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path.name)
        sock.close()  # the socket file stays


@pytest.mark.parametrize("kind", ["FIFO", "directory", "socket"])
@pytest.mark.parametrize("importer", ["rgbd-frames", "euroc"])
def test_an_image_that_is_no_regular_file_is_named_not_waited_for(tmp_path, monkeypatch, importer, kind):
    """Found by qa12: Pillow opened a FIFO colour/cam0 image and blocked forever; then EuRoC called a FIFO,
    directory or socket in cam0/data "missing" (found by QA): it says what the path is."""
    import signal

    src = tmp_path / "src"
    shutil.copytree(SEVEN if importer == "rgbd-frames" else EUROC, src)
    image = (src / "frame-000001.color.jpg" if importer == "rgbd-frames"
             else sorted((src / "mav0/cam0/data").iterdir())[1])
    image.unlink()
    _make_special(image, kind, monkeypatch)
    signal.alarm(60)
    try:
        with pytest.raises(FormatError) as err:
            if importer == "rgbd-frames":
                import_rgbd_frames(src, tmp_path / "out", frame="ego_cam_optical")
            else:
                import_euroc(src, tmp_path / "out")
    finally:
        signal.alarm(0)
    what = "image file" if importer == "rgbd-frames" else "image listed in cam0/data.csv"
    assert err.value.path == image
    assert err.value.message == f"{what} is a {kind}, not a regular file; egopool does not open it"
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.parquet"))


@pytest.mark.parametrize("kind", ["FIFO", "regular file", "missing"])
@pytest.mark.parametrize("importer", ["rgbd-frames", "euroc"])
def test_a_source_folder_that_is_no_directory_is_named(tmp_path, monkeypatch, importer, kind):
    """The folder given to an importer: missing, or a FIFO / file in its place, said as such (rgbd-frames
    said "not a directory" for a missing folder, EuRoC "no mav0/cam0 folder" for a FIFO)."""
    src = tmp_path / "src"
    if kind == "regular file":
        src.write_text("x")
    elif kind != "missing":
        _make_special(src, kind, monkeypatch)
    with pytest.raises(FormatError) as err:
        if importer == "rgbd-frames":
            import_rgbd_frames(src, tmp_path / "out", frame="ego_cam_optical")
        else:
            import_euroc(src, tmp_path / "out")
    what = "rgbd-frames folder" if importer == "rgbd-frames" else "EuRoC folder"
    assert err.value.path == src
    assert err.value.message == (f"{what} is missing" if kind == "missing" else f"{what} is a {kind}, not a directory")


def test_euroc_fifo_image_is_one_cli_line_naming_it(tmp_path, capsys):
    import os

    src = tmp_path / "src"
    shutil.copytree(EUROC, src)
    image = sorted((src / "mav0/cam0/data").iterdir())[3]
    image.unlink()
    os.mkfifo(image)
    assert main(["import", "euroc", str(src), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(image) in err and "is a FIFO, not a regular file" in err, err


@pytest.mark.parametrize("kind", ["FIFO", "regular file"])
def test_euroc_cam0_data_folder_that_is_no_directory_is_named(tmp_path, kind):
    import os

    src = tmp_path / "src"
    shutil.copytree(EUROC, src)
    folder = src / "mav0/cam0/data"
    first = sorted(folder.iterdir())[0].name
    shutil.rmtree(folder)
    if kind == "FIFO":
        os.mkfifo(folder)
    else:
        folder.write_bytes(b"x")
    with pytest.raises(FormatError) as err:
        import_euroc(src, tmp_path / "out")
    assert err.value.path == folder / first
    assert err.value.message == (f"image listed in cam0/data.csv cannot be opened: its folder {folder} is a "
                                 f"{kind}, not a directory")


def test_euroc_imu_value_beyond_float32_names_the_file(tmp_path):
    """Found by qa12: a numpy overflow warning, then the writer's "row 0 holds inf" message naming no file."""
    src = tmp_path / "src"
    shutil.copytree(EUROC, src)
    csv = src / "mav0/imu0/data.csv"
    lines = csv.read_text().splitlines()
    lines[2] = lines[2].rsplit(",", 1)[0] + ",1e300"
    csv.write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError) as err:
        import_euroc(src, tmp_path / "out")
    stamp = lines[2].split(",")[0]
    assert err.value.path == csv
    assert err.value.message == f"imu0 row with timestamp {stamp} holds 1e+300, beyond float32 (the stored IMU type)"
    csv.write_text("")
    assert "imu0/data.csv has no samples: no IMU columns" in import_euroc(src, tmp_path / "out").notes


# qa12: relative-millisecond stamps are noted; numbers are plain ASCII (not 1_0, Arabic-Indic digits)
def _tum_file(tmp_path, body):
    p = tmp_path / "t.txt"; p.write_text(body); return p

def test_tum_relative_ms_stamps_are_noted(tmp_path):
    p = _tum_file(tmp_path, "".join(f"{t} 0 0 0 0 0 0 1\n" for t in (0, 33, 66)))
    with pytest.warns(UserWarning, match="median 33 s apart"):
        res = import_tum(p, tmp_path / "out", frame="tum_fr1_world", task="t", fps=30)
    assert res.counts["rows"] == 1981 and any("divide the first column by 1000" in n for n in res.notes)

@pytest.mark.parametrize("t0", [5e9, -1.3e9, 1.3e9])
def test_tum_created_at_is_the_first_stamp_only_between_2000_and_2100(tmp_path, t0):
    """created_at is a 2000-2100 Unix time (decisions.md V5): stamps of 2128 or 1928 are not wall-clock time."""
    p = _tum_file(tmp_path, "".join(f"{t0 + k / 10:.1f} 0 0 0 0 0 0 1\n" for k in range(3)))
    before = time.time()
    res = import_tum(p, tmp_path / "out", frame="tum_fr1_world", task="t", fps=30)
    created = open_task(res.task_dir).episode(1).meta["created_at"]
    if t0 == 1.3e9:
        assert created == t0 and not any("import time" in s for s in res.synthesised)
    else:
        assert before <= created <= time.time() and any("import time" in s for s in res.synthesised)
    assert validate_task(res.task_dir).findings == []


def test_tum_fractional_stamps_are_not_noted(tmp_path):
    p = _tum_file(tmp_path, "".join(f"{t} 0 0 0 0 0 0 1\n" for t in (0.0, 0.033, 0.066)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = import_tum(p, tmp_path / "out", frame="tum_fr1_world", task="t", fps=30)
    assert not any("divide" in n for n in res.notes)

@pytest.mark.parametrize("tok", ["1_0", "\u0661", "0x10", "１"])
def test_tum_numbers_are_plain_ascii(tmp_path, tok):
    p = _tum_file(tmp_path, f"0 {tok} 0 0 0 0 0 1\n")
    with pytest.raises(FormatError, match="line 1: not a number"):
        read_tum(p)
    p = _tum_file(tmp_path, f"{tok} 0 0 0 0 0 0 1\n")
    with pytest.raises(FormatError, match="line 1"):
        read_tum(p)


# -- the same source twice (issue 16 E) -------------------------------------------------------------------------------

def _snapshot(task: Path) -> dict[str, bytes]:
    return {str(p.relative_to(task)): p.read_bytes() for p in sorted(task.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", ["tum", "euroc", "rgbd-frames"])
def test_importing_the_same_source_twice_is_refused_naming_its_n(tmp_path, capsys, kind):
    """The example: the same TUM file imported twice made N=2 an identical copy without a word."""
    src = {"tum": DATA / "evo_trajectories" / TUM_FILES[0], "euroc": EUROC, "rgbd-frames": SEVEN}[kind]
    frame = {"tum": ["--frame", "tum_fr1_world"], "euroc": [], "rgbd-frames": ["--frame", "ego_cam_optical"]}[kind]
    args = ["import", kind, str(src), *frame, "--out", str(tmp_path), "--task", "t"]
    assert main(args) == 0
    capsys.readouterr()
    before = _snapshot(tmp_path / "t")
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err == (f"egopool: error: {tmp_path}/t: {src} is already in this task as episode N=1 (imported before, "
                   "same content sha256:") + err[len(f"egopool: error: {tmp_path}/t: {src} is already in this task as "
                                                     "episode N=1 (imported before, same content sha256:"):]
    assert err.endswith("...); importing it again would hold it twice (pass --allow-duplicate to import it again "
                        "anyway, or `egopool delete TASK 1` first)\n") and err.count("\n") == 1
    assert _snapshot(tmp_path / "t") == before  # nothing written
    assert main([*args, "--allow-duplicate", "--json"]) == 0
    assert [e["episode_index"] for e in json.loads(capsys.readouterr().out)["episodes"]] == [2]


def test_the_same_content_under_another_name_is_the_same_source_and_a_deleted_one_may_come_back(tmp_path, capsys):
    tum = DATA / "evo_trajectories" / TUM_FILES[0]
    copy = tmp_path / "renamed.txt"
    shutil.copyfile(tum, copy)
    base = ["--frame", "tum_fr1_world", "--out", str(tmp_path / "rec"), "--task", "t"]
    assert main(["import", "tum", str(tum), *base]) == 0
    assert main(["import", "tum", str(copy), *base]) == 1
    assert "is already in this task as episode N=1" in capsys.readouterr().err
    other = tmp_path / "other.txt"
    other.write_text(tum.read_text().replace(" 1.3563 ", " 1.3564 ", 1))  # one digit differs
    assert main(["import", "tum", str(other), *base]) == 0
    assert main(["delete", str(tmp_path / "rec" / "t"), "1", "--yes"]) == 0
    capsys.readouterr()
    assert main(["import", "tum", str(copy), *base, "--json"]) == 0  # N=1 is gone: importing it again is no copy
    assert [e["episode_index"] for e in json.loads(capsys.readouterr().out)["episodes"]] == [3]
