"""The edit tests reuse the ops tests' task builders and backends (tests/ops/backends.py, ops_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ops"))
