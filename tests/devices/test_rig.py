"""Columns, status columns, devices[] entries, calibration keys and the task binding
(multi_device_storage.md §2.2, §2.4, §3, §4, §6.4, §6.5)."""

import pytest

from egopool import SchemaError
from egopool.devices import Device, Rig, stereo_calibration
from egopool.devices.rig import D435_FORENSIC_COLUMNS

G1 = Device("gripper", "gripper:CC:BA:97:25:B4:44", "UMI 夹爪001")
G2 = Device("gripper", "gripper:68:EE:8F:C6:0D:BC", "UMI 夹爪002")


def _cal(name="x"):
    return stereo_calibration(name, resolution=(640, 480), fps=30.0, baseline=0.05, intrinsic=(600, 600, 320, 240))


def _names(rig):
    return [c.name for c in rig.columns()]


def test_rig2_gripper_column_names_exact():
    rig = Rig()
    rig.add(G1)
    g2 = rig.add(G2)
    obs = sorted(c.name for c in g2.columns if c.name.startswith("observation."))
    assert obs == sorted([
        "observation.gripper_2_gripper_state",
        "observation.gripper_2_gripper_left_force", "observation.gripper_2_gripper_left_force_ns",
        "observation.gripper_2_gripper_left_force_matrix", "observation.gripper_2_gripper_left_force_matrix_ns",
        "observation.gripper_2_gripper_right_force", "observation.gripper_2_gripper_right_force_ns",
        "observation.gripper_2_gripper_right_force_matrix", "observation.gripper_2_gripper_right_force_matrix_ns",
        "observation.gripper_2_slam_trajectory", "observation.gripper_2_slam_trajectory_ns",
    ])
    assert sorted(c.name for c in g2.columns if c.name.startswith("status.")) == [
        "status.gripper_2_force_left", "status.gripper_2_force_right", "status.gripper_2_pose"]


def test_rig1_gripper_column_names_exact():
    rig = Rig()
    g1 = rig.add(G1)
    obs = sorted(c.name for c in g1.columns if c.name.startswith("observation."))
    assert obs == sorted([
        "observation.gripper_state", "observation.gripper_left_force", "observation.gripper_left_force_ns",
        "observation.gripper_left_force_matrix", "observation.gripper_left_force_matrix_ns",
        "observation.gripper_right_force", "observation.gripper_right_force_ns",
        "observation.gripper_right_force_matrix", "observation.gripper_right_force_matrix_ns",
        "observation.slam_trajectory", "observation.slam_trajectory_ns",
    ])


def test_status_columns_exactly_uvc_sensors_and_gripper_non_video_slots():
    rig = Rig()
    rig.add(Device("uvc", "uvc:a"))
    rig.add(Device("uvc", "uvc:b"))
    rig.add(Device("d435", "d435:1"))
    rig.add(G1)
    rig.add(Device("usb_glove", "usbglove:1", side="right"))
    status = sorted(n for n in _names(rig) if n.startswith("status."))
    assert status == ["status.gripper_force_left", "status.gripper_force_right", "status.gripper_pose",
                      "status.head_left_rgb", "status.head_right_rgb", "status.right_glove"]
    # external frame sources (D435, S80M, gripper RGB) have no status column (§3)
    assert "status.d435_rgb" not in status and "status.gripper_rgb" not in status


def test_s80m_has_imu_and_no_status():
    rig = Rig()
    rig.add(Device("s80c", "s80m:1@x"))
    names = _names(rig)
    assert "observation.imu" in names and "imu_ts_ns" in names
    assert not [n for n in names if n.startswith("status.")]
    imu = next(c for c in rig.columns() if c.name == "observation.imu")
    assert imu.feature == {"dtype": "float32", "shape": [6]}


def test_d435_forensic_columns_only_on_the_d435_chain():
    rig = Rig()
    rig.add(G1)
    assert not set(D435_FORENSIC_COLUMNS) & set(_names(rig))
    rig.add(Device("d435", "d435:1"))
    rig.add(Device("d435", "d435:2"))
    names = _names(rig)
    assert [n for n in names if n in D435_FORENSIC_COLUMNS] == list(D435_FORENSIC_COLUMNS)  # once, not per device
    assert names.count("raw_hw_ns") == 1
    assert rig.forensic_slots == ("d435_rgb", "d435_depth")
    assert rig.primary_slot == "gripper_rgb"


