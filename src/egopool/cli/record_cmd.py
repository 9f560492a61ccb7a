"""``egopool record`` and ``egopool devices``: the operator's commands for real devices.

``record`` opens the devices in the order given (multi_device_storage.md §2.3), refuses
forbidden combinations before anything opens (§5.1), and records episodes while a live table
shows every device (fps in / out, queued frames, repeats, drops, MB/s). Keys (a terminal):
Enter finishes the episode, ``a`` aborts it (its N is recycled for the next one,
file_format.md §7.5), ``q`` or Ctrl-C finishes it and quits; between episodes Enter starts the
next one and ``q`` quits. A summary of every episode is printed at the end.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich.live import Live
from rich.table import Table

from .._sigint import sigint_deferred
from ..errors import DeviceError, EgopoolError
from ..sources import RecordingSession, list_devices, parse_device_specs
from ..sources.session import DeviceLine
from ..write.checks import check_episode_seconds, check_task_name
from ..write.task_writer import TaskWriter
from .app import app
from .args import record_fps_option
from .output import console, err_console, print_json

_DEVICE_HELP = ("A device, in opening order (repeat the option): KIND:TARGET[?opt=val&...], "
                "KIND:TARGET one of uvc:/dev/video0, uvc:lavfi:testsrc2 (an FFmpeg input format first), "
                "realsense:SERIAL, realsense-bag:FILE, sim:glove, sim:glove-left, sim:glove-right, sim:ble-glove, "
                "sim:gripper, sim:s80c, sim:s80m, sim:d435, sim:uvc; options size=1280x720, fps=30, pix=mjpeg, "
                "name=NAME, role=ego or role=none (sim:s80c / sim:s80m are the ego camera unless role=none), "
                "key=uvc:ID, depth=ffv1, realtime=0 (recordings, with --fast), side=left|right.")


class _Keys:
    """Single key presses from a terminal, on a thread (cbreak mode: Ctrl-C still interrupts)."""

    def __init__(self) -> None:
        self.q: queue.Queue[str] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved: Any = None
        self.enabled = sys.stdin.isatty()

    def __enter__(self) -> _Keys:
        if self.enabled:
            import termios
            import tty

            fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
            self._thread = threading.Thread(target=self._read, name="egopool-keys", daemon=True)
            self._thread.start()
        return self

    def _read(self) -> None:
        fd = sys.stdin.fileno()
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                ch = os.read(fd, 1).decode(errors="replace")
                if ch:
                    self.q.put("enter" if ch in ("\r", "\n") else ch.lower())

    def get(self, timeout: float) -> str | None:
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            return None

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._saved is not None:
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f}"


class _Display:
    """The live status table (rebuilt from RecordingSession.status() a few times a second)."""

    def __init__(self, session: RecordingSession) -> None:
        self.session = session
        self._bytes: dict[str, tuple[float, int]] = {}

    def _rate(self, key: str, now: float, nbytes: int) -> float:
        t0, b0 = self._bytes.get(key, (now, nbytes))
        rate = (nbytes - b0) / (now - t0) if now > t0 else 0.0
        if now - t0 >= 1.0 or key not in self._bytes:
            self._bytes[key] = (now, nbytes)
        return max(0.0, rate)

    def render(self, keys: bool) -> Table:
        live, lines = self.session.status()
        now = time.monotonic()
        n = live["index"]
        skip = live["last_skip"]
        title = (f"recording episode N={n if n is not None else '…'}  {live['elapsed']:.1f} s  {live['rows']} rows  "
                 f"{live['ticks_skipped']} ticks skipped"
                 + (f" (last at {skip['seconds']:.1f} s)" if skip is not None else "")
                 + f"  write queue {live['write_queue']}")
        cap = self.session.recorder.capacity if self.session.recorder is not None else None
        if cap is not None:
            title += "\n" + cap.summary()
        caption = "Enter finish · a abort · q finish and quit" if keys else "Ctrl-C finishes"
        table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
        for col in ("device", "slots", "state", "fps in", "fps out", "queued", "repeats", "drops", "MB/s", "MB"):
            table.add_column(col, justify="left" if col in ("device", "slots", "state") else "right")
        line: DeviceLine
        for line in lines:
            state = line.state if not line.error else f"error: {line.error}"
            table.add_row(line.label, ",".join(line.slots) or "-", state, f"{line.fps_in:.1f}",
                          f"{line.fps_out:.1f}" if line.slots else "-",
                          str(line.queued), str(line.repeats), str(line.drops),
                          f"{self._rate(line.label, now, line.bytes) / 1e6:.2f}", _mb(line.bytes))
        data = live["data_bytes"]
        table.add_row("data parquet", "-", "", "", "", "", "", "", f"{self._rate('data', now, data) / 1e6:.2f}",
                      _mb(data))
        return table


def _episode_summary(done: Any, fps: float) -> dict[str, Any]:
    stats = done.drop_stats
    return {"episode_index": done.index, "status": "finished", "length": done.result.length,
            "seconds": round(done.result.length / fps, 3),
            "ticks_skipped": int(stats.get("ticks_skipped", 0)),
            "repeated": {k[: -len("_repeated_count")]: v for k, v in stats.items() if k.endswith("_repeated_count")},
            "dropped": {k[: -len("_dropped")]: v for k, v in stats.items() if k.endswith("_dropped")},
            "drop_stats": stats, "files": [str(p) for p in done.result.paths]}


@contextlib.contextmanager
def _opened(session: RecordingSession) -> Iterator[RecordingSession]:
    """Open every device; on the way out close them and, when the run created the task and
    recorded no episode into it (Ctrl-C before the first row, a device that never delivered),
    remove the empty task again."""
    session.open()
    try:
        yield session
    finally:
        session.close()
        if session.has_writer and session.writer.remove_if_unused():
            err_console.print(f"no episode was recorded; the new task {session.writer.task_dir} was not kept",
                              markup=False, highlight=False)


@app.command("record")
def record_cmd(
    task: Path = typer.Argument(..., help="Task directory to record into (created when missing); its parent is the "
                                "recordings root."),
    device: list[str] = typer.Option(..., "--device", "-d", help=_DEVICE_HELP),
    seconds: float | None = typer.Option(None, "--seconds", "-s", min=0.1, max=86400.0,
                                         help="Finish each episode after this many seconds."),
    episodes: int | None = typer.Option(None, "--episodes", "-n", min=1, help="Stop after this many finished "
                                        "episodes (default: until q / Ctrl-C in a terminal, else 1)."),
    fps: float = record_fps_option(),
    program: str = typer.Option("main", "--program", help="Declaration style of gloves: main or lite (§6.4)."),
    fast: bool = typer.Option(False, "--fast", help="Record as fast as possible on a virtual clock (recordings with "
                              "realtime=0 and simulated devices only), until the recordings end or --seconds."),
    depth_codec: str = typer.Option("auto", "--depth-codec", help="Depth streams of devices without depth=: auto "
                                    "(12-bit log HEVC unless the measurement before the first episode says this "
                                    "machine cannot hold it in real time, then lossless FFV1 for the whole task; run "
                                    "`egopool compress TASK` afterwards), hevc12 or ffv1. A task keeps the codec it "
                                    "has."),
    compress_after: bool = typer.Option(False, "--compress-after", help="After the last episode (devices closed), "
                                        "bring the task's FFV1 depth to 12-bit log HEVC at the lowest CPU priority "
                                        "(`egopool compress TASK --nice`; resumable: Ctrl-C, then run that)."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON (no live table)."),
) -> None:
    """Record episodes from cameras, RealSense devices or recordings, and simulated devices.

    Conflicts (multi_device_storage.md §5.1) are refused before any device opens. In a terminal:
    Enter finishes an episode, a aborts it (its N is reused by the next one), q / Ctrl-C finishes
    and quits; between episodes Enter starts the next one.
    """
    task = task.expanduser()
    if not task.name or task.name in (".", ".."):
        raise EgopoolError(f"{task}: not a task directory name", hint="e.g. recordings/pick_cup")
    check_task_name(task.name)
    if seconds is not None:  # float32 timestamps, before any device opens (found by qa12: it recorded)
        check_episode_seconds(seconds, fps, "--seconds")
    root = task.parent if str(task.parent) else Path(".")
    # Every spec parsed, the combination checked (§5.1) and every device opened before the task
    # is created: a bad --device or a missing camera leaves nothing on disk.
    session = RecordingSession(lambda: TaskWriter(root, task.name, fps=fps), parse_device_specs(device),
                               program=program, depth_codec=depth_codec)
    session.check_conflicts()
    if fast and not session.replayable:
        raise DeviceError("--fast needs a recording played with realtime=0, and no live device (simulated "
                          "devices may join)", hint="add ?realtime=0 to realsense-bag: devices, or drop --fast")
    done: list[dict[str, Any]] = []
    interrupted = False
    stopped_by: str | None = None
    with _opened(session):
        writer = session.writer
        if fast:
            try:
                for _ in range(episodes or 1):  # without --seconds: until the recordings played to their end
                    ep = session.record_fast(seconds)
                    if ep is None:
                        err_console.print(f"the recordings played to their end after {len(done)} episode(s)",
                                          markup=False, highlight=False)
                        break
                    done.append(_episode_summary(ep, session.writer.fps))
            except KeyboardInterrupt:  # the episode being recorded is discarded (its N recycled)
                interrupted = True
        else:
            if _measure(session, json_out):  # Ctrl-C while measuring: quit with the (empty) summary (R19)
                stopped_by = _record_live(session, done, seconds, episodes, json_out)
    cap = session.recorder.capacity if session.recorder is not None else None
    summary = {"task": str(writer.task_dir), "devices": [s.label for s in session.sources], "episodes": done,
               "capacity": cap.to_dict() if cap is not None else None}
    finished = any(e["status"] == "finished" for e in done)
    if not json_out:
        _print_summary(summary, fps)
        if cap is not None and cap.depth_codec == "ffv1" and cap.depth_reason == "measured" and finished \
                and not compress_after:
            err_console.print(f"depth was recorded losslessly in FFV1 (this machine cannot hold 12-bit HEVC in real "
                              f"time): run `egopool compress {writer.task_dir} --nice` to bring it to the spec's "
                              "12-bit log HEVC", markup=False, highlight=False, soft_wrap=True)
    if compress_after and finished and not interrupted and stopped_by is None:
        summary["compress"] = _compress_after(writer.task_dir, json_out)
    if json_out:
        print_json(summary)
    if stopped_by is not None:
        raise DeviceError(f"recording stopped, {stopped_by}", hint="check the device (`egopool devices`); the "
                          "episodes above are recorded")
    if interrupted:
        err_console.print(f"the episode being recorded was discarded; {len(done)} episode(s) are in "
                          f"{writer.task_dir}", markup=False, highlight=False)
        raise KeyboardInterrupt


def _compress_after(task_dir: Path, json_out: bool) -> dict[str, Any]:
    """``egopool compress TASK --nice`` once the devices are closed (decisions R27); its report as a dict."""
    from ..ops.compress import compress_task

    if not json_out:
        err_console.print("compressing FFV1 depth to 12-bit log HEVC at low priority (Ctrl-C stops; run "
                          f"`egopool compress {task_dir}` to finish later)…", markup=False, highlight=False)
    report = compress_task(task_dir, nice=True)
    if not json_out:
        if report.streams:
            err_console.print(f"compressed {len(report.streams)} depth stream(s) of {', '.join(report.keys)}: "
                              f"{report.frames} frames, {report.bytes_before / 1e6:.1f} -> "
                              f"{report.bytes_after / 1e6:.1f} MB", markup=False, highlight=False)
        for note in report.notes:
            err_console.print(note, markup=False, highlight=False)
    return report.to_dict()


def _measure(session: RecordingSession, json_out: bool) -> bool:
    """Measure, before the first episode, whether this machine holds the rig (issue 20) and say so; False
    when Ctrl-C came meanwhile (nothing is recorded then)."""
    rec = session.recorder
    assert rec is not None
    if not json_out:
        err_console.print("measuring what this machine can hold…", markup=False, highlight=False)
    with sigint_deferred() as interrupted:  # a few seconds of encoding: Ctrl-C quits right after
        report = rec.check_capacity()
    if not json_out:
        for line in report.lines():
            err_console.print(line, markup=False, highlight=False, soft_wrap=True)
    return not interrupted


def _record_live(session: RecordingSession, done: list[dict[str, Any]], seconds: float | None,
                 episodes: int | None, json_out: bool) -> str | None:
    """Record episodes until the limit, q or Ctrl-C; returns why a device stopped the recording
    (no terminal to ask the operator), else None."""
    display = _Display(session)
    with _Keys() as keys:
        interactive = keys.enabled
        limit = episodes if episodes is not None else (None if interactive else 1)
        while limit is None or sum(1 for e in done if e["status"] == "finished") < limit:
            action = _one_episode(session, display, keys, seconds, json_out)
            done.append(action["summary"])
            e = action["summary"]
            if e["status"] == "finished":
                line = f"episode {e['episode_index']}: {e['length']} rows, {e['ticks_skipped']} ticks skipped"
            elif e["status"] == "discarded":
                line = f"no rows recorded, episode discarded ({e['reason']})"
            else:
                line = f"episode aborted; N={e['episode_index']} is recycled for the next one"
            if not json_out:
                err_console.print(line)
            if action["silent"]:
                return str(e["reason"])
            if action["quit"]:
                return None
            if limit is not None and sum(1 for e in done if e["status"] == "finished") >= limit:
                return None
            if interactive and seconds is None:
                if not json_out:
                    err_console.print("Enter: next episode · q: quit")
                try:
                    while True:
                        k = keys.get(0.2)
                        if k == "enter":
                            break
                        if k == "q":
                            return None
                except KeyboardInterrupt:  # Ctrl-C between episodes quits, with the summary
                    return None
    return None


def _one_episode(session: RecordingSession, display: _Display, keys: _Keys, seconds: float | None,
                 json_out: bool) -> dict[str, Any]:
    rec = session.recorder
    assert rec is not None
    with sigint_deferred() as interrupted:  # starting: a Ctrl-C now ends the episode right after
        session.start_episode(max_ticks=max(1, int(round(seconds * rec.fps))) if seconds is not None else None)
    quit_after = bool(interrupted)
    abort = False
    live = Live(display.render(keys.enabled), console=err_console, refresh_per_second=4,
                transient=False) if not json_out and err_console.is_terminal else contextlib.nullcontext()
    try:
        with live:
            while True:
                k = keys.get(0.25) if keys.enabled else None
                if not keys.enabled:
                    time.sleep(0.25)
                if isinstance(live, Live):
                    live.update(display.render(keys.enabled))
                if k == "enter" or quit_after:
                    break
                if k == "a":
                    abort = True
                    break
                if k == "q":
                    quit_after = True
                    break
                if rec.wait_ticks(0):  # --seconds reached, or the episode could not go on (see below)
                    break
                video = [s for s in session.sources if s.reg is not None and s.reg.rgb_slots]
                if video and all(s.ended or s.status().state == "error" for s in video):
                    quit_after = True  # every video input played to its end (or failed)
                    break
    except KeyboardInterrupt:
        quit_after = True
    # Publishing (or discarding) is not cut short by another Ctrl-C: it only asks to quit afterwards.
    with sigint_deferred() as interrupted:
        if abort:
            n = session.abort_episode()
            summary = {"episode_index": n, "status": "aborted", "length": 0, "ticks_skipped": 0}
        else:
            ep = session.finish_or_discard()
            summary = _episode_summary(ep, session.writer.fps) if ep is not None else {}
        if not summary or summary["episode_index"] is None:
            # ended before every device delivered its first frame: nothing was written, no N taken
            summary = {"episode_index": None, "status": "discarded", "length": 0, "ticks_skipped": 0,
                       "reason": rec.discard_reason or "it ended before every device delivered a frame"}
    # a device that stays silent would fail every next episode too: without a terminal, stop
    silent = summary["status"] == "discarded" and rec.discard_reason is not None and not keys.enabled
    return {"quit": quit_after or bool(interrupted), "silent": silent, "summary": summary}


def _print_summary(summary: dict[str, Any], fps: float) -> None:
    table = Table(title=f"{summary['task']}: {sum(1 for e in summary['episodes'] if e['status'] == 'finished')} "
                  f"episode(s) recorded", title_justify="left")
    for col in ("N", "status", "rows", "seconds", "ticks skipped", "repeated frames", "dropped frames"):
        table.add_column(col, justify="left" if col in ("status",) else "right")
    for e in summary["episodes"]:
        if e["status"] == "aborted":
            table.add_row(str(e["episode_index"]), "aborted (N recycled)", "0", "-", "-", "-", "-")
            continue
        if e["status"] == "discarded":
            table.add_row("-", "discarded (no rows)", "0", "-", "-", "-", "-")
            continue
        table.add_row(str(e["episode_index"]), "finished", str(e["length"]), f"{e['length'] / fps:.2f}",
                      str(e["ticks_skipped"]), str(sum(e["repeated"].values())), str(sum(e["dropped"].values())))
    console.print(table)


@app.command("devices")
def devices_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the cameras FFmpeg can open on this machine (with their modes) and connected RealSense cameras,
    each with the --device spec that records it."""
    found = list_devices()
    if json_out:
        print_json(found)
        return
    console.print(f"cameras ({found['input_format']} on {found['platform']}): {len(found['cameras'])}")
    for cam in found["cameras"]:
        console.print(f"  {cam['spec']}  {cam['description']}")
        for m in cam["modes"]:
            console.print(f"      {m['pix_fmt']}{' (compressed)' if m['compressed'] else ''}: {' '.join(m['sizes'])}")
    console.print(f"RealSense: {len(found['realsense'])}")
    for r in found["realsense"]:
        console.print(f"  {r['spec']}  {r['name']} (firmware {r['firmware_version']}, USB {r['usb_type_descriptor']})")
        for m in r["modes"]:
            console.print(f"      {m['stream']} {m['format']} {m['width']}x{m['height']}@{m['fps']}")
    for note in found["notes"]:
        console.print(f"note: {note}")
    if not found["cameras"] and not found["realsense"]:
        console.print("no camera found; FFmpeg sources work the same way: "
                      "--device 'uvc:lavfi:testsrc2=size=1280x720:rate=30'")
