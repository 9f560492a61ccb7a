"""The conflict matrix, one test per row (multi_device_storage.md §5.1, §5.2)."""

import pytest

from egopool import ConflictError, SchemaError
from egopool.devices import Device, Rig

S80C = Device("s80c", "s80m:000000000001@1-3.4.1", "S80C_head")
S80M = Device("s80m", "s80m:ftdi")
D435 = Device("d435", "d435:213622075531")
D405 = Device("d405", "d435:130322270123", "D405_head")
G1 = Device("gripper", "gripper:CC:BA:97:25:B4:44")
G2 = Device("gripper", "gripper:68:EE:8F:C6:0D:BC")


def _keys(rig):
    return [d.key for d in rig.devices]


def test_uvc_times_n_allowed():
    rig = Rig()
    for i in range(4):
        rig.add(Device("uvc", f"uvc:usb-cam{i}"))
    assert [d.slots for d in rig.devices] == [("head_left_rgb",), ("head_right_rgb",), ("head_right_rgb_2",),
                                              ("head_right_rgb_3",)]


def test_d435_times_n_allowed():
    rig = Rig()
    rig.add(D435)
    rig.add(D405)
    rig.add(Device("d435", "d435:3"))
    assert [d.rgb_slots[0] for d in rig.devices] == ["d435_rgb", "D405_head_rgb", "d435_rgb_2"]


@pytest.mark.parametrize("first,second", [(D435, S80C), (S80M, D405)], ids=["d435-then-s80c", "s80m-then-d405"])
def test_d435_with_s80m_refused_later_device(first, second):
    rig = Rig()
    rig.add(first)
    with pytest.raises(ConflictError, match="video0/video2") as exc:
        rig.add(second, role="ego")
    assert first.key in str(exc.value) and second.key in str(exc.value)
    assert _keys(rig) == [first.key]  # the rig is unchanged


def test_two_s80m_refused():
    rig = Rig()
    rig.add(S80C)
    with pytest.raises(ConflictError, match="only one S80M"):
        rig.add(S80M)
    assert _keys(rig) == [S80C.key]


@pytest.mark.parametrize("order", ["gripper-first", "s80m-first"])
def test_gripper_with_standalone_s80m_refused(order):
    rig = Rig()
    first, second = (G1, S80M) if order == "gripper-first" else (S80M, G1)
    rig.add(first)
    with pytest.raises(ConflictError, match="ORB bridge"):
        rig.add(second)
    assert _keys(rig) == [first.key]


def test_gripper_with_ego_s80c_allowed_appendix_b():
    rig = Rig()
    rig.add(S80C, role="ego")
    rig.add(G1)
    rig.add(G2)
    assert _keys(rig) == [S80C.key, G1.key, G2.key]


def test_gripper_with_d435_allowed():
    rig = Rig()
    rig.add(G1)
    rig.add(D435)
    assert [s.image_key for s in rig.streams(30.0)] == ["gripper_rgb", "d435_rgb", "d435_depth"]


def test_two_grippers_allowed_rig_by_opening_order():
    rig = Rig()
    a, b = rig.add(G2), rig.add(G1)
    assert (a.key, a.rig_number, b.key, b.rig_number) == (G2.key, 1, G1.key, 2)


def test_two_gloves_allowed_third_refused():
    rig = Rig()
    left = rig.add(Device("data_ble", "ble:E4:5F:01:AA:10:22", side="left"))
    right = rig.add(Device("usb_glove", "usbglove:364133593535"))
    assert (left.sensor, right.sensor) == ("left_glove", "right_glove")
    with pytest.raises(ConflictError, match="third glove"):
        rig.add(Device("usb_glove", "usbglove:364933593535"))
    with pytest.raises(ConflictError, match="third glove"):
        rig.add(Device("data_ble", "ble:E4:5F:01:AA:10:99", side="left"))
    assert rig.sensors == ["left_glove", "right_glove"]
    names = [c.name for c in rig.columns()]
    assert names.count("observation.left_glove") == 1 and names.count("observation.right_glove") == 1


def test_third_glove_refused_in_lite_including_plain_ble():
    rig = Rig("lite")
    rig.add(Device("ble", "ble:AA:00:00:00:00:01"))
    rig.add(Device("usb_glove", "usbglove:1"))
    with pytest.raises(ConflictError, match="third glove"):
        rig.add(Device("ble", "ble:AA:00:00:00:00:02"))


def test_other_ble_device_is_placeholder_in_main_program():
    rig = Rig("main")
    rig.add(Device("usb_glove", "usbglove:1"))
    rig.add(Device("usb_glove", "usbglove:2"))
    placeholder = rig.add(Device("ble", "ble:AA:00:00:00:00:01", "Mi Band"))  # not a glove: no data
    assert placeholder.columns == () and placeholder.entry is None and placeholder.sensor is None
    assert [d["key"] for d in rig.declarations()["devices"]] == ["usbglove:1", "usbglove:2"]


def test_same_device_twice_refused():
    rig = Rig()
    rig.add(G1)
    with pytest.raises(ConflictError, match="already open"):
        rig.add(G1)


def test_glove_column_written_once_even_with_explicit_sensor():
    rig = Rig()
    rig.add(Device("usb_glove", "usbglove:1", sensor="left_glove"))
    with pytest.raises(ConflictError, match="already"):
        rig.add(Device("data_ble", "ble:AA:00:00:00:00:01", sensor="left_glove"))


def test_ego_role_needs_a_camera():
    rig = Rig()
    with pytest.raises(SchemaError, match="ego"):
        rig.add(G1, role="ego")
    with pytest.raises(SchemaError, match="role"):
        rig.add(D435, role="head")
    assert rig.devices == []


def test_two_gloves_cannot_share_a_hand_pose_column():
    # §5.2 rule 2: one writer per observation column; the hand pose follows the glove's side
    rig = Rig()
    rig.add(Device("usb_glove", "usbglove:1", side="left", sensor="glove_a"))
    with pytest.raises(ConflictError, match="observation.left_hand_pose"):
        rig.add(Device("usb_glove", "usbglove:2", side="left", sensor="glove_b"))
    rig = Rig()
    rig.add(Device("usb_glove", "usbglove:1", side="right", sensor="left_glove"))
    with pytest.raises(ConflictError, match="observation.right_hand_pose"):
        rig.add(Device("usb_glove", "usbglove:2", side="right"))
    assert [d.key for d in rig.devices] == ["usbglove:1"]  # the refused glove left the rig unchanged