def test_glove_columns_ble_vs_usb_and_hand_pose_always():
    rig = Rig()
    assert _names(rig) == ["observation.left_hand_pose", "observation.right_hand_pose"]
    rig.add(Device("data_ble", "ble:E4:5F:01:AA:10:22", side="left"))
    rig.add(Device("usb_glove", "usbglove:364133593535", side="right"))
    feats = {c.name: c.feature for c in rig.columns() if c.feature}
    assert feats["observation.left_glove"] == {"dtype": "float32", "shape": [16, 16]}
    assert feats["observation.right_glove"] == {"dtype": "float32", "shape": [16, 16]}
    assert feats["observation.right_glove_imu_quat"] == {"dtype": "float32", "shape": [16, 4]}
    assert feats["observation.right_glove_imu_valid"] == {"dtype": "float32", "shape": [16]}
    assert "observation.left_glove_imu_quat" not in feats  # BLE glove: pressure only
    assert feats["observation.left_hand_pose"] == {"dtype": "float32", "shape": [21, 3]}
    assert rig.sensors == ["left_glove", "right_glove"]
    hp = next(c for c in rig.columns() if c.name == "observation.left_hand_pose")
    assert hp.sparse is False  # always written, zeros without a solution


@pytest.mark.parametrize("sensor,msg", [("LeftGlove", "a-z0-9_"), ("left_force", "reserved suffix"),
                                        ("left.glove", "one name segment"), ("手套", "a-z0-9_")])
def test_glove_sensor_name_checked_on_register(sensor, msg):
    rig = Rig()
    with pytest.raises(SchemaError, match=msg):
        rig.add(Device("usb_glove", "usbglove:1", sensor=sensor))
    assert rig.devices == []


def test_custom_sensor_name_allowed_when_legal():
    rig = Rig()
    g = rig.add(Device("usb_glove", "usbglove:1", sensor="wrist_glove"))
    assert "observation.wrist_glove_imu_quat" in [c.name for c in g.columns] and rig.sensors == ["wrist_glove"]


def test_device_key_must_match_kind():
    with pytest.raises(SchemaError, match="d435:"):
        Device("d405", "d405:123")
    with pytest.raises(SchemaError, match="usbglove:"):
        Device("usb_glove", "ble:AA")
    with pytest.raises(SchemaError, match="unknown device kind"):
        Device("kinect", "kinect:1")


def test_devices_entries_main_program_gloves():
    rig = Rig("main")
    rig.add(Device("s80c", "s80m:000000000001@1-3.4.1", "S80C_head"), role="ego")
    rig.add(G1)
    rig.add(Device("usb_glove", "usbglove:364933593535", "USB 手套_left", side="left"))
    rig.add(Device("data_ble", "ble:E4:5F:01:AA:10:22", "Matrix_R", side="right"))
    decl = rig.declarations()
    assert decl["devices"] == [
        {"key": "s80m:000000000001@1-3.4.1", "kind": "s80m", "name": "S80C_head",
         "slots": ["stereo_left", "stereo_right", "stereo_depth"]},
        {"key": "gripper:CC:BA:97:25:B4:44", "kind": "gripper", "name": "UMI 夹爪001",
         "slots": ["gripper_stereo_left", "gripper_rgb", "gripper_pose", "gripper_force_left",
                   "gripper_force_right"]},
        {"key": "usbglove:364933593535", "kind": "data_ble", "name": "USB 手套_left", "slots": []},
        {"key": "ble:E4:5F:01:AA:10:22", "kind": "data_ble", "name": "Matrix_R", "slots": []},
    ]
    assert decl["device_names"] == {
        "stereo_left": "S80C_head", "stereo_right": "S80C_head", "stereo_depth": "S80C_head",
        "gripper_stereo_left": "UMI 夹爪001", "gripper_rgb": "UMI 夹爪001", "gripper_pose": "UMI 夹爪001",
        "gripper_force_left": "UMI 夹爪001", "gripper_force_right": "UMI 夹爪001"}
    assert decl["sensors"] == ["left_glove", "right_glove"] and decl["sensor_dim"] == 256
    assert not any("serial" in d or "sensor_column" in d for d in decl["devices"])  # §6.4: compact entries


