"""Colour/depth pairing of a RealSense camera (issue 15 E, librealsense #10850 family): which frames are one
capture, by frame numbers or stamps at a measured offset; what could not be paired is counted."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from egopool.sources.pairing import CapturePairer

T = 1000.0 / 30  # ms


class Fr(NamedTuple):
    stream: str
    number: int
    ts_ms: float


def _captures(n, *, color_after=0.0, lost_depth=(), lost_color=(), depth_number=lambda k: k + 1,
              color_number=lambda k: k + 1, depth_late=False):
    """Frames of ``n`` captures in arrival order: depth then colour (or colour first when depth_late)."""
    out = []
    for k in range(n):
        d = None if k in lost_depth else Fr("depth", depth_number(k), 5000.0 + k * T)
        c = None if k in lost_color else Fr("color", color_number(k), 5000.0 + k * T + color_after)
        out += [f for f in ((c, d) if depth_late else (d, c)) if f is not None]
    return out


def _pairs(frames, color_after=0.0, **kw):
    p = CapturePairer(T, **kw)
    out = []
    for f in frames:
        out += p.push(f)
    out += p.finish()
    # capture of each colour frame and of its depth (by stamp), or None
    cap = [(round((c.ts_ms - color_after - 5000.0) / T), None if d is None else round((d.ts_ms - 5000.0) / T)) for c, d in out]
    return p, cap


CASES = {
    # the case: colour 20 ms after its depth (beyond half a period), depth of captures 8-10 lost
    "offset 20 ms, lost depth": (dict(color_after=20.0, lost_depth={8, 9, 10}), "frame numbers", 20.0, (3, 0)),
    "offset -20 ms, colour first": (dict(color_after=-20.0, depth_late=True, lost_depth={3}), "frame numbers", -20.0,
                                    (1, 0)),
    # counters of two sensors one apart, stamped together: the stamps decide (the SDK's own rule)
    "counters one apart": (dict(color_after=5.0, color_number=lambda k: k + 2, lost_depth={6}), "stamps", 5.0, (1, 0)),
    # librealsense #2224: depth #8 while colour #1
    "counters far apart": (dict(color_after=3.0, depth_number=lambda k: k + 8), "stamps", 3.0, (0, 0)),
    "lost colour": (dict(color_after=20.0, lost_color={5, 12}), "frame numbers", 20.0, (0, 2)),
    "depth delivered late": (dict(color_after=2.0, depth_late=True, lost_depth={0, 15}), "frame numbers", 2.0, (2, 0)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_colour_frame_gets_the_depth_of_its_own_capture(case):
    kw, rule, offset, unpaired = CASES[case]
    p, cap = _pairs(_captures(20, **kw), kw.get("color_after", 0.0))
    lost_color, lost_depth = kw.get("lost_color", set()), kw.get("lost_depth", set())
    assert cap == [(k, None if k in lost_depth else k) for k in range(20) if k not in lost_color]
    assert (p.rule, p.offset_ms) == (rule, pytest.approx(offset))
    assert (p.unpaired_color, p.unpaired_depth) == unpaired


def test_the_half_period_rule_would_pair_the_next_capture():
    """What the SDK's syncer (and egopool before) does with the issue's recording: colour k with depth k+1."""
    frames = _captures(20, color_after=20.0, lost_depth={8, 9, 10})
    near = []
    for c in (f for f in frames if f.stream == "color"):
        d = min((f for f in frames if f.stream == "depth"), key=lambda d: abs(d.ts_ms - c.ts_ms))
        near.append(d.number - c.number if abs(d.ts_ms - c.ts_ms) <= T / 2 else None)
    assert near.count(1) == 16 and near.count(0) == 0
    _, cap = _pairs(frames, 20.0)
    assert sum(1 for k, d in cap if d == k) == 17  # every depth frame with its own colour frame


def test_a_dead_depth_stream_does_not_hold_colour_back():
    p = CapturePairer(T)
    out = []
    for k in range(30):
        out += p.push(Fr("color", k + 1, 5000.0 + k * T))
        assert len(out) >= k + 1 - 3 * p.lock_frames  # at most the lock-in window waits
    out += p.finish()
    assert [d for _, d in out] == [None] * 30 and p.unpaired_color == 30 and p.rule == "stamps"


def test_a_counter_reset_relocks_on_the_stamps():
    frames = _captures(10, color_after=20.0) + [
        f._replace(number=f.number - 100) if f.stream == "depth" else f for f in _captures(20, color_after=20.0)[20:]]
    p, cap = _pairs(frames, 20.0)
    assert cap == [(k, k) for k in range(20)] and p.counter_offset == 100
