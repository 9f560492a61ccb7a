"""``egopool export lerobot|rerun|tum``: hand a task to other tools in their own formats."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ..interop.lerobot_events import ExportEvents
from ..interop.lerobot_export import LeRobotExport, export_lerobot
from ..interop.rerun import RerunExport, export_rerun
from ..interop.tum import CLOCKS, export_tum
from .app import app
from .args import episode_argument, episode_option, task_argument
from .output import console, print_json, progress_bar
from .ray_option import RAY_OPTION, executor_for

export_app = typer.Typer(help="Export a task to other tools' formats: a LeRobot v3.0 dataset, a Rerun .rrd "
                              "recording, TUM trajectory files.", no_args_is_help=True)
app.add_typer(export_app, name="export")

_TASK = task_argument()
_JSON = typer.Option(False, "--json", help="Print the result as JSON.")


def _print_mapping(result: LeRobotExport) -> None:
    plan = result.plan
    table = Table(title=f"LeRobot features ({plan.fps} fps, {len(plan.jobs)} episodes, "
                        f"{sum(j.length for j in plan.jobs)} frames)")
    table.add_column("LeRobot feature")
    table.add_column("dtype / shape")
    table.add_column("from")
    for name, feat in plan.features.items():
        src = plan.mapping()["features"].get(name, {}).get("from", [])
        table.add_row(name, f"{feat['dtype']} {feat['shape']}", ", ".join(src) or "-")
    console.print(table)
    for r in plan.renamed:
        console.print(f"[cyan]renamed[/cyan] {r['from']} -> {r['to']} ({r['why']})")
    for d in plan.dropped:
        console.print(f"[yellow]dropped[/yellow] {d['source']}: {d['reason']}")
    console.print("episodes: " + ", ".join(f"N={j.index} -> {j.episode_index}" for j in plan.jobs))


def _events_for(task: Path, source: str) -> ExportEvents:
    """The events of ``source`` (file or URL) that belong to ``task`` (its directory name or info's task_name)."""
    from ..curation.review_events import events_by_episode, read_events
    from ..meta.info import read_info

    name = str((read_info(task).get("task_name") or "")) if (task / "meta" / "info.json").is_file() else ""
    return ExportEvents(source, events_by_episode(read_events(source), task.resolve().name, *([name] if name else [])))


@export_app.command("lerobot")
def lerobot_cmd(
    task: Path = _TASK,
    out: str = typer.Argument(..., metavar="OUT", help="Dataset root to create (LeRobotDataset(repo_id, root=OUT)), "
                                                       "or an empty s3://BUCKET/PREFIX (meta/info.json written last)."),
    episodes: list[int] = episode_option("--episodes", "-e",
                                         help="Global N to export (repeat; default all), in ascending N."),
    episodes_from: str | None = typer.Option(None, "--episodes-from", metavar="FILE|URL",
                                             help="Export only the episodes a selection names: a file of N per "
                                                  "line, a JSON list of N or a pooling server's JSON answer "
                                                  "({\"episodes\": [{\"task\", \"index\"}]}), or the URL of "
                                                  "one (token from $EGOPOOL_TOKEN; pages followed)."),
    events_from: str | None = typer.Option(None, "--events-from", metavar="FILE|URL",
                                           help="Carry reviewers' events: a pooling server's answer to GET "
                                                "/api/v1/events (saved, or its URL; token from $EGOPOOL_TOKEN; "
                                                "pages followed) -> language_events (lerobot >= 0.6) and "
                                                "egopool_mapping.json's events."),
    state: list[str] = typer.Option(None, "--state", metavar="COL",
                                    help="Columns concatenated (float32) into observation.state (repeat, in order)."),
    action: list[str] = typer.Option(None, "--action", metavar="COL",
                                     help="Columns concatenated (float32) into action (repeat, in order); default: "
                                          "observation.action when the task has it (a LeRobot import's action), "
                                          "else the pooled [0.0] placeholder."),
    repo_id: str | None = typer.Option(None, "--repo-id", help="repo_id recorded in the mapping "
                                                                "(default local/<task>)."),
    depth: bool = typer.Option(True, "--depth/--no-depth",
                               help="Export depth streams: LeRobot depth videos (lerobot >= 0.6), or with "
                                    "--lerobot 0.4 observation.depth.<key> uint16 mm [H, W] per frame."),
    preset: str | None = typer.Option(None, "--preset", metavar="KIND",
                                      help="observation.state for a rig kind: gripper (every gripper state), hand "
                                           "(hand poses) or glove (glove pressures); instead of --state."),
    lerobot: str = typer.Option("0.6", "--lerobot", metavar="RELEASE",
                                help="The LeRobot release to write for: 0.6 (lerobot >= 0.6, default) or 0.4 "
                                     "(lerobot 0.4.x: depth as arrays, 0.4's info keys)."),
    gop: int | None = typer.Option(None, "--gop", metavar="N", min=1,
                                   help="Re-encode RGB videos with a key frame every N frames (random access "
                                        "decodes at most N frames; default: copy the recorded video where LeRobot "
                                        "can read it as is)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing OUT (an earlier LeRobot dataset) "
                                                              "once the new one is complete."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the mapping only; write nothing."),
    ray: str = RAY_OPTION,
    json_out: bool = _JSON,
) -> None:
    """Export a task as a LeRobot v3.0 dataset: frames, videos (copied when LeRobot can decode them), stats.

    Every column or stream that is dropped or renamed is printed and written to OUT/egopool_mapping.json
    (which `egopool import lerobot` reads back). LeRobot's timestamp is frame_index / fps; the pooled
    timestamp is kept as pooled_timestamp. With --ray each episode (its data parquet, videos and statistics) is
    written by its own Ray task and meta/ is assembled here: the same files as without --ray (TASK and OUT must
    be on a file system every node sees). --dry-run does not start Ray.
    """
    from ..storage._path import refuse_near_uri

    refuse_near_uri(out)  # `s3:/b/p` exported everything, then failed (a folder `s3:` left); `s3//b/p` wrote locally
    if episodes_from is not None:
        from ..curation.selection import read_selection

        if episodes:
            raise typer.BadParameter("give --episodes or --episodes-from, not both", param_hint="--episodes-from")
        from ..meta.info import read_info

        name = str((read_info(task).get("task_name") or "")) if (task / "meta" / "info.json").is_file() else ""
        episodes = read_selection(episodes_from).for_task(task.resolve().name, *([name] if name else []))
    if preset is not None:
        from ..interop.lerobot_plan import preset_state
        from ..read.reader import open_task

        if state:
            raise typer.BadParameter("give --state or --preset, not both", param_hint="--preset")
        state = preset_state(open_task(task), preset, episodes or None)
    to_bucket = out.startswith("s3://")
    if to_bucket and events_from is not None:
        raise typer.BadParameter("events go to a dataset directory; export to one, then copy it to the bucket",
                                 param_hint="--events-from")
    events = _events_for(task, events_from) if events_from is not None else None
    if to_bucket and overwrite:
        raise typer.BadParameter("an s3:// OUT must be empty: a bucket has no rename to replace a dataset "
                                 "atomically", param_hint="--overwrite")
    with progress_bar("exporting episodes", json_out or dry_run) as tick, \
            executor_for(None if dry_run else ray) as executor:
        if to_bucket:  # docs/decisions.md O18
            from ..interop.lerobot_bucket import export_lerobot_to_bucket

            result = export_lerobot_to_bucket(task, out, episodes=episodes or None, state=state or (),
                                              action=action or (), depth=depth, repo_id=repo_id, dry_run=dry_run,
                                              progress=tick, executor=executor, lerobot=lerobot, gop=gop)
        else:
            result = export_lerobot(task, Path(out), episodes=episodes or None, state=state or (),
                                    action=action or (), depth=depth, repo_id=repo_id, dry_run=dry_run,
                                    overwrite=overwrite, progress=tick, executor=executor, lerobot=lerobot, gop=gop,
                                    events=events)
    if json_out:
        print_json(result.to_dict())
        return
    _print_mapping(result)
    if result.out is None:
        console.print("dry run: nothing written")
        return
    for warning in result.warnings:
        console.print(f"[yellow]warning[/yellow] {warning}")
    if events is not None:
        exported = {p.index: p for p in result.parts}
        left = sorted(n for n in events.by_episode if n not in exported)
        if left:
            console.print(f"[yellow]warning[/yellow] {sum(len(events.by_episode[n]) for n in left)} event(s) of "
                          f"episode(s) {', '.join(map(str, left[:10]))}{' ...' if len(left) > 10 else ''} not "
                          "carried: not exported (or not in the task)")
        fps = result.plan.fps
        kept = [(e, exported[n].length) for n, evs in events.by_episode.items() if n in exported for e in evs]
        outside = [e for e, length in kept if e.frames(fps, length)[0] >= e.frames(fps, length)[1]]
        long = [e for e, length in kept if e not in outside and e.t1 * fps > length + 1e-6]
        if outside:  # no frame of its episode: in no row (the mapping lists it with language_events null)
            e = outside[0]
            console.print(f"[yellow]warning[/yellow] {len(outside)} event(s) cover no frame of their episode (they "
                          f"start at or after its end): not carried (e.g. episode {e.episode_index} "
                          f"[{e.t0:g}, {e.t1:g}) s {e.label!r}; the episode has {exported[e.episode_index].length} "
                          f"frames, {exported[e.episode_index].length / fps:g} s)")
        if long:
            e = long[0]
            console.print(f"[yellow]warning[/yellow] {len(long)} event(s) end after their episode's last frame, "
                          f"clipped to it (e.g. episode {e.episode_index} [{e.t0:g}, {e.t1:g}) s {e.label!r})")
        carried = len(kept) - len(outside)
        console.print(f"events: {carried} of {events.source} carried (egopool_mapping.json lists them"
                      + (", language_events holds them)" if lerobot != "0.4" else ")"))
    copied = sum(len(p.copied) for p in result.parts)
    total = len(result.parts) * len(result.plan.streams)
    console.print(f"wrote {result.out} ({len(result.parts)} episodes; videos copied without re-encoding: "
                  f"{copied} of {total}); mapping: {str(result.out).rstrip('/')}/egopool_mapping.json")


@export_app.command("tum", context_settings={"ignore_unknown_options": True})
def tum_cmd(
    task: Path = _TASK,
    index: int = episode_argument("Global episode number N (1-based)."),
    columns: list[str] = typer.Argument(None, metavar="COLUMN",
                                        help="Trajectory columns (default: every observation.*slam_trajectory)."),
    clock: str = typer.Option("host", "--clock", help="host: the _ns column (host monotonic ns) in seconds; "
                                                      "sensor: the points' own t (SLAM sensor clock)."),
    out: Path = typer.Option(Path("."), "--out", "-o", help="Directory for <task>_N<N>_<signal>_<clock>.txt."),
    json_out: bool = _JSON,
) -> None:
    """Write one TUM file (timestamp tx ty tz qx qy qz qw) per trajectory of episode N.

    Sorted by time with unique stamps and unit quaternions; points without a stamp, lost points
    (non-finite values, zero quaternion) and repeated stamps are skipped and counted.
    """
    if clock not in CLOCKS:
        raise typer.BadParameter(f"must be one of {', '.join(CLOCKS)}", param_hint="--clock")
    results = export_tum(task, index, columns or None, out_dir=out, clock=clock)
    if json_out:
        print_json([r.to_dict() for r in results])
        return
    for r in results:
        console.print(f"{r.column}: {r.written} of {r.points} poses -> {r.path} (frame {r.frame}, clock {r.clock}); "
                      f"skipped: {r.unstamped} without a stamp, {r.lost} lost, {r.duplicates} repeated stamps"
                      + (f"; {r.renormalised} quaternions renormalised" if r.renormalised else ""))


def print_rerun(result: RerunExport) -> None:
    """Human summary of a Rerun export: entities and row counts, then what could not be shown."""
    table = Table(title=f"Rerun recording {result.path}" if result.path else "Rerun viewer")
    table.add_column("entity")
    table.add_column("rows", justify="right")
    for entity, rows in result.entities.items():
        table.add_row(entity, str(rows))
    console.print(table)
    for note in result.notes:
        console.print(f"[yellow]note[/yellow] {note}")


@export_app.command("rerun", context_settings={"ignore_unknown_options": True})
def rerun_cmd(
    task: Path = _TASK,
    indices: list[int] = episode_argument("Global N (default: every episode).", required=False),
    out: Path = typer.Option(..., "--out", "-o", help="The .rrd file to write (open it with `rerun FILE.rrd`)."),
    stride: int = typer.Option(1, "--stride", min=1, help="Log every K-th depth frame and force matrix "
                                                          "(stored raw in the .rrd)."),
    events_from: str | None = typer.Option(None, "--events-from", metavar="FILE|URL",
                                           help="Show reviewers' events (GET /api/v1/events of a pooling server, "
                                                "saved or its URL) as text at the frames they start and end."),
    json_out: bool = _JSON,
) -> None:
    """Write episodes as a Rerun recording: videos (stored MP4, no re-encode), depth with pinholes,
    trajectories as transforms in their own frame_axes, IMU / forces / glove / gripper state as scalars,
    force matrices as tensors, hand pose as points; timelines frame_index, wall_time and the device clocks."""
    with progress_bar("logging episodes", json_out) as tick:
        result = export_rerun(task, out, indices or None, stride=stride, progress=tick,
                              events=_events_for(task, events_from).by_episode if events_from else None)
    if json_out:
        print_json(result.to_dict())
        return
    print_rerun(result)
    console.print(f"wrote {result.path}; open it with `rerun {result.path}`")
