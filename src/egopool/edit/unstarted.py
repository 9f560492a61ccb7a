"""A merge or split killed after it held its sources and before it created its target's journal (the ``edit:held``
seam: it was planning), docs/decisions.md E92.

Nothing of the target exists, only the hold markers (``meta/.edit.json`` with ``hold``, E45) on its sources; each
names the target and (since E92) every source of the edit. ``egopool edit resume`` / ``abandon`` of the TARGET find
one of them and release them all; ``resume SOURCE`` releases every source of that edit. Only markers whose run is
gone (``holder_alive`` false) are released; a live run is refused, named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._holders import edit_name, holder_alive, journal_doc
from ..errors import EgopoolError
from ..ops._store_task import EDIT_JOURNAL, open_store_task
from ..storage import ObjectPath, as_path, open_store
from .copy import EditReport
from .hold import held_target, hold_note
from .journal import other_edit

__all__ = ["find_hold", "release_holds", "release_unstarted", "unstarted_line"]


def find_hold(target: str) -> tuple[str, dict[str, Any]] | None:
    """A source holding the marker of an edit into ``target`` (a location as :func:`~egopool.edit.source.location`
    gives it): the sources this machine's note names (:func:`~egopool.edit.hold.hold_note`), else the target's
    siblings (a directory's subdirectories; a bucket: one delimited LIST of the parent prefix, then one GET per
    sibling until one is found). ``(source uri, marker)`` or None."""
    note = hold_note(target)
    try:
        noted = [str(u) for u in json.loads(note.read_text()).get("sources") or []]
    except (OSError, ValueError, AttributeError):
        noted = []
    for uri in noted:
        try:
            got = open_store_task(uri).store.get(EDIT_JOURNAL)
        except EgopoolError:
            continue  # a source gone or unreachable: the others, then the siblings
        if got is not None and held_target(doc := journal_doc(got[0])) == target:
            return uri, doc
    root = as_path(target)
    if isinstance(root, ObjectPath):
        parent = root.parent
        store = open_store(str(parent))
        for d in store.list_dir("")[0]:
            got = store.get(f"{d}{EDIT_JOURNAL}")
            if got is not None and held_target(doc := journal_doc(got[0])) == target:
                return f"{str(parent).rstrip('/')}/{d.rstrip('/')}", doc
        return None
    parent_dir = Path(target).parent
    if not parent_dir.is_dir():
        return None
    for child in sorted(parent_dir.iterdir()):
        mark = child / EDIT_JOURNAL
        if mark.is_file():
            doc = journal_doc(mark.read_bytes())
            if held_target(doc) == target:
                return str(child), doc
    return None


def release_holds(target: str, doc: dict[str, Any], where: str) -> list[str]:
    """Remove the markers naming ``target`` from every source of the edit whose marker ``doc`` was found on
    ``where`` (its ``sources``; a marker written before E92 names none: ``where`` alone). Returns the sources
    released.

    Raises
    ------
    LockError
        A marker's run is alive (named: pid, host); nothing released.
    """
    sources = [str(s) for s in doc.get("sources") or []] or [where]
    found = []
    for uri in sources:
        t = open_store_task(uri)
        got = t.store.get(EDIT_JOURNAL)
        if got is None:
            continue
        mark = journal_doc(got[0])
        if held_target(mark) != target:
            continue
        if holder_alive(mark):
            raise other_edit(t, mark)
        found.append((t, uri))
    for t, _uri in found:
        t.store.delete([EDIT_JOURNAL])
    hold_note(target).unlink(missing_ok=True)
    return [uri for _t, uri in found]


def unstarted_line(doc: dict[str, Any], target: str, released: list[str]) -> str:
    """The report line of the holds ``released`` of the edit (marker ``doc``) into ``target``, which has no journal:
    a new task whose ``meta/info.json`` exists was finished (killed before its markers went), one without never
    started copying; a merge into an existing task left nothing unfinished either way."""
    op = str(doc.get("op"))
    name = f"`{edit_name(doc)}`"
    holds = f"hold{'s' if len(released) != 1 else ''} on {', '.join(released) or 'no source'}"
    if op == "merge-into":
        return f"released the {holds} of the {name} into {target} (it left no unfinished journal; its run is gone)"
    if open_store(target).exists("meta/info.json"):
        return f"released the {holds} of the finished {name} into {target} (its run is gone)"
    return f"the {name} into {target} never started copying (its run is gone); released its {holds}"


def release_unstarted(target: str, verb: str) -> EditReport | None:
    """``egopool edit resume|abandon TARGET`` of a target with no journal: the holds of a killed, never-started
    merge or split into it released (:func:`find_hold`, :func:`release_holds`); None when no source beside it
    holds one (the caller refuses as before)."""
    hit = find_hold(target)
    if hit is None:
        return None
    where, doc = hit
    if holder_alive(doc):
        raise other_edit(open_store_task(where), doc)
    released = release_holds(target, doc, where)
    report = EditReport(verb, target, False)
    report.changes.append(unstarted_line(doc, target, released))
    return report
