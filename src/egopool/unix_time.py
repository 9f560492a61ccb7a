"""Which numbers are plausible Unix times in seconds, and which ``created_at`` values ``wall_time`` can build on.

``created_at`` is Unix seconds, of the task (``info.json``, file_format.md §3) and of each episode
(``meta/episodes``, §6.2), and every data row's ``wall_time = created_at + timestamp`` (§7.3, since
v1.3.17) must be strictly increasing. Recordings of this format were made between 2000 and 2100; a
value outside looks like another unit (milliseconds, nanoseconds) or damage. See docs/decisions.md V5.
"""

from __future__ import annotations

import math

__all__ = ["UNIX_2000_S", "UNIX_2100_S", "created_at_problem", "plausible_unix_unit"]

#: Unix seconds of 2000-01-01 and 2100-01-01: stamps of real recordings fall between them.
UNIX_2000_S = 946_684_800
UNIX_2100_S = 4_102_444_800

#: unit -> (factor to seconds, the factor as a message writes it)
_UNITS = {"seconds": (1.0, "1"), "milliseconds": (1e3, "1000"), "microseconds": (1e6, "1e6"),
          "nanoseconds": (1e9, "1e9")}


def plausible_unix_unit(value: float) -> str | None:
    """The unit in which ``value`` is a Unix time between 2000 and 2100 (``"seconds"``,
    ``"milliseconds"``, ``"microseconds"``, ``"nanoseconds"``), or None (also for NaN / Infinity)."""
    for unit, (factor, _) in _UNITS.items():
        if UNIX_2000_S <= abs(value) / factor <= UNIX_2100_S:
            return unit
    return None


def created_at_problem(created_at: float, *, fps: float | None = None,
                       seconds: float = 0.0) -> tuple[str, str] | None:
    """What is wrong with ``created_at`` (Unix s) as the base of ``wall_time``, or None when nothing is.

    Parameters
    ----------
    created_at:
        The value, float64 seconds.
    fps:
        The task's row rate (Hz), when known: rows are ``1/fps`` s apart, and float64
        ``wall_time`` must still tell them apart at ``created_at``.
    seconds:
        The largest ``timestamp`` added to it (s, >= 0); 0 checks ``created_at`` alone.

    Returns
    -------
    (severity, message) or None
        ``("error", ...)`` when ``wall_time = created_at + timestamp`` cannot be stored as a
        strictly increasing float64 (§7.3 MUST): ``created_at`` not finite, the sum overflows,
        or float64 steps at that magnitude are not finer than a row (``>= 1/fps``; from about
        1.4e14 s at 30 fps, e.g. nanoseconds). ``("warning", ...)`` when it is representable
        but not a time between 2000-01-01 and 2100-01-01 (negative, 0, milliseconds...). The
        message starts with ``created_at = <value>`` and, when the value is a 2000–2100 time in
        another unit, names that unit as the fix.
    """
    try:
        x = float(created_at)
    except OverflowError:  # a JSON integer beyond float64 (e.g. -1 followed by 400 zeros)
        return "error", (f"created_at = {str(created_at)[:12]}... ({len(str(abs(int(created_at))))} digits) is beyond "
                         "float64; store Unix seconds")
    unit = plausible_unix_unit(x)
    fix = "; store Unix seconds"
    if unit is not None and unit != "seconds":
        factor, text = _UNITS[unit]
        fix = f"; it looks like {unit} since 1970 ({x / factor:.0f} s): store seconds (divide by {text})"
    if not math.isfinite(x):
        return "error", f"created_at = {x} is not a finite Unix time in seconds{fix}"
    end = abs(x) + abs(float(seconds))
    if not math.isfinite(end):
        return "error", (f"created_at = {x:g}: wall_time = created_at + timestamp overflows float64 (> 1.8e308)"
                         f"{fix}")
    if fps is not None and fps > 0 and math.isfinite(fps):
        step = math.ulp(end)
        if step >= 1.0 / fps:
            return "error", (f"created_at = {x:g}: float64 wall_time = created_at + timestamp moves in steps of "
                             f"{step:.3g} s there, not finer than a row (1/{fps:g} s), so it cannot increase row "
                             f"by row{fix}")
    if not UNIX_2000_S <= x <= UNIX_2100_S:
        return "warning", (f"created_at = {x:g} is not a Unix time in seconds between 2000-01-01 and 2100-01-01"
                           f"{fix}")
    return None
