"""Damage a task file of every kind and run every reader, the validator and every CLI command on it.

Shared by tests/test_fuzz_damage.py (a small deterministic Hypothesis run in CI) and
benchmarks/bench_fuzz_damage.py (thousands of random inputs). Issue 12 "How it is checked":
no exception outside ``egopool.EgopoolError``, no file modified, bounded time and memory.

File kinds (:data:`KINDS`): info.json, stats.json, tasks.jsonl, the ``meta/episodes`` parquet,
the data parquet, the RGB MP4, the FFV1 depth MKV, a frame of a legacy PNG16 depth directory
(and the directory), the abort marker ``recycled_episode.json`` and a reservation dotfile.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from validate_support import FM, TRAJ, build_task

from egopool import EgopoolError, open_task
from egopool.cli.app import main
from egopool.codecs.depth import read_depth_frames
from egopool.codecs.depth_png import encode_png16
from egopool.validate import validate_task

DATA0 = "data/chunk-000/episode-000.parquet"
META0 = "meta/episodes/chunk-000/episode-000.parquet"
PNG_DIR = "videos/chunk-000/d435_depth/episode-001"

#: kind -> path of the damaged file, relative to the task.
KINDS: dict[str, str] = {
    "info.json": "meta/info.json",
    "stats.json": "meta/stats.json",
    "tasks.jsonl": "meta/tasks.jsonl",
    "meta parquet": META0,
    "data parquet": DATA0,
    "mp4": "videos/chunk-000/head_left_rgb/episode-000.mp4",
    "mkv": "videos/chunk-000/d435_depth/episode-000.mkv",
    "png16 frame": f"{PNG_DIR}/000000.png",
    "png16 dir": PNG_DIR,
    "marker": "meta/recycled_episode.json",
    "reservation": "meta/.reserved-3",
}
JSON_KINDS = ("info.json", "stats.json", "tasks.jsonl", "marker")
PARQUET_KINDS = ("meta parquet", "data parquet")

#: Every CLI command that reads a task, as argv after TASK is substituted; each leaves the task unchanged.
COMMANDS: dict[str, list[str]] = {
    "info": ["info", "{task}"],
    "info --json": ["info", "--json", "{task}"],
    "ls": ["ls", "--json", "{task}"],
    "show": ["show", "{task}", "1"],
    "show 2": ["show", "--json", "{task}", "2"],
    "validate": ["validate", "--json", "{task}"],
    "audit-gaps": ["audit-gaps", "--json", "{task}"],
    "stats check": ["stats", "check", "--json", "{task}"],
    "stats recalc": ["stats", "recalc", "--dry-run", "--json", "{task}"],
    "delete": ["delete", "--dry-run", "--json", "--no-registry", "{task}", "1", "2"],
    "migrate": ["migrate", "--dry-run", "--json", "--no-registry", "--split-episodes", "{task}"],
    "repair force-scale": ["repair", "force-scale", "--dry-run", "--json", "--no-registry", "{task}"],
    "compress": ["compress", "--dry-run", "--json", "--no-registry", "{task}"],
    "sync": ["sync", "--dry-run", "--json", "{task}", "{out}/synced"],
    "pack": ["pack", "{task}", "1", "2", "-o", "{out}", "--no-registry", "--json"],
    "upload": ["upload", "{task}", "--server", "http://127.0.0.1:9", "--retries", "0", "--timeout", "1",
               "--no-registry", "--json"],  # nothing listens on port 9: it packs, then fails to connect
    # exports write under {out} only (beside the work directory); without the interop extra they
    # must still end in egopool's one-line message
    "export lerobot": ["export", "lerobot", "{task}", "{out}/lerobot", "--json"],
    "export rerun": ["export", "rerun", "{task}", "1", "2", "-o", "{out}/task.rrd", "--json"],
    "export tum": ["export", "tum", "{task}", "1", "-o", "{out}/tum", "--json"],
    "view": ["view", "{task}", "2", "--no-spawn", "-o", "{out}/view.rrd", "--json"],
    "plot": ["plot", "{task}", "1", "2", "-o", "{out}/episode.png", "--json"],
    # extraction needs the keypoints venv (MediaPipe): in the core venv it is refused in one line
    "keypoints extract": ["keypoints", "extract", "{task}", "1", "--mirror-root", "{out}/kp", "--json"],
    "keypoints backfill": ["keypoints", "backfill", "{task}", "--dry-run", "--no-registry",
                           "--mirror-root", "{out}/kp", "--json"],
    # edit plans from every episode's files (issue 30): the dry run reads them all and writes nothing
    "edit remove-column": ["edit", "remove-column", "{task}", "observation.left_glove", "--dry-run", "--json"],
    "edit split": ["edit", "split", "{task}", "--into", "{out}/split", "--episodes", "1,2", "--dry-run", "--json"],
}
#: Commands that take seconds per run (video export, rendering): each damaged input runs half of
#: them in turn (:func:`commands_for`), so every one still meets every file kind three times.
SLOW_COMMANDS = ("export lerobot", "export rerun", "view", "plot")


def commands_for(i: int) -> list[str]:
    """The commands run on the ``i``-th damaged input of a kind: every fast one, half of the slow ones."""
    slow = SLOW_COMMANDS[i % 2::2]
    return sorted(name for name in COMMANDS if name not in SLOW_COMMANDS or name in slow)


#: Commands that read no task (they write a new one, import another format, run a server or list
#: hardware): covered by their own tests.
NOT_TASK_COMMANDS = {"demo", "simulate", "import", "record", "devices", "serve", "token"}


def build_reference(root: Path) -> Path:
    """Two episodes of every column kind; episode 2's depth stream as a legacy PNG16 directory;
    an abort marker and a stale reservation."""
    task = build_task(root, episodes=2)
    mkv2 = task / "videos/chunk-000/d435_depth/episode-001.mkv"
    frames = list(read_depth_frames(mkv2))
    mkv2.unlink()
    (task / PNG_DIR).mkdir()
    for i, d in enumerate(frames):
        (task / PNG_DIR / f"{i:06d}.png").write_bytes(encode_png16(d))
    (task / "meta/recycled_episode.json").write_text('{"episode_index": 3, "freed_at": "2026-01-01T00:00:00+00:00"}')
    (task / "meta/.reserved-3").write_text("2147483646")  # no such process: a stale reservation
    return task


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (not following symlinks): regular files by sha256, others by kind."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISREG(st.st_mode):
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = "link:" + os.readlink(p)
            else:
                out[rel] = f"mode:{stat.S_IFMT(st.st_mode)}"
    return out


# -- damage ---------------------------------------------------------------------------------------------------
def _replace(p: Path, make: Callable[[Path], None]) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()
    make(p)


def _json_paths(doc: Any, prefix: tuple[Any, ...] = (), limit: int = 400) -> list[tuple[Any, ...]]:
    out = [prefix]
    stack = [(doc, prefix)]
    while stack and len(out) < limit:
        node, at = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append(at + (k,))
            stack.append((v, at + (k,)))
    return out


def _set_path(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    node = doc
    for k in path[:-1]:
        node = node[k]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


#: JSON texts that break readers in known ways, beside the random values Hypothesis draws.
NASTY_JSON: list[str] = ["null", "true", "0", "-1", str(2**70), "1" + "0" * 5000, "1.5", "NaN", "Infinity", '""',
                         json.dumps("x" * 10000), "[]", "{}", '["right"]', '{"+X": ["right"]}',
                         "[" * 1000 + "]" * 1000, "[" * 70 + "]" * 70, '"{c}/{f}/{zz}"', '"../../etc"',
                         '"data/chunk-{c:03d}/episode-{f:03d}.parquet"', '"\\udcff"', "1e999", "-0.0"]
_SLOT = "@@egopool-fuzz@@"


@dataclass
class Damage:
    """One damage: which file kind, which operation, and its parameters (for the figures)."""

    kind: str
    op: str
    detail: str = ""


def damage(task: Path, draw: Any, st: Any, kind: str | None = None) -> Damage:
    """Apply one random damage to a file of ``kind`` (drawn when None) with Hypothesis ``draw`` / ``st``."""
    if kind is None:
        kind = draw(st.sampled_from(sorted(KINDS)))
    p = task / KINDS[kind]
    ops = ["truncate", "flip", "splice", "garbage", "empty", "directory", "fifo", "symlink_loop", "dangling",
           "missing"]
    if kind in JSON_KINDS:
        ops += ["json_value"] * 6 + ["bad_utf8"]
    if kind in PARQUET_KINDS:
        ops += ["column_type"] * 6 + ["drop_column", "footer_len"]
    if kind == "meta parquet":
        ops += ["json_column"] * 3
    if kind in ("mp4", "mkv"):
        ops += ["codec_id", "flip", "splice"]
    if kind == "png16 dir":
        ops = ["missing", "empty_dir", "extra_frame", "fifo_frame", "huge_name"]
    op = draw(st.sampled_from(ops))
    raw = p.read_bytes() if p.is_file() else b""
    detail = ""
    if op == "truncate":
        k = draw(st.integers(0, max(len(raw) - 1, 0)))
        p.write_bytes(raw[:k])
        detail = str(k)
    elif op == "flip":
        for _ in range(draw(st.integers(1, 8))):
            if raw:
                i = draw(st.integers(0, len(raw) - 1))
                raw = raw[:i] + bytes([raw[i] ^ draw(st.integers(1, 255))]) + raw[i + 1:]
        p.write_bytes(raw)
    elif op == "splice":
        i = draw(st.integers(0, len(raw)))
        junk = draw(st.binary(min_size=1, max_size=64))
        p.write_bytes(raw[:i] + junk + raw[i + len(junk):])
    elif op == "garbage":
        p.write_bytes(draw(st.binary(max_size=200)))
    elif op == "empty":
        p.write_bytes(b"")
    elif op == "directory":
        _replace(p, lambda q: q.mkdir())
    elif op == "fifo":
        _replace(p, lambda q: os.mkfifo(q))
    elif op == "symlink_loop":
        _replace(p, lambda q: q.symlink_to(q.name))
    elif op == "dangling":
        _replace(p, lambda q: q.symlink_to("no-such-file"))
    elif op == "missing":
        _replace(p, lambda q: None)
    elif op == "bad_utf8":
        i = draw(st.integers(0, len(raw)))
        p.write_bytes(raw[:i] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])) + raw[i:])
    elif op == "json_value":
        lines = raw.decode().splitlines() if kind == "tasks.jsonl" else [raw.decode()]
        doc = json.loads(lines[0])
        paths = _json_paths(doc)
        at = draw(st.sampled_from(paths))
        nasty = draw(st.booleans())
        value = _SLOT if nasty else draw(st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
            lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12))
        delete = bool(at) and draw(st.booleans())
        text = json.dumps(_set_path(doc, at, value, delete), allow_nan=True)
        if nasty:
            text = text.replace(json.dumps(_SLOT), draw(st.sampled_from(NASTY_JSON)))
        lines[0] = text
        p.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        detail = f"{'/'.join(map(str, at))} {'deleted' if delete else type(value).__name__}"
    elif op in ("column_type", "drop_column", "json_column"):
        table = pq.read_table(p)
        col = draw(st.sampled_from(table.column_names))
        n = table.num_rows
        if op == "drop_column":
            table = table.drop([col])
        else:
            if op == "json_column":
                col = draw(st.sampled_from(["drop_stats", "video_codec", "calibration", "force_matrix_specs",
                                            "slam_specs"]))
                arr = pa.array([draw(st.sampled_from(NASTY_JSON))] * n)
            else:
                typ = draw(st.sampled_from(["null", "int32", "int64", "float64", "string", "list<float32>",
                                            "list<list<float64>>", "list<int64>", "bool", "list<null>"]))
                arr = _column(typ, n, draw, st)
                detail = typ
            table = table.set_column(table.column_names.index(col), col, arr)
        pq.write_table(table, p)
        detail = f"{col} {detail}".strip()
    elif op == "footer_len":
        claim = draw(st.sampled_from([0, 1, len(raw) - 8, len(raw), 2**31, 2**32 - 1]))
        p.write_bytes(raw[:-8] + (max(claim, 0) % 2**32).to_bytes(4, "little") + b"PAR1")
        detail = str(claim)
    elif op == "codec_id":
        for tag, new in ((b"V_FFV1", b"V_QQQQ"), (b"avc1", b"qqqq"), (b"avcC", b"qqqq")):
            raw = raw.replace(tag, new, 1)
        p.write_bytes(raw)
    elif op == "empty_dir":
        _replace(p, lambda q: q.mkdir())
        (p / "000000.png").write_bytes(b"")
    elif op == "extra_frame":
        (p / "000009.png").write_bytes(draw(st.binary(max_size=100)))
    elif op == "fifo_frame":
        (p / "000005.png").unlink()
        os.mkfifo(p / "000005.png")
    elif op == "huge_name":
        (p / ("9" * 240 + ".png")).write_bytes((p / "000000.png").read_bytes())  # > float range, < NAME_MAX
    return Damage(kind, op, detail)


def _column(typ: str, n: int, draw: Any, st: Any) -> pa.Array:
    ints = st.integers(-(2**63), 2**63 - 1)
    if typ == "null":
        return pa.nulls(n)
    if typ == "int32":
        return pa.array([draw(st.integers(-(2**31), 2**31 - 1)) for _ in range(n)], pa.int32())
    if typ == "int64":
        return pa.array([draw(ints) for _ in range(n)], pa.int64())
    if typ == "float64":
        return pa.array([draw(st.floats()) for _ in range(n)], pa.float64())
    if typ == "string":
        return pa.array([draw(st.text(max_size=5)) for _ in range(n)])
    if typ == "bool":
        return pa.array([draw(st.booleans()) for _ in range(n)])
    if typ == "list<null>":
        return pa.array([[None] * draw(st.integers(0, 3)) for _ in range(n)], pa.list_(pa.null()))
    if typ == "list<int64>":
        return pa.array([[draw(ints) for _ in range(draw(st.integers(0, 3)))] for _ in range(n)], pa.list_(pa.int64()))
    if typ == "list<float32>":
        return pa.array([[draw(st.floats(width=32)) for _ in range(draw(st.integers(0, 9)))] for _ in range(n)],
                        pa.list_(pa.float32()))
    return pa.array([[[0.5] * draw(st.integers(0, 8))] * draw(st.integers(0, 2)) for _ in range(n)],
                    pa.list_(pa.list_(pa.float64())))


# -- running every reader ------------------------------------------------------------------------------------
class Hang(BaseException):
    """Raised by the alarm: a call ran past its time bound (not an Exception, so nothing swallows it)."""


def _release_fifos(root: Path) -> None:
    """Open every FIFO under ``root`` for writing once: a reader blocked in open() (inside C code
    that retries on EINTR, so SIGALRM alone cannot free it) gets EOF and returns to Python."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if stat.S_ISFIFO(os.lstat(p).st_mode):
                with contextlib.suppress(OSError):
                    os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))