def test_devices_entries_lite_program_gloves():
    rig = Rig("lite")
    rig.add(Device("ble", "ble:E4:5F:01:AA:10:23", "BLE 手套", side="left"))
    rig.add(Device("usb_glove", "usbglove:364133593535", "USB 手套_right", side="right"))
    decl = rig.declarations()
    assert decl["devices"] == [
        {"key": "ble:E4:5F:01:AA:10:23", "kind": "ble_glove", "name": "BLE 手套", "slots": ["left_glove"]},
        {"key": "usbglove:364133593535", "kind": "usb_glove", "name": "USB 手套_right", "slots": ["right_glove"]},
    ]
    assert decl["device_names"] == {"left_glove": "BLE 手套", "right_glove": "USB 手套_right"}


def test_uvc_and_d435_entries_and_names():
    rig = Rig()
    rig.add(Device("uvc", "uvc:usb-DECXIN_x", "头部相机"))
    rig.add(Device("d405", "d435:130322270123", "D405_head"))
    rig.add(Device("d435", "d435:213622075531"))
    decl = rig.declarations()
    assert [(d["kind"], d["name"], d["slots"]) for d in decl["devices"]] == [
        ("uvc", "头部相机", ["head_left_rgb"]), ("d435", "D405_head", ["D405_head_rgb", "D405_head_depth"]),
        ("d435", "D435", ["d435_rgb", "d435_depth"])]
    assert decl["device_names"]["D405_head_depth"] == "D405_head" and decl["device_names"]["d435_rgb"] == "D435"


def test_calibration_keys_first_device_gets_head_stereo():
    rig = Rig()
    rig.add(Device("uvc", "uvc:a"))  # no calibration: does not take head_stereo
    rig.add(Device("d435", "d435:1", calibration=_cal()))
    rig.add(Device("d435", "d435:2", calibration=_cal()))
    rig.add(Device("d405", "d435:3", "D405_head", calibration=_cal()))
    rig.add(Device("d435", "d435:4", calibration=_cal()))
    cal = rig.calibration()
    assert list(cal) == ["head_stereo", "d435_rgb_calibration", "D405_head_rgb_calibration",
                         "d435_rgb_3_calibration"]
    assert cal["head_stereo"]["name"] == "head_stereo"
    assert cal["head_stereo"]["left_camera"] == {"intrinsic": [600.0, 600.0, 320.0, 240.0],
                                                 "distortion": [0.0] * 5}
    assert set(cal["head_stereo"]) == {"type", "name", "resolution", "fps", "baseline", "left_camera",
                                       "right_camera", "depth_scale", "cam_imu_timeshift"}


def test_calibration_head_stereo_follows_opening_order():
    rig = Rig()
    rig.add(Device("d435", "d435:2", calibration=_cal("second-serial")))
    rig.add(Device("d435", "d435:1", calibration=_cal("first-serial")))
    cal = rig.calibration()
    assert list(cal) == ["head_stereo", "d435_rgb_calibration"]
    assert cal["head_stereo"]["name"] == "head_stereo" and cal["d435_rgb_calibration"]["name"] == "d435_rgb_calibration"


def test_s80m_after_uvc_gets_head_stereo():
    rig = Rig()
    rig.add(Device("uvc", "uvc:a"))
    rig.add(Device("s80c", "s80m:1", calibration=_cal()))
    assert list(rig.calibration()) == ["head_stereo"]


