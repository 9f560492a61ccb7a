"""An episode written with the real writer that holds exactly: a frozen RGB stream (its first frame held for
every later row), one 200 ms stall seen by two stamp series, and 10 dark frames on the moving stream."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from egopool import StreamSpec, TaskWriter, vector_column
from egopool.schema import key_column

ROWS = 120
STALL_AT = 60  # the stall is between rows 59 and 60
DARK = range(80, 90)


def write_facts_task(root: Path, name: str = "facts", dark: tuple[int, ...] = (10,)) -> Path:
    """One episode per item of ``dark`` as the module says (head_rgb frozen, wrist_rgb moving, glove signal),
    episode k with ``dark[k]`` dark frames from row 80."""
    tw = TaskWriter(root, name, fps=30.0)
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    for n_dark in dark:
        ep = tw.begin_episode(columns=[vector_column("observation.right_glove", [4]), key_column("raw_hw_ns")],
                              streams=[StreamSpec("head_rgb", "rgb", 64, 48), StreamSpec("wrist_rgb", "rgb", 64, 48)],
                              sensors=["right_glove"], sensor_dim=4, created_at=1_700_000_000.0)
        t = 0.0
        for i in range(ROWS):
            if i == STALL_AT:
                t += 0.2  # one 200 ms stall
            img = np.roll(base, 2 * i, axis=1)
            if DARK.start <= i < DARK.start + n_dark:
                img = np.zeros_like(img)
            images = {"wrist_rgb": img} if i else {"wrist_rgb": img, "head_rgb": base}
            ep.add_frame({"observation.right_glove": np.full(4, i, np.float32), "raw_hw_ns": int(5e12 + t * 1e9)},
                         images=images, timestamp=t, hardware_ns=int(1e12 + t * 1e9))
            t += 1 / 30
        ep.finish()
    return root / name
