"""``egopool simulate``: record episodes of a simulated multi-device rig (multi_device_storage.md §4–§6)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..devices.simulated import RIGS, SimulatedRig, build_rig
from ..errors import EgopoolError
from ..recorder import Recorder
from ..write.task_writer import TaskWriter
from .app import app
from .args import record_fps_option
from ..codecs.depth import DEPTH_CODECS
from ..write.checks import check_episode_seconds
from .output import changed_values_to_stderr, console, err_console, print_json

_RIG_HELP = ("Device combination: full = Appendix B (ego S80C + 2 UMI grippers + 2 USB gloves); "
             "d435x2 = two D435 (d435_rgb, d435_rgb_2); uvc3 = three UVC cameras; gripper_d405 = D405_head as "
             "ego + gripper + BLE glove; lite_gloves = lite program, BLE + USB glove + UVC.")
#: Bound of --seconds (the fps bounds are cli.args.RECORD_FPS: the recorder's queues are sized in
#: rows, fps / 2): an episode longer than a day is a typo, not a simulation.
_MAX_SECONDS = 86400.0


@app.command("simulate")
def simulate_cmd(
    rig_name: str = typer.Option("full", "--rig", help=_RIG_HELP),
    episodes: int = typer.Option(1, "--episodes", "-n", min=1, help="Episodes to record."),
    seconds: float = typer.Option(3.0, "--seconds", "-s", min=0.01, max=_MAX_SECONDS,
                                  help="Length of each episode in seconds."),
    out: Path = typer.Option(Path("data/recordings"), "--out", "-o", help="Recordings root (the task is a "
                             "directory inside it)."),
    task: str | None = typer.Option(None, "--task", "-t", help="Task name (default: sim_<rig>)."),
    fps: float = record_fps_option(),
    scale: int = typer.Option(1, "--scale", min=1, help="Divide every frame size by this for quick runs."),
    realtime: bool = typer.Option(False, "--realtime/--fast", help="Tick against the wall clock (ticks the writer "
                                  "cannot keep up with are skipped and counted) or on a virtual clock as fast as "
                                  "the writer allows (default)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulated signals."),
    depth_codec: str = typer.Option("auto", "--depth-codec", help=f"Depth streams: auto, {' or '.join(DEPTH_CODECS)} "
                                    "(hevc12 = 12-bit log code, small, lossy, clips to 100..20000 mm and counts the "
                                    "clipped pixels; ffv1 = lossless uint16 mm MKV; auto = hevc12 unless --realtime "
                                    "measures that this machine cannot hold it, then ffv1 for the whole task: run "
                                    "`egopool compress TASK` afterwards). A task keeps the codec it has."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON summary."),
) -> None:
    """Record N episodes of a simulated rig into a pooled_episodes_v1 task.

    Every device kind produces plausible signals (moving SLAM trajectories in their declared frames,
    400 Hz IMU, 16x16 glove pressure, forces and 250x250x3 force matrices, RGB and depth video), named
    and declared as multi_device_storage.md says.
    """
    if rig_name not in RIGS:
        raise EgopoolError(f"unknown rig {rig_name!r}", hint=f"use one of {', '.join(sorted(RIGS))}")
    check_episode_seconds(seconds, fps, "--seconds")  # float32 timestamps, before anything is written
    rig = build_rig(rig_name, scale=scale, depth_codec=depth_codec)
    writer = TaskWriter(out, task if task is not None else f"sim_{rig_name}", fps=fps)
    rec = Recorder(writer, rig)
    sim = SimulatedRig(rig, fps=fps, seed=seed)
    done: list[dict[str, Any]] = []
    if realtime:  # before the first tick: say whether this machine holds the rig (issue 20)
        if not json_out:
            err_console.print("measuring what this machine can hold…", markup=False, highlight=False)
        report = rec.check_capacity()
        if not json_out:
            for line in report.lines():
                err_console.print(line, markup=False, highlight=False, soft_wrap=True)
    with changed_values_to_stderr(), \
            Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                     console=err_console, disable=json_out or not err_console.is_terminal, transient=True) as progress:
        bar = progress.add_task(f"recording {rig_name}", total=episodes)
        for _ in range(episodes):
            ep = sim.record(rec, seconds, realtime=realtime,
                            on_tick=_skip_status(rec, progress, bar, rig_name) if realtime else None)
            done.append({"episode_index": ep.index, "chunk": ep.result.chunk, "file": ep.result.file,
                         "length": ep.result.length, "drop_stats": ep.drop_stats,
                         "files": [str(p) for p in ep.result.paths]})
            progress.advance(bar)
    summary = {"task": str(writer.task_dir), "rig": rig_name, "devices": [d.key for d in rig.devices],
               "episodes": done, "capacity": rec.capacity.to_dict() if rec.capacity is not None else None}
    if json_out:
        print_json(summary)
        return
    if rec.capacity is not None and rec.capacity.depth_codec == "ffv1" and rec.capacity.depth_reason == "measured":
        console.print(f"depth was recorded losslessly in FFV1 (this machine cannot hold 12-bit HEVC in real time): "
                      f"run `egopool compress {writer.task_dir}` to bring it to the spec's 12-bit log HEVC",
                      markup=False, highlight=False)
    console.print(f"[bold]{writer.task_dir}[/bold]: {len(done)} episode(s) of rig {rig_name!r} "
                  f"({len(rig.devices)} devices)")
    for e in done:
        skipped = e["drop_stats"].get("ticks_skipped", 0)
        console.print(f"  episode {e['episode_index']}: {e['length']} rows, {len(e['files'])} files"
                      + (f", {skipped} ticks skipped" if skipped else ""))


def _skip_status(rec: Recorder, progress: Progress, bar: Any, rig_name: str) -> Any:
    """A feeder-thread callback putting the ticks skipped so far (and the last one's time) on the progress
    line, at most 4 times a second."""
    last = [0.0]

    def update() -> None:
        now = time.monotonic()
        if now - last[0] < 0.25:
            return
        last[0] = now
        live = rec.live_stats()
        skip = live["last_skip"]
        text = f"recording {rig_name}: {live['rows']} rows, {live['ticks_skipped']} ticks skipped"
        if skip is not None:
            text += f" (last at {skip['seconds']:.1f} s)"
        progress.update(bar, description=text)
    return update