def test_slam_table_per_column_frames_and_owners():
    rig = Rig()
    rig.add(Device("s80c", "s80m:000000000001@1-3.4.1"), role="ego")
    rig.add(G1)
    rig.add(G2)
    assert rig.slam_frames() == {"observation.ego_slam_trajectory": "ego_cam_optical",
                                 "observation.slam_trajectory": "down_left_forward",
                                 "observation.gripper_2_slam_trajectory": "down_left_forward"}
    feats = {c.name: c.feature for c in rig.columns() if c.feature}
    assert feats["observation.gripper_2_slam_trajectory"]["owner"] == {
        "role": "gripper", "rig": 2, "device_key": "gripper:68:EE:8F:C6:0D:BC"}
    assert feats["observation.gripper_2_slam_trajectory"]["source_slot"] == "gripper_2_stereo_left"
    assert feats["observation.ego_slam_trajectory"]["owner"] == {"role": "ego",
                                                                 "device_key": "s80m:000000000001@1-3.4.1"}
    assert feats["observation.ego_slam_trajectory"]["time"]["epoch"] == "first_frame"
    assert feats["observation.slam_trajectory"]["time"]["epoch"] == "enter_press"


def test_ego_on_d435_takes_its_rgb_slot_as_source():
    rig = Rig()
    rig.add(Device("d405", "d435:1", "D405_head"), role="ego")
    feat = next(c.feature for c in rig.columns() if c.name == "observation.ego_slam_trajectory")
    assert feat["source_slot"] == "D405_head_rgb" and feat["frame_axes"] == {"+X": "right", "+Y": "down",
                                                                              "+Z": "forward"}


# -- column names cannot change across episodes of a task (§2.4) -------------------------------------
def _info_of(rig):
    feats = {c.name: dict(c.feature) for c in rig.columns() if c.feature}
    return {"features": feats, "devices": rig.declarations()["devices"]}


def test_same_order_next_episode_is_accepted():
    a = Rig()
    a.add(G1)
    a.add(G2)
    b = Rig()
    b.add(G1)
    b.add(G2)
    b.check_task(_info_of(a))


def test_gripper_order_swapped_would_rename_columns_refused():
    a = Rig()
    a.add(G1)
    a.add(G2)
    b = Rig()
    b.add(G2)
    b.add(G1)
    with pytest.raises(SchemaError, match="cannot change"):
        b.check_task(_info_of(a))


def test_single_gripper_reopened_as_rig2_refused_by_slots():
    a = Rig()
    a.add(G2)
    info = {"features": {}, "devices": _info_of(a)["devices"]}  # no trajectory yet, slots still bind
    b = Rig()
    b.add(G1)
    b.add(G2)
    with pytest.raises(SchemaError, match="slots"):
        b.check_task(info)


def test_lite_glove_side_swapped_refused():
    a = Rig("lite")
    a.add(Device("usb_glove", "usbglove:1", side="left"))
    b = Rig("lite")
    b.add(Device("usb_glove", "usbglove:1", side="right"))
    with pytest.raises(SchemaError, match="slots"):
        b.check_task(_info_of(a))


def test_shape_change_of_a_task_column_refused():
    rig = Rig()
    rig.add(Device("usb_glove", "usbglove:1", side="left"))
    info = {"features": {"observation.left_glove": {"dtype": "float32", "shape": [256]}}, "devices": []}
    with pytest.raises(SchemaError, match="shape"):
        rig.check_task(info)


def test_device_that_stops_writing_its_trajectory_is_not_a_rename():
    # §6.7: "某段 ego SLAM 失败 → 该段没有轨迹列，features 仍有" — a D435 that was the ego camera
    # and is now opened without the ego role writes no trajectory at all, under no other name.
    a = Rig()
    a.add(Device("d435", "d435:1"), role="ego")
    a.add(G1)
    b = Rig()
    b.add(Device("d435", "d435:1"))
    b.add(G1)
    b.check_task(_info_of(a))
    assert "observation.ego_slam_trajectory" not in _names(b)


def test_ego_camera_moving_to_another_ego_prefix_is_still_refused():
    a = Rig()
    a.add(Device("d435", "d435:1"), role="ego")
    a.add(Device("d435", "d435:2"), role="ego")  # ego_2_
    b = Rig()
    b.add(Device("d435", "d435:2"), role="ego")  # would now write ego_slam_trajectory
    with pytest.raises(SchemaError, match="cannot change"):
        b.check_task(_info_of(a))
