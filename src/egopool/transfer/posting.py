"""One POST of an episode zip to ``egopool serve``, with its retries (file_format.md §9; docs/decisions.md U7, U29).

Network errors and 5xx answers are retried with exponential backoff (0.5 s doubling to 8 s, jittered); a 503
carrying ``Retry-After`` (the server's intake queue is full, U29) is waited as long as it says, without
counting as a retry, up to :data:`BUSY_WAIT_S` per episode; 4xx and 507 are final.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from ..errors import TransferError
from .pack import PackedEpisode

__all__ = ["BUSY_WAIT_S", "MAX_RETRY_AFTER_S", "Cancelled", "answer_of", "multipart_form", "post_episode",
           "retry_after"]

_BLOCK = 1 << 20


class Cancelled(Exception):
    """The run was interrupted (Ctrl-C): a worker stops packing or sending at its next block."""


def multipart_form(task: str, f: int, zip_path: Path, sent: Callable[[int], None]
                   ) -> tuple[str, int, Callable[[], Iterator[bytes]]]:
    """(content type, length, body factory) of the §9 form: name, episode_index, file.

    ``sent(done_bytes)`` is called before each block; it may raise :class:`Cancelled` to stop the body.
    """
    boundary = f"egopool-{uuid.uuid4().hex}"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\n{task}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"episode_index\"\r\n\r\n{f}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"episode.zip\"\r\n"
            "Content-Type: application/zip\r\n\r\n").encode("utf-8")
    tail = f"\r\n--{boundary}--\r\n".encode("ascii")
    size = zip_path.stat().st_size

    def body() -> Iterator[bytes]:
        yield head
        done = 0
        with open(zip_path, "rb") as fh:
            while block := fh.read(_BLOCK):
                done += len(block)
                sent(done)
                yield block
        yield tail

    return f"multipart/form-data; boundary={boundary}", len(head) + size + len(tail), body


def answer_of(resp: httpx.Response) -> dict[str, Any]:
    try:
        doc = resp.json()
    except ValueError:
        return {"message": resp.text[:500]}
    return doc if isinstance(doc, dict) else {"message": str(doc)[:500]}


#: Seconds one episode may wait in all for a server whose queue is full (503 with ``Retry-After``), beyond its retries.
BUSY_WAIT_S = 600.0
#: The longest ``Retry-After`` honoured as given (a larger one is waited this long, then the upload is tried again).
MAX_RETRY_AFTER_S = 60.0


def retry_after(resp: httpx.Response) -> float | None:
    """Seconds a 503's ``Retry-After`` header asks to wait (delta-seconds, at most :data:`MAX_RETRY_AFTER_S`), or None
    when it has none or an HTTP date (egopool's server sends seconds; another server's 503 is retried as a 5xx)."""
    raw = resp.headers.get("retry-after", "").strip()
    if not raw.isdigit():
        return None
    return min(float(raw), MAX_RETRY_AFTER_S)


def post_episode(client: httpx.Client, url: str, packed: PackedEpisode, retries: int, backoff: float,
          sent: Callable[[int], None], cancel: threading.Event) -> tuple[httpx.Response, int]:
    """POST with retries of network errors and 5xx; returns the final response and the attempts.

    ``sent(done_bytes)`` is called per block (it raises :class:`Cancelled` once ``cancel`` is set).
    """
    attempt = 0
    busy_waited = 0.0
    while True:
        attempt += 1
        ctype, length, body = multipart_form(packed.task, packed.file, packed.path, sent)
        status: int | None = None
        try:
            resp = client.post(url, content=body(), headers={"Content-Type": ctype, "Content-Length": str(length)})
            resp.read()
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if resp.status_code < 500 or resp.status_code == 507:  # 507: the server's disk is full, retrying won't help
                return resp, attempt
            status = resp.status_code
            problem = f"HTTP {resp.status_code}: {answer_of(resp).get('message', '')}"
            wait = retry_after(resp) if resp.status_code == 503 else None
            if wait is not None and busy_waited + wait <= BUSY_WAIT_S:
                # the server is up and its intake queue full (docs/decisions.md U29): wait as long as it says, a
                # little jittered so that PCs told the same do not come back together; not counted as a retry
                attempt -= 1
                busy_waited += wait
                if cancel.wait(wait * random.uniform(1.0, 1.25)):
                    raise Cancelled
                continue
        if attempt > retries:
            raise TransferError(f"episode {packed.index}: giving up after {attempt} attempts ({problem})",
                                status=status,
                                hint="check that the server runs and is reachable, then run the same command again")
        delay = min(8.0, backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
        if cancel.wait(delay):
            raise Cancelled
