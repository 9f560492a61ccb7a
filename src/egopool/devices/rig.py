"""A recording rig: devices registered in opening order, their slots, columns and declarations.

Implements multi_device_storage.md §2.3 (numbering), §3 (status columns), §4
(device kind -> data), §5.1 (conflicts, via :mod:`.conflicts`), §5.2 (unique slots and
column prefixes) and §6 (``devices``, ``device_names``, ``sensors``, ``calibration``,
per-column SLAM declarations)::

    rig = Rig(program="main")
    rig.add(Device("s80c", "s80m:000000000001@1-3.4.1", name="S80C_head", width=1280, height=800,
                   calibration=cal), role="ego")
    rig.add(Device("gripper", "gripper:CC:BA:97:25:B4:44", name="UMI 夹爪001"))
    ep = task_writer.begin_episode(**rig.episode_kwargs(fps=30.0))

Column names are checked (§2.4) when a device registers, before anything is
allocated, so a refused device leaves the rig unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..codecs.depth import DEPTH_CODECS
from ..errors import CodecError, ConflictError, SchemaError
from ..schema import (ColumnSpec, check_column_name, force_matrix_column, hand_pose_column, imu_columns, key_column,
                      scalar_ns_column, slam_trajectory_columns, status_column, vector_column)
from ..write.task_writer import StreamSpec
from . import slots as _slots
from .conflicts import Opened, check_can_open
from .kinds import GLOVE_KINDS, PROGRAMS, VIDEO_KINDS, Device, glove_entry_kind, slot_base

__all__ = ["D435_FORENSIC_COLUMNS", "EGO_TIME", "GRIPPER_TIME", "SENSOR_DIM", "RegisteredDevice", "Rig",
           "check_depth_choice"]

SENSOR_DIM = 256
#: §4.3: the D435 chain's forensic key columns (written only when the chain filled them).
D435_FORENSIC_COLUMNS = ("depth_ns", "rgb_dup", "rgb_gap", "depth_dup", "depth_gap", "ts_src", "host_ns")
#: §6.6 ``time`` of a gripper trajectory (t = camera sensor s, origin at the ENTER press).
GRIPPER_TIME = {"t": "sensor_s", "clock": "camera_sensor", "epoch": "enter_press"}
#: §6.6 ``time`` of an ego trajectory (origin at the first frame).
EGO_TIME = {"t": "sensor_s", "clock": "camera_sensor", "epoch": "first_frame"}
GRIPPER_FRAME = "down_left_forward"
EGO_FRAME = "ego_cam_optical"


@dataclass
class RegisteredDevice:
    """One device as the rig registered it.

    Attributes
    ----------
    device:
        The device.
    order:
        Opening order, 0-based.
    role:
        ``"ego"`` or None.
    slots:
        ``devices[].slots``: every slot the device registered, recorded or not (§6.4).
    rgb_slots:
        Recorded RGB streams (``cameras`` entries).
    depth_slots:
        Recorded depth stream -> its master RGB slot (§4.8).
    columns:
        Data-parquet columns the device writes (observation, status and key columns).
    signals:
        Logical signal -> column name, for sources: ``state``, ``left_force``,
        ``left_force_ns``, ``left_force_matrix``, ``left_force_matrix_ns``, ``trajectory``,
        ``pressure``, ``imu_quat``, ``imu_valid``, ``hand_pose``, ``imu``, ``ego_trajectory``...
    status_ids:
        ``status.<id>`` ids (UVC slots, glove sensors, gripper non-video slots, §3).
    sensor:
        Glove sensor column name (``left_glove``), else None.
    rig_number:
        Gripper rig (1-based), else None.
    entry:
        The compact ``devices[]`` entry ``{key, kind, name, slots}``, or None (main-program
        ``ble`` placeholder).
    calibration:
        The device's calibration, or None; its key is assigned by :meth:`Rig.calibration`.
    """

    device: Device
    order: int
    role: str | None
    slots: tuple[str, ...]
    rgb_slots: tuple[str, ...] = ()
    depth_slots: dict[str, str] = field(default_factory=dict)
    columns: tuple[ColumnSpec, ...] = ()
    signals: dict[str, str] = field(default_factory=dict)
    status_ids: tuple[str, ...] = ()
    sensor: str | None = None
    rig_number: int | None = None
    entry: dict[str, Any] | None = None
    calibration: Mapping[str, Any] | None = None

    @property
    def key(self) -> str:
        """The device key."""
        return self.device.key

    @property
    def kind(self) -> str:
        """The recorded kind (``d435``, ``s80m``, ``gripper``, ``data_ble``...)."""
        return self.device.recorded_kind


class Rig:
    """Devices of one recording session, registered in opening order (§2.3 "编号 = 打开顺序").

    Parameters
    ----------
    program:
        ``"main"`` or ``"lite"``: decides the glove ``devices[]`` style and whether a plain
        ``ble`` device is recorded (§4.5, §6.4).
    force_matrix_encoding, force_matrix_scale:
        Force-matrix storage of every gripper (file_format.md §7.2.1).
    depth_codec:
        Depth streams: ``"hevc12"`` (12-bit log code, lossy, clips to 100..20000 mm; the
        default), ``"ffv1"`` (lossless uint16 mm MKV), file_format.md §8, or ``"auto"``: the
        recorder decides by measurement for the whole task (:mod:`egopool.capacity`, docs/decisions.md
        R24); such streams carry ``codec=None`` until then. A device's own ``depth=`` wins.

    Raises
    ------
    SchemaError
        Unknown program.
    """

    def __init__(self, program: str = "main", *, force_matrix_encoding: str = "row_diff_quantized",
                 force_matrix_scale: float = 10, depth_codec: str = "hevc12") -> None:
        if program not in PROGRAMS:
            raise SchemaError(f"unknown program {program!r}", hint=f"use one of {PROGRAMS}")
        self.program = program
        self.depth_codec = check_depth_choice(depth_codec)
        self.fm_encoding, self.fm_scale = force_matrix_encoding, force_matrix_scale
        self._devices: list[RegisteredDevice] = []

    # -- registration ------------------------------------------------------------------------------
    @property
    def devices(self) -> list[RegisteredDevice]:
        """Registered devices in opening order."""
        return list(self._devices)

    def device(self, key: str) -> RegisteredDevice:
        """The registered device with ``key``. Raises KeyError."""
        for d in self._devices:
            if d.key == key:
                return d
        raise KeyError(key)

    def _taken_slots(self) -> set[str]:
        return {s for d in self._devices for s in d.slots} | {s for d in self._devices for s in d.rgb_slots}

    def _records_glove(self, dev: Device) -> bool:
        return dev.kind in GLOVE_KINDS and not (dev.kind == "ble" and self.program == "main")

    def add(self, device: Device, *, role: str | None = None) -> RegisteredDevice:
        """Open ``device`` (optionally as the ``"ego"`` camera) and allocate its slots and columns.

        Returns
        -------
        RegisteredDevice
            Slots, columns, signals and ``devices[]`` entry of the device.

        Raises
        ------
        ConflictError
            §5.1 refuses the combination, the device is already open, a third glove, a
            9th UVC camera, or a column another device already writes (§5.2 rule 2).
        SchemaError
            A column name breaks §2.4 (e.g. a glove sensor named with capitals or a
            reserved suffix), or ``role="ego"`` on a device that has no camera.
        """
        if role not in (None, "ego"):
            raise SchemaError(f"unknown role {role!r}", hint="the only role is 'ego' (§4.7)")
        if role == "ego" and device.recorded_kind not in VIDEO_KINDS:
            raise SchemaError(f"{device.kind} {device.key} cannot be the ego camera",
                              hint="the ego role binds to a d435/s80m/uvc device (§4.1)")
        records_glove = self._records_glove(device)
        check_can_open([Opened(d.device, d.role, self._records_glove(d.device)) for d in self._devices],
                       device, role, records_glove=records_glove)
        reg = self._plan(device, role, records_glove)
        mine = [c.name for c in reg.columns]
        for name in mine:
            check_column_name(name)
        taken_cols = {c.name: d for d in self._devices for c in d.columns if not _shared_key_column(c.name)}
        for name in mine:
            if name in taken_cols and not _shared_key_column(name):
                raise ConflictError(f"{device.kind} {device.key} would write {name!r}, which "
                                    f"{taken_cols[name].key} already writes (§5.2 rule 2)")
        clash = (set(reg.slots) | set(reg.rgb_slots)) & self._taken_slots()
        if clash:
            raise ConflictError(f"{device.kind} {device.key}: slot(s) {sorted(clash)} are already taken (§5.2 rule 1)")
        self._devices.append(reg)
        return reg

    def _plan(self, dev: Device, role: str | None, records_glove: bool) -> RegisteredDevice:
        kind = dev.recorded_kind
        order = len(self._devices)
        name = dev.display_name
        same = [d for d in self._devices if d.kind == kind]
        if kind == "uvc":
            slot = _slots.uvc_slot(len(same))
            reg = RegisteredDevice(dev, order, role, (slot,), rgb_slots=(slot,), status_ids=(slot,),
                                   columns=(status_column(slot), key_column("raw_hw_ns")))
        elif kind == "d435":
            base = slot_base(dev.name) if dev.name else ""
            rgb, depth = _slots.d435_slots(base or "d435", self._taken_slots())
            cols = [key_column("raw_hw_ns"), *(key_column(c) for c in D435_FORENSIC_COLUMNS)]
            reg = RegisteredDevice(dev, order, role, (rgb, depth), rgb_slots=(rgb,), depth_slots={depth: rgb},
                                   columns=tuple(cols), calibration=dev.calibration)
        elif kind == "s80m":
            left, right, depth = _slots.S80M_SLOTS
            imu, imu_ts = imu_columns()
            reg = RegisteredDevice(dev, order, role, _slots.S80M_SLOTS, rgb_slots=(left, right),
                                   depth_slots={depth: left} if dev.has_depth else {},
                                   columns=(key_column("raw_hw_ns"), imu, imu_ts),
                                   signals={"imu": imu.name, "imu_ts": imu_ts.name}, calibration=dev.calibration)
        elif kind == "gripper":
            reg = self._plan_gripper(dev, order, len(same) + 1)
        elif records_glove:
            reg = self._plan_glove(dev, order)
        else:  # main-program ``ble`` placeholder: no data, not in devices (§4.5)
            return RegisteredDevice(dev, order, role, ())
        if role == "ego":
            n_ego = sum(1 for d in self._devices if d.role == "ego") + 1
            prefix = _slots.ego_prefix(n_ego)
            traj, ns = slam_trajectory_columns(prefix, frame=EGO_FRAME, time=EGO_TIME,
                                               owner={"role": "ego", "device_key": dev.key},
                                               source_slot=reg.rgb_slots[0])
            reg.columns = (*reg.columns, traj, ns)
            reg.signals.update({"ego_trajectory": traj.name, "ego_trajectory_ns": ns.name})
        if reg.entry is None and kind not in GLOVE_KINDS:
            reg.entry = {"key": dev.key, "kind": kind, "name": name, "slots": list(reg.slots)}
        return reg

    def _plan_gripper(self, dev: Device, order: int, rig: int) -> RegisteredDevice:
        p = _slots.gripper_prefix(rig)
        stereo, rgb, pose, force_l, force_r = _slots.gripper_slots(rig)
        cols: list[ColumnSpec] = [key_column("raw_hw_ns")]
        signals: dict[str, str] = {}
        state = vector_column(f"observation.{p}gripper_state", [3], kind="state")
        cols.append(state)
        signals["state"] = state.name
        for side in ("left", "right"):
            force = vector_column(f"observation.{p}gripper_{side}_force", [3], kind="force")
            force_ns = scalar_ns_column(force.name + "_ns")
            fm = force_matrix_column(f"observation.{p}gripper_{side}_force_matrix", self.fm_encoding, self.fm_scale)
            fm_ns = scalar_ns_column(fm.name + "_ns")
            cols += [force, force_ns, fm, fm_ns]
            signals.update({f"{side}_force": force.name, f"{side}_force_ns": force_ns.name,
                            f"{side}_force_matrix": fm.name, f"{side}_force_matrix_ns": fm_ns.name})
        traj, ns = slam_trajectory_columns(p, frame=GRIPPER_FRAME, time=GRIPPER_TIME,
                                           owner={"role": "gripper", "rig": rig, "device_key": dev.key},
                                           source_slot=stereo)
        cols += [traj, ns]
        signals.update({"trajectory": traj.name, "trajectory_ns": ns.name})
        status = (pose, force_l, force_r)
        cols += [status_column(s) for s in status]
        return RegisteredDevice(dev, order, None, (stereo, rgb, pose, force_l, force_r), rgb_slots=(rgb,),
                                columns=tuple(cols), signals=signals, status_ids=status, rig_number=rig)

    def _plan_glove(self, dev: Device, order: int) -> RegisteredDevice:
        taken = {d.sensor for d in self._devices if d.sensor}
        if dev.sensor is not None:
            if dev.sensor in taken:
                raise ConflictError(f"glove {dev.key} wants observation.{dev.sensor}, which another glove already "
                                    "writes (§5.2 rule 2)")
            sensor = dev.sensor
        else:
            sensor = _slots.glove_sensor(dev.side, taken, dev.key)
        if "." in sensor:
            raise SchemaError("a sensor column is one name segment (§2.2 observation.<sensor>)",
                              column=f"observation.{sensor}")
        check_column_name(f"observation.{sensor}", "pressure")
        pressure = vector_column(f"observation.{sensor}", [16, 16], kind="pressure")
        cols: list[ColumnSpec] = [pressure, status_column(sensor)]
        signals = {"pressure": pressure.name}
        if dev.kind == "usb_glove":
            quat = vector_column(f"observation.{sensor}_imu_quat", [16, 4], kind="imu_quat")
            valid = vector_column(f"observation.{sensor}_imu_valid", [16], kind="imu_valid")
            cols += [quat, valid]
            signals.update({"imu_quat": quat.name, "imu_valid": valid.name})
            side = dev.side or sensor.split("_", 1)[0]
            if side in ("left", "right"):
                signals["hand_pose"] = f"observation.{side}_hand_pose"
            hand = signals.get("hand_pose")
            other = next((d for d in self._devices if hand is not None and d.signals.get("hand_pose") == hand), None)
            if other is not None:
                raise ConflictError(f"glove {dev.key} would write {hand!r}, which glove {other.key} already writes "
                                    "(§5.2 rule 2: one writer per column)",
                                    hint="give each glove its own side (left / right)")
        entry_kind = glove_entry_kind(dev.kind, self.program)
        slots = (sensor,) if self.program == "lite" else ()
        entry = {"key": dev.key, "kind": entry_kind, "name": dev.display_name, "slots": list(slots)}
        return RegisteredDevice(dev, order, None, slots, columns=tuple(cols), signals=signals,
                                status_ids=(sensor,), sensor=sensor, entry=entry)

    # -- what the writer needs ---------------------------------------------------------------------
    @property
    def sensors(self) -> list[str]:
        """Glove sensor columns in opening order (``info.sensors``, §6.4)."""
        return [d.sensor for d in self._devices if d.sensor]

    @property
    def primary_slot(self) -> str | None:
        """The RGB slot whose frame stamps each row's ``hardware_ns``: the first recorded RGB slot
        in opening order (the ego camera's when it is opened first, §5.6)."""
        for d in self._devices:
            if d.rgb_slots:
                return d.rgb_slots[0]
        return None

    @property
    def forensic_slots(self) -> tuple[str, str] | None:
        """``(rgb, depth)`` slots of the first D435/D405, whose chain fills the §4.3 forensic columns."""
        for d in self._devices:
            if d.kind == "d435":
                depth = next(iter(d.depth_slots))
                return d.rgb_slots[0], depth
        return None

    def columns(self) -> list[ColumnSpec]:
        """Every data column of the rig (key columns and ``action`` are added by the writer).

        Both hand-pose columns are always written (§4.5 "恒写列", Appendix C "恒有"); shared
        key columns (``raw_hw_ns``) appear once.
        """
        out: dict[str, ColumnSpec] = {}
        for d in self._devices:
            for c in d.columns:
                out.setdefault(c.name, c)
        for side in ("left", "right"):
            c = hand_pose_column(side)
            out.setdefault(c.name, c)
        return list(out.values())

    def streams(self, fps: float) -> list[StreamSpec]:
        """Recorded video streams (RGB, then each depth slot with its master, §4.8) in opening order."""
        out: list[StreamSpec] = []
        for d in self._devices:
            dev = d.device
            sfps = dev.fps if dev.fps and dev.fps != fps else None
            for s in d.rgb_slots:
                out.append(StreamSpec(s, "rgb", dev.width, dev.height, sfps))
            for s, master in d.depth_slots.items():
                w, h = dev.depth_size or (dev.width, dev.height)
                codec = dev.depth_codec or (None if self.depth_codec == "auto" else self.depth_codec)
                out.append(StreamSpec(s, "depth", w, h, sfps, codec=codec, master_slot=master))
        return out

    def calibration(self) -> dict[str, Any]:
        """``calibration`` dict (§6.5): the first device with a calibration gets ``head_stereo``,
        the others ``<first slot without _N>_calibration``.

        When two later devices would share a key (three unnamed D435s), the later one keeps its
        instance number (``d435_rgb_3_calibration``) instead of overwriting the earlier one.
        """
        out: dict[str, Any] = {}
        for d in self._devices:
            if not d.calibration:
                continue
            if not out:
                key = "head_stereo"
            else:
                key = f"{_slots.strip_instance(d.slots[0])}_calibration"
                if key in out:
                    key = f"{d.slots[0]}_calibration"
            cal = copy.deepcopy(dict(d.calibration))
            cal["name"] = key
            out[key] = cal
        return out

    def declarations(self) -> dict[str, Any]:
        """``devices``, ``device_names``, ``calibration``, ``sensors``, ``sensor_dim`` (§6.4, §6.5)."""
        devices = [dict(d.entry, slots=list(d.entry["slots"])) for d in self._devices if d.entry is not None]
        names = {s: d.device.display_name for d in self._devices if d.entry is not None for s in d.slots}
        return {"devices": devices, "device_names": names, "calibration": self.calibration(),
                "sensors": self.sensors, "sensor_dim": SENSOR_DIM}

    def slam_frames(self) -> dict[str, str]:
        """Trajectory column -> frame id, from the same specs that declare ``features[...].frame`` (§6.6)."""
        return {c.name: c.feature["frame"] for c in self.columns()
                if c.kind == "slam_trajectory" and c.feature and "frame" in c.feature}

    def episode_kwargs(self, fps: float) -> dict[str, Any]:
        """Keyword arguments for :meth:`TaskWriter.begin_episode` (columns, streams, declarations)."""
        return {"columns": self.columns(), "streams": self.streams(fps), **self.declarations()}

    def check_task(self, info: Mapping[str, Any]) -> None:
        """Refuse to record into a task whose earlier episodes named this rig's columns differently (§2.4).

        ``features`` is a task-level union: a device whose columns change name between
        episodes leaves two keys behind forever. Checked: a trajectory column owned by a
        device key (``owner.device_key``) that this rig would write under another name; a
        gripper or lite glove whose slots (which carry its column prefix or sensor) changed;
        a column whose element ``shape`` differs from the task's declaration.

        Raises
        ------
        SchemaError
            Naming the column or device and how it was named before.
        """
        features = info.get("features") or {}
        old_devices = {d.get("key"): d for d in info.get("devices") or [] if isinstance(d, Mapping)}
        for d in self._devices:
            mine = {c.name for c in d.columns}
            # A rename = the device now writes a trajectory of the same role under another name;
            # a device that writes none this time (ego role off, SLAM off) renames nothing (§6.7).
            my_roles = {(c.feature.get("owner") or {}).get("role") for c in d.columns
                        if c.kind == "slam_trajectory" and c.feature}
            for col, feat in features.items():
                owner = feat.get("owner") if isinstance(feat, Mapping) else None
                if isinstance(owner, Mapping) and owner.get("device_key") == d.key and col not in mine \
                        and owner.get("role") in my_roles:
                    raise SchemaError(f"device {d.key} wrote {col!r} in earlier episodes of this task and would now "
                                      "write it under another name; column names cannot change within a task (§2.4)",
                                      column=col, hint="open the devices in the same order as before, or record "
                                      "into a new task")
            old = old_devices.get(d.key)
            binds = d.kind == "gripper" or (d.sensor is not None and self.program == "lite")
            if old is not None and binds and old.get("slots") and list(old["slots"]) != list(d.slots):
                raise SchemaError(f"device {d.key} had slots {old['slots']} in earlier episodes and would now get "
                                  f"{list(d.slots)}; its column names would change (§2.4)",
                                  hint="open the devices in the same order as before, or record into a new task")
        for c in self.columns():
            old_feat = features.get(c.name)
            if c.feature and isinstance(old_feat, Mapping) and "shape" in old_feat and \
                    list(old_feat["shape"]) != list(c.feature["shape"]):
                raise SchemaError(f"declared with shape {old_feat['shape']} in this task, now {c.feature['shape']}",
                                  column=c.name, hint="a column keeps its meaning within a task; use a new name")


def check_depth_choice(codec: str) -> str:
    """``codec`` when it is ``"auto"`` or one of :data:`~egopool.codecs.depth.DEPTH_CODECS`.

    Raises
    ------
    CodecError
        Naming the codec and the choices.
    """
    if codec == "auto" or codec in DEPTH_CODECS:
        return codec
    raise CodecError(f"unknown depth codec {codec!r}", hint="use auto (12-bit log HEVC when this machine holds it in "
                     "real time, else FFV1 for the task), hevc12 (lossy, 100..20000 mm) or ffv1 (lossless uint16 mm)")


def _shared_key_column(name: str) -> bool:
    # raw_hw_ns is one per row for every RGB device (§3); the D435 forensic columns belong to
    # the first D435's chain. Neither is a per-device signal.
    return "." not in name
