"""Episodes a selection names: what ``--episodes-from`` reads (docs/decisions.md Q8).

A selection is one of:

* a text file of global N, one per line (blank lines and ``#`` comments ignored);
* a JSON file: a list of N, or a server's answer ``{"episodes": [{"task": ..., "index" | "episode_index": N,
  ...}], "next_cursor": ...}`` (the search API, e.g. the accepted episodes of a task);
* an ``http(s)://`` URL of such an answer on a pooling server, fetched with the token in
  ``$EGOPOOL_TOKEN`` (``Authorization: Bearer``); while an answer has a ``next_cursor``, the
  next page is fetched with ``cursor=<next_cursor>`` added to the URL's query.

Use it with the loader: ``PooledDataset(roots, keys, episodes=read_selection(src).by_task(only=names))``.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..errors import EgopoolError

__all__ = ["TOKEN_ENV", "Selection", "read_selection"]

#: Environment variable holding the token for a selection URL.
TOKEN_ENV = "EGOPOOL_TOKEN"
_MAX_PAGES = 100_000

T = TypeVar("T")


@dataclass(frozen=True)
class Selection:
    """Selected episodes: ``(task or None, N)`` pairs in the order given (None: a bare N, any task).

    Attributes
    ----------
    source:
        What it was read from (file or URL without its query), for messages.
    items:
        ``(task, N)`` pairs, duplicates removed.
    """

    source: str
    items: tuple[tuple[str | None, int], ...]

    def for_task(self, task: str, *aliases: str) -> list[int]:
        """Ascending N selected for task ``task`` (or one of its ``aliases``, e.g. ``info.json``'s
        ``task_name``; bare N count for every task).

        Raises
        ------
        EgopoolError
            Nothing in the selection is for ``task`` (one line naming the selection and its tasks).
        """
        names = {task, *aliases}
        picked = sorted({n for t, n in self.items if t is None or t in names})
        if not picked:
            named = sorted({t for t, _ in self.items if t is not None})
            raise EgopoolError(f"the selection {self.source} names no episode of task {task!r}"
                               + (f" (it names tasks {named})" if named else " (it is empty)"),
                               hint="select episodes of this task on the server, or export the task it names")
        return picked

    def by_task(self, only: Iterable[str] | None = None) -> dict[str, list[int]]:
        """``{task: ascending N}`` for :class:`egopool.dataset.PooledDataset`'s ``episodes`` (a bare N
        has no task: use :meth:`for_task`); ``only``: keep these task names (the tasks the dataset reads)."""
        keep = set(only) if only is not None else None
        out: dict[str, set[int]] = {}
        for t, n in self.items:
            if t is not None and (keep is None or t in keep):
                out.setdefault(t, set()).add(n)
        return {t: sorted(v) for t, v in sorted(out.items())}


def _n(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise EgopoolError(f"{where}: {value!r} is not an episode number N",
                           hint="one global N (1-based integer) per line, or the server's JSON answer")
    try:
        n = int(value)
    except ValueError:
        raise EgopoolError(f"{where}: {value!r} is not an episode number N",
                           hint="one global N (1-based integer) per line, or the server's JSON answer") from None
    if n < 1:
        raise EgopoolError(f"{where}: episode number {n} is below 1 (N is 1-based)")
    return n


def _from_json(doc: Any, where: str) -> tuple[list[tuple[str | None, int]], Any]:
    """Pairs and the ``next_cursor`` of one JSON document."""
    if isinstance(doc, list):
        return [(None, _n(v, where)) for v in doc], None
    if not isinstance(doc, dict) or not isinstance(doc.get("episodes"), list):
        raise EgopoolError(f"{where}: not a selection (a list of N, or an object with an 'episodes' list)")
    pairs: list[tuple[str | None, int]] = []
    for e in doc["episodes"]:
        if isinstance(e, dict):
            n = e.get("index", e.get("episode_index"))
            task = e.get("task")
            pairs.append((str(task) if task is not None else None, _n(n, where)))
        else:
            pairs.append((None, _n(e, where)))
    return pairs, doc.get("next_cursor")


def _from_text(text: str, where: str) -> list[tuple[str | None, int]]:
    pairs: list[tuple[str | None, int]] = []
    for i, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            pairs.append((None, _n(line, f"{where} line {i}")))
    return pairs


def _with_cursor(url: str, cursor: Any) -> str:
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k != "cursor"]
    query.append(("cursor", str(cursor)))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def _reason(r: Any) -> str:
    """One line of a refusal: an egopool server's ``message``, else the body's first words (an
    HTML error page of another server is not printed whole, docs/decisions.md Q21)."""
    try:
        doc = r.json()
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        text = doc["message"]
    else:
        text = re.sub(r"<[^>]*>", " ", r.text)
    text = " ".join(text.split())
    return (text[:200] + " …") if len(text) > 200 else (text or "(no body)")


def fetch_pages(url: str, what: str, hint: str, parse: Callable[[Any, str], tuple[list[T], Any]], *,
                token: str | None, timeout: float) -> list[T]:
    """Every item of a paged ``GET`` of the pooling server's API (``next_cursor`` followed), in order.

    ``parse(doc, shown)`` turns one JSON answer into ``(items, next_cursor)``; ``what`` names the answer in
    messages (``the selection``, ``the events``) and ``hint`` is the fix for an answer that is not JSON. The
    token (``$EGOPOOL_TOKEN``) goes as a Bearer header; redirects are not followed.

    Raises
    ------
    EgopoolError
        The server cannot be reached, refuses the token (401/403: the read scope named), answers another
        status (its reason shown), answers something that is not JSON, or has more than ``_MAX_PAGES`` pages.
    """
    import httpx

    shown = urllib.parse.urlsplit(url)._replace(query="").geturl()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    items: list[T] = []
    seen: set[str] = set()
    page = url
    for _ in range(_MAX_PAGES):
        try:
            r = httpx.get(page, headers=headers, timeout=timeout, follow_redirects=False)
        except httpx.HTTPError as exc:
            raise EgopoolError(f"cannot fetch {what} {shown}: {exc}", hint="check the URL and the server") from exc
        if r.status_code in (401, 403):
            raise EgopoolError(f"the server refused {what} {shown} ({r.status_code})",
                               hint=f"put a token with the read scope in ${TOKEN_ENV}")
        if r.status_code != 200:
            raise EgopoolError(f"the server answered {r.status_code} for {what} {shown}: {_reason(r)}")
        try:
            doc = r.json()
        except ValueError:
            raise EgopoolError(f"{what} {shown} {'are' if what.endswith('s') else 'is'} not JSON", hint=hint
                               ) from None
        got, cursor = parse(doc, shown)
        items += got
        if cursor in (None, "") or str(cursor) in seen:
            return items
        seen.add(str(cursor))
        page = _with_cursor(url, cursor)
    raise EgopoolError(f"{what} {shown} {'have' if what.endswith('s') else 'has'} more than {_MAX_PAGES} pages")


def _fetch(url: str, token: str | None, timeout: float) -> list[tuple[str | None, int]]:
    return fetch_pages(url, "the selection", "give the URL of a /api/v1/... answer", _from_json,
                       token=token, timeout=timeout)


def _dedup(pairs: Iterable[tuple[str | None, int]]) -> tuple[tuple[str | None, int], ...]:
    return tuple(dict.fromkeys(pairs))


def read_selection(source: str | Path, *, token: str | None = None, timeout: float = 60.0) -> Selection:
    """Read a selection (module docstring) from a file or a server URL.

    Parameters
    ----------
    source:
        File path, or ``http(s)://`` URL.
    token:
        Bearer token for a URL (default ``$EGOPOOL_TOKEN``).
    timeout:
        Seconds per request.

    Raises
    ------
    EgopoolError
        A missing or malformed file, a value that is not an N ≥ 1, a refused or failed request.
    """
    text = str(source)
    if text.startswith(("http://", "https://")):
        return Selection(urllib.parse.urlsplit(text)._replace(query="").geturl(),
                         _dedup(_fetch(text, token or os.environ.get(TOKEN_ENV), timeout)))
    path = Path(source)
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EgopoolError(f"cannot read the selection: {exc}", path=path,
                           hint="a file of N per line, or the server's JSON answer") from exc
    if raw.lstrip()[:1] in ("[", "{"):
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise EgopoolError(f"the selection is not valid JSON: {exc}", path=path) from exc
        return Selection(str(path), _dedup(_from_json(doc, str(path))[0]))
    return Selection(str(path), _dedup(_from_text(raw, str(path))))
