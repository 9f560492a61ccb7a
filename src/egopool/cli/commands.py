"""The index of egopool's top-level commands: which module defines each, and its one-line summary.

``egopool --help`` lists the commands from this index without importing a single command module;
``egopool ls TASK`` imports the module of ``ls`` alone (issue 16 B: a command loads what it needs
and nothing else). A command module attaches its commands to :data:`egopool.cli.app.app` when
imported, as before. ``tests/test_cli_startup.py`` checks the index against the commands the
modules define (names, modules and summaries), so a new command fails the suite until it is
listed here.
"""

from __future__ import annotations

__all__ = ["COMMANDS", "Entry"]

#: (name, modules defining it under egopool.cli, summary = the first paragraph of its help).
Entry = tuple[str, tuple[str, ...], str]

#: Every top-level command and group, in ``--help``'s order.
COMMANDS: tuple[Entry, ...] = (
    ("audit-gaps", ("audit_cmd",),
     "Find holes in hardware_ns (unwrapped when 32-bit truncated) and every *_ns column."),
    ("demo", ("demo_cmd",), "Build a validated multi-device task from the bundled real recordings."),
    ("info", ("inspect_cmds",), "Show a task's meta/info.json declarations."),
    ("ls", ("inspect_cmds",), "List a task's episodes (global N, chunk, file, rows, streams, size, complete)."),
    ("show", ("inspect_cmds",), "Show one episode: its meta row, columns with types, streams and trajectories."),
    ("delete", ("ops_cmds",),
     "Delete episodes by global N: videos, data and meta row, verified gone (file_format.md §2, §9)."),
    ("migrate", ("ops_cmds",), "Bring a legacy task to the v1.1.2 layout (file_format.md §2, §6.1, §11)."),
    ("compress", ("ops_cmds",),
     "Bring a task's FFV1 depth (.mkv) to the spec's 12-bit log HEVC (.mp4), every episode at once (§3, §8)."),
    ("edit", ("edit_cmds",),
     "Reorganise tasks: merge, split, rename, task strings, columns and streams; journaled, resumable, on a "
     "directory or s3:// alike."),
    ("record", ("record_cmd",),
     "Record episodes from cameras, RealSense devices or recordings, and simulated devices."),
    ("devices", ("record_cmd",),
     "List the cameras FFmpeg can open on this machine (with their modes) and connected RealSense cameras, "
     "each with the --device spec that records it."),
    ("simulate", ("simulate_cmd",), "Record N episodes of a simulated rig into a pooled_episodes_v1 task."),
    ("pack", ("transfer_cmds",),
     "Pack episodes into upload zips, one per episode: the §9 single-episode slice plus a manifest."),
    ("upload", ("transfer_cmds",),
     "Upload episodes to a pooling server (`egopool serve`), resumably (file_format.md §9)."),
    ("sync", ("sync_cmd",),
     "Copy a task's committed episodes between a directory and a bucket, both ways, resumably."),
    ("serve", ("transfer_cmds",),
     "Run the pooling importer server (FastAPI + uvicorn, from the optional extra 'server' of egopool)."),
    ("validate", ("validate_cmd",),
     "Check tasks against the pooled_episodes_v1 spec (file_format.md §12, multi_device_storage.md §8)."),
    ("view", ("view_cmds",), "Show episode N in the Rerun viewer; without a display, write an .rrd and say where."),
    ("plot", ("view_cmds",),
     "One overview sheet per episode: trajectories (top and 3-D), IMU, forces, gripper state, glove pressure, "
     "first/last RGB and depth frames, gap and duplicate-frame markers (matplotlib)."),
    ("export", ("export_cmds",),
     "Export a task to other tools' formats: a LeRobot v3.0 dataset, a Rerun .rrd recording, TUM trajectory "
     "files."),
    ("import", ("import_cmds", "interop_import_cmds"),
     "Import recordings from other layouts (RGB-D frame folders, TUM trajectories, EuRoC/ASL, LeRobot v3.0, "
     "Project Aria) into a pooled_episodes_v1 task."),
    ("stats", ("ops_cmds",), "Rebuild or audit meta/stats.json (file_format.md §4)."),
    ("repair", ("ops_cmds",), "Repair episode metadata from the data itself; clean up after killed writers."),
    ("keypoints", ("keypoints_cmds",),
     "Hand keypoints: MediaPipe extraction into keypoints_output/ and the back-fill of "
     "observation.<side>_hand_pose (file_format.md §10, §7.2)."),
    ("token", ("transfer_cmds",), "Access tokens of `egopool serve` (hashed at rest, with scopes)."),
)
