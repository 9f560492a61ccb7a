"""Where egopool keeps this machine's state: ``$XDG_STATE_HOME/egopool`` (``~/.local/state/egopool`` without
XDG): a bucket server's state, sync's locks and owner id, the edit holds' notes, the crash tests' pause markers."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["state_dir"]


def state_dir() -> Path:
    """``$XDG_STATE_HOME/egopool``, else ``~/.local/state/egopool`` (read at each call; not created)."""
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "egopool"
