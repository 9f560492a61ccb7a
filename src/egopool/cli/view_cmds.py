"""``egopool view TASK N`` (Rerun viewer, or an .rrd without a display) and ``egopool plot TASK N``."""

from __future__ import annotations

from pathlib import Path

import typer

from ..interop.rerun import view_episode
from .app import app
from .args import episode_argument, task_argument
from .export_cmds import print_rerun
from .output import console, print_json


@app.command("view", context_settings={"ignore_unknown_options": True})
def view_cmd(
    task: Path = task_argument(),
    index: int = episode_argument("Global episode number N (1-based)."),
    out: Path | None = typer.Option(None, "--out", "-o",
                                    help="The .rrd written when there is no display (default <task>_N<N>.rrd)."),
    spawn: bool | None = typer.Option(None, "--spawn/--no-spawn",
                                      help="Open the Rerun viewer (default: when a display exists)."),
    stride: int = typer.Option(1, "--stride", min=1, help="Log every K-th depth frame and force matrix."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Show episode N in the Rerun viewer; without a display, write an .rrd and say where."""
    result = view_episode(task, index, out=out, spawn=spawn, stride=stride)
    if json_out:
        print_json(result.to_dict())
        return
    print_rerun(result)
    if result.path is not None:
        console.print(f"no display: wrote {result.path}; open it elsewhere with `rerun {result.path}`")
    else:
        console.print("sent to the Rerun viewer")


@app.command("plot", context_settings={"ignore_unknown_options": True})
def plot_cmd(
    task: Path = task_argument(),
    indices: list[int] = episode_argument("Global episode numbers N (1-based)."),
    out: Path = typer.Option(Path("episode.png"), "--out", "-o",
                             help="PNG to write; several N get _N<n> before the suffix."),
    json_out: bool = typer.Option(False, "--json", help="Print the written paths as JSON."),
) -> None:
    """One overview sheet per episode: trajectories (top and 3-D), IMU, forces, gripper state, glove
    pressure, first/last RGB and depth frames, gap and duplicate-frame markers (matplotlib)."""
    from ..interop.plot import plot_episodes

    paths = plot_episodes(task, indices, out)
    if json_out:
        print_json([str(p) for p in paths])
        return
    for p in paths:
        console.print(f"wrote {p}")
