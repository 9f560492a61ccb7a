"""Reviewers' events in a Rerun recording (``export rerun --events-from``; docs/decisions.md P18).

Rerun has no range annotation: each event ``[t0, t1)`` of episode N becomes two ``TextLog`` rows of entity
``episode_N/events`` on the ``frame_index`` timeline, one at the first frame of the range (``"<label>:
<note> [t0-t1 s, by <who>]"``, level INFO) and one at the frame where it ends (``"end of <label>"``, level
DEBUG), so the viewer's text log and time panel show where each range starts and stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..curation.review_events import ReviewEvent
from .lerobot_events import event_content

__all__ = ["log_events"]


def log_events(rr: Any, rec: Any, entity: str, frames: np.ndarray, fps: float, events: Sequence[ReviewEvent]) -> int:
    """Log ``events`` of one episode (``frames``: its rows' ``frame_index`` values, int64 [rows]) into ``rec``
    under ``entity``; return the rows logged (two per event that covers a frame)."""
    n = 0
    for e in events:
        f0, f1 = e.frames(fps, len(frames))
        if f0 >= f1:
            continue
        who = f", by {e.token_id}" if e.token_id else ""
        rec.set_time("frame_index", sequence=int(frames[f0]))
        rec.log(entity, rr.TextLog(f"{event_content(e)} [{e.t0:.3f}-{e.t1:.3f} s{who}]", level="INFO"))
        rec.set_time("frame_index", sequence=int(frames[min(f1, len(frames) - 1)]))
        rec.log(entity, rr.TextLog(f"end of {e.label}", level="DEBUG"))
        n += 2
    rec.reset_time()
    return n
