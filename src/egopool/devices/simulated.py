"""Simulated sources for every device kind, and the preset rigs of ``egopool simulate``.

Each source produces plausible signals at its own rate and clock and pushes them into
a :class:`~egopool.recorder.Recorder` (multi_device_storage.md §4, §5.4):

* UVC / gripper RGB: 30 fps frames stamped with the host clock (``hardware_ns ==
  raw_hw_ns``);
* D435/D405: RGB + depth (uint16 mm) on a device clock with an offset; ``hardware_ns``
  normalised to ``anchor + seq × T``, the raw stamp in ``raw_hw_ns``, frame counters
  for the forensic chain, and an optional dropped frame every ``drop_every`` frames;
* S80M/S80C: stereo pair (+ depth) on the SDK clock, IMU at 400 Hz (gyro rad/s, accel
  m/s², ``imu_ts_ns`` on the same clock);
* gripper: force ``[fx, fy, fz]`` mN at 100 Hz equal to the sums of a moving contact
  patch in its 250×250×3 mN force matrix (30 Hz), state ``[open_pct, gripped, fz_mn]``,
  SLAM points at 30 Hz moving forward in ``down_left_forward`` with t in sensor seconds
  from the ENTER press;
* ego camera: SLAM points at 20 Hz walking forward in ``ego_cam_optical``;
* gloves: 16×16 pressure at 50 Hz; USB gloves add 16 IMU quaternions (XYZW), validity
  and a hand pose (21 joints × xyz, m) replayed from the bundled dex-retargeting
  recording (mirrored for the left hand).

Video sources cost what a camera costs, a hand-over: RGB frames come from a pool of 16
real frames (the bundled hand video) pre-rendered once per size in yuv420p and wrapped without
a copy, depth from 16 pre-rendered frames of the bundled real TUM depth frame (issue 11), so
``egopool simulate --realtime`` measures the recorder, not the simulator.

Everything is deterministic for a given seed; windows are half-open ``(t0, t1]`` in
host-monotonic ns, so the same sample is never emitted twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable
from importlib import resources
from typing import Any, NamedTuple, Protocol

import av
import numpy as np

from .._threads import name_thread
from ..errors import SchemaError
from ..recorder import Frame, RecordedEpisode, Recorder
from ..sample_frames import POOL_FRAMES, depth_pool, force_matrix_pool, video_pool
from ..write.checks import check_episode_seconds
from .kinds import Device, stereo_calibration
from .rig import RegisteredDevice, Rig, check_depth_choice

__all__ = ["RIGS", "CaptureSink", "SimulatedRig", "build_rig"]

_SEC = 1_000_000_000


class CaptureSink(Protocol):
    """What a simulated device pushes its captures into: a :class:`~egopool.recorder.Recorder`, or a
    wrapper of one (``sources/simulated.py`` counts what each device delivers)."""

    def push_frame(self, slot: str, frame: Frame) -> None: ...

    def push_sample(self, column: str, value: Any, ns: int = 0) -> None: ...

    def push_points(self, column: str, points: np.ndarray, ns: np.ndarray | None = None) -> None: ...

    def mark_disconnected(self, sids: Iterable[str], reason: str) -> None: ...


def _sample_times(t0: int, t1: int, epoch: int, rate_hz: float, phase_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices k >= 0 and times ``epoch + phase + k·period`` inside ``(t0, t1]`` (ns)."""
    period = int(round(_SEC / rate_hz))
    base = epoch + phase_ns
    k0 = max(0, (t0 - base) // period + 1)
    k1 = (t1 - base) // period
    if k1 < k0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    k = np.arange(k0, k1 + 1, dtype=np.int64)
    return k, base + k * period


def _quat_axis(axis: int, angle: np.ndarray) -> np.ndarray:
    """Quaternions ``(K, 4)`` xyzw for rotations by ``angle`` (rad) about coordinate axis ``axis``."""
    q = np.zeros((len(angle), 4))
    q[:, axis] = np.sin(angle / 2)
    q[:, 3] = np.cos(angle / 2)
    return q


class _Rgb:
    """A camera's frames at no cost per frame: frame k is pool frame ``(k + offset) % 16`` of
    :func:`~egopool.sample_frames.video_pool`, handed over without a copy (a yuv420p ``av.VideoFrame`` wrapping the
    pre-rendered planes), as a camera source hands over its decoded frames. The recorder's
    figures are then the recorder's own, not the simulator's (issue 11)."""

    def __init__(self, width: int, height: int, seed: int) -> None:
        self.pool = video_pool(width, height)
        self.offset = int(seed) * 5 % POOL_FRAMES
        self.yuv = self.pool[0].ndim == 2

    def frame(self, k: int) -> Any:
        arr = self.pool[(int(k) + self.offset) % POOL_FRAMES]
        return av.VideoFrame.from_numpy_buffer(arr, format="yuv420p") if self.yuv else arr


class _Depth:
    """Depth frames at no cost per frame: frame k is :func:`~egopool.sample_frames.depth_pool` frame ``k % 16`` (no copy)."""

    def __init__(self, width: int, height: int) -> None:
        self.frames = depth_pool(width, height)

    def frame(self, k: int) -> np.ndarray:
        return self.frames[int(k) % len(self.frames)]


class _ForceMatrix:
    """A Gaussian contact patch (mN per taxel) sliding across the 250×250 sensor; 12 frames cycled."""

    def __init__(self, seed: int) -> None:
        frames, sums = force_matrix_pool(seed)
        self.frames, self.sums = list(frames), list(sums)

    def index(self, t_ns: int, epoch: int) -> int:
        return int((t_ns - epoch) // (_SEC // 30)) % len(self.frames)


def _hand_joints() -> np.ndarray:
    ref = resources.files("egopool") / "samples" / "dexretarget_hand_video" / "human_joint_right.npy"
    with resources.as_file(ref) as p:
        joints: np.ndarray = np.load(p).astype(np.float32)
    return joints


class _Stamp(NamedTuple):
    hardware_ns: int
    raw_hw_ns: int
    counter: int | None = None
    ts_src: int = 0
    host_ns: int = 0


class _Source:
    """Base of every simulated source: ``emit`` pushes what was captured in ``(t0, t1]``."""

    def __init__(self, reg: RegisteredDevice, sim: SimulatedRig) -> None:
        self.reg, self.sim = reg, sim
        self.seed = sim.seed * 1000 + reg.order
        self.epoch = 0
        self.fps = reg.device.fps or sim.fps
        self.phase = int((1 + reg.order % 7) * 1_000_000)  # capture phase inside a frame period
        self.rgb = {s: _Rgb(reg.device.width, reg.device.height, self.seed + i) for i, s in enumerate(reg.rgb_slots)}
        w, h = reg.device.depth_size or (reg.device.width, reg.device.height)
        self.depth = {s: _Depth(w, h) for s in reg.depth_slots}
        self.ego_col = reg.signals.get("ego_trajectory")
        self.failed = False  # raised in this episode: fed no more until the next reset

    def reset(self, epoch: int) -> None:
        self.epoch = epoch
        self.failed = False

    def emit(self, t0: int, t1: int, rec: CaptureSink) -> None:
        self.emit_video(t0, t1, rec)
        if self.ego_col:
            self.emit_ego(t0, t1, rec)
        self.emit_signals(t0, t1, rec)

    def stamps(self, k: int, t: int) -> _Stamp:
        """Host-clock chain (UVC, gripper RGB): stamped by the capture thread, raw == hardware."""
        return _Stamp(t, t)

    def emit_video(self, t0: int, t1: int, rec: CaptureSink) -> None:
        if not self.rgb and not self.depth:
            return
        ks, ts = _sample_times(t0, t1, self.epoch, self.fps, self.phase)
        for k, t in zip(ks.tolist(), ts.tolist(), strict=True):
            if self.sim.drop_every and k and k % self.sim.drop_every == 0 and self.reg.kind == "d435":
                continue  # the device dropped this frame: the counter jumps (rgb_gap / depth_gap)
            stamp = self.stamps(k, t)
            for s, pat in self.rgb.items():
                rec.push_frame(s, Frame(pat.frame(k), stamp.hardware_ns, stamp.raw_hw_ns, stamp.counter,
                                        stamp.ts_src, stamp.host_ns))
            for s, dpat in self.depth.items():
                rec.push_frame(s, Frame(dpat.frame(k), stamp.hardware_ns, stamp.raw_hw_ns + 150_000
                                        if stamp.raw_hw_ns else 0, stamp.counter, stamp.ts_src, stamp.host_ns))

    def emit_ego(self, t0: int, t1: int, rec: CaptureSink) -> None:
        _, ts = _sample_times(t0, t1, self.epoch, 20.0, self.phase + 2_000_000)
        if not len(ts) or self.ego_col is None:
            return
        t = (ts - self.epoch) / _SEC
        pts = np.zeros((len(ts), 8))
        pts[:, 0] = t
        pts[:, 1] = 0.05 * np.sin(2 * np.pi * 0.4 * t)           # +X right: sway
        pts[:, 2] = 0.02 * np.sin(2 * np.pi * 1.8 * t)           # +Y down: gait bob
        pts[:, 3] = 0.3 * t                                       # +Z forward: walking
        pts[:, 4:] = _quat_axis(1, 0.1 * np.sin(2 * np.pi * 0.2 * t))  # yaw about +Y (down)
        rec.push_points(self.ego_col, pts, self.sim.host_stamps(ts))

    def emit_signals(self, t0: int, t1: int, rec: CaptureSink) -> None:
        """Non-video signals of the kind (overridden)."""


class _D435(_Source):
    """Device clock with an offset; ``hardware_ns`` = anchor + seq × T (v1.3.11 normalisation)."""

    def stamps(self, k: int, t: int) -> _Stamp:
        dev = t + 1_700_000_000_000 + ((k * 7919) % 400) * 1000  # offset + 0..0.4 ms jitter
        anchor = self.epoch + self.phase + 1_700_000_000_000
        return _Stamp(anchor + k * int(round(_SEC / self.fps)), dev, counter=1000 + k, ts_src=1)


class _S80M(_Source):
    """SDK hardware clock (same source as the IMU) with a fixed offset from the host clock."""

    OFFSET = 5_000_000_000

    def stamps(self, k: int, t: int) -> _Stamp:
        return _Stamp(t + self.OFFSET, t + self.OFFSET)

    def emit_signals(self, t0: int, t1: int, rec: CaptureSink) -> None:
        if "imu" not in self.reg.signals:
            return
        _, ts = _sample_times(t0, t1, self.epoch, 400.0, 250_000)
        if not len(ts):
            return
        t = (ts - self.epoch) / _SEC
        rng = np.random.default_rng(self.seed + int(ts[0] % 100_000))
        gyro = np.stack([0.05 * np.sin(2 * np.pi * 0.5 * t), 0.2 * np.sin(2 * np.pi * 0.2 * t),
                         0.02 * np.cos(2 * np.pi * 0.3 * t)], axis=1)
        acc = np.stack([0.3 * np.sin(2 * np.pi * 1.8 * t), np.full_like(t, -9.81), 0.2 * np.cos(2 * np.pi * 1.8 * t)],
                       axis=1)
        samples = np.concatenate([gyro, acc], axis=1) + rng.normal(0, 0.01, (len(t), 6))
        rec.push_points(self.reg.signals["imu"], samples.astype(np.float32), ts + self.OFFSET)


class _Gripper(_Source):
    def __init__(self, reg: RegisteredDevice, sim: SimulatedRig) -> None:
        super().__init__(reg, sim)
        self.fm = {side: _ForceMatrix(self.seed * 2 + i) for i, side in enumerate(("left", "right"))}

    def emit_signals(self, t0: int, t1: int, rec: CaptureSink) -> None:
        sig = self.reg.signals
        for side, fm in self.fm.items():
            _, ts = _sample_times(t0, t1, self.epoch, 30.0, self.phase + 4_000_000)
            for t in ts.tolist():
                rec.push_sample(sig[f"{side}_force_matrix"], fm.frames[fm.index(t, self.epoch)], t)
            _, ts = _sample_times(t0, t1, self.epoch, 100.0, 1_300_000)
            for t in ts.tolist():
                rec.push_sample(sig[f"{side}_force"], fm.sums[fm.index(t, self.epoch)], t)
        _, ts = _sample_times(t0, t1, self.epoch, 30.0, self.phase)
        for t in ts.tolist():
            s = (t - self.epoch) / _SEC
            open_pct = 50.0 + 50.0 * np.cos(2 * np.pi * 0.25 * s)
            fz = float(self.fm["left"].sums[self.fm["left"].index(t, self.epoch)][2])
            rec.push_sample(sig["state"], np.array([open_pct, float(open_pct < 30.0), fz], np.float32))
        _, ts = _sample_times(t0, t1, self.epoch, 30.0, self.phase + 1_000_000)
        if len(ts):
            t = (ts - self.epoch) / _SEC
            rig = self.reg.rig_number or 1
            pts = np.zeros((len(ts), 8))
            pts[:, 0] = t                                                   # sensor s since ENTER
            pts[:, 1] = 0.03 * np.sin(2 * np.pi * 0.5 * t)                  # +X down
            pts[:, 2] = (0.1 if rig == 1 else -0.1) * np.sin(2 * np.pi * 0.2 * t)  # +Y left
            pts[:, 3] = 0.15 * t                                            # +Z forward
            pts[:, 4:] = _quat_axis(2, 0.3 * np.sin(2 * np.pi * 0.3 * t))  # roll about forward
            rec.push_points(sig["trajectory"], pts, self.sim.host_stamps(ts))


class _Glove(_Source):
    def __init__(self, reg: RegisteredDevice, sim: SimulatedRig) -> None:
        super().__init__(reg, sim)
        y, x = np.mgrid[0:16, 0:16].astype(np.float32)
        self.grid = (x, y)
        self.left = reg.sensor is not None and reg.sensor.startswith("left")
        self.joints = _hand_joints() if "hand_pose" in reg.signals else None

    def emit_signals(self, t0: int, t1: int, rec: CaptureSink) -> None:
        sig = self.reg.signals
        x, y = self.grid
        _, ts = _sample_times(t0, t1, self.epoch, 50.0, self.phase)
        for t in ts.tolist():
            s = (t - self.epoch) / _SEC
            press = 800.0 * np.exp(-((x - 5 - 3 * np.sin(s)) ** 2 + (y - 8) ** 2) / 6.0) * (0.6 + 0.4 * np.sin(3 * s))
            rec.push_sample(sig["pressure"], press.astype(np.float32))
            if "imu_quat" in sig:
                ang = 0.3 * np.sin(s + np.arange(16) / 4.0)
                rec.push_sample(sig["imu_quat"], _quat_axis(0, ang).astype(np.float32))
                valid = np.ones(16, np.float32)
                valid[int(s * 2) % 16] = 0.0  # one sensor briefly invalid
                rec.push_sample(sig["imu_valid"], valid)
        if self.joints is not None:
            _, ts = _sample_times(t0, t1, self.epoch, 30.0, self.phase)
            for t in ts.tolist():
                j = self.joints[int((t - self.epoch) // (_SEC // 30)) % len(self.joints)].copy()
                if self.left:
                    j[:, 0] = -j[:, 0]  # mirror the right hand
                rec.push_sample(sig["hand_pose"], j)


_SOURCES: dict[str, type[_Source]] = {"uvc": _Source, "d435": _D435, "s80m": _S80M, "gripper": _Gripper,
                                      "data_ble": _Glove, "ble": _Glove, "usb_glove": _Glove}


class SimulatedRig:
    """Simulated sources for every device of a :class:`Rig`.

    Parameters
    ----------
    rig:
        The registered devices.
    fps:
        Default capture rate of video devices without their own ``fps``.
    seed:
        Makes every signal deterministic.
    missing_stamp_every:
        Every n-th trajectory point has no host stamp (``_ns`` = 0); 0 = never.
    no_trajectory_stamps:
        No trajectory point has a host stamp (the episode gets no ``_ns`` column, §5.5).
    drop_every:
        The D435 drops every n-th frame (frame counter gap); 0 = never.
    """

    def __init__(self, rig: Rig, *, fps: float = 30.0, seed: int = 0, missing_stamp_every: int = 0,
                 no_trajectory_stamps: bool = False, drop_every: int = 0, keys: Collection[str] | None = None) -> None:
        self.rig, self.fps, self.seed = rig, float(fps), int(seed)
        self.missing_stamp_every, self.no_stamps = int(missing_stamp_every), bool(no_trajectory_stamps)
        self.drop_every = int(drop_every)
        self.sources = [_SOURCES[d.kind](d, self) for d in rig.devices
                        if (d.columns or d.rgb_slots) and (keys is None or d.key in keys)]
        self._points = 0
        self._pump: threading.Thread | None = None
        self._pump_stop = threading.Event()

    def host_stamps(self, ts: np.ndarray) -> np.ndarray:
        """Host ns of trajectory points, with the configured missing stamps (0)."""
        out = np.asarray(ts, dtype=np.int64).copy()
        if self.no_stamps:
            return np.zeros_like(out)
        if self.missing_stamp_every:
            idx = self._points + np.arange(len(out))
            out[(idx + 1) % self.missing_stamp_every == 0] = 0
        self._points += len(out)
        return out

    def reset(self, epoch_ns: int) -> None:
        """Start every source's episode clock (ENTER press) at ``epoch_ns``."""
        self._points = 0
        for s in self.sources:
            s.reset(epoch_ns)

    def feed(self, t0: int, t1: int, rec: CaptureSink) -> None:
        """Push everything captured in ``(t0, t1]`` (host-monotonic ns) into ``rec``.

        A source that raises stops for the rest of the episode, as a real device does: its
        ``status.*`` columns read ``disconnected`` from the next row on, counted per row
        (``<id>_disconnected_count``), with the error as the reason; the other sources go on.
        """
        for s in self.sources:
            if s.failed:
                continue
            try:
                s.emit(t0, t1, rec)
            except Exception as exc:  # noqa: BLE001 - one device's failure never costs the recording
                s.failed = True
                rec.mark_disconnected(s.reg.status_ids, f"{s.reg.device.key}: {type(exc).__name__}: {exc}")

    def record(self, rec: Recorder, seconds: float, *, realtime: bool = False,
               on_tick: Callable[[], None] | None = None) -> RecordedEpisode:
        """Record one episode of ``seconds``.

        ``realtime=False`` runs on a virtual clock as fast as the writer allows;
        ``realtime=True`` runs a feeder thread against the wall clock while the recorder
        ticks in real time (ticks the writer cannot keep up with are skipped and counted).
        An exception while recording (Ctrl-C) aborts the episode: its N is free again and
        the recorder can record the next one.

        Raises
        ------
        SchemaError
            ``seconds`` is not finite and > 0, or longer than float32 ``timestamp`` can time
            at the recorder's fps (nothing is recorded).
        """
        check_episode_seconds(seconds, rec.fps)
        if not realtime:
            host0 = time.monotonic_ns()
            self.reset(host0 - int(round(_SEC / rec.fps)))
            return rec.record_virtual(seconds, self.feed, host0_ns=host0)
        rec.start_episode()
        self.start(rec, on_tick)
        try:
            time.sleep(seconds + rec.period / 2)
        except BaseException:  # Ctrl-C: discard the episode, free N and the recorder
            self.stop()
            rec.abort_episode()
            raise
        self.stop()
        return rec.stop_episode()

    def start(self, rec: Recorder, on_tick: Callable[[], None] | None = None) -> None:
        """Start a feeder thread pushing into ``rec`` against the wall clock (every 4 ms), from a
        new episode clock (ENTER press) at now. :meth:`stop` ends it."""
        self.stop()
        self.reset(time.monotonic_ns())
        last = [time.monotonic_ns()]
        stop = self._pump_stop = threading.Event()

        def pump() -> None:
            name_thread("egopool-sim")
            while not stop.is_set():
                now = time.monotonic_ns()
                self.feed(last[0], now, rec)
                last[0] = now
                if on_tick is not None:
                    on_tick()
                stop.wait(0.004)

        self._pump = threading.Thread(target=pump, name="egopool-sim", daemon=True)
        self._pump.start()

    def stop(self) -> None:
        """Stop the feeder thread of :meth:`start` (no-op when none runs)."""
        self._pump_stop.set()
        if self._pump is not None:
            self._pump.join()
            self._pump = None


# -- preset rigs --------------------------------------------------------------------------------------
def _even(v: float) -> int:
    return max(16, int(v) // 2 * 2)


def _rig_full(scale: int) -> Rig:
    """Appendix B: ego S80C + 2 UMI grippers + 2 USB gloves, main program."""
    w, h = _even(1280 / scale), _even(800 / scale)
    f = 600.0 * w / 1280
    cal = stereo_calibration("head_stereo", resolution=(w, h), fps=30.0, baseline=0.095,
                             intrinsic=(f, f, w / 2, h / 2))
    rig = Rig("main")
    rig.add(Device("s80c", "s80m:000000000001@1-3.4.1", "S80C_head", w, h, calibration=cal), role="ego")
    gw, gh = _even(1280 / scale), _even(960 / scale)
    rig.add(Device("gripper", "gripper:CC:BA:97:25:B4:44", "UMI 夹爪001", gw, gh))
    rig.add(Device("gripper", "gripper:68:EE:8F:C6:0D:BC", "UMI 夹爪002", gw, gh))
    rig.add(Device("usb_glove", "usbglove:364933593535", "USB 手套_left", side="left"))
    rig.add(Device("usb_glove", "usbglove:364133593535", "USB 手套_right", side="right"))
    return rig


def _d435_cal(serial: int, w: int, h: int) -> dict[str, Any]:
    f = (615.0 + serial % 7) * w / 640
    return stereo_calibration("d435", resolution=(w, h), fps=30.0, baseline=0.05, intrinsic=(f, f, w / 2, h / 2))


def _rig_d435x2(scale: int) -> Rig:
    """Two unnamed D435s: d435_rgb/_depth, then d435_rgb_2/_depth_2; head_stereo + d435_rgb_calibration."""
    w, h = _even(640 / scale), _even(480 / scale)
    rig = Rig("main")
    rig.add(Device("d435", "d435:213622075531", None, w, h, calibration=_d435_cal(1, w, h)))
    rig.add(Device("d435", "d435:213622075532", None, w, h, calibration=_d435_cal(2, w, h)))
    return rig


def _rig_uvc3(scale: int) -> Rig:
    """Three UVC cameras: head_left_rgb, head_right_rgb, head_right_rgb_2."""
    w, h = _even(640 / scale), _even(480 / scale)
    rig = Rig("main")
    for i in range(3):
        rig.add(Device("uvc", f"uvc:usb-DECXIN_Camera_{i:02d}-video-index0", f"UVC {i}", w, h))
    return rig


def _rig_gripper_d405(scale: int) -> Rig:
    """A D405 named D405_head as the ego camera + one UMI gripper + a BLE glove."""
    rig = Rig("main")
    w, h = _even(640 / scale), _even(480 / scale)
    rig.add(Device("d405", "d435:130322270123", "D405_head", w, h, calibration=_d435_cal(3, w, h)), role="ego")
    rig.add(Device("gripper", "gripper:CC:BA:97:25:B4:44", "UMI 夹爪001", _even(1280 / scale), _even(960 / scale)))
    rig.add(Device("data_ble", "ble:E4:5F:01:AA:10:22", "Matrix_L", side="left"))
    return rig


def _rig_lite_gloves(scale: int) -> Rig:
    """Lite program: a plain ``ble`` device opened as a glove + a USB glove + one UVC camera."""
    rig = Rig("lite")
    rig.add(Device("uvc", "uvc:usb-DECXIN_Camera_00-video-index0", "head", _even(640 / scale), _even(480 / scale)))
    rig.add(Device("ble", "ble:E4:5F:01:AA:10:23", "BLE 手套", side="left"))
    rig.add(Device("usb_glove", "usbglove:364133593535", "USB 手套_right", side="right"))
    return rig


RIGS: dict[str, Callable[[int], Rig]] = {
    "full": _rig_full, "d435x2": _rig_d435x2, "uvc3": _rig_uvc3, "gripper_d405": _rig_gripper_d405,
    "lite_gloves": _rig_lite_gloves,
}


def build_rig(name: str, *, scale: int = 1, depth_codec: str = "hevc12") -> Rig:
    """A preset rig by name (``full``, ``d435x2``, ``uvc3``, ``gripper_d405``, ``lite_gloves``).

    Parameters
    ----------
    scale:
        Divide every frame size by this (>= 1) for quick runs; 1 = the real sizes.
    depth_codec:
        ``hevc12`` (12-bit log code, lossy), ``ffv1`` (lossless) or ``auto`` (the recorder measures,
        docs/decisions.md R24) for every depth stream.

    Raises
    ------
    SchemaError
        Unknown rig name or a scale < 1.
    CodecError
        Unknown depth codec.
    """
    if name not in RIGS:
        raise SchemaError(f"unknown rig {name!r}", hint=f"use one of {sorted(RIGS)}")
    if scale < 1:
        raise SchemaError(f"scale must be >= 1, got {scale}")
    rig = RIGS[name](int(scale))
    rig.depth_codec = check_depth_choice(depth_codec)
    return rig
