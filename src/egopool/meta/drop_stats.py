"""``drop_stats`` keys for values the writer had to change or leave out (file_format.md §6.2, §5.5).

``drop_stats`` (a JSON object in the episode row) counts what an episode lost: plain keys
are frames / rows (summable as frame drops), keys ending in ``_count`` are event counts
and ``_ms`` durations (§6.2, v1.3.10). Besides the recorder's own keys (decisions.md R4),
egopool counts every value the format could not hold as given, so that nothing is
changed without a trace (DESIGN §8, docs/decisions.md #22):

``<signal>_rejected_count``
    samples of ``observation.<signal>`` (or of a key column) that could not be stored
    (NaN / Infinity in a stats column, wrong length, wrong type, out of the column's
    range); the row holds the "no sample" value of multi_device_storage.md §5.5 instead.
``<image_key>_rejected_count``
    video frames of the wrong size or dtype; the stream repeated its previous frame.
``<signal>_saturated_count``
    force-matrix cells beyond the int16 range of ``row_diff_quantized`` at the column's
    ``scale`` (file_format.md §7.2.1), stored as 32767/−32768 (``row_flat_raw``: finite
    values beyond float32, stored as ±Infinity).
``<image_key>_clipped_count``
    depth pixels outside the 12-bit log code's ``[d_min, d_max]`` (DESIGN §3), stored at
    the nearest end of the range; ``--depth-codec ffv1`` stores uint16 mm losslessly.
``<signal>_nonfinite_count``
    NaN / Infinity values a caller stored on purpose in a float column that is not a stats column
    (``EpisodeWriter.add_frame`` without ``reject_bad``: e.g. a hand joint a tracker does not have);
    stored as given, so a reader computing with the column gets NaN. The recorder stores such
    a sample as "no sample" instead (``_rejected_count``).
``<slot>_disconnected_count``
    rows recorded while ``status.<slot>`` said ``disconnected`` (its device stopped, e.g. its source
    raised): those rows hold no sample of that device (multi_device_storage.md §5.5 "设备中途断连").
``rows_rejected``
    rows the writer refused as a whole (a frame-drop key: no row was written).
``<image_key>_encode_failed_count``
    a stream whose encoder failed mid-episode; the episode was published without it.
``<signal>_missing_count``
    values of ``observation.<signal>`` the source left empty (an empty MPS CSV field), stored as
    missing (NaN, the column's ``missing_value``) instead of the 0 a parser reads there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CHANGED_VALUE_SUFFIXES", "changed_value_notes", "clipped_key", "disconnected_key", "encode_failed_key",
           "missing_key", "nonfinite_key", "rejected_key", "saturated_key", "signal_name"]

#: Suffixes of the keys that count values stored otherwise than given.
CHANGED_VALUE_SUFFIXES = ("_rejected_count", "_saturated_count", "_clipped_count", "_encode_failed_count",
                          "_nonfinite_count", "_disconnected_count")


def signal_name(column: str) -> str:
    """``observation.right_glove`` -> ``right_glove``; a key column keeps its name."""
    return column.split(".", 1)[1] if column.startswith(("observation.", "status.")) else column


def rejected_key(column_or_stream: str) -> str:
    """Key counting rejected samples of a column (or frames of a stream)."""
    return f"{signal_name(column_or_stream)}_rejected_count"


def missing_key(column: str) -> str:
    """Key counting values of a column stored as missing because the source left them empty."""
    return f"{signal_name(column)}_missing_count"


def saturated_key(column: str) -> str:
    """Key counting saturated force-matrix cells of ``column``."""
    return f"{signal_name(column)}_saturated_count"


def clipped_key(image_key: str) -> str:
    """Key counting depth pixels clipped into the log code's range."""
    return f"{image_key}_clipped_count"


def nonfinite_key(column: str) -> str:
    """Key counting NaN / Infinity values stored as given in a non-stats float column."""
    return f"{signal_name(column)}_nonfinite_count"


def disconnected_key(status_id: str) -> str:
    """Key counting rows recorded while ``status.<status_id>`` said ``disconnected``."""
    return f"{status_id}_disconnected_count"


def encode_failed_key(image_key: str) -> str:
    """Key marking a stream that was left out after its encoder failed."""
    return f"{image_key}_encode_failed_count"


def _count(n: int | float) -> str:
    """A count as text: ints exactly (an int beyond float64 cannot go through ``:g``), floats ``:g``."""
    return str(n) if isinstance(n, int) else f"{n:g}"


def changed_value_notes(drop_stats: Mapping[str, Any], episode: int | None = None,
                        reasons: Mapping[str, str] | None = None) -> list[str]:
    """One line per ``drop_stats`` key that counts values stored otherwise than given.

    Parameters
    ----------
    drop_stats:
        An episode row's ``drop_stats`` (parsed).
    episode:
        Global N, to prefix each line with ``episode N:``.
    reasons:
        Optional key -> first reason, appended as ``(first: ...)``.

    Returns
    -------
    list[str]
        Messages saying what was changed, how often, and the lossless way out where one exists.
    """
    pre = f"episode {episode}: " if episode is not None else ""
    out: list[str] = []
    for key in sorted(drop_stats):
        n = drop_stats[key]
        if isinstance(n, bool) or not isinstance(n, (int, float)) or n <= 0:
            continue
        if key == "rows_rejected":
            out.append(f"{pre}{_count(n)} row(s) could not be written and were left out")
        elif key.endswith("_rejected_count"):
            what = key[: -len("_rejected_count")]
            out.append(f"{pre}{_count(n)} sample(s) of {what} could not be stored (NaN/Infinity, wrong length, type or "
                       "range) and were written as 'no sample' (multi_device_storage.md §5.5; a video frame: as the "
                       "stream's previous frame)")
        elif key.endswith("_saturated_count"):
            what = key[: -len("_saturated_count")]
            out.append(f"{pre}{_count(n)} force-matrix cell(s) of {what} were beyond what the column's encoding holds "
                       "(file_format.md §7.2.1; row_diff_quantized: the int16 range at its scale, stored saturated "
                       "at ±32767/scale; row_flat_raw: the float32 range, stored as ±Infinity); record with a "
                       "smaller scale or row_flat_raw (float32) to keep them")
        elif key.endswith("_clipped_count"):
            what = key[: -len("_clipped_count")]
            out.append(f"{pre}{_count(n)} depth pixel(s) of {what} were outside the 12-bit log code's range and were "
                       "stored clipped; use --depth-codec ffv1 (lossless uint16 mm) to keep them")
        elif key.endswith("_nonfinite_count"):
            what = key[: -len("_nonfinite_count")]
            out.append(f"{pre}{_count(n)} value(s) of {what} are NaN/Infinity, stored as given: a missing sample is "
                       "zeros (multi_device_storage.md §5.5), so a reader computing with this column gets NaN")
        elif key.endswith("_disconnected_count"):
            what = key[: -len("_disconnected_count")]
            out.append(f"{pre}{_count(n)} row(s) were recorded while {what} was disconnected (status.{what}); they "
                       "hold no sample of it")
        elif key.endswith("_encode_failed_count"):
            what = key[: -len("_encode_failed_count")]
            out.append(f"{pre}the encoder of stream {what} failed; the episode was published without that stream")
        else:
            continue
        if reasons and key in reasons:
            out[-1] += f" (first: {reasons[key]})"
    return out