@contextlib.contextmanager
def time_bound(seconds: int, root: Path) -> Iterator[None]:
    """Raise :class:`Hang` in the main thread after ``seconds`` (SIGALRM), freeing FIFO opens first."""
    def boom(signum: int, frame: object) -> None:
        raise Hang(f"still running after {seconds} s")

    watchdog = threading.Timer(seconds, _release_fifos, args=(root,))
    watchdog.daemon = True
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    watchdog.start()
    try:
        yield
    finally:
        signal.alarm(0)
        watchdog.cancel()
        signal.signal(signal.SIGALRM, old)


@dataclass
class Outcome:
    """What one damaged task did: EgopoolErrors seen per call, and every unexpected failure."""

    errors: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def _call(out: Outcome, name: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except EgopoolError as exc:
        out.errors[name] = exc.one_line()
    except Exception as exc:  # noqa: BLE001 - that is the finding
        out.failures.append(f"{name}: {type(exc).__name__}: {exc}"[:400])
    return None


def run_readers(task: Path, out: Outcome) -> None:
    """The reader API on every episode: every accessor a user calls."""
    t = _call(out, "open_task", lambda: open_task(task))
    if t is None:
        return
    _call(out, "tasks", lambda: t.tasks)
    eps = _call(out, "episodes", t.episodes) or []
    for n in (1, 2):
        _call(out, f"episode({n})", lambda n=n: t.episode(n))
    for ep in eps:
        i = ep.index
        for name in ("meta", "schema", "length", "table", "streams", "column_names"):
            _call(out, f"{i}.{name}", lambda name=name: getattr(ep, name))
        for name, fn in (("trajectory", lambda: ep.trajectory(TRAJ)), ("trajectories", ep.trajectories),
                         ("to_frame", lambda: ep.trajectory(TRAJ).to_frame("down_left_forward")),
                         ("imu", ep.imu), ("imu_samples", ep.imu_samples), ("hardware_ns", ep.hardware_ns),
                         ("pair_trajectory", lambda: ep.pair_trajectory(TRAJ)), ("frame_drops", ep.frame_drops),
                         ("force_matrix_spec", lambda: ep.force_matrix_spec(FM)),
                         ("force_matrix", lambda: ep.force_matrix(FM, 11)),
                         ("force_matrices", lambda: ep.force_matrices(FM, 0, 2)),
                         ("force_matrix_fz_ratio", lambda: ep.force_matrix_fz_ratio(FM, TRAJ))):
            _call(out, f"{i}.{name}", fn)
        streams = _call(out, f"{i}.streams", lambda: ep.streams) or {}
        for key in streams:
            _call(out, f"{i}.video({key})", lambda key=key: sum(1 for _ in ep.video(key)))
            _call(out, f"{i}.depth({key})", lambda key=key: sum(1 for _ in ep.depth(key)))


def run_validator(task: Path, out: Outcome) -> None:
    """validate_task never raises; a check that stopped early on nameable damage is a failure too."""
    report = _call(out, "validate_task", lambda: validate_task(task))
    if report is None:
        return
    for f in report.findings:
        if "stopped early" in f.message or "could not be fully checked" in f.message or "could not finish" in f.message:
            out.failures.append(f"validate_task: {f.message}"[:400])


def run_cli(task: Path, names: list[str], out: Outcome) -> None:
    """Each command in-process: exit 0 or 1, every stderr line is egopool's own one-line message.

    ``pack`` writes its zips beside the work directory (``<work>/../packs``), never into the task.
    """
    packs = task.parent.parent / "packs"
    shutil.rmtree(packs, ignore_errors=True)
    packs.mkdir(parents=True)  # `edit split --into {out}/split` needs its parent (an edit creates no path, E55)
    for name in names:
        argv = [a.replace("{task}", str(task)).replace("{out}", str(packs)) for a in COMMANDS[name]]
        so, se = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
                rc = main(argv)
        except Exception as exc:  # noqa: BLE001
            out.failures.append(f"egopool {name}: {type(exc).__name__}: {exc}"[:400])
            continue
        err = se.getvalue().splitlines()
        if rc not in (0, 1) or any(not line.startswith("egopool: ") for line in err):
            out.failures.append(f"egopool {name}: exit {rc}, stderr {se.getvalue()[:300]!r}")


def check_one(reference: Path, work: Path, draw: Any, st: Any, commands: list[str],
              seconds: int = 120, kind: str | None = None) -> tuple[Damage, Outcome]:
    """Copy the reference task, damage it, run everything on it; returns what happened."""
    if work.exists():
        shutil.rmtree(work)
    task = work / reference.name
    shutil.copytree(reference, task, symlinks=True)
    dmg = damage(task, draw, st, kind)
    before = snapshot(work)
    out = Outcome()
    with time_bound(seconds, work):
        run_readers(task, out)
        run_validator(task, out)
        run_cli(task, commands, out)
    after = snapshot(work)
    if after != before:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        out.failures.append(f"files changed: {changed[:5]}")
    return dmg, out
