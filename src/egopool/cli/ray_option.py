"""``--ray [ADDRESS]``: the option every collection-wide command shares (docs/scale.md).

click/typer options take a value or none, not an optional one, so :func:`optional_ray_value`
rewrites the command line before parsing: ``--ray`` followed by something that is not a
cluster address (a task directory, another option, nothing) becomes ``--ray=`` (Ray's
default resolution, :data:`egopool.jobs.executor.RAY_DEFAULT_ADDRESS`). An address is
``auto``, ``local``, ``ray://…`` or ``host:port``; ``--ray=ADDRESS`` is always an address.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from ..jobs.executor import Executor

__all__ = ["RAY_OPTION", "executor_for", "optional_ray_value"]

_ADDRESS = re.compile(r"^(auto|local|ray://\S+|[A-Za-z0-9_.\-]+:\d{1,5}|\[[0-9A-Fa-f:.]+\]:\d{1,5})$")

RAY_OPTION: Any = typer.Option(
    None, "--ray", metavar="[ADDRESS]",
    help="Run one Ray task per episode on a Ray cluster (pip install 'egopool\\[ray]'). ADDRESS: host:port of "
         "`ray start --head`, ray://host:10001 (Ray Client, from outside the cluster), auto, or local; without "
         "it RAY_ADDRESS, else the latest local cluster, else a private one. The task directories must be on a "
         "file system every node sees.")


def optional_ray_value(argv: Sequence[str]) -> list[str]:
    """``[..., "--ray", "TASK"]`` -> ``[..., "--ray=", "TASK"]``; an address after ``--ray`` is kept."""
    out = list(argv)
    for i, tok in enumerate(out):
        if tok == "--":
            break
        if tok == "--ray":
            nxt = out[i + 1] if i + 1 < len(out) else None
            if nxt is None or not _ADDRESS.match(nxt):
                out[i] = "--ray="
    return out


def executor_for(ray: str | None) -> Executor[Any, Any, Any]:
    """In-process without ``--ray``; a :class:`~egopool.jobs.RayExecutor` with it."""
    from ..jobs.executor import make_executor  # every command line passes optional_ray_value, few run jobs

    return make_executor(ray)
