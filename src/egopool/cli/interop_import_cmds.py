"""``egopool import lerobot|aria``: LeRobot v3.0 datasets and Project Aria recordings into a task."""

from __future__ import annotations

from pathlib import Path

import typer

from ..importers.bucket_out import import_into
from ..interop.lerobot_import import import_lerobot
from .args import lerobot_index_option, local_source
from .import_cmds import _OUT_HELP, ALLOW_DUPLICATE, _progress, _report, import_app


@import_app.command("lerobot")
def lerobot_cmd(
    directory: Path = typer.Argument(..., metavar="DIR", help="LeRobot v3.0 dataset root (meta/, data/, videos/)."),
    task: str = typer.Option(..., "--task", help="Task name (created, or appended to)."),
    out: str = typer.Option("recordings", "--out", metavar="PATH", help=_OUT_HELP),
    episodes: list[int] = lerobot_index_option("--episode", "-e",
                                               help="LeRobot episode_index to import (repeat; default all)."),
    allow_duplicate: bool = ALLOW_DUPLICATE,
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Import a local LeRobot v3.0 dataset: one pooled episode per LeRobot episode, N from the task's next.

    H.264/HEVC videos are stream-copied per episode, others (LeRobot's default AV1) re-encoded as H.264.
    A dataset written by `egopool export lerobot` returns under its pooled names (egopool_mapping.json).
    """
    directory = local_source(directory, "a LeRobot dataset") or directory
    with _progress("importing frames", json_out) as tick:
        result = import_into(out, lambda root: import_lerobot(directory, root, task=task, progress=tick,
                                                              episodes=episodes or None,
                                                              allow_duplicate=allow_duplicate))
    _report(result, json_out)


@import_app.command("aria")
def aria_cmd(
    recording: Path | None = typer.Argument(None, metavar="RECORDING.vrs",
                                            help="Project Aria (Gen1) VRS recording; leave out to import --mps alone."),
    task: str = typer.Option(..., "--task", help="Task name (created, or appended to)."),
    mps: Path | None = typer.Option(None, "--mps", metavar="DIR",
                                    help="MPS output folder: trajectory/, hand_tracking/, eye_gaze/."),
    out: str = typer.Option("recordings", "--out", metavar="PATH", help=_OUT_HELP),
    fps: float = typer.Option(30.0, "--fps", help="Row rate without a VRS (with one: the RGB camera's rate)."),
    allow_duplicate: bool = ALLOW_DUPLICATE,
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    verbose: bool = typer.Option(False, "--verbose", help="Also show projectaria-tools' own messages (on stderr)."),
) -> None:
    """Import a Project Aria recording: RGB and SLAM cameras as streams, both IMUs with their own device
    stamps; with --mps, the closed-loop trajectory (ego SLAM), hand tracking (hand pose) and eye gaze.
    An empty MPS field is stored as missing (NaN) and counted, never as 0."""
    import logging
    import sys

    from ..interop.aria import import_aria

    recording = local_source(recording, "a VRS recording")
    mps = local_source(mps, "an MPS output folder")
    log = logging.getLogger("egopool.interop.aria")
    handler = logging.StreamHandler(sys.stderr)
    if verbose:
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    try:
        with _progress("importing frames", json_out) as tick:
            result = import_into(out, lambda root: import_aria(recording, root, task=task, mps_dir=mps, fps=fps,
                                                               progress=tick, allow_duplicate=allow_duplicate))
    finally:
        log.removeHandler(handler)
    _report(result, json_out)
