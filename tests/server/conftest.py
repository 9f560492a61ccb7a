"""The review pages' tests share the transfer tests' helpers (a real ``egopool serve``, Debian chromium)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "transfer"))
