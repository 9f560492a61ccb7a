"""Who owns a task's edit journal, and whether that run still lives (docs/decisions.md E2, E44, E46).

The lowest layer of the package's lock messages: the ``flock`` helpers (:mod:`egopool._atomic`), the markers
(:mod:`egopool.meta.markers`) and the store-task journals (:mod:`egopool.ops._store_task`) all ask it, and it
asks nothing of them (only :mod:`egopool.errors`): it reads ``meta/.edit.json`` as plain JSON and ``/proc``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from .errors import LockError

__all__ = ["EDIT_JOURNAL", "STALE_AFTER", "edit_in_progress", "edit_name", "journal_doc", "holder_alive", "holder_text", "lock_holder", "owner_of",
           "pid_alive"]

#: a journal of a run on another host is taken as dead after this long without a step (s)
STALE_AFTER = 6 * 3600.0

#: task-relative key of an ``egopool edit``'s journal (docs/decisions.md E2): the edit's plan and ownership
EDIT_JOURNAL = "meta/.edit.json"


def journal_doc(body: bytes) -> dict[str, Any]:
    """The JSON object of an edit journal's (or a hold marker's) bytes; ``{}`` when they are not UTF-8 JSON of an
    object (a damaged journal still names a task as held: its owner is then unknown)."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (another user's process counts as alive; a zombie, a process
    that has exited but was not reaped yet, does not: docs/decisions.md E44)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: the state letter follows the command name's closing parenthesis in /proc/PID/stat
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return True
    return state not in ([b"Z"], [b"X"])


def owner_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The ``owner`` object of the journal ``doc`` (``host``, ``pid``, ``at``: unix s of its last step), {} when
    absent or not an object."""
    got = doc.get("owner")
    return got if isinstance(got, dict) else {}


def holder_alive(doc: dict[str, Any]) -> bool:
    """Whether the run that owns the journal ``doc`` may still run: on this host, its pid exists; on another, its
    last step is younger than :data:`STALE_AFTER` (the rule by which a journal is taken over)."""
    owner = owner_of(doc)
    host, pid = owner.get("host"), owner.get("pid")
    if host == socket.gethostname():
        return isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and pid_alive(pid)
    at = owner.get("at")
    return isinstance(at, (int, float)) and time.time() - float(at) < STALE_AFTER


def holder_text(doc: dict[str, Any]) -> str:
    """Who owns the journal ``doc``, for a message: ``pid 123 on host-a, last step 40 s ago`` (what is recorded)."""
    owner = owner_of(doc)
    parts = []
    if owner.get("pid") is not None:
        parts.append(f"pid {owner.get('pid')}" + (f" on {owner.get('host')}" if owner.get("host") else ""))
    at = owner.get("at")
    if isinstance(at, (int, float)):
        age = max(0.0, time.time() - float(at))
        parts.append(f"last step {age:.0f} s ago" if age < 120 else f"last step {age / 60:.0f} min ago")
    return ", ".join(parts) or "owner not recorded"


def edit_name(doc: dict[str, Any]) -> str:
    """The command the journal ``doc`` belongs to, as a user types it after ``egopool`` ("edit merge --into")."""
    op = str(doc.get("op") or "?")
    return "edit merge --into" if op == "merge-into" else f"edit {op}"


def lock_holder(task_dir: Path) -> str:
    """Who holds a directory task's lock, for the one line of a command that waits for it (:func:`egopool._atomic.say_waiting`):
    the edit its ``meta/.edit.json`` names ("`edit merge` (pid 123)"; a merge or split holding it as a source
    says so), else "another egopool process (a recorder or a maintenance command)"."""
    try:
        doc = journal_doc((task_dir / EDIT_JOURNAL).read_bytes())
    except OSError:
        doc = {}
    if not holder_alive(doc):
        return "another egopool process (a recorder or a maintenance command)"
    pid = owner_of(doc).get("pid")
    return f"`{edit_name(doc)}`" + (f" (pid {pid})" if pid is not None else "") + \
        (" reading it as a source" if doc.get("hold") else "")


def edit_in_progress(doc: dict[str, Any], url: str, task: str, nothing: str) -> LockError:
    """The one-line refusal of a command that meets another edit's journal ``doc`` (at ``url``) in ``task``.

    Its owner alive (:func:`holder_alive`): "`egopool edit merge --into` is in progress on this task (pid, host,
    last step)", wait for it. Dead or stale: "an interrupted `egopool edit ...`", finish it with ``egopool edit
    resume TASK`` (only then is resuming safe). ``nothing``: what the refused command did not do ("nothing was
    deleted").
    """
    name, who = edit_name(doc), holder_text(doc)
    again = "run again"
    raw = doc.get("args")
    args = raw if isinstance(raw, dict) else {}
    renamed = doc.get("target") if doc.get("hold") else args.get("target")
    if doc.get("op") == "rename" and renamed and str(renamed).rstrip("/") != task.rstrip("/"):
        again = f"run again on {renamed} (the task's new name)"  # the task is then the new name (E94)
    if holder_alive(doc):
        return LockError(f"`egopool {name}` is in progress on this task ({who}; {url})", path=task,
                         hint=f"wait for it to finish, then {again}; {nothing}")
    return LockError(f"an interrupted `egopool {name}` holds this task (its run, {who}, is gone; {url})", path=task,
                     hint=f"`egopool edit resume {task}` finishes it, then {again}; {nothing}")
