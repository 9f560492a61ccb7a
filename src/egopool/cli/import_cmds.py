"""``egopool import rgbd-frames|tum|euroc``: bring recordings from other layouts into a task.

``import lerobot|aria`` attach to the same group from ``interop_import_cmds``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from ..errors import EgopoolError
from ..frames import FRAMES
from ..importers import ImportResult, import_euroc, import_rgbd_frames, import_tum
from ..importers.bucket_out import import_into
from .app import app
from .args import local_source
from ..codecs.depth import DEPTH_CODECS
from .output import changed_values_to_stderr, console, print_json, progress_bar

import_app = typer.Typer(help="Import recordings from other layouts (RGB-D frame folders, TUM trajectories, "
                              "EuRoC/ASL, LeRobot v3.0, Project Aria) into a pooled_episodes_v1 task.",
                         no_args_is_help=True)
app.add_typer(import_app, name="import")

_OUT_HELP = "Recordings root (a directory or s3://BUCKET/PREFIX); the task is written to OUT/TASK."
_TASK_HELP = "Task name (default: the input's name)."
#: ``--allow-duplicate`` of every importer (docs/decisions.md D6).
ALLOW_DUPLICATE = typer.Option(False, "--allow-duplicate",
                               help="Import even when this task already holds the same content from an earlier "
                                    "import (otherwise refused, naming its N).")
_FRAME_HELP = ("Registered frame id of the poses' world ({}); the files do not say which way their axes point. "
               "ego_cam_optical = right/down/forward of a camera (e.g. SLAM output relative to the first frame).")


def _frames_list() -> str:
    return ", ".join(sorted(FRAMES))


def _need_frame(frame: str | None, what: str, path: Path) -> str:
    if frame is None:
        raise EgopoolError(f"{what} does not say which way its axes point; pass --frame", path=path,
                           hint=f"registered frames: {_frames_list()}")
    return frame


@contextmanager
def _progress(label: str, quiet: bool) -> Iterator[Callable[[int, int], None]]:
    with changed_values_to_stderr(), progress_bar(label, quiet) as tick:
        yield tick


def _report(result: ImportResult, json_out: bool) -> None:
    if json_out:
        print_json(result.to_dict())
        return
    for ep in result.episodes:
        console.print(f"episode N={ep.index} (chunk-{ep.chunk:03d}/episode-{ep.file:03d}): {ep.length} rows "
                      f"-> {result.task_dir}")
    for line in result.synthesised:
        console.print(f"[yellow]timestamps synthesised[/yellow]: {line}")
    for line in result.notes:
        console.print(f"  - {line}")


@import_app.command("rgbd-frames")
def rgbd_frames_cmd(
    directory: Path = typer.Argument(
        ..., metavar="DIR", help="Folder with frame-NNNNNN.color.jpg|png, .depth.png (uint16 mm), "
                                                ".pose.txt (4x4 camera-to-world) and camera-intrinsics.txt."),
    out: str = typer.Option("recordings", "--out", metavar="PATH", help=_OUT_HELP),
    task: str | None = typer.Option(None, "--task", help=_TASK_HELP),
    fps: float = typer.Option(30.0, "--fps", help="Frame rate used to synthesise timestamps (the files have none)."),
    frame: str | None = typer.Option(None, "--frame", help=_FRAME_HELP.format("see egopool.frames")),
    name: str = typer.Option("camera", "--name", help="Device name; slots are NAME_rgb and NAME_depth."),
    depth_codec: str = typer.Option("hevc12", "--depth-codec", help=f"{' or '.join(DEPTH_CODECS)}: hevc12 = 12-bit "
                                    "log code (small, lossy, clips to 100..20000 mm, counted in drop_stats); ffv1 = "
                                    "lossless uint16 mm MKV."),
    allow_duplicate: bool = ALLOW_DUPLICATE,
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Import colour + depth + pose frames (7-Scenes layout) as one episode with RGB, depth and trajectory."""
    directory = local_source(directory, "a frames folder") or directory
    frame = _need_frame(frame, "a pose.txt file", directory)
    with _progress("importing frames", json_out) as tick:
        result = import_into(out, lambda root: import_rgbd_frames(
            directory, root, frame=frame, task=task, fps=fps, name=name, depth_codec=depth_codec, progress=tick,
            allow_duplicate=allow_duplicate))
    _report(result, json_out)


@import_app.command("tum")
def tum_cmd(
    file: Path = typer.Argument(
        ..., metavar="FILE", help="TUM trajectory: 'timestamp tx ty tz qx qy qz qw' per line, '#' comments."),
    out: str = typer.Option("recordings", "--out", metavar="PATH", help=_OUT_HELP),
    task: str | None = typer.Option(None, "--task", help=_TASK_HELP),
    fps: float = typer.Option(30.0, "--fps", help="Row rate; each row holds the poses of its 1/fps window."),
    frame: str | None = typer.Option(None, "--frame", help=_FRAME_HELP.format("see egopool.frames")),
    prefix: str = typer.Option("ego_", "--prefix",
                               help="Column prefix: ego_ -> observation.ego_slam_trajectory; '' -> gripper rig1."),
    allow_duplicate: bool = ALLOW_DUPLICATE,
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Import a TUM trajectory file as one episode with a trajectory column (+ _ns from its timestamps)."""
    file = local_source(file, "a TUM file") or file
    frame = _need_frame(frame, "a TUM file", file)
    with _progress("importing poses", json_out) as tick:
        result = import_into(out, lambda root: import_tum(file, root, frame=frame, task=task, fps=fps, prefix=prefix,
                                                          progress=tick, allow_duplicate=allow_duplicate))
    _report(result, json_out)


@import_app.command("euroc")
def euroc_cmd(
    directory: Path = typer.Argument(
        ..., metavar="DIR", help="EuRoC/ASL folder holding mav0/ (cam0, imu0, optional ground truth)."),
    out: str = typer.Option("recordings", "--out", metavar="PATH", help=_OUT_HELP),
    task: str | None = typer.Option(None, "--task", help=_TASK_HELP),
    fps: float | None = typer.Option(None, "--fps", help="Nominal rate (default: cam0 sensor.yaml rate_hz)."),
    frame: str | None = typer.Option(None, "--frame",
                                     help="Frame id of the ground-truth world; ground truth is imported only "
                                          "when given."),
    allow_duplicate: bool = ALLOW_DUPLICATE,
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Import a EuRoC/ASL recording: one row per cam0 frame, IMU samples attached per frame window."""
    directory = local_source(directory, "a EuRoC recording") or directory
    with _progress("importing frames", json_out) as tick:
        result = import_into(out, lambda root: import_euroc(directory, root, task=task, fps=fps, frame=frame,
                                                            progress=tick, allow_duplicate=allow_duplicate))
    _report(result, json_out)
