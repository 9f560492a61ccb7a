"""Slot names, prefixes and numbering (multi_device_storage.md §2.3, §4.2–§4.7, Appendix A)."""

import pytest

from egopool import ConflictError
from egopool.devices import Device, Rig, slot_base
from egopool.devices.slots import (d435_slots, ego_prefix, glove_sensor, gripper_prefix, gripper_slots,
                                   strip_instance, uvc_slot)


@pytest.mark.parametrize("index,slot", [(0, "head_left_rgb"), (1, "head_right_rgb"), (2, "head_right_rgb_2"),
                                        (5, "head_right_rgb_5"), (7, "head_right_rgb_7")])
def test_uvc_slot_by_index(index, slot):
    assert uvc_slot(index) == slot


def test_ninth_uvc_camera_is_refused():
    with pytest.raises(ConflictError, match="design limit is 8"):
        uvc_slot(8)
    rig = Rig()
    for i in range(8):
        rig.add(Device("uvc", f"uvc:cam{i}"))
    assert [d.slots[0] for d in rig.devices][-3:] == ["head_right_rgb_5", "head_right_rgb_6", "head_right_rgb_7"]
    with pytest.raises(ConflictError):
        rig.add(Device("uvc", "uvc:cam8"))
    assert len(rig.devices) == 8


def test_d435_unnamed_then_second_of_prefix_gets_2():
    rig = Rig()
    a = rig.add(Device("d435", "d435:1"))
    b = rig.add(Device("d435", "d435:2"))
    c = rig.add(Device("d405", "d435:3"))
    assert a.slots == ("d435_rgb", "d435_depth")
    assert b.slots == ("d435_rgb_2", "d435_depth_2")
    assert c.slots == ("d435_rgb_3", "d435_depth_3")
    assert a.depth_slots == {"d435_depth": "d435_rgb"} and b.depth_slots == {"d435_depth_2": "d435_rgb_2"}


def test_d435_user_named_uses_name_as_base():
    rig = Rig()
    a = rig.add(Device("d405", "d435:1", name="D405_head"))
    b = rig.add(Device("d435", "d435:2", name="D405_head"))
    c = rig.add(Device("d435", "d435:3"))
    assert a.slots == ("D405_head_rgb", "D405_head_depth")
    assert b.slots == ("D405_head_rgb_2", "D405_head_depth_2")
    assert c.slots == ("d435_rgb", "d435_depth")  # another prefix: not numbered


def test_slot_base_cleans_but_keeps_chinese():
    assert slot_base("D405 head") == "D405_head"
    assert slot_base("头部/相机#1") == "头部_相机_1"
    assert slot_base("  --  ") == ""
    rig = Rig()
    assert rig.add(Device("d435", "d435:9", name="头部 相机")).slots == ("头部_相机_rgb", "头部_相机_depth")
    assert rig.add(Device("d435", "d435:8", name="!!")).slots == ("d435_rgb", "d435_depth")


def test_d435_numbering_skips_slots_taken_by_other_devices():
    assert d435_slots("d435", {"d435_rgb"}) == ("d435_rgb_2", "d435_depth_2")
    assert d435_slots("head_left", {"head_left_rgb"}) == ("head_left_rgb_2", "head_left_depth_2")


def test_gripper_rig1_has_empty_prefix_rig2_gripper_2():
    assert gripper_prefix(1) == "" and gripper_prefix(2) == "gripper_2_"
    assert gripper_slots(1) == ("gripper_stereo_left", "gripper_rgb", "gripper_pose", "gripper_force_left",
                                "gripper_force_right")
    assert gripper_slots(2) == ("gripper_2_stereo_left", "gripper_2_rgb", "gripper_2_pose", "gripper_2_force_left",
                                "gripper_2_force_right")


def test_gripper_rig_is_opening_order_and_never_gripper_1():
    rig = Rig()
    first = rig.add(Device("gripper", "gripper:68:EE:8F:C6:0D:BC"))
    second = rig.add(Device("gripper", "gripper:CC:BA:97:25:B4:44"))
    assert (first.rig_number, second.rig_number) == (1, 2)
    assert first.rgb_slots == ("gripper_rgb",) and second.rgb_slots == ("gripper_2_rgb",)
    names = [c.name for c in rig.columns()]
    assert not any("gripper_1_" in n for n in names)
    assert "observation.slam_trajectory" in names and "observation.gripper_2_slam_trajectory" in names


def test_only_gripper_rgb_is_recorded_stereo_is_display_only():
    rig = Rig()
    g = rig.add(Device("gripper", "gripper:CC:BA:97:25:B4:44", width=64, height=48))
    assert [s.image_key for s in rig.streams(30.0)] == ["gripper_rgb"]
    assert "gripper_stereo_left" in g.slots and "gripper_stereo_left" not in g.rgb_slots


def test_ego_prefix_role_name_then_numbered():
    assert ego_prefix(1) == "ego_" and ego_prefix(2) == "ego_2_"
    rig = Rig()
    rig.add(Device("s80c", "s80m:1@1-1"), role="ego")
    rig.add(Device("uvc", "uvc:a"), role="ego")
    names = [c.name for c in rig.columns()]
    assert "observation.ego_slam_trajectory" in names and "observation.ego_2_slam_trajectory_ns" in names


def test_s80m_global_slots():
    rig = Rig()
    s = rig.add(Device("s80c", "s80m:000000000001@1-3.4.1"))
    assert s.slots == ("stereo_left", "stereo_right", "stereo_depth")
    assert s.rgb_slots == ("stereo_left", "stereo_right") and s.depth_slots == {"stereo_depth": "stereo_left"}
    rig2 = Rig()
    m = rig2.add(Device("s80m", "s80m:ftdi"))  # S80M without depth engine: depth slot registered, not recorded
    assert m.slots == ("stereo_left", "stereo_right", "stereo_depth") and m.depth_slots == {}


def test_strip_instance():
    assert strip_instance("d435_rgb_2") == "d435_rgb"
    assert strip_instance("head_right_rgb_12") == "head_right_rgb"
    assert strip_instance("stereo_left") == "stereo_left"


def test_glove_sensor_by_side_or_first_free():
    assert glove_sensor("right", set(), "k") == "right_glove"
    assert glove_sensor(None, set(), "k") == "left_glove"
    assert glove_sensor(None, {"left_glove"}, "k") == "right_glove"
    with pytest.raises(ConflictError, match="already writes"):
        glove_sensor("left", {"left_glove"}, "k")
    with pytest.raises(ConflictError, match="third glove"):
        glove_sensor(None, {"left_glove", "right_glove"}, "k")
