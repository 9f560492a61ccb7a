"""``egopool keypoints extract|backfill``: hand keypoints into the mirror and back into the data (§10, §7.2)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ..keypoints import ExtractOptions, backfill_hand_pose, extract_keypoints
from .app import app
from .args import episode_argument
from .ops_cmds import _CHANGE_TASK, _DRY, _JSON, _READ_TASK, _REG, _progress, _registry_hint
from .output import console, print_json
from .ray_option import RAY_OPTION, executor_for

keypoints_app = typer.Typer(help="Hand keypoints: MediaPipe extraction into keypoints_output/ and the back-fill of "
                                 "observation.<side>_hand_pose (file_format.md §10, §7.2).", no_args_is_help=True)
app.add_typer(keypoints_app, name="keypoints")

_INDICES = episode_argument("Global 1-based episode numbers (default: every episode).", required=False)
_MIRROR = typer.Option(None, "--mirror-root", metavar="DIR",
                       help="The keypoints_output directory (default: beside the recordings root, or "
                            "$EGOPOOL_KEYPOINTS_ROOT).")


@keypoints_app.command("extract", context_settings={"ignore_unknown_options": True})
def extract_cmd(task: Path = _READ_TASK, indices: list[int] = _INDICES,
                stream: str = typer.Option(None, "--stream", metavar="KEY",
                                           help="RGB stream to read (default: the ego trajectory's source slot, "
                                                "else the only RGB stream)."),
                mirror_root: Path = _MIRROR,
                mirrored: bool = typer.Option(False, "--mirrored",
                                              help="The stream is a mirrored (selfie) view; keep MediaPipe's "
                                                   "left/right labels as they are."),
                model_complexity: int = typer.Option(1, "--model-complexity", min=0, max=1,
                                                     help="MediaPipe hand model: 0 lite, 1 full."),
                ray: str = RAY_OPTION, json_out: bool = _JSON,
                verbose: bool = typer.Option(False, "--verbose",
                                             help="Also show MediaPipe's own messages (on stderr).")) -> None:
    """Run MediaPipe Hands on each episode's ego RGB stream; write keypoints_output/<task>/episode_NNNNNN/.

    Writes hand_pose/ (2-D pixels), hand_pose_3d/ (63 world-landmark values per hand, m) and auto_labels/, one row per data row keyed by frame_index; a hand not found is zeros with <side>_present false. Needs pip install 'egopool\\[keypoints]' (mediapipe 0.10.21). Exit 1 when an episode could not be processed.
    """
    from .._native_output import show_log
    from ..keypoints.mediapipe_hands import log as mediapipe_log

    opts = ExtractOptions(stream=stream, mirrored=mirrored, model_complexity=model_complexity)
    with show_log(mediapipe_log, verbose), _progress("extracting") as cb, executor_for(ray) as executor:
        report = extract_keypoints(task, indices or None, options=opts, mirror_root=mirror_root, executor=executor,
                                   progress=None if cb is None else (lambda d, t: cb(d, t, "episodes")))
    if json_out:
        print_json(report.to_dict())
    else:
        table = Table("N", "stream", "frames", "hand", "left", "right", "frames/s", "result")
        for e in report.episodes:
            fps = f"{e.frames / e.seconds:.1f}" if e.seconds > 0 else "-"
            table.add_row(str(e.index), e.stream, str(e.frames), f"{100 * e.hand_rate:.1f} %", str(e.left_frames),
                          str(e.right_frames), fps, "ok" if e.ok else f"[red]{e.error}[/red]")
        console.print(table)
        console.print(f"{len(report.episodes)} episode(s), {report.frames} frames, a hand in "
                      f"{100 * report.hand_rate:.1f} % of them, {report.frames_per_cpu_second:.1f} frames per "
                      f"CPU-second ({report.executor}); mirror: {report.mirror_root}")
        handless = [e for e in report.episodes if e.ok and e.frames and not e.hand_frames]
        if handless:
            streams = ", ".join(sorted({e.stream for e in handless}))
            console.print(f"[yellow]no hand in any frame of episode(s) {', '.join(str(e.index) for e in handless)} "
                          f"(stream {streams}): if that camera does not see the hands, pick the one that does with "
                          "--stream KEY[/yellow]")
    if not report.ok:
        raise typer.Exit(1)


@keypoints_app.command("backfill", context_settings={"ignore_unknown_options": True})
def backfill_cmd(task: Path = _CHANGE_TASK, indices: list[int] = _INDICES, mirror_root: Path = _MIRROR,
                 dry_run: bool = _DRY, json_out: bool = _JSON, registry: bool = _REG) -> None:
    """Write hand_pose_3d of the mirror into observation.left_hand_pose / right_hand_pose of the data parquet.

    Per episode under the task lock: the mirror's frame_index must equal the data's (else refused), absent hands are zeros, every other column is copied unchanged, the new file replaces the old atomically and pipeline.db's sha256 is updated. A second run changes nothing. An s3:// task needs --mirror-root (or $EGOPOOL_KEYPOINTS_ROOT); each data object is PUT whole under N's claim with its sha256. Exit 1 when an episode was refused or has no mirror.
    """
    with _registry_hint(), _progress("back-filling") as cb:
        report = backfill_hand_pose(task, indices or None, mirror_root=mirror_root, dry_run=dry_run,
                                    registry=registry, progress=cb)
    if json_out:
        print_json(report.to_dict())
    else:
        for e in report.episodes:
            hands = ", ".join(f"{s} {n}" for s, n in e.hand_rows.items())
            line = f"episode {e.index}: {e.status}"
            if e.status in ("written", "would write"):
                line += f" ({e.changed_rows} of {e.rows} rows change; hand rows: {hands})"
            if e.added_columns:
                line += f"; adds {', '.join(e.added_columns)}"
            if e.reason:
                line += f": {e.reason}"
            console.print(line if e.status not in ("refused", "missing") else f"[red]{line}[/red]")
        if not report.episodes:
            console.print("no episode has hand_pose_3d in the mirror; run `egopool keypoints extract TASK` first")
    if not report.ok:
        raise typer.Exit(1)
