"""The edit tests reuse the ops tests' task builders and backends (tests/ops/backends.py, ops_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ops"))

import pytest  # noqa: E402


@pytest.fixture(params=["dir", "bucket"])
def backend(request):
    """Each test that takes ``backend`` runs on a directory and on the session's SeaweedFS (``"dir"`` / ``"bucket"``)."""
    if request.param == "bucket":
        request.getfixturevalue("s3_server")
    return request.param
