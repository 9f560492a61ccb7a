"""What a reviewer looks at for one pooled episode (issue 19): browser previews, signal summaries, quality facts.

* :mod:`.proxy`: a JPEG thumbnail and a small browser-playable H.264 proxy per stream (RGB as is,
  depth colour-mapped), one proxy frame per stream frame;
* :mod:`.signals`: ``signals.json``, the time series a reviewer plots (IMU, gripper, gloves,
  force matrices, trajectory top views), at most 2000 points per series;
* :mod:`.quality`: automatic quality facts (duration, frames per stream, gaps, drops, idle
  ranges, blur and exposure outliers, validation findings, size);
* :mod:`.selection`: the episodes a server selection names (``--episodes-from``).

Readers only: nothing here writes into a task directory (docs/decisions.md Q1).
"""
